import functools
import json
import os
import re
import sys
import tempfile
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


#: Where the workers leave ``{test id: group}`` for the controller's scheduler (:class:`_ByGroup`): an environment
#: variable the controller sets, which its workers inherit.
GROUPS_FILE = "COURSE_TEST_GROUPS"


def pytest_collection_modifyitems(config, items):
    """Mark each test with what its fixtures need, and every test that needs anything beyond this process `slow`;
    give each one the group its worker runs it in (``--dist loadgroup``, :func:`_group`), and, in a worker, leave
    the groups where the controller's scheduler reads them."""
    groups = {}
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
            groups[item.nodeid] = group
    if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get(GROUPS_FILE):
        path = Path(os.environ[GROUPS_FILE])
        written = path.with_name(f"{path.name}.{os.environ['PYTEST_XDIST_WORKER']}")
        written.write_text(json.dumps(groups))
        written.replace(path)  # whole, at once: both workers write the same groups


def pytest_configure(config):
    """The controller of a run on workers (``-n``) makes the file its workers leave the groups in."""
    if config.pluginmanager.hasplugin("xdist") and getattr(config.option, "numprocesses", None) \
            and not hasattr(config, "workerinput"):
        handle, name = tempfile.mkstemp(prefix="course-test-groups-", suffix=".json")
        os.close(handle)
        os.environ[GROUPS_FILE] = name
        config.add_cleanup(lambda: Path(name).unlink(missing_ok=True))


def pytest_xdist_make_scheduler(config, log):
    """With ``--dist loadgroup``, the scheduler of :class:`_ByGroup`. (pytest-xdist 3.8 marks a test's group by
    renaming its node id, which pytest 9 no longer lets it do: its own ``loadgroup`` sends the tests of one group
    to both workers, and each makes the group's fixtures.)"""
    if config.getvalue("dist") == "loadgroup":
        from xdist.scheduler import LoadScopeScheduling

        class _ByGroup(LoadScopeScheduling):
            """Each group (:func:`_group`) one unit of work on one worker; every test of no group a unit of its own."""

            def _split_scope(self, nodeid: str) -> str:
                return _groups().get(nodeid, nodeid)

        return _ByGroup(config, log)
    return None


@functools.cache
def _groups() -> dict[str, str]:
    """``{test id: group}`` as the workers left it (read once, when the workers have collected)."""
    return json.loads(Path(os.environ[GROUPS_FILE]).read_text() or "{}")


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
