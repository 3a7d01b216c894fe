import os
import re
import sys
from pathlib import Path

import pytest

from course import ASSIGNMENTS, ROOT, load, make_course, nbgrader, notebook, submit
from layout import chapters

sys.path.insert(0, str(ROOT / "benchmarks"))
from book_build import BuildFailed, build_from_scratch

if os.environ.get("PYTEST_XDIST_WORKER"):  # two workers on two cores: one thread each, theirs and their children's
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)

#: What a test may need beyond this process (markers declared in pyproject.toml): each implies `slow`.
NEEDS = ("book", "browser", "nbgrader", "sandbox", "postgres", "dask", "gpu")
#: What the session's fixtures need, added to every test that uses them.
FIXTURE_NEEDS = {"built_book": ("book",), "graded_course": ("nbgrader",)}


def pytest_collection_modifyitems(config, items):
    """Mark each test with what its fixtures need, and every test that needs anything beyond this process `slow`;
    give each one the group its worker runs it in (``--dist loadgroup``): the tests that read the built book one
    group, so that the book is built once, and every other module a group of its own, so that a module's fixtures
    are made once."""
    for item in items:
        for fixture, needs in FIXTURE_NEEDS.items():
            if fixture in getattr(item, "fixturenames", ()):
                for need in needs:
                    item.add_marker(need)
        if any(item.get_closest_marker(need) for need in NEEDS):
            item.add_marker("slow")
        group = _group(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))


def _group(item) -> str:
    """The tests that must run on one worker (``--dist loadgroup``), so that what they share is made once: those of
    the built book; those that share a session fixture; in a module, those that share a module's fixture. ``""``
    for a test that shares nothing: any worker."""
    if item.get_closest_marker("book"):
        return "book"
    definitions = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    shared = sorted(name for name, defs in definitions.items()
                    if defs and defs[-1].scope in ("module", "session") and not defs[-1].func.__module__.startswith(
                        ("_pytest", "pytest")))
    sessions = [name for name in shared if definitions[name][-1].scope == "session"]
    if sessions:
        return "+".join(sessions)
    return f"{item.nodeid.split('::')[0]}::{'+'.join(shared)}" if shared else ""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI=true, a test that needs something CI installs (a browser, PostgreSQL, bubblewrap, ...) and skips
    fails instead: a missing part must never pass silently."""
    outcome = yield
    report = outcome.get_result()
    needs = [need for need in NEEDS if item.get_closest_marker(need)]
    if report.skipped and needs and os.environ.get("CI"):
        reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome, report.longrepr = "failed", f"skipped under CI, where it must run ({', '.join(needs)}): {reason}"


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
    """One autograde run over two submissions of every assignment.

    * ``blank``: the generated exercise notebook, unanswered;
    * ``warns``: the instructor's source notebook with a warning raised in every solution cell's
      code, which must not cost points (nbgrader gives 0 to a graded cell that writes to stderr):
      it earns full marks only if the source notebook as it is does.
    """
    course = make_course(tmp_path_factory.mktemp("course"))
    for assignment in ASSIGNMENTS:
        solution = load(notebook(course / "solutions", assignment))
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
