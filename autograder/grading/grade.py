"""Grade one submission: assemble, execute in the sandbox, judge every part.

Runs in a worker process of its own (``cli.py`` starts one per submission), so that
whatever a submission does to its grader, the other submissions never see it.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from .notebooks import UnreadableNotebook, answer_ids, assemble, parts_of, read_submission, release_source
from .run import CellResult, execute
from .sandbox import Limits

#: Status of a part, as in grades/<assignment>.csv.
STATUSES = ("passed", "failed", "error", "timeout", "tampered", "missing")


@dataclass
class PartResult:
    """One row of the grades: how one student did on one graded part."""

    part: str
    score: float
    max_score: float
    status: str
    message: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def grade_submission(source: NotebookNode, path: Path, limits: Limits):
    """Grade the notebook at ``path`` against the instructor's ``source``.

    Returns:
        ``(results, autograded, unanswered)``: one result per part of ``source``; the
        executed notebook to store for nbgrader's formgrader and feedback (``None`` when
        there was nothing to execute); and, per answer grade id, whether it was left blank.
    """
    parts = parts_of(source)
    nothing_answered = dict.fromkeys(answer_ids(source), True)
    if not path.is_file():
        missing = f"no notebook {path.name} in the submission"
        return [PartResult(p.grade_id, 0.0, p.points, "missing", missing) for p in parts], None, nothing_answered
    try:
        submission = read_submission(path)
    except UnreadableNotebook as error:
        return [PartResult(p.grade_id, 0.0, p.points, "error", str(error)) for p in parts], None, nothing_answered
    try:
        assembled = assemble(source, submission)
    except Exception as error:  # metadata no notebook tool writes: the submission's fault, not the grader's
        message = f"the notebook could not be read as an assignment: {type(error).__name__}: {error}"
        return [PartResult(p.grade_id, 0.0, p.points, "error", message) for p in parts], None, nothing_answered
    cell_results = execute(assembled, limits)
    results = [_judge(assembled, cell_results, index) for index, role in enumerate(assembled.roles) if role == "test"]
    return results, _autograded(assembled, cell_results, results), assembled.unanswered


def _judge(assembled, cell_results: list[CellResult], test_index: int) -> PartResult:
    """The result of the part whose test cell is ``test_index``."""
    part = assembled.part_of(test_index)

    def verdict(status: str, message: str = "") -> PartResult:
        return PartResult(part.grade_id, part.points if status == "passed" else 0.0, part.points, status, message)

    if part.tampered:
        return verdict("tampered", f"not run: {part.tampered}; code that changes how grading works gets no points")
    start = max([i for i in range(test_index) if assembled.roles[i] == "test"], default=-1) + 1
    for index in range(start, test_index):  # the part's own answers ran out of time or killed the kernel
        if cell_results[index].status in ("timeout", "died"):
            return verdict(_status_of(cell_results[index]), f"an answer cell: {cell_results[index].message}")
    result = cell_results[test_index]
    if result.audit != "clean" and result.status in ("ok", "error"):
        return verdict("tampered", f"while being checked, the code {result.audit.replace('changed:', 'changed')}")
    if result.status == "ok":
        return verdict("passed")
    answer_errors = [cell_results[i].message for i in range(start, test_index) if cell_results[i].status == "error"]
    context = f" (an answer cell raised {answer_errors[0]})" if answer_errors else ""
    return verdict(_status_of(result), _message(result) + context)


def _status_of(result: CellResult) -> str:
    if result.status == "timeout":
        return "timeout"
    if result.status == "error" and result.message.startswith(("AssertionError", "NotImplementedError")):
        return "failed"
    return "error"


def _message(result: CellResult) -> str:
    if result.message.startswith("NotImplementedError"):
        return "not answered (the cell still raises NotImplementedError)"
    return result.message.removeprefix("AssertionError: ")


def _autograded(assembled, cell_results: list[CellResult], results: list[PartResult]) -> NotebookNode:
    """The executed notebook as nbgrader stores it, safe to show to the student.

    Test cells show their visible tests only (hidden tests are taken out of the source)
    and their errors show the check's message without a traceback, so neither reveals
    hidden test code. Cells that were not run show what the student wrote and why.
    """
    notebook = copy.deepcopy(assembled.notebook)
    by_test = iter(results)
    for index, cell in enumerate(notebook.cells):
        if index in assembled.student_sources:
            cell.source = assembled.student_sources[index]
            cell.outputs = [_note("not run: this code changes how grading works")]
        if assembled.roles[index] == "test":
            result = next(by_test)
            cell.source = release_source(cell.source)
            cell.outputs = [o for o in cell.outputs if o.get("output_type") != "error"]
            if result.status != "passed":
                cell.outputs.append(nbformat.v4.new_output("error", ename=result.status, evalue=result.message,
                                                           traceback=[f"{result.status}: {result.message}"]))
        elif cell.cell_type == "code" and cell_results[index].status in ("timeout", "died"):
            cell.outputs.append(_note(cell_results[index].message))
    return notebook


def _note(text: str) -> NotebookNode:
    return nbformat.v4.new_output("stream", name="stdout", text=f"[autograder] {text}\n")
