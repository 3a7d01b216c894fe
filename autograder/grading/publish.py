"""``python -m autograder publish DEST``: the student repository of a course run for credit.

A course taught for credit keeps this repository private: it holds ``solutions/`` (the
answers), ``autograder/reference/`` (reference answers and hidden cases), the grading
command and ``instructors/`` (the answers to the book's think-exercises). Students get a
second repository made from it by this command, holding only

* ``exercises/``: the released notebooks;
* ``autograder/`` without ``reference/`` and ``grading/``: the visible checks, which read
  their expected values from ``autograder/cases/*.json``;
* ``binder/``, ``pyproject.toml`` and a README: what Colab, Binder and ``pip install``
  need to run the exercises.

Run it after ``make exercises``; each run replaces the previous content of ``DEST`` (a git
repository, made on the first run) and commits the new release. Push ``DEST`` to the
students' repository, whose URL ``_config.yml`` names so that the exercise notebooks'
Colab set-up cell installs the checks from it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

#: What the student repository holds, relative to the course repository.
PUBLISHED = ["exercises", "autograder", "binder", "pyproject.toml"]
#: Left out of ``autograder/``: the grading side.
WITHHELD = {"reference", "grading", "__pycache__"}
#: Top-level folders of the course repository that are for instructors only. ``PUBLISHED``
#: names none of them; the last look before committing refuses them all the same.
INSTRUCTORS_ONLY = {"solutions", "instructors"}
#: Text that must never reach students (nbgrader's markers of answers and hidden tests).
MARKERS = ("### BEGIN SOLUTION", "### BEGIN HIDDEN TESTS", "hidden=True")

README = """# {title}: exercises

The exercise notebooks of the course, and the checks their test cells call.

* Open a notebook of `exercises/` on Colab or Binder from the course's book, or locally:
  `pip install torch matplotlib jupyterlab && pip install --no-deps .`, then
  `jupyter lab exercises/`.
* Fill in every `# YOUR CODE HERE` and run the test cell below it: `✔ …` means your answer
  passes the visible checks; a failure says which input was used and what went wrong.
* When your notebook is graded, each test cell also runs hidden checks on inputs drawn for
  you at grading time, so solve the general problem rather than the visible examples.

This repository is generated from the instructors' course repository by
`python -m autograder publish`; do not edit it by hand.
"""


class PublishError(Exception):
    """The student repository cannot be written; the message says why."""


def publish(course: Path, destination: Path, title: str = "Attention Mechanisms") -> list[Path]:
    """Write the student repository of ``course`` into ``destination`` and commit it.

    Returns:
        The files written, relative to ``destination``.

    Raises:
        PublishError: ``destination`` is inside the course, is a folder not made by this
            command, or something meant for instructors would be published.
    """
    course, destination = course.resolve(), destination.resolve()
    if destination == course or course in destination.parents:
        raise PublishError(f"{destination} is inside the course repository; publish to a folder outside it")
    missing = [name for name in PUBLISHED if not (course / name).exists()]
    if missing:
        raise PublishError(f"{course} is not the course repository: it lacks {', '.join(missing)}")
    _prepare(destination)
    for name in PUBLISHED:
        source = course / name
        if source.is_dir():
            shutil.copytree(source, destination / name, ignore=_withheld(course))
        else:
            shutil.copy2(source, destination / name)
    (destination / "README.md").write_text(README.format(title=title), encoding="utf-8")
    (destination / ".gitignore").write_text("__pycache__/\n*.egg-info/\n.ipynb_checkpoints/\n", encoding="utf-8")
    written = sorted(p.relative_to(destination) for p in destination.rglob("*")
                     if p.is_file() and ".git" not in p.relative_to(destination).parts)
    _refuse_instructor_material(destination, written)
    _commit(destination)
    return written


def _withheld(course: Path):
    """``shutil.copytree``'s ignore function: the grading side of ``autograder/``."""
    package = course / "autograder"

    def ignore(folder: str, names: list[str]) -> set[str]:
        if Path(folder).resolve() == package:
            return {n for n in names if n in WITHHELD}
        return {n for n in names if n == "__pycache__" or n.endswith(".pyc")}

    return ignore


def _prepare(destination: Path) -> None:
    """An empty folder, or a previous release (a git repository holding ``exercises/``) emptied."""
    if not destination.exists():
        destination.mkdir(parents=True)
        return
    entries = [p for p in destination.iterdir() if p.name != ".git"]
    if entries and not ((destination / ".git").is_dir() and (destination / "exercises").is_dir()):
        raise PublishError(f"{destination} is not empty and is not a student repository made by this command")
    for entry in entries:
        shutil.rmtree(entry) if entry.is_dir() else entry.unlink()


def _refuse_instructor_material(destination: Path, written: list[Path]) -> None:
    """A last look at what would be published: no references, no solutions, no hidden tests."""
    for relative in written:
        if relative.parts[:2] in (("autograder", "reference"), ("autograder", "grading")):
            raise PublishError(f"{relative} belongs to the grading side")
        if relative.parts[0] in INSTRUCTORS_ONLY:
            raise PublishError(f"{relative} is for instructors only")
        if relative.suffix in (".py", ".ipynb", ".json", ".md", ".txt", ".toml"):
            text = (destination / relative).read_text(encoding="utf-8")
            found = [marker for marker in MARKERS if marker in text]
            if found:
                raise PublishError(f"{relative} contains {found[0]!r}: regenerate the exercises (`make exercises`)")


def _commit(destination: Path) -> None:
    """Commit the release (the repository is made on the first run)."""
    def git(*args: str) -> None:
        identity = ["-c", "user.name=Course publisher", "-c", "user.email=publisher@localhost"]
        subprocess.run(["git", *identity, *args], cwd=destination, check=True, capture_output=True, text=True)

    if shutil.which("git") is None:
        return
    if not (destination / ".git").is_dir():
        git("init", "--quiet", "--initial-branch=main")
    git("add", "--all")
    status = subprocess.run(["git", "status", "--porcelain"], cwd=destination, capture_output=True, text=True)
    if status.stdout.strip():
        git("commit", "--quiet", "-m", "Release the exercises and their visible checks")
