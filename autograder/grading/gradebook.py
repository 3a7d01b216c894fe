"""The course directory as nbgrader lays it out, and the grades recorded where nbgrader looks.

Scores go into nbgrader's own gradebook (any database URL nbgrader accepts), and the
executed notebooks into ``autograded/``, so ``nbgrader export``, the formgrader and
``nbgrader generate_feedback`` work as after ``nbgrader autograde``.
"""

from __future__ import annotations

import csv
import os
import warnings
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.coursedir import CourseDirectory
from sqlalchemy.exc import SAWarning
from traitlets.config.loader import Config, PyFileConfigLoader

from .grade import PartResult

CSV_COLUMNS = ["student", "assignment", "part", "score", "max_score", "status", "message"]


@dataclass
class Course:
    """Where an nbgrader course keeps things, read from its ``nbgrader_config.py``."""

    root: Path
    coursedir: CourseDirectory

    @classmethod
    def open(cls, root: Path) -> "Course":
        root = root.resolve()
        config = Config()
        if (root / "nbgrader_config.py").exists():
            config = PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()
        return cls(root, CourseDirectory(config=config, root=str(root)))

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
            raise SystemExit(f"expected one source notebook in {self.folder('source', assignment)}, found {len(found)}")
        return found[0]

    def students(self, assignment: str) -> list[str]:
        """Every student with a folder for ``assignment`` under ``submitted/``."""
        submitted = self.root / self.coursedir.submitted_directory
        return sorted(p.parent.name for p in submitted.glob(f"*/{assignment}") if p.is_dir()) if submitted.is_dir() else []


def ensure_assignment(course: Course, assignment: str, source_path: Path) -> None:
    """Record the assignment's cells in the gradebook unless ``generate_assignment`` did already."""
    from nbgrader.preprocessors import SaveCells

    notebook_id = source_path.stem
    with Gradebook(course.db_url) as gradebook:
        try:
            gradebook.find_notebook(notebook_id, assignment)
            return
        except MissingEntry:
            gradebook.update_or_create_assignment(assignment)
    resources = {"nbgrader": {"db_url": course.db_url, "assignment": assignment, "notebook": notebook_id}}
    SaveCells().preprocess(nbformat.read(source_path, as_version=4), resources)


def record(course: Course, assignment: str, notebook_id: str, student: str, results: list[PartResult],
           answers_blank: dict[str, bool], timestamp: datetime | None) -> None:
    """Write one student's scores into the gradebook, in one transaction."""
    with warnings.catch_warnings(), Gradebook(course.db_url) as gradebook:
        warnings.simplefilter("ignore", category=SAWarning)  # nbgrader's own autoflush notices
        gradebook.update_or_create_student(student)
        gradebook.update_or_create_submission(assignment, student, timestamp=timestamp)
        for result in results:
            grade = gradebook.find_grade(result.part, notebook_id, assignment, student)
            grade.auto_score = result.score
            grade.needs_manual_grade = grade.manual_score is not None
        for answer_id, blank in answers_blank.items():
            comment = gradebook.find_comment(answer_id, notebook_id, assignment, student)
            comment.auto_comment = "No response." if blank else None
        gradebook.db.commit()


def read_timestamp(folder: Path) -> datetime | None:
    """The submission time nbgrader's ``collect`` wrote to ``timestamp.txt``, if any."""
    from nbgrader.utils import parse_utc

    path = folder / "timestamp.txt"
    try:
        return parse_utc(path.read_text().strip())
    except (OSError, ValueError):
        return None


def write_csv(path: Path, rows: list[dict]) -> None:
    """Write the grades table atomically (a crash never leaves half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".csv.partial")
    with partial.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    os.replace(partial, path)
