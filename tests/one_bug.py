"""A whole solution notebook graded with one answer replaced: the contract's one-bug matrix.

``points_with(assignment, name, answer)`` grades the instructor's source notebook of
``assignment`` as a submission, with the answer ``name`` replaced by ``answer`` right after
its cell, through the grading command's own path (assembly, the judge on every test cell's
checks, hidden cases included) run in this process (``autograder.grading.in_process``), and
returns the points of every test cell. ``test_one_bug.py`` asserts that a wrong answer
costs only the cells that check it.

A training part trains the same model whenever its code, and all the code it can reach, is
the solution's: :class:`TrainedByCode` keeps such a training across gradings, and
:func:`reaches` says when a replaced answer could change it (then it trains afresh).
"""

from __future__ import annotations

import ast
import functools
import importlib

import nbformat

from autograder.grading.in_process import grade_in_process
from autograder.grading.notebooks import CheckCall, check_calls, is_test, nbgrader_meta
from course import ROOT, notebook


@functools.cache
def source(assignment: str) -> nbformat.NotebookNode:
    return nbformat.read(notebook(ROOT / "solutions", assignment), as_version=4)


def test_cells(assignment: str) -> dict[str, list[CheckCall]]:
    """``{grade id: the checks it calls}`` of the source's test cells, in order."""
    return {nbgrader_meta(cell)["grade_id"]: check_calls(cell.source) for cell in source(assignment).cells
            if is_test(cell)}


def points(assignment: str) -> dict[str, float]:
    """``{grade id: points}`` of the source's test cells."""
    return {nbgrader_meta(cell)["grade_id"]: float(nbgrader_meta(cell).get("points", 0))
            for cell in source(assignment).cells if is_test(cell)}


def answer_name(assignment: str, check_name: str) -> str:
    """The notebook's name for the answer that ``checks.<check_name>`` is called on."""
    names = {call.answer for calls in test_cells(assignment).values() for call in calls if call.check == check_name}
    assert len(names) == 1, f"{assignment}: {check_name} is called on {names or 'nothing'}"
    return names.pop()


def points_with(assignment: str, name: str | None = None, answer=None) -> dict[str, float]:
    """``{grade id: points earned}`` of the source notebook graded with answer ``name`` replaced by ``answer``."""
    chapter = importlib.import_module(f"autograder.ch{assignment}")
    replace = {} if name is None else {name: answer}
    results = grade_in_process(source(assignment), source(assignment), chapter, key=f"one-bug-{assignment}",
                               replace=replace)
    return {result.part: result.score for result in results}


def trainers(assignment: str) -> set[str]:
    """The names of the answers whose checks train a model (the chapter's ``TIME_LIMITS``)."""
    chapter = importlib.import_module(f"autograder.ch{assignment}")
    limited = set(getattr(chapter, "TIME_LIMITS", {}))
    return {call.answer for calls in test_cells(assignment).values() for call in calls
            if getattr(chapter, call.check).declaration.name in limited}


def reaches(assignment: str, name: str) -> bool:
    """Whether replacing the answer ``name`` could change what a training answer of ``assignment`` trains: ``name``
    is a trainer, or among the global names a trainer's code uses, through the notebook's definitions."""
    uses = _uses(assignment)
    seen, waiting = set(), sorted(trainers(assignment))
    while waiting:
        current = waiting.pop()
        if current not in seen:
            seen.add(current)
            waiting += sorted(uses.get(current, set()) - seen)
    return name in seen


@functools.cache
def _uses(assignment: str) -> dict[str, set[str]]:
    """``{name a code cell of the source binds: the names its statements load}``."""
    uses: dict[str, set[str]] = {}
    for cell in source(assignment).cells:
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue
        for statement in tree.body:
            bound = [statement.name] if isinstance(statement, (ast.FunctionDef, ast.ClassDef)) else \
                [t.id for t in ast.walk(statement) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)]
            loaded = {n.id for n in ast.walk(statement) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
            for name in bound:
                uses.setdefault(name, set()).update(loaded)
    return uses


class TrainedByCode(dict):
    """The checks' cache of trained models (``_TRAINED``: ``(train, seed) -> result``) keyed by the training
    function's code rather than the function object: a notebook run again defines the same function anew, and
    trains the same model where nothing it reaches changed."""

    @staticmethod
    def _key(key):
        train, seed = key
        return getattr(train, "__code__", train), seed

    def __contains__(self, key):
        return super().__contains__(self._key(key))

    def __getitem__(self, key):
        return super().__getitem__(self._key(key))

    def __setitem__(self, key, value):
        super().__setitem__(self._key(key), value)
