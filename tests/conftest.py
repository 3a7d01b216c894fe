import re
import sys
from pathlib import Path

import pytest

from course import ASSIGNMENTS, ROOT, load, make_course, nbgrader, notebook, submit
from layout import chapters

sys.path.insert(0, str(ROOT / "benchmarks"))
from book_build import BuildFailed, build_from_scratch


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slow: builds the book, starts kernels or nbgrader; deselect with -m 'not slow'"
    )


@pytest.fixture(scope="session")
def built_book(tmp_path_factory) -> Path:
    """The HTML folder of a fresh build, every chapter executed, warnings (and cell errors)
    fatal; shared by the build tests and the browser tests."""
    folder = tmp_path_factory.mktemp("book")
    try:
        _, seconds = build_from_scratch(folder)
    except BuildFailed as failure:
        pytest.fail(f"the book does not build:\n{failure}")
    executed = sorted(Path(chapter).stem for chapter in seconds)
    assert executed == chapters(), "not every chapter was executed, or something else was"
    return folder / "_build" / "html"


@pytest.fixture(scope="session")
def graded_course(tmp_path_factory):
    """One autograde run over three submissions of every assignment.

    * ``solution``: the instructor's source notebook, as is;
    * ``blank``: the generated exercise notebook, unanswered;
    * ``warns``: the source notebook with a warning raised in every solution cell's code,
      which must not cost points (nbgrader gives 0 to a graded cell that writes to stderr).
    """
    course = make_course(tmp_path_factory.mktemp("course"))
    for assignment in ASSIGNMENTS:
        solution = load(notebook(course / "solutions", assignment))
        submit(course, "solution", assignment, solution)
        submit(course, "blank", assignment, load(notebook(course / "exercises", assignment)))
        submit(course, "warns", assignment, with_warnings(solution))
        nbgrader(course, "autograde", assignment, "--create", "--force")
    return course


def with_warnings(nb: dict) -> dict:
    """A copy of ``nb`` whose solution code warns (Python and PyTorch warnings) when it runs."""
    noisy = {**nb, "cells": []}
    for cell in nb["cells"]:
        cell = dict(cell)
        if cell.get("metadata", {}).get("nbgrader", {}).get("solution") and cell["cell_type"] == "code":
            cell["source"] = re.sub(
                r"^( *)### BEGIN SOLUTION\n",
                r"\1### BEGIN SOLUTION\n"
                r"\1import warnings; warnings.warn('a harmless warning from the student code')\n"
                r"\1torch.tensor(torch.zeros(1))  # PyTorch's own UserWarning about copy-constructing\n",
                "".join(cell["source"]),
                flags=re.MULTILINE,
            )
        noisy["cells"].append(cell)
    return noisy
