"""Unit tests of how the grader knows what students received: nbgrader's clearing, as the course configures it.

In the style of nbgrader's ``nbgrader/tests/preprocessors/``: small cells built by hand
with nbgrader metadata, cleared by ``notebooks.release`` (nbgrader's ``ClearSolutions``
and ``ClearHiddenTests``) and assembled with a submission (``notebooks.assemble``), under
nbgrader's defaults and under a course's own ``code_stub`` and delimiters.
"""

from __future__ import annotations

import json
import pickle
import re

import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook
from traitlets.config import Config

from autograder.grading.notebooks import (
    BrokenSource,
    assemble,
    clearing_options,
    read_bounded,
    read_submission,
    release,
)
from autograder.grading.sandbox import Limits
from autograder.grading.verdict import grade_submission

DEFAULT_STUB = "# YOUR CODE HERE\nraise NotImplementedError()"
COURSE_STUB = "# your code here\nraise NotImplementedError"
ANSWER = "def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION"
TEST = "assert double(2) == 4\n### BEGIN HIDDEN TESTS\nassert double(-1) == -2\n### END HIDDEN TESTS"


def meta(grade_id: str, **flags) -> dict:
    """Cell metadata as nbgrader writes it (schema 3), with ``flags`` (grade, solution, points) set."""
    nbgrader = {"grade": False, "solution": False, "locked": False, "grade_id": grade_id, "schema_version": 3,
                "task": False, **flags}
    return {"nbgrader": nbgrader}


def source_notebook(answer: str = ANSWER, test: str = TEST):
    """An instructor's notebook of one part: set-up, an answer cell, its test cell (1 point)."""
    return new_notebook(cells=[
        new_markdown_cell("# Doubling", metadata=meta("intro", locked=True)),
        new_code_cell(answer, metadata=meta("double", solution=True)),
        new_code_cell(test, metadata=meta("test_double", grade=True, locked=True, points=1.0)),
    ])


def submission(answer: str):
    """A student's notebook of :func:`source_notebook` with ``answer`` in its answer cell."""
    student = release(source_notebook())
    student.cells[1].source = answer
    return student


def course(**options) -> dict:
    """:func:`clearing_options` of a course whose ``nbgrader_config.py`` sets ``options``, e.g. ``ClearSolutions={...}``."""
    config = Config()
    for section, values in options.items():
        for name, value in values.items():
            config[section][name] = value
    return clearing_options(config)


# --------------------------------------------------------------------------------------
# nbgrader's defaults
# --------------------------------------------------------------------------------------


def test_the_default_stub_replaces_a_solution_keeping_its_indentation():
    cell = release(source_notebook()).cells[1]
    assert cell.source == "def double(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()"
    compile(cell.source, "<answer>", "exec")


def test_a_solution_cell_without_a_region_is_replaced_whole_as_nbgrader_does():
    assert release(source_notebook(answer="def double(x):\n    return 2 * x")).cells[1].source == DEFAULT_STUB


@pytest.mark.parametrize("answer, unanswered", [
    pytest.param("def double(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()", True, id="as released"),
    pytest.param("def double(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()\n\n", True, id="blank lines"),
    pytest.param("def double(x):\n    return x + x", False, id="answered"),
])
def test_an_answer_left_as_released_is_unanswered(answer, unanswered):
    assert assemble(source_notebook(), submission(answer)).unanswered == {"double": unanswered}


def test_hidden_tests_are_taken_out_of_what_a_test_cell_shows_and_kept_where_it_runs():
    source = source_notebook(test="assert double(2) == 4\nfor x in range(3):\n    assert double(x) >= 0\n"
                                  "    ### BEGIN HIDDEN TESTS\n    assert double(x) == x + x\n    ### END HIDDEN TESTS\n"
                                  "print('done')")
    assembled = assemble(source, submission("def double(x):\n    return x + x"))
    test = assembled.roles.index("test")
    assert assembled.shown == {test: "assert double(2) == 4\nfor x in range(3):\n    assert double(x) >= 0\nprint('done')"}
    assert "assert double(x) == x + x" in assembled.notebook.cells[test].source, "the graded notebook runs them"


def test_a_test_cell_without_hidden_tests_is_shown_as_it_is():
    assembled = assemble(source_notebook(test="assert double(2) == 4\n"), submission("x = 1"))
    assert list(assembled.shown.values()) == ["assert double(2) == 4\n"]


def test_the_source_itself_is_left_unchanged():
    source = source_notebook()
    before = json.dumps(source)
    release(source)
    assemble(source, submission("x = 1"))
    assert json.dumps(source) == before


# --------------------------------------------------------------------------------------
# A course's own stub and delimiters
# --------------------------------------------------------------------------------------


def test_a_course_stub_marks_a_cell_left_as_released_unanswered():
    clearing = course(ClearSolutions={"code_stub": {"python": COURSE_STUB}})
    left = "def double(x):\n    # your code here\n    raise NotImplementedError"
    assert release(source_notebook(), clearing).cells[1].source == left
    assert assemble(source_notebook(), submission(left), clearing).unanswered == {"double": True}
    assert assemble(source_notebook(), submission(left)).unanswered == {"double": False}, "nbgrader's stub is not it"


def test_a_course_stub_given_as_a_string_is_read_as_nbgrader_reads_it():
    assert course(ClearSolutions={"code_stub": COURSE_STUB})["ClearSolutions"]["code_stub"] == {"python": COURSE_STUB}


def test_course_delimiters_mark_the_solutions_and_the_hidden_tests():
    clearing = course(ClearSolutions={"begin_solution_delimeter": "<<< answer", "end_solution_delimeter": ">>> answer"},
                      ClearHiddenTests={"begin_test_delimeter": "<<< secret", "end_test_delimeter": ">>> secret"})
    source = source_notebook(answer="def double(x):\n    # <<< answer\n    return 2 * x\n    # >>> answer",
                             test="assert double(2) == 4\n# <<< secret\nassert double(-1) == -2\n# >>> secret")
    released = release(source, clearing)
    assert released.cells[1].source == "def double(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()"
    assert released.cells[2].source == "assert double(2) == 4"
    assembled = assemble(source, submission(released.cells[1].source), clearing)
    assert assembled.unanswered == {"double": True}
    assert list(assembled.shown.values()) == ["assert double(2) == 4"]


def test_the_clearing_options_are_plain_data_for_a_worker():
    clearing = course(ClearSolutions={"code_stub": {"python": COURSE_STUB}})
    assert json.loads(json.dumps(clearing)) == clearing == pickle.loads(pickle.dumps(clearing))
    assert clearing["ClearSolutions"]["begin_solution_delimeter"] == "BEGIN SOLUTION"
    assert clearing["ClearHiddenTests"]["end_test_delimeter"] == "END HIDDEN TESTS"


# --------------------------------------------------------------------------------------
# A source nbgrader refuses to release
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("answer, test, cell, why", [
    pytest.param("def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x", TEST, "cell 2 (double)",
                 "no end solution statement found", id="no END SOLUTION"),
    pytest.param(ANSWER, "assert double(2) == 4\n### BEGIN HIDDEN TESTS\nassert double(-1) == -2", "cell 3 (test_double)",
                 "No end hidden tests statement found", id="no END HIDDEN TESTS"),
    pytest.param("### BEGIN SOLUTION\n### BEGIN SOLUTION\nx = 1\n### END SOLUTION", TEST, "cell 2 (double)",
                 "nested begin solution", id="nested"),
])
def test_a_region_without_its_end_is_an_error_naming_the_cell(answer, test, cell, why):
    with pytest.raises(BrokenSource, match=rf"^{re.escape(cell)} .*{why}"):
        release(source_notebook(answer, test))
    with pytest.raises(BrokenSource, match=why):
        assemble(source_notebook(answer, test), submission("x = 1"))


def test_a_solution_outside_an_answer_cell_is_an_error_unless_the_course_allows_it():
    source = source_notebook()
    source.cells.insert(1, new_code_cell("### BEGIN SOLUTION\nsecret = 1\n### END SOLUTION"))
    with pytest.raises(BrokenSource, match="cell 2 .*non-solution cell"):
        release(source)
    lenient = course(ClearSolutions={"enforce_metadata": False})
    assert release(source, lenient).cells[1].source == DEFAULT_STUB


def test_a_broken_source_is_the_instructors_error_not_a_submissions(tmp_path):
    path = tmp_path / "doubling.ipynb"
    path.write_text(json.dumps(submission("def double(x):\n    return x + x")))
    broken = source_notebook(answer="def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x")
    with pytest.raises(BrokenSource, match="cell 2 [(]double[)]"):
        grade_submission(broken, path, Limits(sandbox=False), key="unused")


# --------------------------------------------------------------------------------------
# What is taken of a submission: bounded in cells and in code
# --------------------------------------------------------------------------------------


def test_cells_of_the_students_own_past_the_bound_are_not_read_and_the_rest_is(tmp_path):
    """Added cells of any kind and copies of the source's count; the source's cells are read wherever they are."""
    student = submission("def double(x):\n    return x + x")
    answer, test = student.cells[1], student.cells[2]
    copied = new_code_cell(test.source, metadata=test.metadata)
    added = [new_code_cell(f"x = {i}") for i in range(6)] + [new_markdown_cell("a note")]
    student.cells = [student.cells[0], *added, answer, test, copied, new_code_cell("double = None")]
    path = tmp_path / "doubling.ipynb"
    path.write_text(json.dumps(student))
    read, limited = read_bounded(path, source_notebook(), added_cells=4)
    assert [c.source for c in read.cells] == ["# Doubling", "x = 0", "x = 1", "x = 2", "x = 3", answer.source,
                                             test.source]
    assert limited == ["9 cells added to the notebook, more than the 4 read: the last 5 were left out (not run, "
                       "not shown)"]
    assert read_bounded(path, source_notebook(), added_cells=9) == (read_submission(path), [])
    assert len(read_bounded(path)[0].cells) == 12, "without a bound, every cell is read"


def test_the_bound_on_cells_holds_for_an_nbformat_3_notebook(tmp_path):
    cell = {"cell_type": "code", "collapsed": False, "language": "python", "outputs": [], "metadata": {}}
    v3 = {"metadata": {"name": ""}, "nbformat": 3, "nbformat_minor": 0, "worksheets": [
        {"metadata": {}, "cells": [{**cell, "input": f"x = {i}"} for i in range(3)]},
        {"metadata": {}, "cells": [{**cell, "input": f"y = {i}"} for i in range(3)]}]}
    path = tmp_path / "old.ipynb"
    path.write_text(json.dumps(v3))
    read, limited = read_bounded(path, source_notebook(), added_cells=4)
    assert [c.source for c in read.cells] == ["x = 0", "x = 1", "x = 2", "y = 0"] and "the last 2" in limited[0]


def test_code_past_its_bound_is_left_out_from_the_cell_that_passes_it():
    """1 KiB: the added cell before the answer fits, the answer passes it, so it and the later cells are left out."""
    padding = "# " + "x" * 600 + "\n"
    student = submission(padding + "def double(x):\n    return x + x")
    student.cells[1:1] = [new_code_cell(padding + "y = 1")]
    student.cells.append(new_code_cell("z = 2"))
    assembled = assemble(source_notebook(), student, code_kb=1)
    assert [c.source for c in assembled.notebook.cells[1:]] == [padding + "y = 1", release(source_notebook()).cells[1].source,
                                                                TEST], "the stub as released, no later cell"
    assert assembled.roles == ["course", "extra", "answer", "test"]
    assert list(assembled.left_out) == [2] and "passed the 1 KiB taken of a notebook" in assembled.left_out[2]
    assert assembled.unanswered == {"double": False}, "answered, and left out"
    assert assembled.limited == ["the student's own code passes the 1 KiB taken of a notebook: answer cell `double` and "
                                 "1 added cell from there on were left out (not run, not shown)"]
    whole = assemble(source_notebook(), student, code_kb=2)
    assert (whole.left_out, whole.limited, whole.roles.count("extra")) == ({}, [], 2)
