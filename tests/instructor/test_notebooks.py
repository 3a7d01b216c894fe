"""End-to-end tests of the assignments through nbgrader, as an instructor runs them."""

import json
import re
import shutil

import nbformat
import pytest
from nbclient import NotebookClient

from course import ASSIGNMENTS, ROOT, load, make_course, nbgrader, notebook, scores

pytestmark = pytest.mark.nbgrader

MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")


def total(grades):
    return sum(score for score, _ in grades.values()), sum(most for _, most in grades.values())


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_solution_earns_full_marks_even_where_its_code_warns(graded_course, assignment):
    """The solution, a warning raised in every answer's code (nbgrader gives 0 to a graded cell that writes to
    stderr): every part keeps its points."""
    grades = scores(graded_course, assignment, "warns")
    assert grades, "the source notebook has no graded cells"
    lost = {part: grade for part, grade in grades.items() if grade[0] != grade[1]}
    assert not lost, f"the solution loses points on {lost}"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_unanswered_exercise_autogrades_to_zero(graded_course, assignment):
    grades = scores(graded_course, assignment, "blank")
    assert total(grades) == (0, total(scores(graded_course, assignment, "warns"))[1])


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_exercise_is_in_sync_with_its_solution(tmp_path, assignment):
    """exercises/ is exactly what `nbgrader generate_assignment` makes from solutions/ today."""
    regenerated = load(notebook(make_course(tmp_path) / "exercises", assignment))
    committed = load(notebook(ROOT / "exercises", assignment))
    assert committed == regenerated, (
        f"exercises/{assignment} is stale or hand-edited: run `make exercises` and commit the result"
    )


def test_the_chinese_exercises_are_in_sync_with_their_solutions(tmp_path):
    """zh/exercises/ is exactly what `nbgrader generate_assignment` makes from zh/solutions/ today."""
    course = tmp_path / "zh"
    shutil.copy(ROOT / "nbgrader_config.py", tmp_path)
    shutil.copytree(ROOT / "zh" / "solutions", course / "solutions")
    for assignment in ASSIGNMENTS:
        nbgrader(tmp_path, "generate_assignment", assignment, "--force", f"--CourseDirectory.root={course}",
                 f"--db=sqlite:///{tmp_path / 'gradebook.db'}")
        assert load(notebook(ROOT / "zh" / "exercises", assignment)) == load(notebook(course / "exercises", assignment)), (
            f"zh/exercises/{assignment} is stale or hand-edited: run `make exercises` and commit the result")


@pytest.mark.parametrize("edition", ["", "zh/"], ids=["en", "zh"])
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_exercise_reveals_no_solution_and_no_hidden_test(assignment, edition):
    exercise = notebook(ROOT / edition / "exercises", assignment).read_text()
    for marker in MARKERS:
        assert marker not in exercise, f"{edition}exercises/{assignment} contains `{marker}`"
    assert "hidden=True" not in exercise, f"{edition}exercises/{assignment} contains a hidden test call"
    for region in _solution_regions(load(notebook(ROOT / edition / "solutions", assignment))):
        for line in region:
            assert json.dumps(line)[1:-1] not in exercise, \
                f"{edition}exercises/{assignment} contains solution code: {line!r}"


def _solution_regions(nb):
    """The lines between BEGIN and END SOLUTION markers of every cell (code lines only)."""
    for cell in nb["cells"]:
        source = "".join(cell["source"])
        for region in re.findall(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", source, flags=re.DOTALL):
            yield [line.strip() for line in region.splitlines() if len(line.strip()) > 12]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_unanswered_exercise_raises_only_not_implemented(tmp_path, assignment):
    """Run top to bottom, the student notebook fails only where the student has work to do."""
    nb = nbformat.read(notebook(ROOT / "exercises", assignment), as_version=4)
    NotebookClient(nb, timeout=300, allow_errors=True, resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [(cell, out) for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs]
    errors = [out.ename for _, out in outputs if out.output_type == "error"]
    assert errors, "nothing raised: does the exercise still contain the solutions?"
    assert set(errors) == {"NotImplementedError"}, f"unexpected errors: {errors}"
    stderr = [out.text for _, out in outputs if out.output_type == "stream" and out.name == "stderr"]
    assert not stderr, f"the notebook writes to stderr: {stderr}"
