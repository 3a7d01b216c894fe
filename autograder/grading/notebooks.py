"""From a student's submission and the instructor's source to the notebook that is graded.

The graded notebook is the instructor's source notebook with the student's answers put
in: every cell the student cannot legitimately change (set-up code, explanations and
above all the test cells, hidden tests included) comes from the source, and from the
submission only the answer cells, matched by their nbgrader ``grade_id``, plus any code
cells the student added. Edited or deleted test cells, changed cell types, duplicated
ids and edited points therefore change nothing. The nbgrader unit of grading is the test
cell, so a *part* here is one test cell and the answers written since the previous one.

A test cell is never executed at grading. What it checks is read from its source, which
is the instructor's: each ``checks.check_<part>(<answer>)`` line names a check of the
chapter's checks module (and through it the part's declaration) and the answer it is
called on; a line with ``hidden=True`` asks for the hidden cases too (:func:`check_calls`).

What students received is the source cleared by nbgrader's own ``ClearSolutions`` and
``ClearHiddenTests``, configured as the course configures them (:func:`release`): the stub
an unanswered cell holds and the delimiters are the course's, and a region without its end
is an error, as it is for ``nbgrader generate_assignment``.

What the grader takes of a submission is bounded, so that no notebook costs the grader (or
the feedback pages) more than an honest one many times over: at most ``added_cells`` cells
of the student's own are read (:func:`read_bounded`: every cell but the first with each
grade id of the source, whatever its kind), and at most ``code_kb`` KiB of the student's code
is taken, answers and added cells in notebook order (:func:`assemble`). What is past either
bound is left out: not run, not shown, an answer cell left out is an error of its part, and
:attr:`Assembled.limited` says what was left out.
"""

from __future__ import annotations

import ast
import copy
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbformat import NotebookNode
from nbgrader.preprocessors import ClearHiddenTests, ClearSolutions
from traitlets.config import Config

from ..text import clean, clean_tree

#: nbgrader's preprocessors that turn a source notebook into the one students receive.
CLEARING = (ClearSolutions, ClearHiddenTests)


class UnreadableNotebook(Exception):
    """The submission is not a notebook that can be graded; the message says why."""


class BrokenSource(ValueError):
    """The instructor's source notebook cannot be released as nbgrader releases it; the message names the cell."""


@dataclass
class GradedCell:
    """One graded test cell of the source (nbgrader's unit of grading: a part of the assignment).

    Attributes:
        grade_id: the test cell's nbgrader id, e.g. ``"test_masked_softmax"``.
        points: its points in the instructor's source (whatever the submission says).
    """

    grade_id: str
    points: float


@dataclass(frozen=True)
class CheckCall:
    """One ``checks.check_<part>(<answer>[, hidden=True])`` line of a test cell."""

    check: str
    answer: str
    hidden: bool


@dataclass
class Assembled:
    """The notebook to execute and what each of its cells is.

    Attributes:
        notebook: instructor cells with the student's answers put in.
        parts: the graded parts, in notebook order.
        roles: per cell, ``"test"``, ``"answer"``, ``"extra"`` (a cell the student added)
            or ``"course"`` (the instructor's set-up and text).
        checks: per test cell index, the checks its source calls.
        shown: per test cell index, its source as students received it (hidden tests
            taken out): what the autograded notebook shows.
        unanswered: per answer grade id, whether the student left it as released
            (nbgrader's "No response." comment).
        notes: remarks for the instructor, e.g. duplicated ids.
        left_out: per answer cell index, why the student's answer was left out (the cell
            holds the source as released): the code bound was passed at it or before.
        limited: what the bounds left out of the submission, for the run's summary and
            the autograded notebook (``[]``: nothing).
    """

    notebook: NotebookNode
    parts: list[GradedCell]
    roles: list[str]
    checks: dict[int, list[CheckCall]] = field(default_factory=dict)
    shown: dict[int, str] = field(default_factory=dict)
    unanswered: dict[str, bool] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    left_out: dict[int, str] = field(default_factory=dict)
    limited: list[str] = field(default_factory=list)

    def part_of(self, index: int) -> GradedCell | None:
        """The part whose test cell comes at or after cell ``index`` (``None`` past the last)."""
        tests = self.test_indices()
        following = [i for i in tests if i >= index]
        if not following:
            return None
        return self.parts[tests.index(following[0])]

    def test_indices(self) -> list[int]:
        return [i for i, role in enumerate(self.roles) if role == "test"]

    def test_id(self, index: int) -> str:
        """The grade id of the test cell at ``index``."""
        return nbgrader_meta(self.notebook.cells[index])["grade_id"]


def check_calls(source: str) -> list[CheckCall]:
    """The ``checks.check_<part>(<answer>, ...)`` calls of a test cell's source, in order.

    Lines that are not such calls do nothing at grading (a test cell holds only these,
    a test of the course says), nbgrader's delimiters among them (comments, since the
    instructor runs the source). A source that does not parse checks nothing.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "checks"
                and node.func.attr.startswith("check_") and node.args and isinstance(node.args[0], ast.Name)):
            hidden = any(k.arg == "hidden" and isinstance(k.value, ast.Constant) and k.value.value is True
                         for k in node.keywords)
            found.append(CheckCall(node.func.attr, node.args[0].id, hidden))
    return sorted(found, key=lambda call: call.hidden)


def nbgrader_meta(cell: NotebookNode) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


def is_test(cell: NotebookNode) -> bool:
    meta = nbgrader_meta(cell)
    return cell.cell_type == "code" and bool(meta.get("grade")) and not meta.get("solution")


def is_answer(cell: NotebookNode) -> bool:
    return cell.cell_type == "code" and bool(nbgrader_meta(cell).get("solution"))


def read_submission(path: Path) -> NotebookNode:
    """The submitted notebook as nbformat 4, upgraded from older versions.

    Raises:
        UnreadableNotebook: malformed JSON, not a notebook, or a version that cannot be read.
    """
    return read_bounded(path)[0]


def read_bounded(path: Path, source: NotebookNode | None = None,
                 added_cells: int | None = None) -> tuple[NotebookNode, list[str]]:
    """The submitted notebook (:func:`read_submission`) with at most ``added_cells`` cells of the student's own.

    A cell of the student's own is any cell but the first with each grade id of ``source``
    and the source's cells without one, as they are: cells added, of any kind, edited cells
    without an id and copies of the source's. Those past the first
    ``added_cells`` are dropped before the notebook is parsed, so that no count of cells
    costs more than that. ``None``: every cell is read.

    Returns:
        ``(notebook, limited)``: ``limited`` says what was left out (``[]``: nothing).

    Raises:
        UnreadableNotebook: as :func:`read_submission`.
    """
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(raw, dict) or "cells" not in raw and "worksheets" not in raw:
            raise UnreadableNotebook("the file is JSON but not a Jupyter notebook")
        own = 0 if added_cells is None else _keep_own_cells(raw, source, added_cells)
        limited = [] if own <= (added_cells or 0) else [
            f"{own:,} cells added to the notebook, more than the {added_cells:,} read: the last "
            f"{own - added_cells:,} were left out (not run, not shown)"]
        # JSON's "\ud800" escapes give lone surrogates, which no UTF-8 file can hold: replaced
        return nbformat.reads(json.dumps(clean_tree(raw)), as_version=4), limited
    except UnreadableNotebook:
        raise
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UnreadableNotebook(f"the file is not valid notebook JSON ({error})") from None
    except Exception as error:  # noqa: BLE001 - nbformat's own errors for versions it cannot convert
        raise UnreadableNotebook(f"the notebook cannot be read ({type(error).__name__}: {error})") from None


def _keep_own_cells(raw: dict, source: NotebookNode | None, most: int) -> int:
    """Drop from ``raw`` (notebook JSON, any version) the student's own cells past the first ``most``; their count.

    Anything odd (cells that are not objects, metadata that is not) is left to the parser,
    counted as the student's own.
    """
    cells = [] if source is None else source.cells
    known = {nbgrader_meta(c)["grade_id"] for c in cells if nbgrader_meta(c).get("grade_id")}
    unmarked = Counter(c.source for c in cells if not nbgrader_meta(c).get("grade_id"))  # the course's, without id
    worksheets = raw.get("worksheets")
    holders = [raw] if "cells" in raw else [w for w in worksheets if isinstance(w, dict)] \
        if isinstance(worksheets, list) else []
    own = 0

    def kept(cell) -> bool:
        nonlocal own
        grade_id = _raw_grade_id(cell)
        if grade_id in known:
            known.discard(grade_id)
            return True
        text = _raw_source(cell) if grade_id is None else None
        if unmarked[text] > 0:
            unmarked[text] -= 1
            return True
        own += 1
        return own <= most

    for holder in holders:
        if isinstance(holder.get("cells"), list):
            holder["cells"] = [cell for cell in holder["cells"] if kept(cell)]
    return own


def _raw_source(cell) -> str | None:
    """The source of a cell as JSON, joined as nbformat joins it; ``None`` if it has no readable one."""
    text = cell.get("source", cell.get("input")) if isinstance(cell, dict) else None  # nbformat 3: "input"
    if isinstance(text, list) and all(isinstance(line, str) for line in text):
        return "".join(text)
    return text if isinstance(text, str) else None


def _raw_grade_id(cell) -> str | None:
    """The nbgrader grade id of a cell as JSON, unparsed; ``None`` if it has none (or it is not one)."""
    meta = cell.get("metadata") if isinstance(cell, dict) else None
    nbgrader = meta.get("nbgrader") if isinstance(meta, dict) else None
    grade_id = nbgrader.get("grade_id") if isinstance(nbgrader, dict) else None
    return grade_id if isinstance(grade_id, str) else None


def answer_ids(source: NotebookNode) -> list[str]:
    """The grade ids of the source's answer cells, in order."""
    return [nbgrader_meta(c)["grade_id"] for c in source.cells if is_answer(c)]


def parts_of(source: NotebookNode) -> list[GradedCell]:
    """The graded parts of the instructor's source notebook, in order."""
    return [GradedCell(nbgrader_meta(c)["grade_id"], float(nbgrader_meta(c).get("points", 0))) for c in source.cells if is_test(c)]


def assemble(source: NotebookNode, submission: NotebookNode, clearing: dict[str, dict] | None = None,
             code_kb: int | None = None) -> Assembled:
    """The notebook to grade: the source's cells with the submission's answers put in.

    ``clearing``: the course's options of nbgrader's clearing (:func:`clearing_options`;
    nbgrader's defaults if ``None``), which say what an unanswered answer cell holds.
    ``code_kb``: the most of the student's code taken, in KiB of UTF-8 (``None``: all); from
    the cell that passes it on, the student's cells are left out (:func:`_student_cells`).

    Raises:
        BrokenSource: the source cannot be released (:func:`release`).
    """
    released = release(source, clearing)
    taken = _student_cells(submission, source, code_kb)
    answers, extras = taken.answers, taken.extras
    cells, roles, checks, shown, unanswered, left_out = [], [], {}, {}, {}, {}

    def add(cell: NotebookNode, role: str, as_released: NotebookNode | None = None) -> None:
        if role == "test":
            checks[len(cells)] = check_calls(cell.source)
            shown[len(cells)] = as_released.source
        cells.append(cell)
        roles.append(role)

    for extra in extras.get(None, []):
        add(_code_cell(extra), "extra")
    for cell, blank in zip(source.cells, released.cells, strict=True):
        cell = copy.deepcopy(cell)
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        grade_id = nbgrader_meta(cell).get("grade_id")
        if is_answer(cell):
            written = answers.get(grade_id)
            unanswered[grade_id] = written is None or written.strip() == blank.source.strip()
            cell.source = blank.source if written is None or grade_id in taken.left_out else written
            if grade_id in taken.left_out:
                left_out[len(cells)] = (f"not graded: the student's own code passed the {code_kb:,} KiB taken of a "
                                        "notebook by this answer cell, so it and the student's later cells were left "
                                        "out (not run)")
            add(cell, "answer")
        else:
            add(cell, "test" if is_test(cell) else "course", blank)
        for extra in extras.get(grade_id, []):
            add(_code_cell(extra), "extra")
    notebook = copy.deepcopy(source)
    notebook.cells = cells
    limited = taken.limited(code_kb)
    return Assembled(notebook, parts_of(source), roles, checks, shown, unanswered, taken.notes, left_out, limited)


@dataclass
class StudentCells:
    """What :func:`assemble` takes of a submission.

    Attributes:
        answers: ``{grade_id: source}`` of the answer cells (the first code cell with each id).
        extras: ``{preceding grade_id or None: [source, ...]}``: code cells without a known id.
        notes: remarks on anything odd.
        left_out: the answer ids whose answers are left out (past the code bound).
        dropped: how many added cells were left out (past the code bound).
    """

    answers: dict[str, str] = field(default_factory=dict)
    extras: dict[str | None, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    dropped: int = 0

    def limited(self, code_kb: int | None) -> list[str]:
        """What the code bound left out, in words (``[]``: nothing)."""
        if not self.left_out and not self.dropped:
            return []
        what = [f"answer cell{'s' if len(self.left_out) > 1 else ''} "
                + ", ".join(f"`{grade_id}`" for grade_id in self.left_out)] if self.left_out else []
        what += [f"{self.dropped:,} added cell{'s' if self.dropped > 1 else ''}"] if self.dropped else []
        were = "was" if len(self.left_out) + self.dropped == 1 else "were"
        return [f"the student's own code passes the {code_kb:,} KiB taken of a notebook: {' and '.join(what)} "
                f"from there on {were} left out (not run, not shown)"]


def _student_cells(submission: NotebookNode, source: NotebookNode, code_kb: int | None = None) -> StudentCells:
    """The student's answers by grade id, and added code cells by the id they follow.

    Their code is taken in notebook order up to ``code_kb`` KiB of UTF-8 (``None``: all):
    from the cell that passes it on, answers and added cells are left out.
    """
    answers_wanted = set(answer_ids(source))
    known_ids = {nbgrader_meta(c).get("grade_id") for c in source.cells} - {None}
    course_code = {c.source for c in source.cells if c.cell_type == "code" and not nbgrader_meta(c).get("grade_id")}
    taken = StudentCells()
    spent, anchor = 0, None

    def fits(code: str) -> bool:
        nonlocal spent
        spent += len(code.encode("utf-8", "replace"))
        return code_kb is None or spent <= code_kb * 2**10

    def add_extra(code: str) -> None:
        if fits(code):
            taken.extras.setdefault(anchor, []).append(code)
        else:
            taken.dropped += 1

    for cell in submission.cells:
        grade_id = nbgrader_meta(cell).get("grade_id")
        if grade_id in answers_wanted:
            if cell.cell_type != "code":
                taken.notes.append(f"answer cell {grade_id} was turned into a {cell.cell_type} cell; graded as "
                                   "unanswered")
            elif grade_id in taken.answers:  # as nbgrader does: a repeated id is an ordinary cell
                taken.notes.append(f"grade id {grade_id} appears more than once; later copies run as added cells")
                add_extra(cell.source)
            else:
                taken.answers[grade_id] = cell.source
                if not fits(cell.source):
                    taken.left_out.append(grade_id)
            anchor = grade_id
        elif grade_id in known_ids:
            anchor = grade_id  # an instructor cell (possibly edited): its source version is used
        elif cell.cell_type == "code" and cell.source.strip() and cell.source not in course_code:
            add_extra(cell.source)  # a cell the student added (or edited)
    return taken


def _code_cell(source: str) -> NotebookNode:
    return nbformat.v4.new_code_cell(source)


# --------------------------------------------------------------------------------------
# The source as students received it: nbgrader's clearing, as the course configures it
# --------------------------------------------------------------------------------------


def clearing_options(config: Config | None = None) -> dict[str, dict]:
    """The course's options of nbgrader's clearing, resolved as nbgrader resolves them, as plain data.

    ``{"ClearSolutions": {"code_stub": ..., "begin_solution_delimeter": ..., ...},
    "ClearHiddenTests": {...}}``: every configurable option of :data:`CLEARING`, from
    ``config`` (the course's ``nbgrader_config.py``; nbgrader's defaults if ``None``). The
    instructor's process reads them; a grading worker, which never sees the course's
    configuration, is given them with its task.
    """
    preprocessors = [kind(config=copy.deepcopy(config or Config())) for kind in CLEARING]  # they rewrite it
    return {type(p).__name__: {name: getattr(p, name) for name in p.trait_names(config=True)} for p in preprocessors}


def release(source: NotebookNode, clearing: dict[str, dict] | None = None) -> NotebookNode:
    """``source`` as ``nbgrader generate_assignment`` releases it: solutions replaced by the stub, hidden tests out.

    nbgrader's own preprocessors (:data:`CLEARING`) clear each cell, configured by
    ``clearing`` (:func:`clearing_options`; nbgrader's defaults if ``None``).

    Raises:
        BrokenSource: a cell nbgrader refuses to clear (a region without its end, nested
            regions, a region outside a cell of its kind); the message names the cell.
        ValueError: the notebook's language has no stub in ``code_stub`` (nbgrader's message).
    """
    config = Config(copy.deepcopy(clearing or {}))
    preprocessors = [kind(config=config) for kind in CLEARING]
    released = copy.deepcopy(source)
    released.cells = [_cleared(cell, index, source.metadata, preprocessors) for index, cell in enumerate(source.cells)]
    return released


def _cleared(cell: NotebookNode, index: int, metadata: dict, preprocessors: list) -> NotebookNode:
    """One cell cleared by ``preprocessors``, in a notebook of its own so that an error names it."""
    alone = nbformat.v4.new_notebook(cells=[copy.deepcopy(cell)], metadata=copy.deepcopy(metadata))
    try:
        for preprocessor in preprocessors:
            alone, _ = preprocessor.preprocess(alone, {})
    except RuntimeError as error:  # nbgrader's refusal: the same stops ``nbgrader generate_assignment``
        grade_id = nbgrader_meta(cell).get("grade_id")
        name = f"cell {index + 1}" + (f" ({grade_id})" if grade_id else "")
        raise BrokenSource(f"{name} of the source notebook cannot be released by nbgrader: {error}") from None
    return alone.cells[0]


# --------------------------------------------------------------------------------------
# What a submission printed, made safe to show
# --------------------------------------------------------------------------------------

#: The kinds of rich output kept from a submission's cells: text and raster images, which
#: no renderer runs. HTML, JavaScript, SVG (which may hold scripts), Markdown and widgets
#: would run in the browser of whoever opens the feedback or the formgrader.
KEPT_MIME_TYPES = ("text/plain", "image/png", "image/jpeg")


def clean_outputs(outputs: list) -> list[NotebookNode]:
    """``outputs`` with only text and PNG/JPEG images; every other kind of output replaced by a note.

    Streams and errors keep their text; rich outputs keep their kept MIME types (without
    metadata, which could size or style them). An output left with nothing is replaced by
    a note that names what was removed.
    """
    cleaned = []
    for output in outputs:
        kind = output.get("output_type")
        if kind == "stream":
            cleaned.append(nbformat.v4.new_output("stream", name=clean(output.get("name", "stdout")),
                                                  text=clean(output.get("text", ""))))
        elif kind == "error":
            cleaned.append(nbformat.v4.new_output("error", ename=clean(output.get("ename", "")),
                                                  evalue=clean(output.get("evalue", "")),
                                                  traceback=[clean(line) for line in output.get("traceback", [])]))
        elif kind in ("display_data", "execute_result"):
            data = output.get("data", {})
            kept = {mime: clean(data[mime]) for mime in KEPT_MIME_TYPES if isinstance(data.get(mime), str)}
            removed = sorted(set(data) - set(kept))
            if kept:
                cleaned.append(nbformat.v4.new_output("display_data", data=kept))
            if removed:
                cleaned.append(nbformat.v4.new_output(
                    "stream", name="stdout", text=f"[autograder] output of type {', '.join(removed)} not kept: the "
                                                  "autograded notebook keeps text and PNG or JPEG images only\n"))
    return cleaned
