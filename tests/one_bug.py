"""A whole solution notebook graded with one answer replaced: the contract's one-bug matrix.

``points_with(assignment, name, answer)`` grades the instructor's source notebook of
``assignment`` as a submission, with the answer ``name`` replaced by ``answer`` right after
its cell, through the grading command's own path (assembly, the judge on every test cell's
checks, hidden cases included) run in this process (``autograder.grading.in_process``), and
returns the points of every test cell. ``test_one_bug.py`` asserts that a wrong answer
costs only the cells that check it.
"""

from __future__ import annotations

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
