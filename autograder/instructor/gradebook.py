"""The course directory as nbgrader lays it out, and the grades recorded where nbgrader looks.

Scores go into nbgrader's own gradebook (any database URL nbgrader accepts: SQLite, the
default, or PostgreSQL with ``c.CourseDirectory.db_url = "postgresql+psycopg://..."``), and
the executed notebooks into ``autograded/``, so ``nbgrader export``, the formgrader and
``nbgrader generate_feedback`` work as after ``nbgrader autograde``.

Each submission's scores are written in one transaction (``record``), retried whole when
another grading run into the same database wrote the same student at the same moment. A
database that cannot be reached raises ``GradebookUnavailable``: what was committed
before stays, and the grading command, run again, resumes from there.
"""

from __future__ import annotations

import csv
import logging
import os
import random
import sqlite3
import sys
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterator, Mapping, TypeVar

import nbformat
from nbgrader.api import (
    Comment,
    Grade,
    Gradebook,
    InvalidEntry,
    MissingEntry,
    Student,
    SubmittedAssignment,
    SubmittedNotebook,
)
from nbgrader.coursedir import CourseDirectory
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, IntegrityError, InterfaceError, NoSuchModuleError, OperationalError, SAWarning
from traitlets.config.loader import Config

from ..grading.verdict import PartResult
from ..text import clean
from .settings import course_config
from .spreadsheet import inert, plain

T = TypeVar("T")
ATTEMPTS = 5  # tries of one transaction that conflicts with another run's (see ``_conflict``)
# SQLSTATEs of a transaction that lost a race and may simply be run again: serialization
# failure, deadlock, and a table or type another run's first connection created meanwhile
RETRY_SQLSTATES = {"40001", "40P01", "42P07", "42710"}


#: libpq's limits for a PostgreSQL gradebook, unless its URL sets them: seconds to connect
#: (a server that accepts and never answers would otherwise hold the run forever), and TCP
#: keepalives that notice a server gone in the middle of a transaction within about 90 s.
POSTGRES_LIMITS = {"connect_timeout": "10", "keepalives": "1", "keepalives_idle": "60", "keepalives_interval": "10",
                   "keepalives_count": "3"}


def with_limits(db_url: str) -> str:
    """``db_url`` with :data:`POSTGRES_LIMITS` for what it leaves unset (other databases unchanged)."""
    try:
        url = make_url(db_url)
    except Exception:  # noqa: BLE001 - nbgrader reports a malformed URL itself
        return db_url
    if url.get_backend_name() != "postgresql":
        return db_url
    missing = {name: value for name, value in POSTGRES_LIMITS.items() if name not in url.query}
    return url.update_query_dict(missing).render_as_string(hide_password=False)


class GradebookUnavailable(ConnectionError):
    """The gradebook's database cannot be reached, went away in the middle of a run, or has no driver here.

    Its message is one line that names the database (without a password) and says what
    to do: running the command again resumes, and nothing half-written is left behind.
    A ``ConnectionError``, so the command prints it as ``error: ...`` and exits with 2.
    """


#: The grades table's columns. The time each part took is measured anew on every run, so it is kept in the state
#: files only (``grade._save``): the same notebook regraded gives a byte-identical table.
CSV_COLUMNS = ["student", "assignment", "part", "score", "max_score", "status", "message", "auto_score"]


class GradebookError(RuntimeError):
    """The course is not laid out as grading needs (e.g. not exactly one source notebook of an assignment).

    The command prints its message alone and exits with 1.
    """


@dataclass
class Course:
    """Where an nbgrader course keeps things, read from its ``nbgrader_config.py``.

    Attributes:
        config: that file's configuration, read once (``settings.course_config``): nbgrader's
            own sections, and the grading settings' (``c.GradeSettings``).
    """

    root: Path
    coursedir: CourseDirectory
    config: Config

    @classmethod
    def open(cls, root: Path) -> "Course":
        root = root.resolve()
        config = course_config(root)
        return cls(root, CourseDirectory(config=config, root=str(root)), config)

    @property
    def db_url(self) -> str:
        return self.coursedir.db_url

    def folder(self, step: str, assignment: str, student: str = ".") -> Path:
        """``step`` is one of nbgrader's: ``source``, ``submitted``, ``autograded``, ..."""
        directory = getattr(self.coursedir, f"{step}_directory")
        if step in ("source", "release"):
            return self.root / directory / assignment
        return self.root / directory / student / assignment

    def source_notebook(self, assignment: str) -> Path:
        found = sorted(self.folder("source", assignment).glob("*.ipynb"))
        if len(found) != 1:
            raise GradebookError(f"expected one source notebook in {self.folder('source', assignment)}, found {len(found)}")
        return found[0]

    def students(self, assignment: str) -> list[str]:
        """Every student with a folder for ``assignment`` under ``submitted/``."""
        submitted = self.root / self.coursedir.submitted_directory
        return sorted(p.parent.name for p in submitted.glob(f"*/{assignment}") if p.is_dir()) if submitted.is_dir() else []


def environment_on_path(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with this Python environment's ``bin/`` first on ``PATH``: nbgrader runs ``alembic`` (to make
    a gradebook) and is run itself from there, whichever environment the shell had."""
    return {**environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + environ.get("PATH", "")}


def describe(db_url: str) -> str:
    """``db_url`` as written in the configuration, but without its password, to name the database in messages."""
    try:
        url = make_url(db_url)
    except Exception:  # noqa: BLE001 - not a URL SQLAlchemy can parse: say it as given
        return db_url
    return url.render_as_string(hide_password=True) if url.password else db_url


def _conflict(error: BaseException) -> bool:
    """Whether ``error`` is a race with another writer, so that running the transaction again helps."""
    if isinstance(error, (IntegrityError, InvalidEntry)):  # a unique key another run inserted first
        return True
    orig = getattr(error, "orig", None)
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)  # psycopg 3, psycopg2
    if isinstance(error, DBAPIError) and state in RETRY_SQLSTATES:
        return True
    return isinstance(orig, sqlite3.OperationalError) and "locked" in str(orig)


def _unavailable(db_url: str, error: BaseException) -> GradebookUnavailable:
    reason = " ".join(str(getattr(error, "orig", None) or error).split())  # one line
    return GradebookUnavailable(
        f"the gradebook database {describe(db_url)} is unavailable ({reason[:300]}); the grades recorded before "
        "are kept: once it is reachable again, run the same command to resume")


@contextmanager
def _quiet_nbgrader() -> Iterator[None]:
    """nbgrader logs a traceback for every failed commit; the conflicts ``_transaction`` retries are expected."""
    logger = logging.getLogger("tornado.application")  # nbgrader.api's app_log

    def drop(record: logging.LogRecord) -> bool:
        return False

    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


def _transaction(db_url: str, work: Callable[[Gradebook], T]) -> T:
    """``work(gradebook)`` in one transaction, committed at the end.

    The whole transaction is run again (on a new connection) when it conflicts with
    another run's (two runs adding the same student; two first runs creating the tables
    of an empty database), a few times; a database that cannot be reached raises
    ``GradebookUnavailable`` and nothing of the transaction is written.
    """
    for attempt in range(1, ATTEMPTS + 1):
        gradebook = None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", category=SAWarning)  # nbgrader's own autoflush notices
                with _quiet_nbgrader():
                    gradebook = Gradebook(with_limits(db_url))
                result = work(gradebook)
                gradebook.db.commit()
                return result
        except Exception as error:
            if gradebook is not None:
                _close(gradebook)
                gradebook = None
            if attempt < ATTEMPTS and _conflict(error):
                time.sleep(random.uniform(0.05, 0.2) * attempt)
                continue
            if isinstance(error, (OperationalError, InterfaceError)):
                raise _unavailable(db_url, error) from error
            if isinstance(error, (ImportError, NoSuchModuleError)):  # e.g. psycopg not installed
                raise GradebookUnavailable(
                    f"cannot open the gradebook database {describe(db_url)}: no driver for it in this environment "
                    f"({' '.join(str(error).split())}); install it, e.g. pip install 'psycopg[binary]' for "
                    "postgresql+psycopg://") from error
            raise
        finally:
            if gradebook is not None:
                _close(gradebook)
    raise AssertionError("unreachable")


def _close(gradebook: Gradebook) -> None:
    """Close ``gradebook``, rolling back what was not committed; a connection already lost is fine."""
    try:
        gradebook.close()
    except Exception:  # noqa: BLE001 - a connection already lost, however it was lost
        pass


def ensure_assignment(course: Course, assignment: str, source_path: Path) -> None:
    """Record the assignment's cells in the gradebook unless ``generate_assignment`` did already.

    Also when an earlier run saved only some of them (nbgrader's ``SaveCells`` commits cell
    by cell, and the database may have gone away in between): saving them again is safe
    while the notebook has no submissions.
    """
    from nbgrader.preprocessors import SaveCells
    from nbgrader.utils import is_grade, is_solution

    notebook_id = source_path.stem
    source = nbformat.read(source_path, as_version=4)
    wanted = ({c.metadata.nbgrader["grade_id"] for c in source.cells if is_grade(c)},
              {c.metadata.nbgrader["grade_id"] for c in source.cells if is_solution(c)})

    def missing(gradebook: Gradebook) -> bool:
        try:
            saved = gradebook.find_notebook(notebook_id, assignment)
        except MissingEntry:
            gradebook.update_or_create_assignment(assignment)
            return True
        return not (wanted[0] <= {c.name for c in saved.grade_cells}
                    and wanted[1] <= {c.name for c in saved.solution_cells})

    if not _transaction(course.db_url, missing):
        return
    resources = {"nbgrader": {"db_url": with_limits(course.db_url), "assignment": assignment, "notebook": notebook_id}}
    try:
        SaveCells().preprocess(source, resources)
    except (OperationalError, InterfaceError) as error:
        raise _unavailable(course.db_url, error) from error


def _submission(gradebook: Gradebook, assignment: str, student: str) -> SubmittedAssignment:
    """The student's submission, made (with the student) if new, as ``add_submission`` makes it,
    but not committed: nbgrader's ``update_or_create_*`` commit at once, each on its own."""
    try:
        gradebook.find_student(student)
    except MissingEntry:
        gradebook.db.add(Student(id=student))
        gradebook.db.flush()  # another run adding this student first: IntegrityError, and a retry
    try:
        return gradebook.find_submission(assignment, student)
    except MissingEntry:
        pass
    submission = SubmittedAssignment(assignment=gradebook.find_assignment(assignment),
                                     student=gradebook.find_student(student))
    for notebook in submission.assignment.notebooks:
        submitted = SubmittedNotebook(notebook=notebook, assignment=submission)
        for cell in notebook.grade_cells:
            Grade(cell_id=cell.id, notebook=submitted)
        for cell in notebook.solution_cells:
            Comment(cell_id=cell.id, notebook=submitted)
        for cell in notebook.task_cells:
            Comment(cell_id=cell.id, notebook=submitted)
            Grade(cell_id=cell.id, notebook=submitted)
    gradebook.db.add(submission)
    gradebook.db.flush()
    return submission


def record(course: Course, assignment: str, notebook_id: str, student: str, results: list[PartResult],
           answers_blank: dict[str, bool], timestamp: datetime | None) -> None:
    """Write one student's submission and scores into the gradebook, in one transaction.

    Either all of it is committed or none (the caller marks the submission as done only
    after this returns). Raises ``GradebookUnavailable`` if the database cannot be reached.
    """
    from nbgrader.utils import parse_utc

    def write(gradebook: Gradebook) -> None:
        submission = _submission(gradebook, assignment, student)
        submission.timestamp = parse_utc(timestamp)
        for result in results:
            grade = gradebook.find_grade(result.part, notebook_id, assignment, student)
            grade.auto_score = result.score
            grade.needs_manual_grade = grade.manual_score is not None
        for answer_id, blank in answers_blank.items():
            comment = gradebook.find_comment(answer_id, notebook_id, assignment, student)
            comment.auto_comment = "No response." if blank else None

    _transaction(course.db_url, write)


def manual_scores(course: Course, assignment: str) -> dict[tuple[str, str], float]:
    """``{(student, part): score}`` of the scores set by hand (in the formgrader) for ``assignment``.

    The gradebook is the record: a score overridden there replaces the grader's in the
    course's CSV and in ``nbgrader export``.
    """
    def read(gradebook: Gradebook) -> dict[tuple[str, str], float]:
        try:
            submissions = gradebook.assignment_submissions(assignment)
        except MissingEntry:
            return {}
        return {(submission.student_id, grade.name): float(grade.manual_score)
                for submission in submissions for notebook in submission.notebooks for grade in notebook.grades
                if grade.manual_score is not None}

    return _transaction(course.db_url, read)


def has_gradebook(course: Course) -> bool:
    """Whether the course has a gradebook to read: a SQLite one that does not exist yet is not made by reading."""
    url = make_url(course.db_url)
    return not (url.get_backend_name() == "sqlite" and url.database and not Path(url.database).is_file())


def student_ids(course: Course) -> list[str]:
    """The students the gradebook knows (``nbgrader db student add``, or graded once), for who missed a hand-in."""
    if not has_gradebook(course):
        return []
    return _transaction(course.db_url, lambda gradebook: sorted(student.id for student in gradebook.students))


def read_timestamp(folder: Path) -> datetime | None:
    """The submission time nbgrader's ``collect`` wrote to ``timestamp.txt``, if any."""
    from nbgrader.utils import parse_utc

    path = folder / "timestamp.txt"
    try:
        return parse_utc(path.read_text().strip())
    except (OSError, ValueError):
        return None


def read_csv(path: Path) -> list[dict]:
    """The rows of a grades table as :func:`write_csv` wrote them: text cells as they were before
    ``spreadsheet.inert``, ``score``, ``max_score`` and ``auto_score`` as floats (``auto_score`` defaults to
    ``score``). ValueError naming the line where a number is not one."""
    rows = []
    with path.open(newline="", encoding="utf-8") as handle:
        for line, row in enumerate(csv.DictReader(handle), start=2):
            row = {key: plain(value) if isinstance(value, str) else value for key, value in row.items()}
            try:
                numbers = {key: float(row[key]) for key in ("score", "max_score")}
                numbers["auto_score"] = float(row.get("auto_score") or numbers["score"])
            except (KeyError, TypeError, ValueError):
                raise ValueError(f"{path}, line {line}: {row.get('student')!r}'s score {row.get('score')!r} out of "
                                 f"{row.get('max_score')!r} is not a number") from None
            rows.append({**row, **numbers})
    return rows


def write_csv(path: Path, rows: list[dict]) -> None:
    """Write the grades table atomically (a crash never leaves half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".csv.partial")
    with partial.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        # a student's folder name may hold any bytes, a message what a submission raised: every text cell
        # encodable, and inert in a spreadsheet (``spreadsheet.inert``: a leading = + - @ quoted)
        writer.writerows({key: inert(clean(value)) if isinstance(value, str) else value for key, value in row.items()}
                         for row in rows)
    os.replace(partial, path)
