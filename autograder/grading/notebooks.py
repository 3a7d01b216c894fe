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
"""

from __future__ import annotations

import ast
import copy
import json
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
    """

    notebook: NotebookNode
    parts: list[GradedCell]
    roles: list[str]
    checks: dict[int, list[CheckCall]] = field(default_factory=dict)
    shown: dict[int, str] = field(default_factory=dict)
    unanswered: dict[str, bool] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

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
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(raw, dict) or "cells" not in raw and "worksheets" not in raw:
            raise UnreadableNotebook("the file is JSON but not a Jupyter notebook")
        # JSON's "\ud800" escapes give lone surrogates, which no UTF-8 file can hold: replaced
        return nbformat.reads(json.dumps(clean_tree(raw)), as_version=4)
    except UnreadableNotebook:
        raise
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UnreadableNotebook(f"the file is not valid notebook JSON ({error})") from None
    except Exception as error:  # noqa: BLE001 - nbformat's own errors for versions it cannot convert
        raise UnreadableNotebook(f"the notebook cannot be read ({type(error).__name__}: {error})") from None


def answer_ids(source: NotebookNode) -> list[str]:
    """The grade ids of the source's answer cells, in order."""
    return [nbgrader_meta(c)["grade_id"] for c in source.cells if is_answer(c)]


def parts_of(source: NotebookNode) -> list[GradedCell]:
    """The graded parts of the instructor's source notebook, in order."""
    return [GradedCell(nbgrader_meta(c)["grade_id"], float(nbgrader_meta(c).get("points", 0))) for c in source.cells if is_test(c)]


def assemble(source: NotebookNode, submission: NotebookNode, clearing: dict[str, dict] | None = None) -> Assembled:
    """The notebook to grade: the source's cells with the submission's answers put in.

    ``clearing``: the course's options of nbgrader's clearing (:func:`clearing_options`;
    nbgrader's defaults if ``None``), which say what an unanswered answer cell holds.

    Raises:
        BrokenSource: the source cannot be released (:func:`release`).
    """
    released = release(source, clearing)
    answers, extras, notes = _student_cells(submission, source)
    cells, roles, checks, shown, unanswered = [], [], {}, {}, {}

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
            cell.source = blank.source if written is None else written
            add(cell, "answer")
        else:
            add(cell, "test" if is_test(cell) else "course", blank)
        for extra in extras.get(grade_id, []):
            add(_code_cell(extra), "extra")
    notebook = copy.deepcopy(source)
    notebook.cells = cells
    return Assembled(notebook, parts_of(source), roles, checks, shown, unanswered, notes)


def _student_cells(submission: NotebookNode, source: NotebookNode):
    """The student's answers by grade id, and added code cells by the id they follow.

    Returns:
        ``(answers, extras, notes)``: ``{grade_id: source}`` for answer cells (the first
        code cell with each id), ``{preceding grade_id or None: [source, ...]}`` for code
        cells without a known id, and remarks on anything odd.
    """
    answers_wanted = set(answer_ids(source))
    known_ids = {nbgrader_meta(c).get("grade_id") for c in source.cells} - {None}
    course_code = {c.source for c in source.cells if c.cell_type == "code" and not nbgrader_meta(c).get("grade_id")}
    answers: dict[str, str] = {}
    extras: dict[str | None, list[str]] = {}
    notes: list[str] = []
    anchor = None
    for cell in submission.cells:
        grade_id = nbgrader_meta(cell).get("grade_id")
        if grade_id in answers_wanted:
            if cell.cell_type != "code":
                notes.append(f"answer cell {grade_id} was turned into a {cell.cell_type} cell; graded as unanswered")
            elif grade_id in answers:  # as nbgrader does: a repeated id is an ordinary cell
                notes.append(f"grade id {grade_id} appears more than once; later copies run as added cells")
                extras.setdefault(anchor, []).append(cell.source)
            else:
                answers[grade_id] = cell.source
            anchor = grade_id
        elif grade_id in known_ids:
            anchor = grade_id  # an instructor cell (possibly edited): its source version is used
        elif cell.cell_type == "code" and cell.source.strip() and cell.source not in course_code:
            extras.setdefault(anchor, []).append(cell.source)  # a cell the student added (or edited)
    return answers, extras, notes


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
