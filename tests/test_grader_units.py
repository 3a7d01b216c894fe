"""Unit tests of the grading command's internals, without a kernel or nbgrader.

In the style of nbgrader's own ``nbgrader/tests/preprocessors/`` tests: small notebooks
built by hand with ``nbformat.v4`` and nbgrader metadata, fed to the functions that
assemble the notebook to grade (``notebooks.py``), scan student code (``scan.py``) and
turn cell outcomes into grades (``grade.py``). Cell outcomes are faked with
``CellResult``; nothing is executed, so every test takes milliseconds.
"""

from __future__ import annotations

import json

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from autograder.grading.grade import PartResult, _autograded, _judge
from autograder.grading.notebooks import (
    BLANK_ANSWER,
    UnreadableNotebook,
    assemble,
    blank_version,
    parts_of,
    read_submission,
    release_source,
)
from autograder.grading.run import CellResult
from autograder.grading.scan import scan

# --------------------------------------------------------------------------------------
# Building notebooks by hand
# --------------------------------------------------------------------------------------

DOUBLE = "def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION"
DOUBLE_BLANK = "def double(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()"
TEST_DOUBLE = (
    "assert double(2) == 4, 'double(2) should be 4'\n"
    "### BEGIN HIDDEN TESTS\n"
    "assert double(-3) == -6, 'secret: double(-3)'\n"
    "### END HIDDEN TESTS"
)
SQUARE = "def square(x):\n    ### BEGIN SOLUTION\n    return x * x\n    ### END SOLUTION"
TEST_SQUARE = (
    "assert square(3) == 9, 'square(3) should be 9'\n"
    "### BEGIN HIDDEN TESTS\n"
    "assert square(-4) == 16, 'secret: square(-4)'\n"
    "### END HIDDEN TESTS"
)
HIDDEN = ("BEGIN HIDDEN TESTS", "END HIDDEN TESTS", "secret:", "double(-3)", "square(-4)")

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


def source_notebook(setup: str = "import torch") -> nbformat.NotebookNode:
    """The instructor's notebook: two parts, ``double`` (2 points) and ``square`` (1 point)."""
    return new_notebook(cells=[
        course_cell("intro", "# Two functions", markdown=True),
        course_cell("setup", setup),
        answer_cell("double", DOUBLE),
        graded_cell("test_double", TEST_DOUBLE, points=2),
        answer_cell("square", SQUARE),
        graded_cell("test_square", TEST_SQUARE, points=1),
    ])


def released(source: nbformat.NotebookNode, **answers: str) -> nbformat.NotebookNode:
    """The student's copy of ``source`` (answers blank, hidden tests out), with ``answers``
    (by grade id) written in."""
    student = nbformat.from_dict(json.loads(json.dumps(source)))
    for cell in student.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = answers.get(grade_id, blank_version(cell.source))
        elif cell.metadata.get("nbgrader", {}).get("grade"):
            cell.source = release_source(cell.source)
    return student


def answered(**overrides: str) -> nbformat.NotebookNode:
    """A submission of :func:`source_notebook` with both parts answered correctly."""
    return released(source_notebook(), **{"double": "def double(x):\n    return x + x",
                                          "square": "def square(x):\n    return x ** 2", **overrides})


def index_of(cells, grade_id: str) -> int:
    """The position of the (first) cell with ``grade_id``."""
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in cells]
    return ids.index(grade_id)


def outcomes(assembled, by_index: dict[int, CellResult] | None = None) -> list[CellResult]:
    """One faked result per cell: ``ok`` for code, ``not run`` for text (as ``run.execute``
    reports them), except the cells of ``by_index``."""
    results = [CellResult("ok" if c.cell_type == "code" else "not run") for c in assembled.notebook.cells]
    for index, result in (by_index or {}).items():
        results[index] = result
    return results


def judged(assembled, results: list[CellResult]) -> dict[str, PartResult]:
    """Every part's verdict, by grade id."""
    verdicts = [_judge(assembled, results, i) for i, role in enumerate(assembled.roles) if role == "test"]
    return {v.part: v for v in verdicts}


# --------------------------------------------------------------------------------------
# assemble: the notebook to grade
# --------------------------------------------------------------------------------------


def test_answers_are_put_into_the_source_by_grade_id():
    source = source_notebook()
    submission = answered()
    # the student moved the square answer above everything: it is matched by id, not place
    square = submission.cells.pop(index_of(submission.cells, "square"))
    submission.cells.insert(0, square)
    assembled = assemble(source, submission)
    assert assembled.roles == ["course", "course", "answer", "test", "answer", "test"]
    assert assembled.notebook.cells[ANSWER_1].source == "def double(x):\n    return x + x"
    assert assembled.notebook.cells[ANSWER_2].source == "def square(x):\n    return x ** 2"
    assert [p.grade_id for p in assembled.parts] == ["test_double", "test_square"]
    assert assembled.unanswered == {"double": False, "square": False}
    assert not assembled.notes and not assembled.student_sources
    assert all(not p.tampered for p in assembled.parts)


def test_instructor_cells_come_from_the_source_with_their_outputs_cleared():
    source = source_notebook()
    source.cells[SETUP].outputs = [new_output("stream", name="stdout", text="stale\n")]
    source.cells[SETUP].execution_count = 7
    submission = answered()
    submission.cells[SETUP].source = "import torch\ntorch.manual_seed(0)  # the student edited a locked cell"
    submission.cells[INTRO].source = "# my notes"
    assembled = assemble(source, submission)
    assert assembled.notebook.cells[SETUP].source == "import torch"
    assert assembled.notebook.cells[SETUP].outputs == [] and assembled.notebook.cells[SETUP].execution_count is None
    assert assembled.notebook.cells[INTRO].source == "# Two functions"
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
    submission.cells.insert(TEST_1, new_code_cell("assert True  # test_double"))
    assembled = assemble(source_notebook(), submission)
    assert assembled.roles == ["course", "course", "answer", "extra", "test", "answer", "test"]
    assert assembled.notebook.cells[3].source == "assert True  # test_double"
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
    assert assembled.unanswered == {"double": True, "square": False}
    assert any("double" in note and "markdown" in note for note in assembled.notes)
    assert "extra" not in assembled.roles


def test_points_edited_in_the_submission_are_ignored():
    submission = answered()
    submission.cells[TEST_1].metadata["nbgrader"]["points"] = 100.0
    submission.cells[TEST_2].metadata["nbgrader"]["points"] = 0.0
    source = source_notebook()
    assembled = assemble(source, submission)
    assert [(p.grade_id, p.points) for p in assembled.parts] == [("test_double", 2.0), ("test_square", 1.0)]
    assert [(p.grade_id, p.points) for p in assembled.parts] == [(p.grade_id, p.points) for p in parts_of(source)]
    assert assembled.notebook.cells[TEST_1].metadata["nbgrader"]["points"] == 2.0


def test_cells_the_student_added_run_after_the_cell_they_followed():
    submission = answered()
    submission.cells.insert(ANSWER_1 + 1, new_code_cell("print(double(21))"))  # after the answer
    submission.cells.insert(0, new_code_cell("x = 1  # before everything"))
    submission.cells.append(new_code_cell("print(square(5))"))  # after the last test
    submission.cells.append(new_code_cell("   \n"))  # empty: dropped
    submission.cells.append(new_markdown_cell("my notes"))  # text: dropped
    assembled = assemble(source_notebook(), submission)
    assert assembled.roles == ["extra", "course", "course", "answer", "extra", "test", "answer", "test", "extra"]
    sources = [c.source for c in assembled.notebook.cells]
    assert sources[0] == "x = 1  # before everything"
    assert sources[4] == "print(double(21))"
    assert sources[8] == "print(square(5))"
    # an added cell belongs to the part whose test follows it
    assert assembled.part_of(4).grade_id == "test_double" and assembled.part_of(8) is None


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
    copy = answer_cell("double", "def double(x):\n    return 0  # second copy")
    submission.cells.insert(ANSWER_1 + 1, copy)
    assembled = assemble(source_notebook(), submission)
    assert assembled.roles == ["course", "course", "answer", "extra", "test", "answer", "test"]
    assert assembled.notebook.cells[ANSWER_1].source == "def double(x):\n    return x + x"
    assert assembled.notebook.cells[ANSWER_1 + 1].source == "def double(x):\n    return 0  # second copy"
    assert len(assembled.notes) == 1 and "double" in assembled.notes[0]


@pytest.mark.parametrize("student_answer, expected", [
    pytest.param(DOUBLE_BLANK, True, id="as released"),
    pytest.param(DOUBLE_BLANK + "\n\n", True, id="as released with blank lines"),
    pytest.param(None, True, id="deleted"),
    pytest.param("def double(x):\n    return 2 * x", False, id="answered"),
    pytest.param("def double(x):\n    # YOUR CODE HERE\n    return 2 * x", False, id="answered under the comment"),
    pytest.param("def double(x):\n    raise NotImplementedError()", False, id="changed stub"),
])
def test_unanswered_means_left_as_released(student_answer, expected):
    submission = released(source_notebook())
    if student_answer is None:
        del submission.cells[ANSWER_1]
    else:
        submission.cells[ANSWER_1].source = student_answer
    assembled = assemble(source_notebook(), submission)
    assert assembled.unanswered["double"] is expected
    assert assembled.unanswered["square"] is True
    if student_answer is None:
        assert assembled.notebook.cells[ANSWER_1].source == DOUBLE_BLANK


def test_the_released_notebook_is_unanswered_everywhere():
    assembled = assemble(source_notebook(), released(source_notebook()))
    assert assembled.unanswered == {"double": True, "square": True}
    assert assembled.notebook.cells[ANSWER_1].source == DOUBLE_BLANK


def test_tampering_in_an_answer_replaces_it_by_the_stub_and_marks_its_part():
    tampering = "def double(x):\n    return 2 * x\ntorch.allclose = lambda *a, **k: True"
    assembled = assemble(source_notebook(setup="import torch"), answered(double=tampering))
    assert assembled.notebook.cells[ANSWER_1].source == DOUBLE_BLANK
    assert assembled.student_sources == {ANSWER_1: tampering}
    first, second = assembled.parts
    assert "line 3" in first.tampered and "torch.allclose" in first.tampered
    assert f"cell {ANSWER_1 + 1}" in first.tampered
    assert second.tampered == "", "only the part the cell belongs to is tampered"


def test_tampering_in_the_second_answer_marks_only_the_second_part():
    tampering = "import autograder\n\ndef square(x):\n    return x * x"
    assembled = assemble(source_notebook(), answered(square=tampering))
    first, second = assembled.parts
    assert first.tampered == ""
    assert "line 1" in second.tampered and "autograder" in second.tampered
    assert assembled.notebook.cells[ANSWER_2].source == blank_version(SQUARE)
    assert assembled.student_sources == {ANSWER_2: tampering}


def test_tampering_in_an_added_cell_marks_the_following_part():
    submission = answered()
    submission.cells.insert(TEST_1 + 1, new_code_cell("x = 1\nimport inspect"))  # after test_double
    assembled = assemble(source_notebook(), submission)
    extra = assembled.roles.index("extra")
    assert extra == TEST_1 + 1
    assert assembled.notebook.cells[extra].source == "", "a flagged added cell runs nothing"
    assert assembled.student_sources == {extra: "x = 1\nimport inspect"}
    first, second = assembled.parts
    assert first.tampered == ""
    assert "line 2" in second.tampered and "inspect" in second.tampered


def test_module_names_bound_by_the_instructors_set_up_count_as_modules():
    setup = "import torch\nfrom autograder import ch03_masking as checks"
    tampering = "def double(x):\n    return 2 * x\nchecks.check_double = lambda f: None"
    assert scan(tampering) == [], "alone, `checks` is not known to be a module"
    assembled = assemble(source_notebook(setup=setup), answered(double=tampering))
    assert "line 3" in assembled.parts[0].tampered and "checks" in assembled.parts[0].tampered
    assert not assemble(source_notebook(setup=setup), answered()).parts[0].tampered, "the set-up itself is not scanned"


# --------------------------------------------------------------------------------------
# release_source and blank_version
# --------------------------------------------------------------------------------------


def test_release_source_takes_the_hidden_tests_out():
    cell = ("x = 1\nassert x == 1\n"
            "### BEGIN HIDDEN TESTS\nassert x != 2\nassert x > 0\n### END HIDDEN TESTS\n"
            "print('done')\n")
    assert release_source(cell) == "x = 1\nassert x == 1\nprint('done')"
    assert release_source(TEST_DOUBLE) == "assert double(2) == 4, 'double(2) should be 4'"
    assert all(marker not in release_source(TEST_DOUBLE) for marker in HIDDEN)


def test_release_source_keeps_a_cell_without_hidden_tests():
    visible = "assert double(2) == 4\nassert double(0) == 0"
    assert release_source(visible) == visible
    assert release_source(visible + "\n\n") == visible, "trailing blank lines go"


def test_release_source_handles_indented_hidden_blocks():
    cell = ("for x in range(3):\n    assert x >= 0\n"
            "    ### BEGIN HIDDEN TESTS\n    assert x < 3\n    ### END HIDDEN TESTS")
    assert release_source(cell) == "for x in range(3):\n    assert x >= 0"


def test_blank_version_keeps_the_indentation_of_the_stub():
    assert blank_version(DOUBLE) == DOUBLE_BLANK
    compile(blank_version(DOUBLE), "<answer>", "exec")  # still valid Python


def test_blank_version_at_top_level_and_with_two_solutions():
    assert blank_version("### BEGIN SOLUTION\nx = 1\n### END SOLUTION") == BLANK_ANSWER
    cell = ("class Model:\n"
            "    def __init__(self):\n"
            "        ### BEGIN SOLUTION\n        self.w = 1\n        ### END SOLUTION\n"
            "\n"
            "    def forward(self, x):\n"
            "        ### BEGIN SOLUTION\n        return self.w * x\n        ### END SOLUTION\n")
    blank = blank_version(cell)
    assert blank == ("class Model:\n"
                     "    def __init__(self):\n"
                     "        # YOUR CODE HERE\n        raise NotImplementedError()\n"
                     "\n"
                     "    def forward(self, x):\n"
                     "        # YOUR CODE HERE\n        raise NotImplementedError()\n")
    compile(blank, "<answer>", "exec")


def test_blank_version_of_a_cell_without_a_solution_is_the_cell():
    assert blank_version("def f(x):\n    return x") == "def f(x):\n    return x"


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
    assert submission.cells[ANSWER_1].source == "def double(x):\n    return x + x"


def test_read_submission_upgrades_an_nbformat_3_notebook(tmp_path):
    v3 = {
        "metadata": {"name": ""}, "nbformat": 3, "nbformat_minor": 0,
        "worksheets": [{"metadata": {}, "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": ["# Two functions"]},
            {"cell_type": "code", "collapsed": False, "language": "python", "outputs": [],
             "metadata": nbgrader("double", solution=True),
             "input": ["def double(x):\n", "    return x + x"]},
        ]}],
    }
    path = tmp_path / "old.ipynb"
    path.write_text(json.dumps(v3), encoding="utf-8")
    submission = read_submission(path)
    assert submission.nbformat == 4
    assert [c.cell_type for c in submission.cells] == ["markdown", "code"]
    assert submission.cells[1].source == "def double(x):\n    return x + x"
    # and its answer is found by grade id
    assembled = assemble(source_notebook(), submission)
    assert assembled.notebook.cells[ANSWER_1].source == "def double(x):\n    return x + x"
    assert assembled.unanswered == {"double": False, "square": True}


# --------------------------------------------------------------------------------------
# scan: what student code may not do
# --------------------------------------------------------------------------------------

FORBIDDEN = {
    "rebinding torch.allclose": "import torch\ntorch.allclose = lambda *a, **k: True",
    "rebinding through an import alias": "import torch.testing as tt\ntt.assert_close = lambda *a, **k: None",
    "augmented assignment to a module attribute": "import math\nmath.pi += 1",
    "deleting a module attribute": "import torch\ndel torch.allclose",
    "rebinding a tensor method": "import torch\ntorch.Tensor.__eq__ = lambda self, other: True",
    "subscript into a module": "import torch\ntorch.testing.__all__[0] = 'x'",
    "setattr through an alias": "import torch as t\nsetattr(t, 'allclose', lambda *a, **k: True)",
    "delattr on a module": "import torch\ndelattr(torch, 'allclose')",
    "exec": "exec('x = 1')",
    "eval": "y = eval('1 + 1')",
    "compile": "code = compile('x = 1', '<s>', 'exec')",
    "__import__": "os = __import__('os')",
    "globals()": "globals()['double'] = print",
    "vars()": "vars()['double'] = print",
    "__builtins__": "__builtins__.print = None",
    "breakpoint": "breakpoint()",
    "sys.modules": "import sys\nsys.modules['torch'].allclose",
    "sys._getframe": "import sys\nframe = sys._getframe(1)",
    "sys.settrace": "import sys\nsys.settrace(None)",
    "sys.meta_path": "import sys\nsys.meta_path.insert(0, object())",
    "frame f_back": "def f(frame):\n    return frame.f_back",
    "frame f_globals": "def f(frame):\n    return frame.f_globals",
    "traceback tb_frame": "try:\n    1 / 0\nexcept ZeroDivisionError as e:\n    frame = e.__traceback__.tb_frame",
    "__globals__": "def f():\n    pass\ng = f.__globals__",
    "__code__": "def f():\n    pass\nf.__code__ = (lambda: 1).__code__",
    "__dict__": "import torch\nd = torch.__dict__",
    "__subclasses__": "classes = object.__subclasses__()",
    "import autograder": "import autograder",
    "import a submodule of autograder": "import autograder.core",
    "from autograder import ch03_masking": "from autograder import ch03_masking",
    "from autograder.grading import guard": "from autograder.grading import guard",
    "import inspect": "import inspect",
    "import ctypes": "import ctypes",
    "import builtins": "import builtins",
    "import gc": "import gc",
    "import importlib": "import importlib",
    "from IPython import get_ipython": "from IPython import get_ipython",
    "get_ipython()": "shell = get_ipython()",
    "as_subclass": "import torch\nx = torch.zeros(1).as_subclass(torch.Tensor)",
    "_make_subclass": "import torch\nx = torch.Tensor._make_subclass(torch.Tensor, torch.zeros(1))",
    "a class deriving from torch.Tensor": "import torch\nclass Always(torch.Tensor):\n    pass",
    "a class deriving from Tensor": "from torch import Tensor\nclass Always(Tensor):\n    pass",
    "defining __torch_function__": (
        "class Always:\n"
        "    @classmethod\n"
        "    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
        "        return True"
    ),
    "reading __torch_function__": "import torch\nf = torch.Tensor.__torch_function__",
    "inside a function body": "def double(x):\n    import torch\n    torch.allclose = None\n    return 2 * x",
}


@pytest.mark.parametrize("code", FORBIDDEN.values(), ids=FORBIDDEN.keys())
def test_scan_flags_tampering(code):
    findings = scan(code)
    assert findings, f"not flagged:\n{code}"
    assert all(finding.startswith("line ") for finding in findings)


def test_scan_names_the_line_and_the_construct():
    code = "def double(x):\n    return 2 * x\n\ntorch.allclose = lambda *a, **k: True\n"
    findings = scan(code)
    assert len(findings) == 1
    assert findings[0].startswith("line 4:") and "torch.allclose" in findings[0]
    assert scan("x = 1\ny = eval('2')")[0].startswith("line 2:")


def test_scan_knows_the_modules_of_the_notebook():
    code = "checks.check_double = lambda f: None"
    assert scan(code) == []
    assert scan(code, {"checks"}), "a module imported in the set-up cell must not be changed either"


ORDINARY = {
    "masked softmax with masked_fill": (
        "import torch\n"
        "def masked_softmax(X, valid_lens):\n"
        "    if valid_lens is None:\n"
        "        return torch.softmax(X, dim=-1)\n"
        "    k = X.shape[-1]\n"
        "    mask = torch.arange(k, device=X.device)[None, None, :] < valid_lens.reshape(X.shape[0], -1, 1)\n"
        "    X = X.masked_fill(~mask, float('-inf'))\n"
        "    weights = torch.softmax(X, dim=-1)\n"
        "    return torch.nan_to_num(weights, nan=0.0)\n"
    ),
    "sys.exit()": "import sys\nif False:\n    sys.exit()",
    "list comprehension": "squares = [x * x for x in range(10) if x % 2]\npairs = {k: v for k, v in zip('ab', [1, 2])}",
    "a class deriving from nn.Module": (
        "import torch\nfrom torch import nn\n"
        "class AdditiveAttention(nn.Module):\n"
        "    def __init__(self, num_hiddens, dropout=0.0):\n"
        "        super().__init__()\n"
        "        self.W_k = nn.LazyLinear(num_hiddens, bias=False)\n"
        "        self.w_v = nn.LazyLinear(1, bias=False)\n"
        "        self.dropout = nn.Dropout(dropout)\n"
        "    def forward(self, queries, keys, values):\n"
        "        features = torch.tanh(queries.unsqueeze(2) + self.W_k(keys).unsqueeze(1))\n"
        "        self.attention_weights = torch.softmax(self.w_v(features).squeeze(-1), dim=-1)\n"
        "        return torch.bmm(self.dropout(self.attention_weights), values)\n"
    ),
    "math.sqrt": "import math\nscale = 1 / math.sqrt(64)",
    "f-string": "name, value = 'd', 8\nmessage = f'{name} = {value:.2f} ({value!r})'",
    "indexing and assigning a tensor": "import torch\nX = torch.zeros(3, 3)\nX[0, :] = 1\nX[X > 0] += 2",
    "a local named like nothing forbidden": "frame = 3\nback = frame + 1\nmodules = ['a']",
    "calling torch functions with keywords": "import torch\nY = torch.nn.functional.softmax(torch.ones(2), dim=0)",
    "a lambda and sorted": "order = sorted([3, 1, 2], key=lambda x: -x)",
    "getattr on an ordinary object": "class A:\n    size = 2\nn = getattr(A(), 'size', 0)",
    "try/except with a message": "try:\n    1 / 0\nexcept ZeroDivisionError as error:\n    print(f'oops: {error}')",
}


@pytest.mark.parametrize("code", ORDINARY.values(), ids=ORDINARY.keys())
def test_scan_passes_ordinary_answers(code):
    compile(code, "<answer>", "exec")  # the examples themselves are valid Python
    assert scan(code) == []


def test_scan_leaves_syntax_errors_to_the_student():
    code = "def double(x)\n    exec('return 2 * x')"  # missing colon, and exec
    with pytest.raises(SyntaxError):
        compile(code, "<answer>", "exec")
    assert scan(code) == []


#: Ways around the first version of the scan, found by these tests and closed since.
CLOSED_GAPS = {
    "a module rebound through a plain assignment": "import torch\nt = torch\nt.allclose = lambda *a, **k: True",
    "object.__setattr__ on a module": "import torch\nobject.__setattr__(torch, 'allclose', lambda *a, **k: True)",
    "a forbidden attribute read with getattr": "def f():\n    pass\ng = getattr(f, '__globals__')",
    "sys under another name": "import sys as s\nframe = s._getframe(1)",
    "from sys import modules": "from sys import modules\nchecks = modules['autograder.ch03_masking']",
    "a Tensor subclass made with type()": "import torch\nAlways = type('Always', (torch.Tensor,), {})",
}


@pytest.mark.parametrize("code", CLOSED_GAPS.values(), ids=CLOSED_GAPS.keys())
def test_scan_closed_gaps(code):
    compile(code, "<answer>", "exec")
    assert scan(code), f"not flagged:\n{code}"


# --------------------------------------------------------------------------------------
# _judge: from cell outcomes to a grade per part
# --------------------------------------------------------------------------------------


@pytest.fixture
def two_parts():
    """An assembled two-part notebook, both parts answered."""
    assembled = assemble(source_notebook(), answered())
    assert assembled.roles == ["course", "course", "answer", "test", "answer", "test"]
    return assembled


def test_every_part_passes_with_its_points(two_parts):
    verdicts = judged(two_parts, outcomes(two_parts))
    assert verdicts == {
        "test_double": PartResult("test_double", 2.0, 2.0, "passed", ""),
        "test_square": PartResult("test_square", 1.0, 1.0, "passed", ""),
    }


def test_a_failed_assertion_fails_with_its_message(two_parts):
    results = outcomes(two_parts, {TEST_1: CellResult("error", "AssertionError: double(2) should be 4")})
    verdicts = judged(two_parts, results)
    assert verdicts["test_double"] == PartResult("test_double", 0.0, 2.0, "failed", "double(2) should be 4")
    assert verdicts["test_square"].status == "passed", "one part's failure costs the other nothing"


def test_an_assertion_without_a_message_fails(two_parts):
    verdicts = judged(two_parts, outcomes(two_parts, {TEST_2: CellResult("error", "AssertionError: ")}))
    assert (verdicts["test_square"].status, verdicts["test_square"].score) == ("failed", 0.0)


def test_a_stub_left_in_place_fails_as_not_answered(two_parts):
    results = outcomes(two_parts, {TEST_1: CellResult("error", "NotImplementedError: ")})
    verdict = judged(two_parts, results)["test_double"]
    assert (verdict.status, verdict.score) == ("failed", 0.0)
    assert "not answered" in verdict.message


@pytest.mark.parametrize("message", ["NameError: name 'double' is not defined", "TypeError: unsupported operand",
                                     "RuntimeError: shape mismatch"])
def test_any_other_exception_is_an_error(two_parts, message):
    verdict = judged(two_parts, outcomes(two_parts, {TEST_1: CellResult("error", message)}))["test_double"]
    assert verdict == PartResult("test_double", 0.0, 2.0, "error", message)


def test_a_test_cell_that_runs_out_of_time_is_a_timeout(two_parts):
    results = outcomes(two_parts, {TEST_2: CellResult("timeout", "the cell ran longer than 30 s")})
    verdicts = judged(two_parts, results)
    assert verdicts["test_square"] == PartResult("test_square", 0.0, 1.0, "timeout", "the cell ran longer than 30 s")
    assert verdicts["test_double"].status == "passed"


def test_an_answer_cell_that_runs_out_of_time_makes_its_part_a_timeout(two_parts):
    # the test cell itself "passed" on the replayed kernel: the answer's timeout decides
    results = outcomes(two_parts, {ANSWER_1: CellResult("timeout", "the cell ran longer than 30 s")})
    verdicts = judged(two_parts, results)
    assert verdicts["test_double"].status == "timeout" and verdicts["test_double"].score == 0.0
    assert "an answer cell" in verdicts["test_double"].message and "30 s" in verdicts["test_double"].message
    assert verdicts["test_square"].status == "passed", "the next part is judged on its own cells"


def test_an_answer_cell_that_kills_the_kernel_makes_its_part_an_error(two_parts):
    results = outcomes(two_parts, {ANSWER_2: CellResult("died", "the kernel died while running this cell")})
    verdicts = judged(two_parts, results)
    assert verdicts["test_square"].status == "error" and "kernel died" in verdicts["test_square"].message
    assert verdicts["test_double"].status == "passed"


@pytest.mark.parametrize("audit", ["changed: torch.allclose", "changed: builtins.AssertionError, torch.Tensor.__eq__",
                                   "audit failed: NameError"])
def test_a_test_cell_whose_audit_is_not_clean_is_tampered(two_parts, audit):
    results = outcomes(two_parts, {TEST_1: CellResult("ok", audit=audit)})
    verdicts = judged(two_parts, results)
    assert (verdicts["test_double"].status, verdicts["test_double"].score) == ("tampered", 0.0)
    assert audit.removeprefix("changed: ") in verdicts["test_double"].message
    assert verdicts["test_square"].status == "passed"


def test_a_failing_test_cell_whose_audit_is_not_clean_is_tampered(two_parts):
    results = outcomes(two_parts, {TEST_2: CellResult("error", "AssertionError: no", audit="changed: torch.allclose")})
    assert judged(two_parts, results)["test_square"].status == "tampered"


def test_a_tampered_part_is_tampered_whatever_its_cells_did():
    tampering = "def square(x):\n    return x * x\nimport ctypes"
    assembled = assemble(source_notebook(), answered(square=tampering))
    verdicts = judged(assembled, outcomes(assembled))  # every cell "ok"
    assert verdicts["test_square"].status == "tampered" and verdicts["test_square"].score == 0.0
    assert verdicts["test_square"].max_score == 1.0
    assert "not run" in verdicts["test_square"].message and "ctypes" in verdicts["test_square"].message
    assert verdicts["test_double"] == PartResult("test_double", 2.0, 2.0, "passed", "")


def test_an_answer_cell_error_is_named_in_the_message(two_parts):
    results = outcomes(two_parts, {ANSWER_1: CellResult("error", "SyntaxError: invalid syntax (line 2)"),
                                   TEST_1: CellResult("error", "NameError: name 'double' is not defined")})
    verdicts = judged(two_parts, results)
    message = verdicts["test_double"].message
    assert verdicts["test_double"].status == "error"
    assert message.startswith("NameError: name 'double' is not defined")
    assert "an answer cell raised SyntaxError: invalid syntax (line 2)" in message


def test_an_answer_cell_error_of_another_part_is_not_named(two_parts):
    results = outcomes(two_parts, {ANSWER_1: CellResult("error", "SyntaxError: invalid syntax"),
                                   TEST_2: CellResult("error", "AssertionError: square(3) should be 9")})
    verdicts = judged(two_parts, results)
    assert verdicts["test_square"].message == "square(3) should be 9"


def test_an_answer_cell_error_does_not_matter_if_the_test_passes(two_parts):
    results = outcomes(two_parts, {ANSWER_1: CellResult("error", "ValueError: a print that failed")})
    assert judged(two_parts, results)["test_double"].status == "passed"


def test_added_cells_count_with_the_part_they_precede():
    submission = answered()
    submission.cells.insert(ANSWER_1 + 1, new_code_cell("while True: pass"))
    assembled = assemble(source_notebook(), submission)
    extra = assembled.roles.index("extra")
    results = outcomes(assembled, {extra: CellResult("timeout", "the cell ran longer than 30 s")})
    verdicts = judged(assembled, results)
    assert verdicts["test_double"].status == "timeout"
    assert verdicts["test_square"].status == "passed"


# --------------------------------------------------------------------------------------
# _autograded: the notebook stored for the formgrader and the student's feedback
# --------------------------------------------------------------------------------------


def autograded_of(assembled, results):
    verdicts = [_judge(assembled, results, i) for i, role in enumerate(assembled.roles) if role == "test"]
    return _autograded(assembled, results, verdicts), verdicts


def errors(cell) -> list:
    return [o for o in cell.outputs if o.get("output_type") == "error"]


def test_hidden_tests_never_reach_the_autograded_notebook(two_parts):
    # the kernel's own traceback of a failed hidden test quotes its code
    two_parts.notebook.cells[TEST_1].outputs = [new_output(
        "error", ename="AssertionError", evalue="secret: double(-3)",
        traceback=["assert double(-3) == -6, 'secret: double(-3)'", "AssertionError: secret: double(-3)"])]
    results = outcomes(two_parts, {TEST_1: CellResult("error", "AssertionError: secret: double(-3)")})
    autograded, _ = autograded_of(two_parts, results)
    for index in (TEST_1, TEST_2):
        cell = autograded.cells[index]
        assert all(marker not in cell.source for marker in HIDDEN)
        assert cell.source.startswith("assert "), "the visible tests stay"
        assert "BEGIN HIDDEN TESTS" in two_parts.notebook.cells[index].source, "the assembled notebook is not changed"
    # the hidden test's code is nowhere, not even in a traceback
    text = nbformat.writes(autograded)
    assert "double(-3) == -6" not in text and "square(-4)" not in text
    nbformat.validate(autograded)


def test_a_failed_part_gets_an_error_output_with_its_message(two_parts):
    results = outcomes(two_parts, {TEST_1: CellResult("error", "AssertionError: double(2) should be 4")})
    autograded, verdicts = autograded_of(two_parts, results)
    [error] = errors(autograded.cells[TEST_1])
    assert (error.ename, error.evalue) == ("failed", "double(2) should be 4")
    assert any("double(2) should be 4" in line for line in error.traceback)
    assert errors(autograded.cells[TEST_2]) == [], "a passed part shows no error"


def test_every_status_other_than_passed_shows_as_an_error(two_parts):
    results = outcomes(two_parts, {TEST_1: CellResult("timeout", "the cell ran longer than 30 s"),
                                   TEST_2: CellResult("ok", audit="changed: torch.allclose")})
    autograded, _ = autograded_of(two_parts, results)
    assert [e.ename for e in errors(autograded.cells[TEST_1])] == ["timeout"]
    [tampered] = errors(autograded.cells[TEST_2])
    assert tampered.ename == "tampered" and "torch.allclose" in tampered.evalue


def test_a_flagged_cell_shows_what_the_student_wrote_and_why_it_did_not_run():
    tampering = "def double(x):\n    return 2 * x\ntorch.allclose = lambda *a, **k: True"
    assembled = assemble(source_notebook(), answered(double=tampering))
    autograded, verdicts = autograded_of(assembled, outcomes(assembled))
    cell = autograded.cells[ANSWER_1]
    assert cell.source == tampering
    assert any("not run" in o.get("text", "") for o in cell.outputs)
    assert [e.ename for e in errors(autograded.cells[TEST_1])] == ["tampered"]
    assert errors(autograded.cells[TEST_2]) == []
    assert assembled.notebook.cells[ANSWER_1].source == DOUBLE_BLANK, "what ran stays the stub"


def test_an_answer_cell_that_ran_out_of_time_says_so():
    assembled = assemble(source_notebook(), answered())
    results = outcomes(assembled, {ANSWER_2: CellResult("timeout", "the cell ran longer than 30 s")})
    autograded, _ = autograded_of(assembled, results)
    assert any("30 s" in o.get("text", "") for o in autograded.cells[ANSWER_2].outputs)
    assert not any("30 s" in o.get("text", "") for o in autograded.cells[ANSWER_1].outputs)
