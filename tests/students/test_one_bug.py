"""One bug costs once: every catalogued wrong answer, put into the whole solution notebook in
place of the right one, costs only the cells that check it.

This is the matrix the contract promises (wrong answers × assignments), graded through the
grading command's own judging (in this process, ``autograder.grading.in_process``): a test
cell judges only its own part, and a part that calls an earlier one by name is graded with
a correct stand-in for it.
"""

from __future__ import annotations

import importlib

import pytest

import one_bug
from autograder import ch06_transformer, ch07_decoding
from course import ASSIGNMENTS

#: (assignment, catalogued wrong answer) for every wrong answer of every assignment's catalogue
MATRIX = [(assignment, entry) for assignment in ASSIGNMENTS
          for entry in importlib.import_module(f"catalogue_ch{assignment[:2]}").WRONG]


#: Per assignment, the models its solution's training answer trained (kept while no replaced answer can reach it).
KEPT_TRAININGS = {assignment: one_bug.TrainedByCode() for assignment in ASSIGNMENTS}


@pytest.fixture(autouse=True)
def trained_models(request, monkeypatch):
    """A grading trains afresh where the replaced answer can reach a training answer (or is one); otherwise it
    finds the model the solution's own training made, as an unchanged notebook would train it again."""
    assignment, entry = (request.getfixturevalue(n) if n in request.fixturenames else None for n in ("assignment", "entry"))
    fresh = entry is None or assignment is None or one_bug.reaches(assignment, one_bug.answer_name(assignment, entry[1].__name__))
    for module in (ch06_transformer, ch07_decoding):
        monkeypatch.setattr(module, "_TRAINED", {} if fresh else KEPT_TRAININGS[assignment])


@pytest.mark.slow
@pytest.mark.parametrize("assignment, entry", MATRIX, ids=[f"{a[:2]}-{e[0]}" for a, e in MATRIX])
def test_a_wrong_answer_costs_only_its_own_cells(assignment, entry):
    description, check, answer, _ = entry
    name = one_bug.answer_name(assignment, check.__name__)
    earned = one_bug.points_with(assignment, name, answer)
    own = {grade_id for grade_id, calls in one_bug.test_cells(assignment).items() if any(c.answer == name for c in calls)}
    full = one_bug.points(assignment)
    lost_elsewhere = {grade_id: f"{earned[grade_id]:g}/{points:g}" for grade_id, points in full.items()
                      if grade_id not in own and earned[grade_id] != points}
    assert not lost_elsewhere, f"{description} (in {name}) also cost {lost_elsewhere}"
    assert any(earned[grade_id] < full[grade_id] for grade_id in own), f"{description} cost nothing: {earned}"


#: The assignments whose solution trains a model when its notebook runs (seconds each: out of the fast loop).
TRAINING = {"06_transformer", "07_decoding"}


@pytest.mark.parametrize("assignment", [pytest.param(a, marks=[pytest.mark.slow] if a in TRAINING else [])
                                        for a in ASSIGNMENTS])
def test_the_solution_notebook_earns_every_point_in_process(assignment):
    assert one_bug.points_with(assignment) == one_bug.points(assignment)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_a_test_cell_calls_checks_on_its_own_answer_only(assignment):
    """A test cell is its checks, called on one answer: nothing else in it would run at grading."""
    for cell in one_bug.source(assignment).cells:
        if not one_bug.is_test(cell):
            continue
        grade_id, calls = one_bug.nbgrader_meta(cell)["grade_id"], one_bug.check_calls(cell.source)
        assert len({call.answer for call in calls}) == 1, f"{assignment} {grade_id}: checks called on {calls}"
        statements = [line for line in cell.source.splitlines() if line.strip() and not line.lstrip().startswith("#")]
        calls_lines = [line for line in statements if line.startswith("checks.check_")]
        assert calls_lines == statements, (f"{assignment} {grade_id}: a test cell holds only `checks.check_…(answer)` "
                                           f"calls; these lines would not run at grading: "
                                           f"{[s for s in statements if s not in calls_lines]}")
