"""A whole solution notebook graded with one answer replaced: the contract's one-bug matrix.

``points_with(assignment, name, answer)`` runs the instructor's source notebook of
``assignment`` in this process, with the answer ``name`` replaced by ``answer`` right after
its cell, and returns the points every test cell earns (hidden tests included, as the
grading command runs them). ``test_one_bug.py`` asserts that a wrong answer costs only the
cells that check it.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import io
import re
import warnings
from dataclasses import dataclass

from course import ROOT, load, notebook

_MARKER = re.compile(r"^\s*### (BEGIN|END) (SOLUTION|HIDDEN TESTS)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class TestCell:
    """A graded cell: its id, points, source, and the answers its checks are called on."""

    grade_id: str
    points: float
    source: str
    answers: frozenset[str]
    checks: frozenset[str]


def _meta(cell: dict) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


def _source(cell: dict) -> str:
    return _MARKER.sub("", "".join(cell["source"]))


def check_calls(source: str) -> list[tuple[str, str]]:
    """``(check function, answer name)`` of every ``checks.check_<part>(<name>, ...)`` call in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "checks"
                and node.func.attr.startswith("check_") and node.args and isinstance(node.args[0], ast.Name)):
            found.append((node.func.attr, node.args[0].id))
    return found


@functools.cache
def cells(assignment: str) -> tuple[list[dict], list[TestCell]]:
    """The source notebook's cells, and its test cells in order."""
    nb = load(notebook(ROOT / "solutions", assignment))
    tests = []
    for cell in nb["cells"]:
        meta = _meta(cell)
        if cell["cell_type"] == "code" and meta.get("grade") and not meta.get("solution"):
            calls = check_calls(_source(cell))
            tests.append(TestCell(meta["grade_id"], float(meta.get("points", 0)), _source(cell),
                                  frozenset(n for _, n in calls), frozenset(c for c, _ in calls)))
    return nb["cells"], tests


def cells_checking(assignment: str, check_name: str) -> list[TestCell]:
    """The test cells that call ``checks.<check_name>``."""
    return [cell for cell in cells(assignment)[1] if check_name in cell.checks]


def answer_name(assignment: str, check_name: str) -> str:
    """The notebook's name for the answer that ``checks.<check_name>`` is called on."""
    names = {name for cell in cells_checking(assignment, check_name) for c, name in check_calls(cell.source)
             if c == check_name}
    assert len(names) == 1, f"{assignment}: {check_name} is called on {names or 'nothing'}"
    return names.pop()


def points_with(assignment: str, name: str | None, answer, before_each_test=None) -> dict[str, float]:
    """``{grade_id: points earned}`` of the source notebook with answer ``name`` replaced by ``answer``.

    Cells run in order in one namespace, as in a kernel; errors in ungraded cells are
    ignored (they cost nothing), and a test cell earns its points when it raises nothing.
    ``before_each_test`` is called before each test cell (to clear a cache, say).
    """
    namespace: dict = {"__name__": "__main__"}
    earned = {}
    source_cells, _ = cells(assignment)
    quiet = contextlib.redirect_stdout(io.StringIO())
    with quiet, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for cell in source_cells:
            if cell["cell_type"] != "code":
                continue
            meta, code = _meta(cell), _source(cell)
            if meta.get("grade") and not meta.get("solution"):
                if before_each_test is not None:
                    before_each_test()
                try:
                    exec(compile(code, meta["grade_id"], "exec"), namespace)  # noqa: S102 (the course's own notebook)
                    earned[meta["grade_id"]] = float(meta.get("points", 0))
                except Exception:  # noqa: BLE001 - a failed test cell earns nothing
                    earned[meta["grade_id"]] = 0.0
                continue
            with contextlib.suppress(Exception):
                exec(compile(code, meta.get("grade_id", "cell"), "exec"), namespace)  # noqa: S102
            if name is not None and name in _defined_by(code):
                namespace[name] = answer
    return earned


def _defined_by(code: str) -> set[str]:
    """The top-level names a cell defines with ``def`` or ``class``."""
    return {node.name for node in ast.parse(code).body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
