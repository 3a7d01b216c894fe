"""Grade one submission: its cells run in the sandbox, every part judged from outside it.

Runs in a worker process (a local one, or a Dask worker) per submission. The submission's
own cells run in its sandboxed kernel (``execute.py``); then each test cell's checks are
judged here, in the grading process, by the course's judge (``autograder/judge.py``), which
draws the hidden inputs, asks the kernel for the answers' results (``kernel_respondent.py``)
and compares them with the references' results computed here. Nothing the kernel prints
or replies decides a grade beyond being its answer: the verdict, and the text each test
cell shows in the autograded notebook, are written here.
"""

from __future__ import annotations

import copy
import importlib
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

import nbformat
import torch
from nbformat import NotebookNode

from ..judge import NotDefined, Respondent, judge
from .execute import CellResult, KernelLost, open_session
from .kernel_respondent import TimedOut
from .notebooks import (Assembled, UnreadableNotebook, answer_ids, assemble, clean_outputs, parts_of, read_submission,
                        release_source)
from .sandbox import Limits

#: Status of a part, as in grades/<assignment>.csv.
STATUSES = ("passed", "failed", "error", "timeout", "missing")
#: The longest message kept for a part (what a student's code raised is part of it).
MESSAGE_CHARACTERS = 2000


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


def grade_submission(source: NotebookNode, path: Path, limits: Limits, key: str):
    """Grade the notebook at ``path`` against the instructor's ``source``; ``key`` draws the hidden cases.

    The checks are those of the chapter named after the notebook (``03_masking.ipynb``:
    ``autograder.ch03_masking``).

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
    chapter = importlib.import_module(f"autograder.ch{path.stem}")
    where = [torch.device("cpu")] + ([torch.device("cuda")] if limits.device == "cuda" else [])
    with open_session(assembled, limits) as session:
        session.run_cells()
        verdicts = judge_test_cells(session, assembled, chapter, limits.cell_seconds, key, where)
    results = [verdict for verdict, _ in verdicts.values()]
    return results, autograded(assembled, session.results, verdicts), assembled.unanswered


# --------------------------------------------------------------------------------------
# The test cells
# --------------------------------------------------------------------------------------


class Session(Protocol):
    """Where a submission's cells ran: ``execute.KernelSession`` at grading, ``in_process.InProcessSession`` in tests.

    Attributes:
        results: per cell, how it ended; deadline: ``time.monotonic()`` of the notebook's time limit.
    """

    results: list[CellResult]
    deadline: float

    @property
    def alive(self) -> bool: ...

    def recover(self) -> bool: ...

    def respondent(self, declaration, check: str, test: str, answer: str, deadline: float) -> Respondent: ...


def judge_test_cells(session: Session, assembled: Assembled, chapter, seconds: float, key: str,
                     where: list[torch.device]) -> dict[int, tuple[PartResult, str]]:
    """``{test cell index: (result, the text its cell shows)}``, each part judged within ``seconds``."""
    return {index: _judge_test_cell(session, assembled, chapter, index, seconds, key, where)
            for index in assembled.test_indices()}


def _judge_test_cell(session: Session, assembled: Assembled, chapter, index: int, seconds: float, key: str,
                     where: list[torch.device]) -> tuple[PartResult, str]:
    """The result of the part whose test cell is ``index``, and the text its cell shows."""
    part = assembled.part_of(index)

    def verdict(status: str, text: str = "") -> tuple[PartResult, str]:
        text = text if len(text) <= MESSAGE_CHARACTERS else text[:MESSAGE_CHARACTERS] + " […]"
        passed = status == "passed"
        return PartResult(part.grade_id, part.points if passed else 0.0, part.points, status, "" if passed else text), text

    tests = assembled.test_indices()
    start = max([i for i in tests if i < index], default=-1) + 1
    for answer in range(start, index):  # the part's own answers ran out of time or killed the kernel
        if session.results[answer].status in ("timeout", "died"):
            return verdict(_status_of(session.results[answer]), f"an answer cell: {session.results[answer].message}")
    calls = assembled.checks.get(index, [])
    if not calls:
        return verdict("error", "this test cell calls no check of the course (`checks.check_…(answer)`)")
    deadline = min(time.monotonic() + seconds, session.deadline)
    lines = []
    for call in calls:
        if time.monotonic() >= session.deadline:
            return verdict("timeout", "not checked: the notebook's time limit was reached")
        if not session.alive:
            return verdict("error", "not run: the kernel was lost too often")
        declaration = getattr(getattr(chapter, call.check, None), "declaration", None)
        if declaration is None:
            return verdict("error", f"the course has no check `{call.check}` in {chapter.__name__}")
        respondent = session.respondent(declaration, call.check, assembled.test_id(index), call.answer, deadline)
        try:
            count = judge(declaration, respondent, hidden=call.hidden, key=key, where=where)
        except NotDefined as missing:
            return verdict("error", str(missing) + _context(session.results, 0, index))
        except AssertionError as failure:
            return verdict("failed", str(failure) + _context(session.results, start, index))
        except NotImplementedError:
            return verdict("failed", "not answered (the cell still raises NotImplementedError)")
        except TimedOut as timeout:
            session.recover()
            return verdict("timeout", str(timeout))
        except KernelLost:
            session.recover()
            return verdict("error", "the kernel died while this part was checked (it exited, crashed or ran out of memory)")
        kind = "hidden" if call.hidden else "visible"
        lines.append(f"{count} {kind} case{'s' if count != 1 else ''}")
    devices = " and ".join(device.type for device in where)
    return verdict("passed", f"✔ {part.grade_id.removeprefix('test_')}: passed {' and '.join(lines)} on {devices}")


def _context(results: list[CellResult], start: int, index: int) -> str:
    """Why the part may have failed: what went wrong last in the cells from ``start`` to ``index``."""
    for i in reversed(range(start, index)):
        if results[i].status == "error":
            return f" (an answer cell raised {results[i].message})"
        if results[i].status in ("timeout", "died"):
            return f" (an earlier cell: {results[i].message})"
    return ""


def _status_of(result: CellResult) -> str:
    return "timeout" if result.status == "timeout" else "error"


# --------------------------------------------------------------------------------------
# The autograded notebook
# --------------------------------------------------------------------------------------


def autograded(assembled: Assembled, cell_results: list[CellResult],
               verdicts: dict[int, tuple[PartResult, str]]) -> NotebookNode:
    """The executed notebook as nbgrader stores it, safe to show to the student and the instructor.

    Test cells show their visible lines only (hidden tests are taken out of the source) and
    the grader's verdict, never anything the kernel wrote. The other cells keep what they
    printed, as text and PNG or JPEG images only (no HTML, JavaScript or SVG from a
    submission reaches the feedback pages or the formgrader).
    """
    notebook = copy.deepcopy(assembled.notebook)
    for index, cell in enumerate(notebook.cells):
        if index in verdicts:
            result, text = verdicts[index]
            cell.source = release_source(cell.source)
            if result.status == "passed":
                cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text + "\n")]
            else:
                cell.outputs = [nbformat.v4.new_output("error", ename=result.status, evalue=text,
                                                       traceback=[f"{result.status}: {text}"])]
        elif cell.cell_type == "code":
            cell.outputs = clean_outputs(cell.outputs)
            if cell_results[index].status in ("timeout", "died"):
                cell.outputs.append(_note(cell_results[index].message))
    return notebook


def _note(text: str) -> NotebookNode:
    return nbformat.v4.new_output("stream", name="stdout", text=f"[autograder] {text}\n")
