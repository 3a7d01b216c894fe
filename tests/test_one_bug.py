"""One bug costs once: every catalogued wrong answer, put into the whole solution notebook in
place of the right one, costs only the cells that check that answer.

This is the matrix the contract promises (wrong answers × assignments): a test cell may
not judge a part through another part of the student's, and a part that calls an earlier
one by name is graded with a correct stand-in for it.
"""

from __future__ import annotations

import importlib

import pytest

import one_bug
from autograder import ch06_transformer
from course import ASSIGNMENTS

#: (assignment, catalogued wrong answer) for every wrong answer of every assignment's catalogue
MATRIX = [(assignment, entry) for assignment in ASSIGNMENTS
          for entry in importlib.import_module(f"catalogue_ch{assignment[:2]}").WRONG]


def _forget_trained_models() -> None:
    """Each test cell trains afresh: a model trained before the swap must not be reused."""
    ch06_transformer._TRAINED.clear()


@pytest.mark.slow
@pytest.mark.parametrize("assignment, entry", MATRIX, ids=[f"{a[:2]}-{e[0]}" for a, e in MATRIX])
def test_a_wrong_answer_costs_only_its_own_cells(assignment, entry):
    description, check, answer, _ = entry
    name = one_bug.answer_name(assignment, check.__name__)
    earned = one_bug.points_with(assignment, name, answer, before_each_test=_forget_trained_models)
    own = {cell.grade_id for cell in one_bug.cells(assignment)[1] if name in cell.answers}
    full = {cell.grade_id: cell.points for cell in one_bug.cells(assignment)[1]}
    lost_elsewhere = {grade_id: f"{earned[grade_id]:g}/{points:g}" for grade_id, points in full.items()
                      if grade_id not in own and earned[grade_id] != points}
    assert not lost_elsewhere, f"{description} (in {name}) also cost {lost_elsewhere}"
    assert any(earned[grade_id] < full[grade_id] for grade_id in own), f"{description} cost nothing: {earned}"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_solution_notebook_earns_every_point_in_process(assignment):
    earned = one_bug.points_with(assignment, None, None, before_each_test=_forget_trained_models)
    assert earned == {cell.grade_id: cell.points for cell in one_bug.cells(assignment)[1]}


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_a_test_cell_calls_checks_on_its_own_answer_only(assignment):
    """A test cell is its checks, called on one answer: no line of it may run another part of the student's."""
    for cell in one_bug.cells(assignment)[1]:
        assert len(cell.answers) == 1, f"{assignment} {cell.grade_id}: checks called on {sorted(cell.answers)}"
        statements = [line for line in cell.source.splitlines() if line.strip() and not line.lstrip().startswith("#")]
        calls = [line for line in statements if line.startswith("checks.check_")]
        assert calls == statements, (f"{assignment} {cell.grade_id}: a test cell holds only `checks.check_…(answer)` "
                                     f"calls; these lines run student code outside them: "
                                     f"{[s for s in statements if s not in calls]}")
