"""``python -m autograder publish DEST``: the student repository of a course run for credit.

A course taught for credit keeps this repository private: it holds ``solutions/`` (the
answers), ``autograder/reference/`` (reference answers and hidden cases), the grading
command and ``instructors/`` (the answers to the book's think-exercises). Students get a
second repository made from it by this command, holding only

* ``exercises/``: the released notebooks, those of the assignments chosen
  (``--assignments 01 02``; all by default), earlier releases kept as they are; in English, or
  in Chinese (``--language zh``: the notebooks of ``zh/exercises/``, generated from
  ``zh/solutions/``, whose code cells, grade ids and points are the English ones);
* ``autograder/`` without ``reference/``, ``grading/`` and ``instructor/``: the visible checks of every
  chapter, which read their expected values from ``autograder/cases/*.json`` (the checks of
  an assignment not released yet give nothing of its answers away);
* ``binder/``, a ``pyproject.toml`` of the checks alone and a README: what Colab, Binder
  and ``pip install`` need to run the exercises.

It refuses an exercise that differs from a fresh ``nbgrader generate_assignment`` of its
source (a notebook an instructor test-solved in ``exercises/``, say), and says so when the
notebooks would install their checks from the course repository itself rather than from
the students'. Run it after ``make exercises``; each run commits the new release in
``DEST`` (a git repository, made on the first run), or says that nothing changed. Push
``DEST`` to the students' repository.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import tomllib

from .gradebook import environment_on_path

#: What the student repository holds, relative to the course repository (``exercises/``, the
#: chosen assignments only, and a ``pyproject.toml`` of its own are written apart).
PUBLISHED = ["autograder", "binder"]
#: Left out of ``autograder/``: the grading side (references, the grading worker, the instructor's commands).
WITHHELD = {"reference", "grading", "instructor", "__pycache__"}
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


README_IN_CHINESE = """# {title}：作业

本课程的作业笔记本（notebook），以及其中测试单元格调用的检查。

* 从课程书中用 Colab 或 Binder 打开 `exercises/` 中的 notebook，或在本地运行：
  `pip install torch matplotlib jupyterlab && pip install --no-deps .`，然后
  `jupyter lab exercises/`。
* 补全每一处 `# YOUR CODE HERE`，并运行其下方的测试单元格：`✔ …` 表示你的答案通过了可见的检查；
  未通过时，提示会说明用了哪个输入、哪里出了错（检查的提示为英文，常见说法见课程书中文版的《提示语对照表》）。
* 评分时，每个测试单元格还会在评分时为你生成的输入上运行隐藏的检查，所以请解决一般的问题，
  而不只是可见的例子。

本仓库由教师的课程仓库通过 `python -m autograder publish --language zh` 生成，请勿手工修改。
"""

#: Where each edition's assignments are in the course repository: ``solutions/`` and ``exercises/`` under it.
EDITIONS = {"en": ".", "zh": "zh"}
READMES = {"en": README, "zh": README_IN_CHINESE}


PYPROJECT = """[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "{name}"
version = "{version}"
description = "The visible checks of the course's exercises"
requires-python = "{python}"
# Colab and Binder have PyTorch and matplotlib, which the checks need: nothing else is installed.
dependencies = []

[tool.setuptools.packages.find]
include = ["autograder*"]

[tool.setuptools.package-data]
autograder = ["cases/*.json"]
"""


class PublishError(Exception):
    """The student repository cannot be written; the message says why."""


@dataclass
class Release:
    """What a run of :func:`publish` did.

    Attributes:
        written: the files of the student repository, relative to it.
        assignments: the assignments whose exercises this run released.
        committed: whether anything changed (and was committed).
        warnings: what the instructor should look at (the repository the notebooks install from).
    """

    written: list[Path]
    assignments: list[str]
    committed: bool
    warnings: list[str]


def publish(course: Path, destination: Path, title: str = "Attention Mechanisms",
            assignments: list[str] | None = None, check_generated: bool = True, language: str = "en") -> Release:
    """Write the student repository of ``course`` into ``destination`` and commit it.

    Args:
        assignments: ids or numbers (``"03_masking"`` or ``"03"``) of the assignments to
            release; ``None``: all. The exercises of assignments released before stay.
        check_generated: refuse an exercise that differs from a fresh generation of its
            source (needs nbgrader; leave it on).
        language: ``en``, or ``zh`` for the Chinese edition's notebooks (``zh/exercises/``) and README.

    Raises:
        PublishError: ``destination`` is inside the course, is a folder not made by this
            command, an assignment is unknown or its exercise is not the generated one, or
            something meant for instructors would be published.
    """
    course, destination = course.resolve(), destination.resolve()
    if language not in EDITIONS:
        raise PublishError(f"no edition in {language!r}: the course has {', '.join(EDITIONS)}")
    edition = course / EDITIONS[language]
    if destination == course or course in destination.parents:
        raise PublishError(f"{destination} is inside the course repository; publish to a folder outside it")
    missing = [name for name in [*PUBLISHED, "pyproject.toml"] if not (course / name).exists()]
    missing += [] if (edition / "exercises").is_dir() else [str((edition / "exercises").relative_to(course))]
    if missing:
        raise PublishError(f"{course} is not the course repository: it lacks {', '.join(missing)}")
    chosen = _chosen(edition, assignments)
    if check_generated:
        _expect_generated(course, edition, chosen)
    _prepare(destination)
    for name in PUBLISHED:
        shutil.copytree(course / name, destination / name, ignore=_withheld(course))
    for assignment in chosen:
        shutil.rmtree(destination / "exercises" / assignment, ignore_errors=True)
        shutil.copytree(edition / "exercises" / assignment, destination / "exercises" / assignment,
                        ignore=_withheld(course))
    (destination / "pyproject.toml").write_text(_students_pyproject(course), encoding="utf-8")
    (destination / "README.md").write_text(READMES[language].format(title=title), encoding="utf-8")
    (destination / ".gitignore").write_text("__pycache__/\n*.egg-info/\n.ipynb_checkpoints/\n", encoding="utf-8")
    written = sorted(p.relative_to(destination) for p in destination.rglob("*")
                     if p.is_file() and ".git" not in p.relative_to(destination).parts)
    _refuse_instructor_material(destination, written)
    committed = _commit(destination, chosen)
    return Release(written, chosen, committed, _install_warnings(course, destination))


def _chosen(edition: Path, assignments: list[str] | None) -> list[str]:
    """The assignment ids asked for (by id or number), checked against the edition's ``exercises/``."""
    known = sorted(p.name for p in (edition / "exercises").iterdir() if p.is_dir() and not p.name.startswith("."))
    if assignments is None:
        return known
    chosen = []
    for wanted in assignments:
        matches = [a for a in known if a == wanted or a.split("_")[0] == wanted]
        if not matches:
            raise PublishError(f"no assignment {wanted!r} in exercises/ (there are {', '.join(known)})")
        chosen += [a for a in matches if a not in chosen]
    return chosen


def _expect_generated(course: Path, edition: Path, assignments: list[str]) -> None:
    """Each exercise of ``edition`` (the course folder, or ``zh/``) equals a fresh ``nbgrader generate_assignment``
    of its source, or nothing is published."""
    with tempfile.TemporaryDirectory(prefix="publish-check-") as folder:
        scratch = Path(folder)
        shutil.copy(course / "nbgrader_config.py", scratch)
        for assignment in assignments:
            shutil.copytree(edition / "solutions" / assignment, scratch / "solutions" / assignment)
            generated = subprocess.run(["nbgrader", "generate_assignment", assignment, "--force"], cwd=scratch,
                                       capture_output=True, text=True, env=environment_on_path(os.environ))
            if generated.returncode != 0:
                raise PublishError(f"nbgrader could not generate {assignment}: {generated.stderr.strip()[-500:]}")
            fresh = json.loads((scratch / "exercises" / assignment / f"{assignment}.ipynb").read_text())
            released = json.loads((edition / "exercises" / assignment / f"{assignment}.ipynb").read_text())
            if fresh != released:
                where = edition.relative_to(course)
                raise PublishError(f"{where / 'exercises' / assignment} is not what nbgrader generates from "
                                   f"{where / 'solutions' / assignment} (a solved or edited copy?): run `make exercises`, "
                                   "then publish again")


def _students_pyproject(course: Path) -> str:
    """The students' ``pyproject.toml``: the checks alone, no grading extra, no entry points."""
    project = tomllib.loads((course / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return PYPROJECT.format(name=project["name"], version=project["version"],
                            python=project.get("requires-python", ">=3.10"))


def _install_warnings(course: Path, destination: Path) -> list[str]:
    """A warning when the notebooks would install their checks from the course repository itself."""
    import yaml

    url = str(yaml.safe_load((course / "_config.yml").read_text(encoding="utf-8"))["repository"]["url"]).rstrip("/")
    origin = subprocess.run(["git", "remote", "get-url", "origin"], cwd=course, capture_output=True, text=True)
    course_url = origin.stdout.strip().removesuffix(".git").rstrip("/") if origin.returncode == 0 else ""
    if course_url and _same_repository(url, course_url):
        return [f"the exercise notebooks install their checks from {url}, which is this course repository (with its "
                "solutions): set repository.url in _config.yml to the students' repository, run `make exercises`, "
                "and publish again"]
    return []


def _same_repository(first: str, second: str) -> bool:
    """Whether two remote addresses name one repository (``https://host/o/r`` and ``git@host:o/r``)."""
    def key(url: str) -> str:
        return url.removesuffix(".git").replace("git@", "").replace(":", "/").split("//")[-1].lower()

    return key(first) == key(second)


def _withheld(course: Path):
    """``shutil.copytree``'s ignore function: the grading side of ``autograder/``."""
    package = course / "autograder"

    def ignore(folder: str, names: list[str]) -> set[str]:
        if Path(folder).resolve() == package:
            return {n for n in names if n in WITHHELD}
        return {n for n in names if n == "__pycache__" or n.endswith(".pyc")}

    return ignore


def _prepare(destination: Path) -> None:
    """An empty folder, or a previous release (a git repository holding ``exercises/``) emptied but for
    its exercises (an assignment released before stays as it was)."""
    if not destination.exists():
        destination.mkdir(parents=True)
        return
    entries = [p for p in destination.iterdir() if p.name != ".git"]
    if entries and not ((destination / ".git").is_dir() and (destination / "exercises").is_dir()):
        raise PublishError(f"{destination} is not empty and is not a student repository made by this command")
    for entry in entries:
        if entry.name != "exercises":
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()


def _refuse_instructor_material(destination: Path, written: list[Path]) -> None:
    """A last look at what would be published: no references, no solutions, no hidden tests."""
    for relative in written:
        if relative.parts[0] == "autograder" and len(relative.parts) > 1 and relative.parts[1] in WITHHELD:
            raise PublishError(f"{relative} belongs to the grading side")
        if relative.parts[0] in INSTRUCTORS_ONLY:
            raise PublishError(f"{relative} is for instructors only")
        if relative.suffix in (".py", ".ipynb", ".json", ".md", ".txt", ".toml"):
            text = (destination / relative).read_text(encoding="utf-8")
            found = [marker for marker in MARKERS if marker in text]
            if found:
                raise PublishError(f"{relative} contains {found[0]!r}: regenerate the exercises (`make exercises`)")


def _commit(destination: Path, assignments: list[str]) -> bool:
    """Commit the release (the repository is made on the first run); whether anything changed."""
    def git(*args: str) -> None:
        identity = ["-c", "user.name=Course publisher", "-c", "user.email=publisher@localhost"]
        subprocess.run(["git", *identity, *args], cwd=destination, check=True, capture_output=True, text=True)

    if shutil.which("git") is None:
        return True
    if not (destination / ".git").is_dir():
        git("init", "--quiet", "--initial-branch=main")
    git("add", "--all")
    status = subprocess.run(["git", "status", "--porcelain"], cwd=destination, capture_output=True, text=True)
    if not status.stdout.strip():
        return False
    git("commit", "--quiet", "-m", f"Release {', '.join(assignments)} and the visible checks")
    return True
