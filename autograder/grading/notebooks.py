"""From a student's submission and the instructor's source to the notebook that is graded.

The graded notebook is the instructor's source notebook with the student's answers put
in: every cell the student cannot legitimately change (set-up code, explanations and
above all the test cells, hidden tests included) comes from the source, and from the
submission only the answer cells, matched by their nbgrader ``grade_id``, plus any code
cells the student added. Edited or deleted test cells, changed cell types, duplicated
ids and edited points therefore change nothing. The nbgrader unit of grading is the test
cell, so a *part* here is one test cell and the answers written since the previous one.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from .scan import module_aliases, scan

#: The stub nbgrader puts in place of a solution (what an unanswered cell holds).
BLANK_ANSWER = "# YOUR CODE HERE\nraise NotImplementedError()"
_SOLUTION = re.compile(r"^([ \t]*)### BEGIN SOLUTION\n.*?^[ \t]*### END SOLUTION[ \t]*$", re.MULTILINE | re.DOTALL)


class UnreadableNotebook(Exception):
    """The submission is not a notebook that can be graded; the message says why."""


@dataclass
class Part:
    """One graded test cell and the answers it checks.

    Attributes:
        grade_id: the test cell's nbgrader id, e.g. ``"test_masked_softmax"``.
        points: its points in the instructor's source (whatever the submission says).
        tampered: why the part's code was not run, or ``""``.
    """

    grade_id: str
    points: float
    tampered: str = ""


@dataclass
class Assembled:
    """The notebook to execute and what each of its cells is.

    Attributes:
        notebook: instructor cells with the student's answers put in.
        parts: the graded parts, in notebook order.
        roles: per cell, ``"test"``, ``"answer"``, ``"extra"`` (a cell the student added)
            or ``"course"`` (the instructor's set-up and text).
        student_sources: per cell index, what the student wrote where it differs from
            what is executed (a flagged cell), to show in the autograded notebook.
        unanswered: per answer grade id, whether the student left it as released
            (nbgrader's "No response." comment).
        notes: remarks for the instructor, e.g. duplicated ids.
    """

    notebook: NotebookNode
    parts: list[Part]
    roles: list[str]
    student_sources: dict[int, str] = field(default_factory=dict)
    unanswered: dict[str, bool] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def part_of(self, index: int) -> Part | None:
        """The part whose test cell comes at or after cell ``index`` (``None`` past the last)."""
        tests = [i for i, role in enumerate(self.roles) if role == "test"]
        following = [i for i in tests if i >= index]
        if not following:
            return None
        return self.parts[tests.index(following[0])]


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
        text = path.read_text(encoding="utf-8")
        raw = json.loads(text)
        if not isinstance(raw, dict) or "cells" not in raw and "worksheets" not in raw:
            raise UnreadableNotebook("the file is JSON but not a Jupyter notebook")
        return nbformat.reads(text, as_version=4)
    except UnreadableNotebook:
        raise
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UnreadableNotebook(f"the file is not valid notebook JSON ({error})") from None
    except Exception as error:  # nbformat's own errors for versions it cannot convert
        raise UnreadableNotebook(f"the notebook cannot be read ({type(error).__name__}: {error})") from None


def answer_ids(source: NotebookNode) -> list[str]:
    """The grade ids of the source's answer cells, in order."""
    return [nbgrader_meta(c)["grade_id"] for c in source.cells if is_answer(c)]


def parts_of(source: NotebookNode) -> list[Part]:
    """The graded parts of the instructor's source notebook, in order."""
    return [Part(nbgrader_meta(c)["grade_id"], float(nbgrader_meta(c).get("points", 0))) for c in source.cells if is_test(c)]


def assemble(source: NotebookNode, submission: NotebookNode) -> Assembled:
    """The notebook to grade: the source's cells with the submission's answers put in."""
    answers, extras, notes = _student_cells(submission, source)
    known_modules = set().union(*(module_aliases(c.source) for c in source.cells if c.cell_type == "code"))
    cells, roles, student_sources, unanswered = [], [], {}, {}
    parts = {p.grade_id: p for p in parts_of(source)}
    pending_tamper: list[str] = []  # reasons waiting for the next test cell

    def add(cell: NotebookNode, role: str, written: str | None = None, instead: str = "") -> None:
        """Append ``cell``; student code (``written``) that tampers is replaced by ``instead``."""
        findings = scan(written, known_modules) if written is not None else []
        if findings:
            pending_tamper.append(f"cell {len(cells) + 1}, {findings[0]}")
            student_sources[len(cells)] = written
            cell.source = instead
        cells.append(cell)
        roles.append(role)

    for extra in extras.get(None, []):
        add(_code_cell(extra), "extra", extra)
    for cell in source.cells:
        cell = copy.deepcopy(cell)
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        grade_id = nbgrader_meta(cell).get("grade_id")
        if is_answer(cell):
            written, blank = answers.get(grade_id), blank_version(cell.source)
            unanswered[grade_id] = written is None or written.strip() == blank.strip()
            cell.source = blank if written is None else written
            add(cell, "answer", written, instead=blank)
        elif is_test(cell):
            add(cell, "test")
            if pending_tamper:
                parts[grade_id].tampered = "; ".join(pending_tamper)
                pending_tamper.clear()
        else:
            add(cell, "course")
        for extra in extras.get(grade_id, []):
            add(_code_cell(extra), "extra", extra)
    notebook = copy.deepcopy(source)
    notebook.cells = cells
    return Assembled(notebook, list(parts.values()), roles, student_sources, unanswered, notes)


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


def blank_version(source: str) -> str:
    """An answer cell as students receive it: each solution replaced by nbgrader's stub."""
    stub = lambda match: "\n".join(match.group(1) + line for line in BLANK_ANSWER.splitlines())  # noqa: E731
    return _SOLUTION.sub(stub, source)


def _code_cell(source: str) -> NotebookNode:
    return nbformat.v4.new_code_cell(source)


def release_source(cell_source: str) -> str:
    """A test cell's source as students see it: the hidden tests taken out."""
    kept, hidden = [], False
    for line in cell_source.splitlines():
        if "### BEGIN HIDDEN TESTS" in line:
            hidden = True
        elif "### END HIDDEN TESTS" in line:
            hidden = False
        elif not hidden:
            kept.append(line)
    return "\n".join(kept).rstrip()
