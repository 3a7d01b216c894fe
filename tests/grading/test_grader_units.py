"""Unit tests of the grading command's internals, without a kernel or nbgrader.

In the style of nbgrader's own ``nbgrader/tests/preprocessors/`` tests: small notebooks
built by hand with ``nbformat.v4`` and nbgrader metadata, fed to the functions that
assemble the notebook to grade (``notebooks.py``), judge its test cells (``verdict.py``),
keep only safe outputs, and carry data between a kernel and the judge (``wire.py``,
``kernel/serve.py``, ``kernel_respondent.py``). The toy notebook has two real parts of chapter 3,
``causal_mask`` (2 points here) and ``padding_mask`` (1 point); its cells run in this
process (``in_process.py``), so every test takes milliseconds.
"""

from __future__ import annotations

import base64
import functools
import json
import math
from collections import Counter, OrderedDict
from types import SimpleNamespace

import nbformat
import pytest
import torch
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from autograder import ch03_masking, wire
from autograder.grading.execute import CellResult, CellStatus, KernelLost
from autograder.grading.in_process import InProcessSession
from autograder.grading.kernel_respondent import KernelRespondent, TimedOut
from autograder.grading.notebooks import (
    CheckCall,
    UnreadableNotebook,
    assemble,
    check_calls,
    clean_outputs,
    parts_of,
    read_submission,
    release,
)
from autograder.grading.verdict import PartResult, PartStatus, autograded, judge_test_cells
from autograder.protocol import PROMPT, Reply

# --------------------------------------------------------------------------------------
# Building notebooks by hand
# --------------------------------------------------------------------------------------

DOUBLE = ("def causal_mask(num_queries, num_keys, device=None):\n    ### BEGIN SOLUTION\n"
          "    return torch.ones(num_queries, num_keys, dtype=torch.bool, device=device).tril()\n    ### END SOLUTION")
DOUBLE_BLANK = "def causal_mask(num_queries, num_keys, device=None):\n    # YOUR CODE HERE\n    raise NotImplementedError()"
TEST_DOUBLE = (
    "checks.check_causal_mask(causal_mask)\n"
    "### BEGIN HIDDEN TESTS\n"
    "checks.check_causal_mask(causal_mask, hidden=True)\n"
    "### END HIDDEN TESTS"
)
SQUARE = ("def padding_mask(valid_lens, num_keys):\n    ### BEGIN SOLUTION\n"
          "    return torch.arange(num_keys, device=valid_lens.device) < valid_lens[:, None, None]\n    ### END SOLUTION")
TEST_SQUARE = (
    "checks.check_padding_mask(padding_mask)\n"
    "### BEGIN HIDDEN TESTS\n"
    "checks.check_padding_mask(padding_mask, hidden=True)\n"
    "### END HIDDEN TESTS"
)
RIGHT_DOUBLE = "def causal_mask(num_queries, num_keys, device=None):\n    return torch.tril(torch.ones(num_queries, num_keys, device=device)).bool()"
WRONG_DOUBLE = "def causal_mask(num_queries, num_keys, device=None):\n    return torch.ones(num_queries, num_keys, dtype=torch.bool, device=device).triu()"
RIGHT_SQUARE = "def padding_mask(valid_lens, num_keys):\n    return (torch.arange(num_keys, device=valid_lens.device)[None, None] < valid_lens[:, None, None])"
HIDDEN = ("BEGIN HIDDEN TESTS", "END HIDDEN TESTS", "hidden=True")
SETUP_CODE = "import torch\nfrom autograder import ch03_masking as checks"

# Where each cell of the two-part source notebook lands in an assembled notebook without
# added cells.
INTRO, SETUP, ANSWER_1, TEST_1, ANSWER_2, TEST_2 = range(6)


def nbgrader(grade_id: str, *, grade: bool = False, solution: bool = False, locked: bool = False,
             points: float | None = None) -> dict:
    """Cell metadata as nbgrader writes it (schema 3)."""
    meta = {"grade": grade, "solution": solution, "locked": locked, "grade_id": grade_id,
            "schema_version": 3, "task": False}
    if points is not None:
        meta["points"] = float(points)
    return {"nbgrader": meta}


def answer_cell(grade_id: str, source: str):
    """An autograded answer cell (nbgrader's "solution" cell)."""
    return new_code_cell(source, metadata=nbgrader(grade_id, solution=True))


def graded_cell(grade_id: str, source: str, points: float):
    """A locked, graded test cell (named so that pytest does not collect it)."""
    return new_code_cell(source, metadata=nbgrader(grade_id, grade=True, locked=True, points=points))


def course_cell(grade_id: str, source: str, *, markdown: bool = False):
    """A locked instructor cell: set-up code or text."""
    make = new_markdown_cell if markdown else new_code_cell
    return make(source, metadata=nbgrader(grade_id, locked=True))


def source_notebook(setup: str = SETUP_CODE) -> nbformat.NotebookNode:
    """The instructor's notebook: two parts, ``causal_mask`` (2 points) and ``padding_mask`` (1 point)."""
    return new_notebook(cells=[
        course_cell("intro", "# Two masks", markdown=True),
        course_cell("setup", setup),
        answer_cell("causal_mask", DOUBLE),
        graded_cell("test_causal_mask", TEST_DOUBLE, points=2),
        answer_cell("padding_mask", SQUARE),
        graded_cell("test_padding_mask", TEST_SQUARE, points=1),
    ])


def released(source: nbformat.NotebookNode, **answers: str) -> nbformat.NotebookNode:
    """The student's copy of ``source`` (answers blank, hidden tests out), with ``answers``
    (by grade id) written in."""
    student = release(source)
    for cell in student.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = answers.get(grade_id, cell.source)
    return student


def answered(**overrides: str) -> nbformat.NotebookNode:
    """A submission of :func:`source_notebook` with both parts answered correctly."""
    return released(source_notebook(), **{"causal_mask": RIGHT_DOUBLE, "padding_mask": RIGHT_SQUARE, **overrides})


def index_of(cells, grade_id: str) -> int:
    """The position of the (first) cell with ``grade_id``."""
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in cells]
    return ids.index(grade_id)


# --------------------------------------------------------------------------------------
# assemble: the notebook to grade
# --------------------------------------------------------------------------------------


def test_answers_are_put_into_the_source_by_grade_id():
    source = source_notebook()
    submission = answered()
    # the student moved the square answer above everything: it is matched by id, not place
    square = submission.cells.pop(index_of(submission.cells, "padding_mask"))
    submission.cells.insert(0, square)
    assembled = assemble(source, submission)
    assert assembled.roles == ["course", "course", "answer", "test", "answer", "test"]
    assert assembled.notebook.cells[ANSWER_1].source == RIGHT_DOUBLE
    assert assembled.notebook.cells[ANSWER_2].source == RIGHT_SQUARE
    assert [p.grade_id for p in assembled.parts] == ["test_causal_mask", "test_padding_mask"]
    assert assembled.unanswered == {"causal_mask": False, "padding_mask": False}
    assert not assembled.notes
    assert assembled.checks == {TEST_1: [CheckCall("check_causal_mask", "causal_mask", False),
                                         CheckCall("check_causal_mask", "causal_mask", True)],
                                TEST_2: [CheckCall("check_padding_mask", "padding_mask", False),
                                         CheckCall("check_padding_mask", "padding_mask", True)]}


def test_instructor_cells_come_from_the_source_with_their_outputs_cleared():
    source = source_notebook()
    source.cells[SETUP].outputs = [new_output("stream", name="stdout", text="stale\n")]
    source.cells[SETUP].execution_count = 7
    submission = answered()
    submission.cells[SETUP].source = SETUP_CODE + "\ntorch.manual_seed(0)  # the student edited a locked cell"
    submission.cells[INTRO].source = "# my notes"
    assembled = assemble(source, submission)
    assert assembled.notebook.cells[SETUP].source == SETUP_CODE
    assert assembled.notebook.cells[SETUP].outputs == [] and assembled.notebook.cells[SETUP].execution_count is None
    assert assembled.notebook.cells[INTRO].source == "# Two masks"
    assert source.cells[SETUP].outputs, "assemble must not change the source notebook"


def test_an_edited_test_cell_is_replaced_by_the_source_with_its_hidden_tests():
    submission = answered()
    submission.cells[TEST_1].source = "pass  # nothing to check here"
    assembled = assemble(source_notebook(), submission)
    assert assembled.notebook.cells[TEST_1].source == TEST_DOUBLE
    assert "extra" not in assembled.roles, "an edited test cell is not a cell the student added"


def test_a_deleted_test_cell_is_put_back():
    submission = answered()
    del submission.cells[TEST_2]
    del submission.cells[TEST_1]
    assembled = assemble(source_notebook(), submission)
    assert assembled.roles == ["course", "course", "answer", "test", "answer", "test"]
    assert assembled.notebook.cells[TEST_1].source == TEST_DOUBLE
    assert assembled.notebook.cells[TEST_2].source == TEST_SQUARE


def test_a_retyped_test_cell_runs_as_an_added_cell_and_the_source_test_still_runs():
    submission = answered()
    # deleted, then typed again without its metadata (and without the hidden tests)
    del submission.cells[TEST_1]
    submission.cells.insert(TEST_1, new_code_cell("assert True  # test_causal_mask"))
    assembled = assemble(source_notebook(), submission)
    assert assembled.roles == ["course", "course", "answer", "extra", "test", "answer", "test"]
    assert assembled.notebook.cells[3].source == "assert True  # test_causal_mask"
    assert assembled.notebook.cells[4].source == TEST_DOUBLE


def test_a_test_cell_turned_into_markdown_still_runs_from_the_source():
    submission = answered()
    submission.cells[TEST_1] = new_markdown_cell("gone", metadata=submission.cells[TEST_1].metadata)
    assembled = assemble(source_notebook(), submission)
    cell = assembled.notebook.cells[TEST_1]
    assert (cell.cell_type, cell.source, assembled.roles[TEST_1]) == ("code", TEST_DOUBLE, "test")


def test_an_answer_cell_turned_into_markdown_is_graded_as_unanswered():
    submission = answered()
    submission.cells[ANSWER_1] = new_markdown_cell(submission.cells[ANSWER_1].source,
                                                   metadata=submission.cells[ANSWER_1].metadata)
    assembled = assemble(source_notebook(), submission)
    cell = assembled.notebook.cells[ANSWER_1]
    assert cell.cell_type == "code" and cell.source == DOUBLE_BLANK
    assert assembled.unanswered == {"causal_mask": True, "padding_mask": False}
    assert any("causal_mask" in note and "markdown" in note for note in assembled.notes)
    assert "extra" not in assembled.roles


def test_points_edited_in_the_submission_are_ignored():
    submission = answered()
    submission.cells[TEST_1].metadata["nbgrader"]["points"] = 100.0
    submission.cells[TEST_2].metadata["nbgrader"]["points"] = 0.0
    source = source_notebook()
    assembled = assemble(source, submission)
    assert [(p.grade_id, p.points) for p in assembled.parts] == [("test_causal_mask", 2.0), ("test_padding_mask", 1.0)]
    assert [(p.grade_id, p.points) for p in assembled.parts] == [(p.grade_id, p.points) for p in parts_of(source)]
    assert assembled.notebook.cells[TEST_1].metadata["nbgrader"]["points"] == 2.0


def test_cells_the_student_added_run_after_the_cell_they_followed():
    submission = answered()
    submission.cells.insert(ANSWER_1 + 1, new_code_cell("print(causal_mask(2, 2))"))  # after the answer
    submission.cells.insert(0, new_code_cell("x = 1  # before everything"))
    submission.cells.append(new_code_cell("print(padding_mask(torch.tensor([1]), 2))"))  # after the last test
    submission.cells.append(new_code_cell("   \n"))  # empty: dropped
    submission.cells.append(new_markdown_cell("my notes"))  # text: dropped
    assembled = assemble(source_notebook(), submission)
    assert assembled.roles == ["extra", "course", "course", "answer", "extra", "test", "answer", "test", "extra"]
    sources = [c.source for c in assembled.notebook.cells]
    assert sources[0] == "x = 1  # before everything"
    assert sources[4] == "print(causal_mask(2, 2))"
    assert sources[8] == "print(padding_mask(torch.tensor([1]), 2))"
    # an added cell belongs to the part whose test follows it
    assert assembled.part_of(4).grade_id == "test_causal_mask" and assembled.part_of(8) is None


def test_instructor_code_without_nbgrader_metadata_is_not_taken_for_an_added_cell():
    source = source_notebook()
    source.cells.insert(TEST_1 + 1, new_code_cell("import math"))  # an instructor cell nbgrader does not know
    submission = answered()
    submission.cells.insert(TEST_1 + 1, new_code_cell("import math"))  # as released
    assembled = assemble(source, submission)
    assert assembled.roles == ["course", "course", "answer", "test", "course", "answer", "test"]
    submission.cells[TEST_1 + 1].source = "import math\nprint(math.pi)"  # edited: the student's own cell now
    assembled = assemble(source, submission)
    assert assembled.roles == ["course", "course", "answer", "test", "extra", "course", "answer", "test"]


def test_a_duplicated_answer_id_keeps_the_first_copy_and_runs_the_rest_as_added_cells():
    submission = answered()
    copy = answer_cell("causal_mask", WRONG_DOUBLE + "  # second copy")
    submission.cells.insert(ANSWER_1 + 1, copy)
    assembled = assemble(source_notebook(), submission)
    assert assembled.roles == ["course", "course", "answer", "extra", "test", "answer", "test"]
    assert assembled.notebook.cells[ANSWER_1].source == RIGHT_DOUBLE
    assert assembled.notebook.cells[ANSWER_1 + 1].source == WRONG_DOUBLE + "  # second copy"
    assert len(assembled.notes) == 1 and "causal_mask" in assembled.notes[0]


@pytest.mark.parametrize("student_answer, expected", [
    pytest.param(DOUBLE_BLANK, True, id="as released"),
    pytest.param(DOUBLE_BLANK + "\n\n", True, id="as released with blank lines"),
    pytest.param(None, True, id="deleted"),
    pytest.param(RIGHT_DOUBLE, False, id="answered"),
    pytest.param(RIGHT_DOUBLE.replace("\n", "\n    # YOUR CODE HERE\n", 1), False, id="answered under the comment"),
    pytest.param("def causal_mask(num_queries, num_keys, device=None):\n    raise NotImplementedError()", False,
                 id="changed stub"),
])
def test_unanswered_means_left_as_released(student_answer, expected):
    submission = released(source_notebook())
    if student_answer is None:
        del submission.cells[ANSWER_1]
    else:
        submission.cells[ANSWER_1].source = student_answer
    assembled = assemble(source_notebook(), submission)
    assert assembled.unanswered["causal_mask"] is expected
    assert assembled.unanswered["padding_mask"] is True
    if student_answer is None:
        assert assembled.notebook.cells[ANSWER_1].source == DOUBLE_BLANK


def test_the_released_notebook_is_unanswered_everywhere():
    assembled = assemble(source_notebook(), released(source_notebook()))
    assert assembled.unanswered == {"causal_mask": True, "padding_mask": True}
    assert assembled.notebook.cells[ANSWER_1].source == DOUBLE_BLANK


# --------------------------------------------------------------------------------------
# check_calls: what a test cell checks, read from its source
# --------------------------------------------------------------------------------------


def test_a_test_cell_names_its_checks_and_their_answers():
    assert check_calls(TEST_DOUBLE) == [CheckCall("check_causal_mask", "causal_mask", False),
                                        CheckCall("check_causal_mask", "causal_mask", True)]


def test_lines_that_are_not_checks_of_an_answer_check_nothing():
    source = "print('all good')\nchecks.cauchy_kernel(1)\nother.check_x(y)\nchecks.check_x()\nchecks.check_x('y')"
    assert check_calls(source) == []
    assert check_calls("this is not python (") == []


# --------------------------------------------------------------------------------------
# judge_test_cells: every part judged through its checks, in this process
# --------------------------------------------------------------------------------------


def graded(submission, *, results: dict[int, CellResult] | None = None, session_class=InProcessSession,
           code_kb: int | None = None):
    """``({grade id: result}, {grade id: text}, assembled, session)`` of ``submission``, judged here."""
    assembled = assemble(source_notebook(), submission, code_kb=code_kb)
    session = session_class(assembled)
    session.run_cells()
    for index, result in (results or {}).items():
        session.results[index] = result
    verdicts = judge_test_cells(session, assembled, ch03_masking, 60.0, "unit-key", [torch.device("cpu")])
    return ({r.part: r for r, _ in verdicts.values()}, {r.part: text for r, text in verdicts.values()}, assembled,
            session, verdicts)


def test_every_part_passes_with_its_points():
    results, texts, *_ = graded(answered())
    spent = {part: result.seconds for part, result in results.items()}
    assert all(isinstance(seconds, float) and seconds >= 0 for seconds in spent.values()), \
        f"the time each part's checks took is recorded: {spent}"
    assert results == {"test_causal_mask": PartResult("test_causal_mask", 2.0, 2.0, "passed", "",
                                                      spent["test_causal_mask"]),
                       "test_padding_mask": PartResult("test_padding_mask", 1.0, 1.0, "passed", "",
                                                       spent["test_padding_mask"])}
    assert texts["test_causal_mask"].startswith("✔ causal_mask: passed, results right on ") and "visible cases and" in texts[
        "test_causal_mask"] and "hidden cases, on cpu, replayed on meta" in texts["test_causal_mask"]


def test_a_status_is_stored_and_shown_as_its_text():
    """The CSV, the state files and the autograded notebook keep the words they always had."""
    result = PartResult("test_causal_mask", 0.0, 2.0, "needs a look", "why")
    assert result.status is PartStatus.NEEDS_A_LOOK and PartStatus("needs a look") == "needs a look"
    row = result.as_dict()
    assert type(row["status"]) is str and json.dumps(row["status"]) == '"needs a look"'
    assert f"{result.status}: why" == "needs a look: why" and str(CellStatus.NOT_RUN) == "not run"
    assert PartResult(**json.loads(json.dumps(row))) == result, "a state file reads back as it was written"
    assert [status.value for status in PartStatus] == ["passed", "failed", "error", "timeout", "missing",
                                                       "needs a look"]
    with pytest.raises(ValueError):
        CellResult("crashed")


def test_a_wrong_answer_fails_with_the_judges_message_and_costs_only_its_part():
    results, *_ = graded(answered(causal_mask=WRONG_DOUBLE))
    assert (results["test_causal_mask"].status, results["test_causal_mask"].score) == ("failed", 0.0)
    assert results["test_causal_mask"].message.startswith("causal_mask: the mask has wrong entries")
    assert results["test_padding_mask"].status == "passed"


def test_a_stub_left_in_place_fails_as_not_answered():
    results, *_ = graded(released(source_notebook(), padding_mask=RIGHT_SQUARE))
    assert (results["test_causal_mask"].status, results["test_causal_mask"].score) == ("failed", 0.0)
    assert "not answered" in results["test_causal_mask"].message
    assert results["test_padding_mask"].status == "passed"


def test_an_answer_that_does_not_exist_fails_and_names_the_error_of_its_cell():
    results, *_ = graded(answered(causal_mask="def causal_mask(q, k, device=None)\n    return None"))
    verdict = results["test_causal_mask"]
    assert verdict.status == "error" and "`causal_mask` is not defined" in verdict.message
    assert "the answer cell `causal_mask` raised SyntaxError" in verdict.message


def test_a_cell_the_student_added_that_raised_is_not_called_an_answer_cell():
    submission = answered(causal_mask="def causal_mask(q, k, device=None)\n    return None")
    submission.cells.insert(TEST_1, new_code_cell("1 / 0"))  # a cell of the student's own, after the answer
    verdict = graded(submission)[0]["test_causal_mask"]
    assert "a cell you added raised ZeroDivisionError" in verdict.message
    assert "answer cell" not in verdict.message


def test_an_answer_redefined_after_its_test_cell_is_judged_as_it_was_there():
    submission = answered()
    submission.cells.insert(TEST_1 + 1, new_code_cell(WRONG_DOUBLE))  # after its test: changes nothing
    results, *_ = graded(submission)
    assert results["test_causal_mask"].status == "passed"


def test_an_answer_cell_that_runs_out_of_time_makes_its_part_a_timeout():
    results, *_ = graded(answered(), results={ANSWER_1: CellResult("timeout", "the cell ran longer than 30 s")})
    assert results["test_causal_mask"].status == "timeout" and results["test_causal_mask"].score == 0.0
    assert "an answer cell" in results["test_causal_mask"].message and "30 s" in results["test_causal_mask"].message
    assert results["test_padding_mask"].status == "passed", "the next part is judged on its own cells"


def test_an_answer_cell_that_kills_the_kernel_makes_its_part_an_error():
    results, *_ = graded(answered(), results={ANSWER_2: CellResult("died", "the kernel died while running this cell")})
    assert results["test_padding_mask"].status == "error" and "kernel died" in results["test_padding_mask"].message
    assert results["test_causal_mask"].status == "passed"


def test_added_cells_count_with_the_part_they_precede():
    submission = answered()
    submission.cells.insert(ANSWER_1 + 1, new_code_cell("x = 1  # its time limit is faked below"))
    assembled = assemble(source_notebook(), submission)
    extra = assembled.roles.index("extra")
    results, *_ = graded(submission, results={extra: CellResult("timeout", "the cell ran longer than 30 s")})
    assert results["test_causal_mask"].status == "timeout"
    assert results["test_padding_mask"].status == "passed"


def test_a_test_cell_that_calls_no_check_is_an_error():
    source = source_notebook()
    source.cells[TEST_2].source = "assert padding_mask(torch.tensor([1]), 2).tolist() == [[[True, False]]]"
    assembled = assemble(source, answered())
    session = InProcessSession(assembled)
    session.run_cells()
    verdicts = judge_test_cells(session, assembled, ch03_masking, 60.0, "unit-key", [torch.device("cpu")])
    result, _ = verdicts[TEST_2]
    assert result.status == "error" and "calls no check" in result.message


class _Silent(InProcessSession):
    """A session whose kernel never answers the judge (a spinning answer) or dies while asked."""

    failure = TimedOut("checking it took longer than the 60 s it had")
    recovered = 0

    def recover(self) -> bool:
        type(self).recovered += 1
        return True

    def respondent(self, declaration, check, test, answer, deadline):
        session = self

        class Failing:
            def ask_all(self, requests):
                raise session.failure

            def check_earlier(self, declaration):
                pass

        return Failing() if test == "test_causal_mask" else super().respondent(declaration, check, test, answer, deadline)


def test_a_part_whose_checking_runs_out_of_time_is_a_timeout_and_the_kernel_is_replaced():
    _Silent.recovered = 0
    results, *_ = graded(answered(), session_class=_Silent)
    assert results["test_causal_mask"] == PartResult("test_causal_mask", 0.0, 2.0, "timeout",
                                                     "checking it took longer than the 60 s it had")
    assert results["test_padding_mask"].status == "passed" and _Silent.recovered == 1


def test_a_kernel_that_dies_while_checked_is_an_error_for_that_part_only():
    class Dying(_Silent):
        failure = KernelLost("the kernel died")

    results, *_ = graded(answered(), session_class=Dying)
    assert results["test_causal_mask"].status == "error" and "kernel died" in results["test_causal_mask"].message
    assert results["test_padding_mask"].status == "passed"


# --------------------------------------------------------------------------------------
# autograded: the notebook stored for the formgrader and the student's feedback
# --------------------------------------------------------------------------------------


def autograded_of(submission, **options):
    _, _, assembled, session, verdicts = graded(submission, **options)
    return autograded(assembled, session.results, verdicts), assembled


def errors(cell) -> list:
    return [o for o in cell.outputs if o.get("output_type") == "error"]


def test_hidden_tests_never_reach_the_autograded_notebook():
    notebook, assembled = autograded_of(answered(causal_mask=WRONG_DOUBLE))
    for index in (TEST_1, TEST_2):
        cell = notebook.cells[index]
        assert all(marker not in cell.source for marker in HIDDEN)
        assert cell.source.startswith("checks.check_"), "the visible checks stay"
        assert "BEGIN HIDDEN TESTS" in assembled.notebook.cells[index].source, "the assembled notebook is not changed"
    assert "hidden=True" not in nbformat.writes(notebook)
    nbformat.validate(notebook)


def test_a_test_cell_shows_the_graders_verdict_and_nothing_the_kernel_wrote():
    submission = answered(causal_mask=WRONG_DOUBLE)
    notebook, _ = autograded_of(submission)
    [error] = errors(notebook.cells[TEST_1])
    assert error.ename == "failed" and error.evalue.startswith("causal_mask: the mask has wrong entries")
    [passed] = notebook.cells[TEST_2].outputs
    assert passed.output_type == "stream" and passed.text.startswith("✔ padding_mask: passed")


def test_an_answer_cell_that_ran_out_of_time_says_so():
    notebook, _ = autograded_of(answered(), results={ANSWER_2: CellResult("timeout", "the cell ran longer than 30 s")})
    assert any("30 s" in o.get("text", "") for o in notebook.cells[ANSWER_2].outputs)
    assert not any("30 s" in o.get("text", "") for o in notebook.cells[ANSWER_1].outputs)


def test_an_answer_past_the_code_bound_is_an_error_of_its_part_and_the_notebook_says_what_was_left_out():
    long_square = RIGHT_SQUARE + "\n# " + "x" * 1500
    notebook, assembled = autograded_of(answered(padding_mask=long_square), code_kb=1)
    [error] = errors(notebook.cells[TEST_2])
    assert error.ename == "error" and "passed the 1 KiB taken of a notebook by this answer cell" in error.evalue
    assert [o.text for o in notebook.cells[TEST_1].outputs][0].startswith("✔ causal_mask: passed")
    assert notebook.cells[ANSWER_2].source == release(source_notebook()).cells[ANSWER_2].source, "as released"
    assert any("[autograder] not graded" in o.get("text", "") for o in notebook.cells[ANSWER_2].outputs)
    last = notebook.cells[-1]
    assert last.cell_type == "markdown" and last.source == (
        "**[autograder]** the student's own code passes the 1 KiB taken of a notebook: answer cell `padding_mask` from "
        "there on was left out (not run, not shown)")
    nbformat.validate(notebook)


PNG = base64.b64encode(b"\x89PNG\r\n\x1a\nrest of a picture").decode()


def test_only_text_and_raster_images_are_kept_of_what_a_cell_printed():
    outputs = [
        new_output("stream", name="stdout", text="hello <b>not bold</b>\n"),
        new_output("display_data", data={"text/html": "<script>steal()</script>", "text/plain": "a table"}),
        new_output("display_data", data={"application/javascript": "steal()"}),
        new_output("execute_result", data={"image/svg+xml": "<svg onload='steal()'/>", "image/png": PNG},
                   metadata={"image/png": {"width": 10000}}, execution_count=3),
        new_output("error", ename="ValueError", evalue="<img src=x onerror=steal()>", traceback=["line"]),
    ]
    cleaned = clean_outputs(outputs)
    text = json.dumps(cleaned)
    assert "<script>" not in text and "javascript" not in text.replace("output of type application/javascript", "")
    assert "onload" not in text and "width" not in text
    kinds = [(o.output_type, sorted(o.get("data", {}))) for o in cleaned]
    assert ("display_data", ["text/plain"]) in kinds and ("display_data", ["image/png"]) in kinds
    assert cleaned[0].text == "hello <b>not bold</b>\n", "text stays text (renderers escape it)"
    assert cleaned[-1].evalue == "<img src=x onerror=steal()>" and cleaned[-1].output_type == "error"
    notes = [o.text for o in cleaned if o.output_type == "stream" and "[autograder]" in o.text]
    assert any("text/html" in note for note in notes) and any("image/svg+xml" in note for note in notes)
    for output in cleaned:
        nbformat.validate(new_notebook(cells=[new_code_cell("x", outputs=[output])]))


def test_the_autograded_notebook_keeps_no_html_a_student_displayed():
    submission = answered()
    submission.cells.insert(TEST_2 + 1, new_code_cell("print(1)"))
    assembled = assemble(source_notebook(), submission)
    session = InProcessSession(assembled)
    session.run_cells()
    extra = assembled.roles.index("extra")
    assembled.notebook.cells[extra].outputs = [new_output("display_data", data={"text/html": "<script>x()</script>"})]
    verdicts = judge_test_cells(session, assembled, ch03_masking, 60.0, "unit-key", [torch.device("cpu")])
    assert "<script>" not in nbformat.writes(autograded(assembled, session.results, verdicts))


# --------------------------------------------------------------------------------------
# wire: data between a kernel and the judge, decoded without running code
# --------------------------------------------------------------------------------------


def test_values_survive_the_trip_through_the_wire():
    value = {"t": torch.arange(6.0).reshape(2, 3), "half": torch.ones(2, dtype=torch.bfloat16),
             "mask": torch.tensor([[True, False]]), "meta": torch.empty(4, 5, device="meta"),
             "items": (1, 2.5, None, "x", [float("inf"), float("nan")]), "device": torch.device("cpu"),
             "dtype": torch.float16, "empty": torch.zeros(0, 3), "helper": ch03_masking._compare_masks}
    codec = wire.Codec(helpers={"compare": ch03_masking._compare_masks})
    back = wire.unpack(wire.pack(value, codec), codec)
    assert torch.equal(back["t"], value["t"]) and back["half"].dtype == torch.bfloat16
    assert torch.equal(back["mask"], value["mask"]) and back["mask"].dtype == torch.bool
    assert back["meta"].device.type == "meta" and back["meta"].shape == (4, 5)
    assert back["items"][:4] == (1, 2.5, None, "x") and math.isinf(back["items"][4][0]) and math.isnan(back["items"][4][1])
    assert back["device"] == torch.device("cpu") and back["dtype"] == torch.float16 and back["empty"].shape == (0, 3)
    assert back["helper"] is ch03_masking._compare_masks


def test_what_cannot_be_sent_is_named_in_a_reply():
    reply = wire.unpack(wire.pack({"model": torch.nn.Linear(2, 2), "f": lambda: 1}, reply=True))
    assert reply == {"model": wire.Opaque("Linear"), "f": wire.Opaque("function")}
    with pytest.raises(wire.WireError):
        wire.pack(lambda: 1)


def _message(header: dict | bytes, *buffers: bytes) -> bytes:
    """A message built by hand: ``header`` as JSON (or its bytes as they are), then ``buffers``."""
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return b"AGW1" + len(text).to_bytes(4, "little") + text + b"".join(buffers)


def _meta(*shape) -> bytes:
    """A message of one ``meta`` tensor of ``shape``: a few dozen bytes, however many elements it claims."""
    return _message({"value": {"tensor": None, "shape": list(shape), "dtype": "bool"}, "buffers": []})


@pytest.mark.parametrize("message, why", [
    pytest.param(b"PK\x03\x04zipped pickle", "wire format", id="a pickle, or anything else"),
    pytest.param(_message({"value": {"tensor": 0, "shape": [2], "dtype": "float32"}, "buffers": [4]}, b"\0" * 4),
                 "with 4 bytes", id="bytes that do not fit the shape"),
    pytest.param(_message({"value": {"tensor": 0, "shape": [1], "dtype": "object"}, "buffers": [8]}, b"\0" * 8),
                 "dtype", id="a dtype not on the list"),
    pytest.param(_message({"value": {"__reduce__": "os.system"}, "buffers": []}), "unknown data", id="an unknown tag"),
    pytest.param(_message({"value": {"tensor": 3, "shape": [1], "dtype": "int8"}, "buffers": [1]}, b"\0"),
                 "without its bytes", id="a buffer that is not there"),
    pytest.param(_message({"value": 1, "buffers": [10]}, b"\0"), "cut short", id="cut short"),
    pytest.param(_message({"value": {"helper": "os.system"}, "buffers": []}), "no helper", id="a helper not given"),
    pytest.param(_message({"value": {"oracle": "x", "bound": {}}, "buffers": []}), "call back", id="an oracle"),
])
def test_malformed_or_hostile_messages_are_refused(message, why):
    with pytest.raises(wire.WireError, match=why):
        wire.unpack(message)


def test_a_message_over_the_limits_is_refused_before_it_is_read():
    big = wire.pack(torch.zeros(1000))
    with pytest.raises(wire.WireError, match="more than the 100 allowed"):
        wire.unpack(big, limits=wire.Limits(bytes=100))
    deep: list = []
    for _ in range(50):
        deep = [deep]
    with pytest.raises(wire.WireError, match="nested deeper"):
        wire.unpack(wire.pack(deep))
    with pytest.raises(wire.WireError, match="more than 10 values"):
        wire.unpack(wire.pack(list(range(20))), limits=wire.Limits(values=10))


#: Messages a student's kernel may send to crash the grader's decoding, each refused as a WireError: before
#: these tests, torch's RuntimeError, TypeError or ValueError (or an allocation) escaped wire.unpack.
HOSTILE_TENSORS = [
    pytest.param(_meta(2**62, 2**62), "elements allowed", id="a meta tensor of 2**124 elements (RuntimeError)"),
    pytest.param(_meta(2**63), "elements allowed", id="a size out of int64's range (TypeError)"),
    pytest.param(_message({"value": {"tensor": 0, "shape": [0, 2**63], "dtype": "int8"}, "buffers": [0]}),
                 "elements allowed", id="a zero-size tensor with a size out of int64's range (TypeError)"),
    pytest.param(_meta(0, 2**62, 2**62), "elements allowed", id="a zero-size tensor whose strides overflow (RuntimeError)"),
    pytest.param(_meta(2**40), "elements allowed", id="a meta tensor of 2**40 elements (decoded)"),
    pytest.param(_meta(-1), "malformed tensor shape", id="a negative size"),
    pytest.param(_meta(True), "malformed tensor shape", id="a bool for a size (TypeError)"),
    pytest.param(_message({"value": {"tensor": None, "shape": [1], "dtype": []}, "buffers": []}), "dtype",
                 id="a dtype that is a list (TypeError)"),
    pytest.param(_message({"value": {"dtype": {}}, "buffers": []}), "unknown data", id="a dtype tag of a dict (TypeError)"),
    pytest.param(_message({"value": {"tensor": 0, "shape": [1], "dtype": "int8", "device": {}}, "buffers": [1]}, b"\0"),
                 "device", id="a device that is not a name"),
    pytest.param(_message({"value": {"tensor": [300], "shape": [1], "dtype": "int8"}, "buffers": []}), "cannot hold",
                 id="300 as int8 (RuntimeError)"),
    pytest.param(_message({"value": {"tensor": [2**70], "shape": [], "dtype": "int64"}, "buffers": []}), "cannot hold",
                 id="2**70 as int64 (ValueError)"),
    pytest.param(_message({"value": [{"tensor": 0, "shape": [2], "dtype": "int8"}] * 3, "buffers": [2]}, b"\0\0"),
                 "bytes of another", id="one buffer for many tensors (a copy each)"),
    pytest.param(_message(b'{"value": 1' + b"0" * 5000 + b', "buffers": []}'), "malformed message header",
                 id="an integer of 5000 digits (ValueError)"),
    pytest.param(_message('{"value": "\u00e9", "buffers": []}'.encode()), "not ASCII",
                 id="a header that is not ASCII"),
]


@pytest.mark.parametrize("message, why", HOSTILE_TENSORS)
def test_hostile_tensors_are_refused_as_wire_errors_and_read_as_replies_that_say_so(message, why):
    with pytest.raises(wire.WireError, match=why):
        wire.unpack(message)
    replies = _respondent()._decode_replies(base64.b64encode(message).decode())
    assert len(replies) == 1 and replies[0].error.startswith("ReplyError:") and why in replies[0].error


def test_the_elements_of_tensors_are_bounded_meta_tensors_included_and_a_buffer_makes_one_tensor():
    meta = wire.pack((torch.empty(4, 5, device="meta"), torch.empty(0, 7, device="meta")))
    assert [t.shape for t in wire.unpack(meta, limits=wire.Limits(elements=20))] == [(4, 5), (0, 7)]
    with pytest.raises(wire.WireError, match="more than the 19 elements allowed"):
        wire.unpack(meta, limits=wire.Limits(elements=19))
    two = wire.pack((torch.zeros(3), torch.empty(3, device="meta")))
    with pytest.raises(wire.WireError, match="more than 5 elements in all"):
        wire.unpack(two, limits=wire.Limits(elements=5))
    assert wire.unpack(_meta(0, 2**20)).shape == (0, 2**20)  # a zero-size tensor of an extent within the limit


def test_a_bool_tensors_bytes_other_than_0_and_1_are_true():
    mask = wire.unpack(_message({"value": {"tensor": 0, "shape": [3], "dtype": "bool"}, "buffers": [3]}, b"\0\2\xff"))
    assert mask.tolist() == [False, True, True] and mask.view(torch.uint8).tolist() == [0, 1, 1]


@pytest.mark.parametrize("message, why", [
    pytest.param(_message(b"[" + b"{}, " * 200_000 + b"{}]"), "more than 200000 values", id="[{}, {}, ...]"),
    pytest.param(_message(b'{"value": ' + b"[" * 68 + b"]" * 68 + b', "buffers": []}'), "nested deeper than 32",
                 id="[[[...]]] deeper than JSON of 32 levels of data"),
    pytest.param(_message(b'{"value": 1, "buffers": []}' + b"]" * 10**6), "closes nothing", id="]]]..."),
    pytest.param(_message(b'{"value": ' + b'"a": ' * 10**6 + b'1, "buffers": []}'), "a key without a value",
                 id='"a": "a": ...'),
])
def test_a_header_is_scanned_and_refused_before_it_is_parsed(message, why, monkeypatch):
    monkeypatch.setattr(json, "loads", lambda *args, **kwargs: pytest.fail("parsed"))
    with pytest.raises(wire.WireError, match=why):
        wire.unpack(message)
    replies = _respondent()._decode_replies(base64.b64encode(message).decode())
    assert replies[0].error.startswith("ReplyError:") and why in replies[0].error


def test_the_scan_of_a_header_counts_json_values_outside_strings_and_lets_data_at_the_limits_through():
    text = 'brackets [{ and "quotes": \\" inside a string'
    assert wire.unpack(wire.pack(text), limits=wire.Limits(values=3)) == text  # the header, the string, buffers
    with pytest.raises(wire.WireError, match="more than 11 values"):
        wire.unpack(wire.pack(list(range(9))), limits=wire.Limits(values=11))  # the header, its list, 9, buffers
    value: object = torch.zeros(2)
    for _ in range(32):  # a tensor in 32 tuples, as deep as data may be: 2 * 32 + 3 levels of JSON
        value = (value,)
    back = wire.unpack(wire.pack(value))
    for _ in range(32):
        back = back[0]
    assert torch.equal(back, torch.zeros(2))


#: Decodes a message of a header ``[{}, {}, ...]`` of about 48 MB (what fits the kernel's largest message,
#: base64-encoded) as the grader does, and prints the message's size, the growth of the process's peak
#: memory meanwhile (building the message included) and what decoding it raised.
MEMORY_PROBE = """
import resource, struct, sys
from autograder import wire
from autograder.grading.kernels import MESSAGE_BYTES

def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)

limits = wire.Limits(bytes=MESSAGE_BYTES)
wire.unpack(wire.pack([{}]), limits=limits)  # what a first decoding imports
chunk, copies = b"{}, " * 2**16, 183
length = 1 + len(chunk) * copies + 3
before = peak()
message = b"".join([b"AGW1", struct.pack("<I", length), b"["] + [chunk] * copies + [b"{}]"])
try:
    wire.unpack(message, limits=limits)
    outcome = "decoded"
except wire.WireError as error:
    outcome = f"WireError: {error}"
print(len(message), peak() - before, outcome)
"""


def test_a_header_of_millions_of_empty_dicts_is_refused_in_little_more_memory_than_the_message():
    """Before the scan, ``json.loads`` built 12 million dicts first: some 1.1 GB for a 48 MB message."""
    import subprocess
    import sys

    pytest.importorskip("resource")
    probe = subprocess.run([sys.executable, "-c", MEMORY_PROBE], capture_output=True, text=True, timeout=300)
    assert probe.returncode == 0, probe.stderr[-2000:]
    size, growth, outcome = probe.stdout.split(maxsplit=2)
    assert int(growth) < 3 * int(size) + 32 * 2**20, f"{int(growth) / 2**20:.0f} MiB for a message of {int(size) / 2**20:.0f} MiB"
    assert int(size) > 45 * 2**20 and outcome.startswith("WireError: more than 200000 values")


def test_a_malformed_reply_is_a_reply_that_says_so():
    assert "not a reply" in Reply.from_data([1, 2]).error
    reply = Reply.from_data({"result": 3, "after": "garbage", "library": "x" * 5, "error": 7, "unanswered": "yes"})
    assert (reply.result, reply.after, reply.library, reply.error, reply.unanswered) == (3, ((), {}), [], "", False)


# --------------------------------------------------------------------------------------
# kernel_respondent: what the judge reads from a kernel, and what it computes for it
# --------------------------------------------------------------------------------------


def _respondent(declaration=None):
    """A kernel respondent whose session only tallies the oracle calls it refuses (no kernel is asked)."""
    session = SimpleNamespace(oracle_refused=Counter())
    respondent = KernelRespondent(session, declaration or ch03_masking.MASKED_ATTENTION, "check_masked_attention",
                                  "test_masked_attention", "masked_attention", deadline=0.0)
    respondent._oracles, respondent._budget, respondent._replies = set(), 100, None
    return respondent


def _prompt(kind: str, value) -> str:
    return f"{PROMPT}{kind} {base64.b64encode(wire.pack(value, reply=True)).decode()}"


def test_the_first_reply_counts_and_a_students_own_prompts_are_ignored():
    respondent = _respondent()
    assert respondent._answer("What is your name?") == ""
    respondent._answer(_prompt("reply", [{"result": 1}]))
    respondent._answer(_prompt("reply", [{"result": 2}]))
    assert [reply.result for reply in respondent._replies] == [1]


@pytest.mark.parametrize("payload", [f"{PROMPT}reply bm90IGEgbWVzc2FnZQ==", _prompt("reply", {"result": 1})],
                         ids=["not a message", "not a list"])
def test_a_reply_that_cannot_be_read_is_an_error_not_a_crash(payload):
    respondent = _respondent()
    respondent._answer(payload)
    assert respondent._replies[0].error.startswith("ReplyError")


def test_an_oracle_answers_only_what_this_part_may_call_on_inputs_of_its_size():
    from autograder.ch01_nadaraya_watson import TRAINING
    from autograder.reference import ch01_nadaraya_watson as ref01

    respondent = _respondent(TRAINING)
    respondent._oracles = set(respondent._dependencies())
    x, y = torch.arange(4.0), torch.arange(4.0) * 10
    answer = respondent._answer(_prompt("oracle", {"name": "ch01_nadaraya_watson:leave_one_out", "args": (x, y),
                                                   "kwargs": {}}))
    assert answer.startswith("ok ")
    keys, values = wire.unpack(base64.b64decode(answer[3:]))
    expected_keys, expected_values = ref01.leave_one_out(x, y)
    assert torch.equal(keys, expected_keys) and torch.equal(values, expected_values)
    refused = respondent._answer(_prompt("oracle", {"name": "ch01_nadaraya_watson:nadaraya_watson", "args": (x, y),
                                                    "kwargs": {}}))
    assert refused.startswith("error") and "not available" in refused
    huge = respondent._answer(_prompt("oracle", {"name": "ch01_nadaraya_watson:leave_one_out",
                                                 "args": (torch.zeros(10**4), torch.zeros(10**4)), "kwargs": {}}))
    assert huge.startswith("error") and "larger" in huge
    assert respondent.session.oracle_refused == {"leave_one_out": 1}  # for the run's summary
    raised = respondent._answer(_prompt("oracle", {"name": "ch01_nadaraya_watson:leave_one_out",
                                                   "args": (torch.zeros(1), torch.zeros(1)), "kwargs": {}}))
    assert raised.startswith("error ValueError")


@pytest.mark.parametrize("call", [
    pytest.param({"name": [], "args": (), "kwargs": {}}, id="a name that is a list (TypeError)"),
    pytest.param(torch.zeros(3), id="a tensor (IndexError)"),
    pytest.param({"name": "ch03_masking:causal_mask", "args": torch.empty(2**20, device="meta"), "kwargs": {}},
                 id="args a tensor of 2**20 rows (a tensor made of each)"),
])
def test_an_oracle_call_that_is_not_a_call_is_answered_an_error(call):
    assert _respondent()._answer(_prompt("oracle", call)).startswith("error the call could not be read")


def test_a_loss_computed_by_the_grader_carries_its_gradient_back_into_the_kernel(monkeypatch):
    """A training loop that calls an earlier part (assignment 7's loss) is answered outside, gradient included."""
    from autograder.ch07_decoding import TRAINING
    from autograder.kernel import serve as respond
    from autograder.reference import ch07_decoding as ref07

    respondent = _respondent(TRAINING)
    respondent._oracles, respondent._budget = set(respondent._dependencies()), 10**4
    monkeypatch.setattr(respond, "exchange", lambda kind, payload: respondent._answer(
        f"{PROMPT}{kind} {base64.b64encode(payload).decode()}"))
    loss_outside = respond._oracle("ch07_decoding:causal_lm_loss", {})
    logits = torch.randn(3, 5, 7, requires_grad=True)
    tokens = torch.randint(0, 7, (3, 5))
    loss = loss_outside(logits, tokens, pad_id=6)
    (2 * loss).backward()
    here = logits.detach().clone().requires_grad_()
    (2 * ref07.causal_lm_loss(here, tokens, pad_id=6)).backward()
    assert torch.allclose(loss, ref07.causal_lm_loss(here, tokens, pad_id=6))
    assert torch.allclose(logits.grad, here.grad) and logits.grad.abs().sum() > 0
    with torch.no_grad():  # no gradient asked: a plain value
        assert not loss_outside(logits, tokens).requires_grad
    malformed = respondent._answer(_prompt("oracle", {"name": "ch07_decoding:causal_lm_loss", "args": (logits.detach(), tokens),
                                                      "kwargs": {}, "gradient": {"wrt": [1], "output": torch.ones(())}}))
    assert malformed.startswith("error ValueError") and "floating-point" in malformed

# --------------------------------------------------------------------------------------
# read_submission
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("content, why", [
    pytest.param(b'{"cells": [', "not valid notebook JSON", id="cut off"),
    pytest.param(b"{'cells': []}", "not valid notebook JSON", id="not JSON"),
    pytest.param(b"\xff\xfe\x00garbage", "not valid notebook JSON", id="not UTF-8"),
    pytest.param(b"[1, 2, 3]", "not a Jupyter notebook", id="a JSON list"),
    pytest.param(b'"a string"', "not a Jupyter notebook", id="a JSON string"),
    pytest.param(b'{"name": "not a notebook"}', "not a Jupyter notebook", id="a JSON object"),
    pytest.param(b'{"cells": "not a list of cells"}', "cannot be read", id="cells that are not cells"),
])
def test_read_submission_refuses_what_is_not_a_notebook(tmp_path, content, why):
    path = tmp_path / "submission.ipynb"
    path.write_bytes(content)
    with pytest.raises(UnreadableNotebook, match=why):
        read_submission(path)


def test_read_submission_reads_a_v4_notebook(tmp_path):
    path = tmp_path / "submission.ipynb"
    nbformat.write(answered(), str(path))
    submission = read_submission(path)
    assert submission.nbformat == 4
    assert submission.cells[ANSWER_1].source == RIGHT_DOUBLE


def test_read_submission_upgrades_an_nbformat_3_notebook(tmp_path):
    v3 = {
        "metadata": {"name": ""}, "nbformat": 3, "nbformat_minor": 0,
        "worksheets": [{"metadata": {}, "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": ["# Two masks"]},
            {"cell_type": "code", "collapsed": False, "language": "python", "outputs": [],
             "metadata": nbgrader("causal_mask", solution=True),
             "input": RIGHT_DOUBLE.splitlines(keepends=True)},
        ]}],
    }
    path = tmp_path / "old.ipynb"
    path.write_text(json.dumps(v3), encoding="utf-8")
    submission = read_submission(path)
    assert submission.nbformat == 4
    assert [c.cell_type for c in submission.cells] == ["markdown", "code"]
    assert submission.cells[1].source == RIGHT_DOUBLE
    # and its answer is found by grade id
    assembled = assemble(source_notebook(), submission)
    assert assembled.notebook.cells[ANSWER_1].source == RIGHT_DOUBLE
    assert assembled.unanswered == {"causal_mask": False, "padding_mask": True}




# --------------------------------------------------------------------------------------
# Fair time: a kernel's CPU share, its CPU time, and training inside the timed call
# --------------------------------------------------------------------------------------

#: Waits for a line, then burns the CPU in two processes for 1.5 s of wall time.
BURNS_TWO_CPUS = "import os, sys, time\nsys.stdin.readline()\nos.fork()\nend = time.monotonic() + 1.5\n" \
                 "while time.monotonic() < end:\n    pass\n"


def test_a_kernel_cgroup_gets_a_cpu_quota_of_its_threads_and_counts_its_cpu_time():
    import subprocess
    import sys
    import time

    from autograder.grading import limits

    hierarchy = limits.available()
    if not isinstance(hierarchy, limits.Hierarchy) or hierarchy.cpu is None or hierarchy.cpuacct is None:
        pytest.skip(f"no cpu and cpuacct cgroup here: {hierarchy}")
    cgroup = limits.KernelCgroup(hierarchy, memory_bytes=256 * 2**20, processes=16, cpus=1)
    try:
        if hierarchy.version == 1:
            assert (cgroup.cpu / "cpu.cfs_quota_us").read_text().split() == [str(limits.CPU_PERIOD_US)]
            assert (cgroup.cpu / "cpu.shares").read_text().split() == ["1024"]
        else:
            assert (cgroup.cpu / "cpu.max").read_text().split() == [str(limits.CPU_PERIOD_US)] * 2
        assert cgroup.cpu_seconds() == 0
        burner = subprocess.Popen([sys.executable, "-c", BURNS_TWO_CPUS], stdin=subprocess.PIPE, text=True)
        cgroup.add(burner.pid)
        burner.communicate("go\n", timeout=30)
        time.sleep(0.3)  # the forked one ends on its own
        used = cgroup.cpu_seconds()
        # two busy processes for 1.5 s: up to 3 s of CPU on two idle cores, at most about 1.5 s under a one-CPU quota
        assert 0.1 < used < 1.5 + 0.3, used
    finally:
        cgroup.close()
    assert cgroup.cpu_seconds() is None


def test_backward_passes_are_counted_only_inside_the_block():
    from autograder.kernel.measure import counting_backward_passes

    weight = torch.ones(3, requires_grad=True)
    with counting_backward_passes() as passes:
        (weight * 2).sum().backward()
        torch.autograd.grad((weight ** 2).sum(), weight)
    assert passes[0] >= 2
    counted = passes[0]
    (weight * 3).sum().backward()
    assert passes[0] == counted and torch.Tensor.backward.__name__ == "backward"


def test_a_training_over_its_cpu_time_fails_saying_which_clock_and_no_backward_pass_is_advice():
    from autograder.core import Case, expect_backward_passes, expect_trained_in_time

    case = Case("train_sorting_transformer", "train_sorting_transformer(seed=5)", seed=5)
    case.seconds, case.clock = 100.0, "CPU time"
    with pytest.raises(AssertionError, match="took 100 s of CPU time; it must finish within 90 s of CPU time"):
        expect_trained_in_time(case, torch.zeros(2), 0.99, limit=90)
    case.seconds = 10.0
    expect_trained_in_time(case, torch.zeros(2), 0.99, limit=90)
    with pytest.raises(AssertionError, match="no backward pass .* was seen during train_sorting_transformer"):
        expect_backward_passes(case, (), {}, (0.99, torch.zeros(2), 0))  # the kernel's count: advice (Part.advise)
    from autograder import ch06_transformer, ch07_decoding

    assert ch06_transformer.SORTING.advise is not None and ch07_decoding.TRAINING.advise is not None


# --------------------------------------------------------------------------------------
# The checks' machinery: nested values, what an answer calls, patched callables
# --------------------------------------------------------------------------------------


def test_a_nested_value_is_mapped_leaf_by_leaf_into_containers_of_its_own_types():
    from autograder import nested

    scale = functools.partial(divmod, 7, b=[2])
    value = ({"a": [1, (2,)], 3: OrderedDict(x=4)}, scale, "5")
    doubled = nested.map_leaves(value, lambda leaf: leaf * 2, into=(*nested.CONTAINERS, functools.partial))
    assert doubled[:1] == ({"a": [2, (4,)], 3: {"x": 8}},) and doubled[2] == "55"
    assert type(doubled[0][3]) is dict and type(doubled[0]["a"]) is list  # a dict comes back plain, a list a list
    assert doubled[1].func is divmod and doubled[1].args == (14,) and doubled[1].keywords == {"b": [4]}
    assert nested.map_leaves(value, id)[1] == id(scale)  # a partial outside `into` is a leaf
    assert nested.map_leaves({"k": ["v"]}, str.upper, keys=True) == {"K": ["V"]}


def test_the_leaves_of_a_nested_value_come_in_order_and_a_fold_sees_its_containers():
    from autograder import nested

    value = [1, {"key": (2, 3)}, functools.partial(print, 4, end=5)]
    assert nested.leaves(value) == [1, 2, 3, value[2]]
    assert nested.leaves(value, into=(list, dict, tuple, functools.partial)) == [1, 2, 3, 4, 5]
    depth = nested.fold(value, lambda leaf: 0, lambda container, items: 1 + max(
        items.values() if isinstance(container, dict) else items, default=0))
    assert depth == 3


def test_a_case_moves_to_a_device_with_its_partials_and_its_tensors_are_found_in_tuples_and_lists():
    from autograder.core import tensors_in, to_device

    weight, x = torch.ones(2, 2), torch.zeros(3)
    moved = to_device(([x], {"score": functools.partial(torch.matmul, other=weight), "device": torch.device("cpu")}),
                      "meta")
    assert moved[0][0].device.type == "meta" and moved[1]["device"] == torch.device("meta")
    assert moved[1]["score"].keywords["other"].device.type == "meta" and weight.device.type == "cpu"
    assert [id(t) for t in tensors_in((x, [weight], {"not": x}))] == [id(x), id(weight)]  # not a dict's tensors


def test_the_names_an_answer_calls_are_those_of_its_code_nested_functions_and_methods_included():
    from autograder.kernel.respond import names_called

    def answer(x):
        return [json.dumps(item) for item in x]  # a comprehension: code nested in the answer's

    class Module:
        def forward(self, x):
            return math.sqrt(x)

    assert {"json", "dumps"} <= names_called(answer) and {"math", "sqrt"} <= names_called(Module)
    assert "math" not in names_called(answer)
    assert names_called(lambda: None) == set() and names_called(3) == set()


def test_patched_callables_are_restored_in_reverse_order_even_after_an_error():
    from autograder.kernel.measure import patched

    owner, namespace = SimpleNamespace(f=len), {"g": len}
    with pytest.raises(KeyError), patched([(owner, "f", abs), (namespace, "g", abs), (namespace, "g", min)]):
        assert owner.f is abs and namespace["g"] is min
        raise KeyError
    assert owner.f is len and namespace == {"g": len}


# --------------------------------------------------------------------------------------
# The grader's own memory and workers: oracle arguments, grading forks, oversized files
# --------------------------------------------------------------------------------------

TABLE_ORACLE = "ch05_positional_encoding:sinusoidal_encoding"


def _module_respondent():
    """A respondent for assignment 05's PositionalEncoding, budgeted for a case ``X (2, 20, 16), max_len=50``."""
    from autograder.ch05_positional_encoding import MODULE
    from autograder.grading.kernel_respondent import ORACLE_FACTOR, ORACLE_SLACK, _elements

    respondent = _respondent(MODULE)
    respondent._oracles = set(respondent._dependencies())
    respondent._budget = ORACLE_FACTOR * _elements((torch.zeros(2, 20, 16), 50)) + ORACLE_SLACK
    return respondent


def test_what_an_oracle_call_may_compute_counts_the_integers_that_size_its_result():
    from autograder.grading.kernel_respondent import _elements

    assert _elements((torch.zeros(2, 3), 50_000, 2_000)) == 6 + 10**8
    assert _elements(((3, [4]), {"n": 5, "flag": True, "dim": -1, "scale": 2.5})) == 60  # bools, negatives, floats: 0
    respondent = _module_respondent()
    table = respondent._answer(_prompt("oracle", {"name": TABLE_ORACLE, "args": (50, 16), "kwargs": {}}))
    assert table.startswith("ok ") and wire.unpack(base64.b64decode(table[3:])).shape == (50, 16)
    for args, kwargs in [((50_000, 2_000), {}), ((), {"max_len": 50_000, "num_hiddens": 2_000})]:
        bomb = respondent._answer(_prompt("oracle", {"name": TABLE_ORACLE, "args": args, "kwargs": kwargs}))
        assert bomb.startswith("error the grader refuses") and "100,000,000 elements" in bomb, bomb


@pytest.mark.parametrize("error", [MemoryError(), RuntimeError("DefaultCPUAllocator: can't allocate memory: ...")],
                         ids=["MemoryError", "the CPU allocator"])
def test_an_oracle_that_runs_out_of_memory_answers_an_error(monkeypatch, error):
    from autograder.reference import ch05_positional_encoding as ref05

    def exhausted(*args, **kwargs):
        raise error

    monkeypatch.setitem(ref05.REFERENCES, "sinusoidal_encoding", exhausted)
    answer = _module_respondent()._answer(_prompt("oracle", {"name": TABLE_ORACLE, "args": (50, 16), "kwargs": {}}))
    assert answer == "error the grader ran out of its own memory computing it (the grading worker's data limit)"


def _data_memory() -> int:
    """This process's data memory now (``VmData``), in bytes: what ``RLIMIT_DATA`` is measured against."""
    line = next(line for line in open("/proc/self/status") if line.startswith("VmData:"))
    return int(line.split()[1]) * 1024


def test_a_grading_fork_runs_under_its_data_limit_and_an_oracle_past_it_fails_alone():
    """A table of 4 * 10**8 float64 (3.2 GB) asked within a generous budget, in a fork given 1 GiB more than
    this process holds: the reference's allocation fails in the fork, which answers an error and lives on."""
    import resource

    from autograder.grading.forks import ForkPool

    def ask_for_a_huge_table():
        respondent = _module_respondent()
        respondent._budget = 10**12
        answer = respondent._answer(_prompt("oracle", {"name": TABLE_ORACLE, "args": (20_000, 20_000), "kwargs": {}}))
        return resource.getrlimit(resource.RLIMIT_DATA), answer

    data = _data_memory() + 2**30
    (limit, hard), answer = dict(ForkPool(ask_for_a_huge_table, 1, data).results({"ada": ()}))["ada"]
    assert (limit, hard) == (data, resource.getrlimit(resource.RLIMIT_DATA)[1]), "the soft limit only"
    assert "ran out of its own memory" in answer, answer


def _dies_or_returns(what: str, marker=None):
    """A grading task for the fork pool's tests: it dies (always, or the first time), raises, or returns."""
    import os
    import signal

    if what == "dies" or (what == "dies once" and not marker.exists()):
        if marker is not None:
            marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)
    if what == "raises":
        raise ValueError("a bug of the grader's")
    return f"graded ({what})"


def test_a_grading_fork_that_dies_is_replaced_its_student_tried_once_more_and_no_one_else_is_affected(tmp_path):
    from autograder.grading.forks import ForkPool

    tasks = {"ada": ("fine",), "ben": ("dies",), "cy": ("dies once", tmp_path / "died"), "dee": ("raises",),
             "eve": ("fine",)}
    results = dict(ForkPool(_dies_or_returns, 2, 2**40).results(tasks))
    assert results == {"ada": "graded (fine)", "eve": "graded (fine)", "cy": "graded (dies once)",
                       "dee": "ValueError: a bug of the grader's",
                       "ben": "the grading worker was killed by signal 9 (SIGKILL), probably out of memory "
                              "(tried 2 times)"}


def test_what_a_dead_grading_fork_left_is_removed(tmp_path):
    """Its temporary folders, and its kernels' cgroups with what still runs in them (where cgroups can be made)."""
    import os
    import signal
    import subprocess
    import tempfile
    from pathlib import Path

    from autograder.grading import limits
    from autograder.grading.forks import ForkPool

    hierarchy = limits.available()

    def leave_and_die():
        Path(tempfile.mkdtemp(prefix="autograder-")).joinpath("work").write_text("a kernel's file")
        left = {"folder": tempfile.gettempdir(), "cgroups": [], "process": None}
        if isinstance(hierarchy, limits.Hierarchy):
            cgroup = limits.KernelCgroup(hierarchy, memory_bytes=256 * 2**20, processes=16, cpus=1)
            sleeper = subprocess.Popen(["sleep", "60"])
            cgroup.add(sleeper.pid)
            left.update(cgroups=[str(folder) for folder in cgroup.folders], process=sleeper.pid)
        (tmp_path / "left.json").write_text(json.dumps(left))
        os.kill(os.getpid(), signal.SIGKILL)

    outcome = dict(ForkPool(leave_and_die, 1, 2**40).results({"ada": ()}))["ada"]
    assert outcome.startswith("the grading worker was killed by signal 9"), outcome
    left = json.loads((tmp_path / "left.json").read_text())  # what the second try left
    assert "autograder-worker-" in left["folder"] and not Path(left["folder"]).exists()
    assert not any(Path(folder).exists() for folder in left["cgroups"])
    if left["process"] is not None:
        assert _gone(left["process"]), "a process of the dead fork's kernel still runs"


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie not yet reaped by init counts as ended)."""
    import time
    from pathlib import Path

    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            state = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                         if line.startswith("State:"))
        except FileNotFoundError:
            return True
        if "Z" in state.split()[1]:
            return True
        time.sleep(0.05)
    return False


def test_an_oversized_notebook_is_refused_unread_every_part_an_error():
    from autograder.grading.sandbox import Limits
    from autograder.grading.worker import Oversized, grade_task

    outcome = grade_task(nbformat.writes(source_notebook()), "toy.ipynb", Oversized(30 * 2**20, 20 * 2**20),
                         Limits(sandbox=False), "key")
    assert [(r["part"], r["status"], r["score"]) for r in outcome["results"]] == [
        ("test_causal_mask", "error", 0.0), ("test_padding_mask", "error", 0.0)]
    assert all("30.0 MiB, more than the 20 MiB" in r["message"] for r in outcome["results"])
    assert outcome["autograded"] is None


def test_a_bubblewrapped_kernel_binds_no_folder_of_the_host_but_its_sockets():
    """Its working folder is in its own /tmp (memory of a fixed size), as a forked kernel's."""
    from autograder.grading import sandbox

    policy = sandbox.policy(sandbox.Limits())
    command = sandbox.bwrap_command(policy, ["python"], "/tmp/autograder-x/sockets-y")
    binds = [command[i + 1:i + 3] for i, argument in enumerate(command) if argument == "--bind"]
    assert binds == [["/tmp/autograder-x/sockets-y", "/tmp/autograder-x/sockets-y"]]
    assert any(command[i:i + 2] == ["--tmpfs", "/tmp"] for i in range(len(command)))
    assert command[command.index("--chdir") + 1] == "/tmp/work"


def test_what_a_submission_did_to_the_grader_is_noted_for_the_runs_summary(tmp_path):
    from pathlib import Path

    from autograder.grading.execute import KernelSession
    from autograder.grading.sandbox import Limits
    from autograder.instructor.grade import GradeReport, summary

    session = KernelSession(assemble(source_notebook(), answered()), Limits(), str(tmp_path))
    assert session.notes() == []
    session.output_dropped, session.restarts = 4500 * 2**20, 1
    session.oracle_refused["sinusoidal_encoding"] += 2
    notes = session.notes()
    assert notes == ["printed 4,500 MiB while its answers were judged (read and dropped)",
                     "asked the grader 2 times to compute `sinusoidal_encoding` on more than its part allows (refused)",
                     "its kernel was lost and replaced 1 time while judged"]
    report = GradeReport("05_positional_encoding", ["mallory", "ada"], [], {}, [], Path("grades.csv"), "sqlite://",
                         1.0, notes={"mallory": notes})
    line = next(line for line in summary(report).splitlines() if line.startswith("what submissions did"))
    assert "mallory: printed 4,500 MiB" in line and "ada" not in line


# ---- what a wrong answer returned, kept for the class report ----


def _attention_scaled_by_d(queries, keys, values, mask=None):
    scores = queries @ keys.transpose(-2, -1) / queries.shape[-1]  # 1/d instead of 1/sqrt(d)
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1))
    return weights @ values, weights


def _attention_scaled_by_d_written_otherwise(queries, keys, values, mask=None):
    width = queries.size(-1)
    scores = torch.einsum("...qd,...kd->...qk", queries / width, keys)  # the same mistake, another way
    scores = scores if mask is None else torch.where(mask, scores, torch.tensor(-math.inf))
    weights = scores.softmax(-1).nan_to_num(0.0)
    return torch.einsum("...qk,...kd->...qd", weights, values), weights


def _attention_keys_as_values(queries, keys, values, mask=None):
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1))
    return weights @ (values + keys[..., :1]), weights  # values shifted by the keys' first feature


def _failure(answer):
    from autograder.core import CheckFailed
    from autograder.judge import LocalRespondent, judge

    declaration = ch03_masking.check_masked_attention.declaration
    with pytest.raises(CheckFailed) as raised:
        judge(declaration, LocalRespondent(declaration, answer), where=[torch.device("cpu")])
    return raised.value


def test_two_wrong_answers_whose_messages_read_alike_are_told_apart_by_what_they_returned():
    from autograder.instructor.report import Row, mistake_of

    by_d, again, shifted = (_failure(a) for a in (_attention_scaled_by_d, _attention_scaled_by_d_written_otherwise,
                                                  _attention_keys_as_values))
    texts = {mistake_of(Row("s", "test_masked_attention", 0, 2.5, "failed", str(f), 0, None))
             for f in (by_d, again, shifted)}
    assert len(texts) == 1, "the two mistakes read alike once numbers are set aside (the report's problem)"
    assert by_d.returned is not None and by_d.returned == again.returned, "one mistake written two ways: one digest"
    assert shifted.returned not in (None, by_d.returned), "another mistake: another digest"


def test_a_known_mistake_needs_no_digest():
    from autograder.judge import KnownMistake
    from autograder.reference.ch03_masking import MISTAKES

    (_, unscaled), = [m for m in MISTAKES["masked_attention"] if "1/√d" in m[0]]
    failure = _failure(lambda *args, **kwargs: unscaled(*args, **kwargs))  # called from a module of the student's
    assert isinstance(failure, KnownMistake) and failure.returned is None
