"""An exercise notebook opened in Colab sets itself up, and does nothing anywhere else.

Colab has PyTorch and matplotlib but not the course's ``autograder`` package, so the first
code cell of every assignment installs it from the repository named in ``_config.yml``
(the same URL as the book's launch buttons) when, and only when, it runs on Colab.
"""

import ast
import importlib.util
import re
import subprocess
import sys
import types

import pytest

from course import ASSIGNMENTS, ROOT, load, notebook
from layout import repository

SETUP_ID = "colab_setup"
REAL_FIND_SPEC = importlib.util.find_spec


def setup_cell(folder, assignment) -> dict:
    """The first code cell of ``folder/assignment``, which must be the set-up cell."""
    code = [c for c in load(notebook(folder, assignment))["cells"] if c["cell_type"] == "code"]
    assert code[0]["metadata"]["nbgrader"]["grade_id"] == SETUP_ID, f"{assignment}: first code cell is not the set-up"
    assert code[0]["metadata"]["nbgrader"]["locked"], f"{assignment}: students could edit the set-up cell"
    return code[0]


def run_setup(source: str, monkeypatch, on_colab: bool, autograder_installed: bool) -> list[list[str]]:
    """Execute the set-up cell's code; return the commands it ran through ``subprocess.run``."""
    commands = []
    monkeypatch.setattr(subprocess, "run", lambda command, **kwargs: commands.append(command))
    if on_colab:
        monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    else:
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: REAL_FIND_SPEC(name, *a) if autograder_installed or name != "autograder" else None)
    exec(compile(source, SETUP_ID, "exec"), {})  # noqa: S102 - the notebook's own set-up cell, as Colab runs it
    return commands


@pytest.mark.parametrize("folder", ["solutions", "exercises"])
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_setup_cell_installs_the_checks_on_colab_only(folder, assignment, monkeypatch):
    source = "".join(setup_cell(ROOT / folder, assignment)["source"])
    url, branch = repository()

    on_colab = run_setup(source, monkeypatch, on_colab=True, autograder_installed=False)
    assert on_colab == [[sys.executable, "-m", "pip", "install", "--quiet", f"git+{url}@{branch}"]], (
        f"{assignment}: on Colab the set-up cell must pip-install the repository of _config.yml, got {on_colab}"
    )
    assert run_setup(source, monkeypatch, on_colab=False, autograder_installed=False) == [], "it runs outside Colab"
    assert run_setup(source, monkeypatch, on_colab=True, autograder_installed=True) == [], "it reinstalls on every run"


# What Colab has and binder/requirements.txt installs: numpy and cycler come with
# matplotlib, IPython and matplotlib_inline with Jupyter, autograder from the set-up.
LAUNCH_ENVIRONMENT = {"torch", "matplotlib", "numpy", "cycler", "IPython", "matplotlib_inline", "autograder"}


def imported_modules(source: str) -> set[str]:
    """Top-level names of the modules that ``source`` imports (IPython magics skipped)."""
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
    modules = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            modules |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            modules.add(node.module.split(".")[0])
    return modules


def test_exercises_and_checks_need_only_what_colab_and_binder_have():
    """A student's notebook runs on Colab or Binder: it and the checks it calls import only
    the standard library, PyTorch and matplotlib (the grading command may import more)."""
    sources = {str(p.relative_to(ROOT)): p.read_text() for p in (ROOT / "autograder").glob("*.py")}
    for assignment in ASSIGNMENTS:
        cells = load(notebook(ROOT / "exercises", assignment))["cells"]
        sources[assignment] = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    for name, source in sources.items():
        extra = imported_modules(source) - set(sys.stdlib_module_names) - LAUNCH_ENVIRONMENT
        assert not extra, f"{name} imports {sorted(extra)}, which Colab and binder/requirements.txt lack"
    binder = (ROOT / "binder" / "requirements.txt").read_text()
    assert all(re.search(rf"^{package}\b", binder, re.MULTILINE) for package in ("torch", "matplotlib"))
