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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

import nbformat
import torch
from nbformat import NotebookNode

from ..core import CheckFailed, advice_lines
from ..judge import JudgeFault, NeedsALook, NotDefined, Respondent, judge, passed_line, where_raised
from ..text import clean
from .errors import KernelLost, TimedOut
from .execute import CellResult, CellStatus, Status, open_session
from .notebooks import (
    Assembled,
    BrokenSource,
    UnreadableNotebook,
    answer_ids,
    assemble,
    clean_outputs,
    parts_of,
    read_bounded,
)
from .reading import Finding, Reading, read
from .sandbox import Limits


class PartStatus(Status):
    """How one part did, as written in grades/<assignment>.csv, the state files and the summary (in this order)."""

    PASSED = "passed"
    FAILED = "failed"  # a wrong result, or not answered
    ERROR = "error"  # it could not be checked: not defined, raised, its kernel lost, the notebook unreadable
    TIMEOUT = "timeout"
    MISSING = "missing"  # no notebook submitted
    NEEDS_A_LOOK = "needs a look"  # points withheld until an instructor looks (:func:`_read_into`)


#: The findings of the reading a message names (then "and N more").
SHOWN_FINDINGS = 3
#: The longest message kept for a part (what a student's code raised is part of it).
MESSAGE_CHARACTERS = 2000


@dataclass
class PartResult:
    """One row of the grades: how one student did on one graded part."""

    part: str
    score: float
    max_score: float
    status: PartStatus  # or its text, as read back from a state file
    message: str = ""
    #: the time the part's calls took in the kernel (its CPU time, as its time limits count it), where measured
    seconds: float | None = None
    #: where a visible case failed on what the answer returned, a digest of that (``CheckFailed.returned``): kept in
    #: the state file, not the grades table, for the class report to tell unnamed mistakes apart
    returned: str | None = None

    def __post_init__(self):
        self.status = PartStatus(self.status)

    def as_dict(self) -> dict:
        """Plain data, the status as its text: a row of the CSV, of a state file, of a worker's outcome."""
        return {**asdict(self), "status": self.status.value}


@dataclass
class Graded:
    """One submission, graded.

    Attributes:
        results: one result per part of the source.
        autograded: the executed notebook to store for nbgrader's formgrader and feedback
            (``None`` when there was nothing to execute).
        unanswered: per answer grade id, whether it was left blank.
        notes: what the submission did to the grader, for the run's summary (output it
            flooded while judged, oracle calls refused, a file refused unread).
    """

    results: list[PartResult]
    autograded: NotebookNode | None
    unanswered: dict[str, bool]
    notes: list[str] = field(default_factory=list)


def all_parts(source: NotebookNode, status: PartStatus, message: str, notes: list[str] | None = None) -> Graded:
    """A submission that was not run at all (missing, unreadable, refused): every part ``status``, saying why."""
    return Graded([PartResult(p.grade_id, 0.0, p.points, status, message) for p in parts_of(source)], None,
                  dict.fromkeys(answer_ids(source), True), notes or [])


def grade_submission(source: NotebookNode, path: Path, limits: Limits, key: str,
                     clearing: dict[str, dict] | None = None) -> Graded:
    """Grade the notebook at ``path`` against the instructor's ``source``; ``key`` draws the hidden cases.

    The checks are those of the chapter named after the notebook (``03_masking.ipynb``:
    ``autograder.ch03_masking``); ``clearing`` is how the course's nbgrader clears the source
    (``notebooks.clearing_options``). Of the submission, at most ``limits.added_cells`` cells
    of the student's own and ``limits.code_kb`` KiB of the student's code are taken; what
    is past them is left out, and the notes and the autograded notebook say so.

    Raises:
        BrokenSource: the source cannot be released, whatever was submitted.
    """
    if not path.is_file():
        return all_parts(source, PartStatus.MISSING, f"no notebook {path.name} in the submission")
    try:
        submission, unread = read_bounded(path, source, limits.added_cells)
    except UnreadableNotebook as error:
        return all_parts(source, PartStatus.ERROR, str(error))
    try:
        assembled = assemble(source, submission, clearing, limits.code_kb)
    except BrokenSource:
        raise  # the instructor's notebook, not the submission
    except Exception as error:  # noqa: BLE001 - metadata no notebook tool writes: the submission's fault
        return all_parts(source, PartStatus.ERROR, f"the notebook could not be read as an assignment: "
                                                   f"{type(error).__name__}: {error}")
    assembled.limited[:0] = unread
    chapter = importlib.import_module(f"autograder.ch{path.stem}")
    where = [torch.device("cpu")] + ([torch.device("cuda")] if limits.device == "cuda" else [])
    with open_session(assembled, limits) as session:
        session.run_cells()
        verdicts = judge_test_cells(session, assembled, chapter, limits.cell_seconds, key, where)
    results = [verdict for verdict, _ in verdicts.values()]
    return Graded(results, autograded(assembled, session.results, verdicts), assembled.unanswered,
                  assembled.limited + session.notes())


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
    """``{test cell index: (result, the text its cell shows)}``, each part judged within ``seconds``, then held
    against the grader's reading of the code handed in (:func:`_read_into`)."""
    reading = read(assembled)
    return {index: _read_into(_judge_test_cell(session, assembled, chapter, index, seconds, key, where), reading,
                              [(call.answer, getattr(getattr(chapter, call.check, None), "declaration", None))
                               for call in assembled.checks.get(index, [])], index)
            for index in assembled.test_indices()}


def _read_into(judged: tuple[PartResult, str], reading: Reading, answers: list[tuple[str, object]], test: int
               ) -> tuple[PartResult, str]:
    """``judged``, or for a part that forbids library attention and passed on its results: failed where the answer
    reaches library attention in the code handed in, "needs a look" where that code is beyond a static reading.

    The points of such a part are for implementing attention: the grader reads the code itself
    (``reading.py``), since what the kernel says it called could be made up, from the answer that
    stands at the test cell ``test``; what the grader puts in for the checks' own stand-ins is not
    followed. A part that failed, or that does not forbid library attention, keeps its grade.
    """
    result, _ = judged
    forbidding = [(answer, declaration) for answer, declaration in answers
                  if getattr(declaration, "forbid_library", False)]
    if result.status is not PartStatus.PASSED or not forbidding:
        return judged
    found = [finding for answer, declaration in forbidding
             for finding in reading.library(answer, skip=declaration.stand_ins_by_name(), before=test)]
    if found:
        text = _shown(f"{result.part.removeprefix('test_')}: {found[0].what} ({_listed(found)}): the contract asks you "
                      "to implement this part yourself rather than delegate its core to a library implementation, "
                      "so its points are withheld")
        return PartResult(result.part, 0.0, result.max_score, PartStatus.FAILED, text, result.seconds), text
    if not reading.unsure:
        return judged
    text = _shown(f"needs a look (points withheld until an instructor looks): its results are right, but the "
                  f"notebook's own cells hold code that a reading cannot see past ({_listed(reading.unsure)}), so the "
                  "grader cannot tell whether the answer delegates to library attention. Read those cells; if the "
                  "answer is the student's own, give the points by hand in the formgrader")
    return PartResult(result.part, 0.0, result.max_score, PartStatus.NEEDS_A_LOOK, text, result.seconds), text


def _listed(findings: list[Finding]) -> str:
    """The first :data:`SHOWN_FINDINGS` findings, then how many more."""
    more = len(findings) - SHOWN_FINDINGS
    return "; ".join(str(finding) for finding in findings[:SHOWN_FINDINGS]) + (f"; and {more} more" if more > 0 else "")


def _shown(text: str) -> str:
    """A part's message as stored and shown: at most :data:`MESSAGE_CHARACTERS` (``[…]`` marks a cut), storable."""
    return clean(text if len(text) <= MESSAGE_CHARACTERS else text[:MESSAGE_CHARACTERS] + " […]", controls=True)


def _judge_test_cell(session: Session, assembled: Assembled, chapter, index: int, seconds: float, key: str,
                     where: list[torch.device]) -> tuple[PartResult, str]:
    """The result of the part whose test cell is ``index``, and the text its cell shows."""
    part = assembled.part_of(index)

    spent: list[float] = []  # the kernel's CPU seconds of each check call judged, where known

    def verdict(status: PartStatus, text: str = "", returned: str | None = None) -> tuple[PartResult, str]:
        text = _shown(text)
        passed = status is PartStatus.PASSED
        seconds = round(sum(spent), 3) if spent else None
        return PartResult(part.grade_id, part.points if passed else 0.0, part.points, status, "" if passed else text,
                          seconds, returned), text

    tests = assembled.test_indices()
    start = max([i for i in tests if i < index], default=-1) + 1
    for answer in range(start, index):  # the part's own answers left out, or they ran out of time or killed the kernel
        if answer in assembled.left_out:
            return verdict(PartStatus.ERROR, assembled.left_out[answer])
        if session.results[answer].status.cut_short:
            return verdict(_status_of(session.results[answer]), f"an answer cell: {session.results[answer].message}")
    calls = assembled.checks.get(index, [])
    if not calls:
        return verdict(PartStatus.ERROR, "this test cell calls no check of the course (`checks.check_…(answer)`)")
    deadline = min(time.monotonic() + seconds, session.deadline)
    counts, advice = [], []
    for call in calls:
        if time.monotonic() >= session.deadline:
            return verdict(PartStatus.TIMEOUT, "not checked: the notebook's time limit was reached")
        if not session.alive:
            return verdict(PartStatus.ERROR, "not run: the kernel was lost too often")
        declaration = getattr(getattr(chapter, call.check, None), "declaration", None)
        if declaration is None:
            return verdict(PartStatus.ERROR, f"the course has no check `{call.check}` in {chapter.__name__}")
        respondent = session.respondent(declaration, call.check, assembled.test_id(index), call.answer, deadline)
        try:
            try:
                judged = judge(declaration, respondent, hidden=call.hidden, key=key, where=where)
            finally:
                _add_time(spent, respondent)
        except NotDefined as missing:
            return verdict(PartStatus.ERROR, str(missing) + _context(assembled, session.results, 0, index))
        except CheckFailed as failure:
            return verdict(PartStatus.FAILED, str(failure) + _context(assembled, session.results, start, index),
                           failure.returned)
        except NotImplementedError:
            return verdict(PartStatus.FAILED, "not answered (the cell still raises NotImplementedError)")
        except NeedsALook as look:
            return verdict(PartStatus.NEEDS_A_LOOK, f"needs a look (points withheld until an instructor looks): {look}")
        except TimedOut as timeout:
            session.recover()
            return verdict(PartStatus.TIMEOUT, str(timeout))
        except KernelLost:
            session.recover()
            return verdict(PartStatus.ERROR,
                           "the kernel died while this part was checked (it exited, crashed or ran out of memory)")
        except JudgeFault:
            raise
        except Exception as error:  # the course's own code (a bare assert, a bug): never the student's zero
            raise JudgeFault(f"{part.grade_id}: the grader failed while judging it: {type(error).__name__}: "
                             f"{error} ({where_raised(error)})") from error
        counts.append((judged.cases, call.hidden))
        advice += judged.advice
    return verdict(PartStatus.PASSED, passed_line(declaration, counts, where) + advice_lines(tuple(dict.fromkeys(advice))))


def _add_time(spent: list[float], respondent) -> None:
    """Add to ``spent`` the kernel's CPU seconds of the call ``respondent`` just answered, where it measures them."""
    measure = getattr(respondent, "cpu_seconds", None)
    seconds = measure() if measure is not None else None
    if seconds is not None:
        spent.append(seconds)


def _context(assembled: Assembled, results: list[CellResult], start: int, index: int) -> str:
    """Why the part may have failed: what went wrong last in the cells from ``start`` to ``index``, each named
    for what it is (an answer cell by its name, a cell the student added, or one the assignment gave)."""
    for i in reversed(range(start, index)):
        if results[i].status is CellStatus.ERROR:
            return f" ({_cell_named(assembled, i)} raised {results[i].message})"
        if results[i].status.cut_short:
            return f" (an earlier cell: {results[i].message})"
    return ""


def _cell_named(assembled: Assembled, index: int) -> str:
    """The cell at ``index`` as a message names it: ``the answer cell `causal_mask```, ``a cell you added`` or
    ``a cell of the assignment``."""
    role = assembled.roles[index] if index < len(assembled.roles) else ""
    if role == "answer":
        grade_id = (assembled.notebook.cells[index].metadata.get("nbgrader") or {}).get("grade_id")
        return f"the answer cell `{grade_id}`" if grade_id else "an answer cell"
    return "a cell you added" if role == "extra" else "a cell of the assignment"


def _status_of(result: CellResult) -> PartStatus:
    """The status of a part whose answer cell was cut short: a timeout if it ran out of time, else an error."""
    return PartStatus.TIMEOUT if result.status is CellStatus.TIMEOUT else PartStatus.ERROR


# --------------------------------------------------------------------------------------
# The autograded notebook
# --------------------------------------------------------------------------------------


def autograded(assembled: Assembled, cell_results: list[CellResult],
               verdicts: dict[int, tuple[PartResult, str]]) -> NotebookNode:
    """The executed notebook as nbgrader stores it, safe to show to the student and the instructor.

    Test cells show their visible lines only (hidden tests are taken out of the source) and
    the grader's verdict, never anything the kernel wrote. The other cells keep what they
    printed, as text and PNG or JPEG images only (no HTML, JavaScript or SVG from a
    submission reaches the feedback pages or the formgrader). An answer the bounds left
    out says so in its cell, and what they left out is said in a last cell.
    """
    notebook = copy.deepcopy(assembled.notebook)
    for index, cell in enumerate(notebook.cells):
        if index in verdicts:
            result, text = verdicts[index]
            cell.source = assembled.shown[index]
            if result.status is PartStatus.PASSED:
                cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text + "\n")]
            else:
                cell.outputs = [nbformat.v4.new_output("error", ename=result.status.value, evalue=text,
                                                       traceback=[f"{result.status}: {text}"])]
        elif cell.cell_type == "code":
            cell.outputs = clean_outputs(cell.outputs)
            if cell_results[index].status.cut_short:
                cell.outputs.append(_note(cell_results[index].message))
            if index in assembled.left_out:
                cell.outputs.append(_note(assembled.left_out[index]))
    if assembled.limited:
        notebook.cells.append(nbformat.v4.new_markdown_cell(
            "\n\n".join(f"**[autograder]** {clean(note, controls=True)}" for note in assembled.limited)))
    return notebook


def _note(text: str) -> NotebookNode:
    return nbformat.v4.new_output("stream", name="stdout", text=f"[autograder] {text}\n")
