"""A throw-away nbgrader course directory for the tests: generate, submit, autograde, read grades."""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENTS = sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir() and not p.name.startswith("."))
BIN = Path(sys.executable).parent  # nbgrader and jupyter of the environment running the tests


def notebook(folder: Path, assignment: str) -> Path:
    """The path of an assignment's notebook under ``folder`` (solutions/ or exercises/)."""
    return folder / assignment / f"{assignment}.ipynb"


def nbgrader(course: Path, *args: str) -> subprocess.CompletedProcess:
    """Run ``nbgrader ARGS`` in ``course``, failing with its output if it fails."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run([str(BIN / "nbgrader"), *args], cwd=course, env=env, capture_output=True, text=True)
    assert result.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result


def make_course(directory: Path) -> Path:
    """A course directory with the repository's config and solutions, every assignment generated.

    ``nbgrader generate_assignment`` runs once per test session (about 3 s an assignment),
    in a course of its own; every course after that is a copy of that one.
    """
    shutil.copytree(_generated_course(), directory, dirs_exist_ok=True)
    return directory


@functools.cache
def _generated_course() -> Path:
    """A course generated from today's solutions, removed when the tests end."""
    directory = Path(tempfile.mkdtemp(prefix="generated-course-"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    shutil.copy(ROOT / "nbgrader_config.py", directory)
    shutil.copytree(ROOT / "solutions", directory / "solutions")
    for assignment in ASSIGNMENTS:
        nbgrader(directory, "generate_assignment", assignment, "--force")
    return directory


def submit(course: Path, student: str, assignment: str, nb: dict) -> None:
    """Place notebook JSON ``nb`` as ``student``'s submission of ``assignment``."""
    path = notebook(course / "submitted" / student, assignment)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb))


def scores(course: Path, assignment: str, student: str) -> dict[str, tuple[float, float]]:
    """``{grade_id: (score, max_score)}`` of a student's autograded notebook."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        submission = gradebook.find_submission_notebook(assignment, assignment, student)
        return {grade.name: (grade.score, grade.max_score) for grade in submission.grades}


def load(path: Path) -> dict:
    return json.loads(path.read_text())
