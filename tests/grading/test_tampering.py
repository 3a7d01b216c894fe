"""What decides points cannot be forged from inside the kernel: the grader's scan, "needs a look", library attention.

In the style of nbgrader's preprocessor tests: small cells and notebooks built by hand, fed
to the scan of a submission's own cells (``grading/tampering.py``), to the verdict that
withholds the points a tampering kernel could have forged (``grading/verdict.py``), and to
the tripwires that see library attention at the level of PyTorch's operators
(``kernel/measure.py``: ``tripwires``). The crafted submissions graded by the real command are in
``submissions.py`` (section 13).
"""

from __future__ import annotations

import math
from pathlib import Path

import nbformat
import pytest
import torch
import torch.nn.functional as F
from nbformat.v4 import new_code_cell
from test_grader_units import ANSWER_1, RIGHT_SQUARE, WRONG_DOUBLE, answered, graded, index_of, source_notebook

from autograder import ch03_masking
from autograder.grading.notebooks import assemble
from autograder.grading.tampering import scan, scan_source
from autograder.instructor.grade import GradeReport, summary
from autograder.judge import kernel_reports
from autograder.kernel.measure import tripwires
from autograder.parts import ArgumentCheck, Part

ROOT = Path(__file__).resolve().parents[2]

# --------------------------------------------------------------------------------------
# The scan of one cell
# --------------------------------------------------------------------------------------

FLAGGED = {
    "respondent replaced": ("import autograder.kernel.serve as r\nr.respond = lambda *a, **k: None", 2, "autograder.kernel.serve.respond"),
    "from-import then assignment": ("from autograder.kernel import serve\nserve.serve = print", 2, "autograder.kernel.serve.serve"),
    "augmented assignment": ("from autograder import ch03_masking as c\nc.CHAPTER += 'x'", 2, "autograder.ch03_masking"),
    "deleted": ("import autograder.judge\ndel autograder.judge.judge", 2, "deletes"),
    "setattr through sys.modules": ("import sys\nsetattr(sys.modules['autograder.kernel.measure'], 'tripwires', print)", 2,
                                    "autograder.kernel.measure"),
    "vars() item": ("import autograder.kernel.serve as r\nvars(r)['respond'] = print", 2, "autograder.kernel.serve.respond"),
    "__dict__ update": ("import autograder.kernel.serve as r\nr.__dict__.update(respond=print)", 2, "changes"),
    "resolve_name": ("import pkgutil\nm = pkgutil.resolve_name('autograder.ch03_masking')", 2, "resolve_name"),
    "import_module": ("import importlib\nimportlib.import_module('autograder.judge')", 2, "import_module"),
    "__import__": ("__import__('autograder.kernel.serve')", 1, "__import__"),
    "a function's code swapped": ("f.__code__ = g.__code__", 1, "__code__"),
    "code swapped by setattr": ("setattr(f, '__code__', g.__code__)", 1, "__code__"),
    "getattr chain": ("import autograder\ngetattr(autograder.kernel, 'serve').respond = print", 2, "autograder.kernel.serve.respond"),
    "ATen operator": ("def f(q, k, v):\n    return torch.ops.aten._scaled_dot_product_attention_math(q, k, v)", 2,
                      "torch.ops"),
    "torch._C": ("import torch\nmode = torch._C._get_torch_function_mode()", 2, "torch._C"),
    "private module imported": ("from torch.utils._python_dispatch import TorchDispatchMode", 1, "torch.utils._python_dispatch"),
    "torch alias": ("import torch as t\nt._C._nn.scaled_dot_product_attention", 2, "torch._C"),
    "the kernel object": ("kernel = get_ipython().kernel", 1, "kernel object"),
    "the shell kept, then its kernel": ("shell = get_ipython()\nshell.kernel.do_execute = None", 2, "kernel object"),
    "IPKernelApp": ("from ipykernel.kernelapp import IPKernelApp", 1, "ipykernel"),
    "code in exec": ("exec('import autograder.kernel.serve as r\\nr.respond = 1')", 1, "autograder"),
    "a cell magic's body": ("%%time\nimport autograder.kernel.measure as c\nc.largest_tensor_created = len", 3,
                            "autograder.kernel.measure.largest_tensor_created"),
    "a cell that does not parse": ("def f(:\n    pass\ntorch._C._nn.x = 1", 3, "does not parse"),
}

NOT_FLAGGED = {
    "the checks imported and called": "from autograder import ch03_masking as checks\nchecks.check_causal_mask(causal_mask)",
    "import lines": "import torch.nn.functional as F\nimport autograder.ch03_masking\nfrom autograder.plots import use_course_style",
    "public library attention (the judge's affair)": "y = F.scaled_dot_product_attention(q, k, v)",
    "dunder and tensor attributes": "print(torch.__version__)\nx = torch.zeros(2)\nx._version\nx.grad = None",
    "magics and shell escapes": "%matplotlib inline\n!ls\nget_ipython().run_line_magic('time', 'x = 1')",
    "a comment": "# torch._C and autograder.kernel.serve.respond = 1 in a comment\nx = 1",
    "the student's own names": "respond = 1\nrespond.x = 2\nkernel = 3\ncode = f.__code__",
    "a name rebound": "import autograder.kernel.serve as r\nr = object()\nr.respond = 1",
    "a cell that does not parse, but only imports": "from autograder import ch03_masking as checks\ndef f(:",
}


@pytest.mark.parametrize("source, line, words", FLAGGED.values(), ids=FLAGGED.keys())
def test_the_scan_flags_each_route_into_the_course_the_kernel_or_private_torch(source, line, words):
    found = scan_source(source)
    assert [number for number, _ in found] == [line], found
    assert words in found[0][1]


@pytest.mark.parametrize("source", NOT_FLAGGED.values(), ids=NOT_FLAGGED.keys())
def test_the_scan_leaves_ordinary_code_alone(source):
    assert scan_source(source) == []


# --------------------------------------------------------------------------------------
# The scan of a notebook
# --------------------------------------------------------------------------------------


def test_only_the_students_cells_are_flagged_with_names_the_instructors_cells_bound():
    source = source_notebook(setup="import torch\nfrom autograder import ch03_masking as checks\n"
                                   "checks.CHAPTER = checks.CHAPTER  # the instructor's own: never flagged")
    submission = answered(padding_mask=RIGHT_SQUARE + "\nchecks.check_padding_mask = print")
    findings = scan(assemble(source, submission))
    assert len(findings) == 1
    finding = findings[0]
    assert (finding.where, finding.line) == ("answer cell `padding_mask`", 3)
    assert "autograder.ch03_masking.check_padding_mask" in finding.what
    assert str(finding).startswith(f"answer cell `padding_mask` (cell {finding.cell + 1}), line 3: ")


def test_a_cell_the_student_added_is_scanned_and_named_so():
    submission = answered()
    submission.cells.insert(ANSWER_1, new_code_cell("import autograder.kernel.serve as r\nr.respond = None"))
    findings = scan(assemble(source_notebook(), submission))
    assert [(f.where, f.line) for f in findings] == [("a cell the student added", 2)]


@pytest.mark.parametrize("assignment", sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir()
                                              and not p.name.startswith(".")))
def test_no_solution_notebook_is_flagged(assignment):
    source = nbformat.read(ROOT / "solutions" / assignment / f"{assignment}.ipynb", as_version=4)
    assert scan(assemble(source, source)) == []


# --------------------------------------------------------------------------------------
# The verdict: points a tampering kernel could have forged are withheld
# --------------------------------------------------------------------------------------

TAMPERING = "import autograder.kernel.serve as r\nr.respond = r.respond"


def test_a_flagged_notebook_needs_a_look_where_it_passed_on_the_kernels_word_and_keeps_its_failures():
    submission = answered(causal_mask=WRONG_DOUBLE)
    submission.cells.insert(index_of(submission.cells, "padding_mask") + 1, new_code_cell(TAMPERING))
    results, texts, assembled, *_ = graded(submission)
    assert (results["test_causal_mask"].status, results["test_causal_mask"].score) == ("failed", 0.0)
    look = results["test_padding_mask"]
    assert (look.status, look.score, look.max_score) == ("needs a look", 0.0, 1.0)
    added = assembled.roles.index("extra")
    assert f"a cell the student added (cell {added + 1}), line 2: assigns into the course's autograder.kernel.serve.respond" \
        in look.message
    assert "whether it changes its inputs in place" in look.message and texts["test_padding_mask"] == look.message


def test_an_unflagged_notebook_keeps_its_points():
    results, *_ = graded(answered())
    assert {r.status for r in results.values()} == {"passed"}


def test_what_a_verdict_takes_on_the_kernels_word():
    assert kernel_reports(ch03_masking.check_causal_mask.declaration) == [
        "its 'default device' probe", "its replay on the meta device (fixed devices)"]
    assert "which library attention it calls" in kernel_reports(ch03_masking.check_masked_attention.declaration)
    assert kernel_reports(ArgumentCheck("p", "ch03_masking", lambda: [])) == ["the errors it raises on fixed bad arguments"]
    assert kernel_reports(Part("p", "ch03_masking", meta=False)) == []  # judged on its results alone


def test_the_summary_names_the_submissions_that_need_a_look():
    rows = [{"student": student, "part": "test_p", "status": status, "score": 0.0, "auto_score": 0.0}
            for student, status in (("ada", "needs a look"), ("ben", "failed"), ("cy", "needs a look"))]
    text = summary(GradeReport("03_masking", ["ada", "ben", "cy"], [], {}, rows, Path("grades.csv"), "sqlite://", 1.0))
    assert "parts: 1 failed, 2 needs a look" in text
    assert "2 submissions need a look" in text and text.split("need a look")[1].splitlines()[0].endswith(": ada, cy")


# --------------------------------------------------------------------------------------
# Library attention, seen at the level of PyTorch's operators
# --------------------------------------------------------------------------------------

QUERIES, KEYS, VALUES = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)


def _own(q, k, v):
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v


def _math_path(q, k, v):
    return torch.ops.aten._scaled_dot_product_attention_math(q, k, v)[0]


def _math_overload(q, k, v):
    return torch.ops.aten._scaled_dot_product_attention_math.default(q, k, v)[0]


def _scripted(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


def _module(q, k, v):
    with torch.no_grad():
        return torch.nn.MultiheadAttention(4, 2, batch_first=True, kdim=4, vdim=6).eval()(q, k, v, need_weights=False)[0]


class _StandIn:
    """A stand-in of the checks' own, which may call library attention."""

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v)


@pytest.mark.parametrize("answer, called", [
    (_own, set()),
    (_scripted, {"torch.nn.functional.scaled_dot_product_attention"}),
    (_math_path, {"torch.ops.aten._scaled_dot_product_attention_math"}),
    (_math_overload, {"torch.ops.aten._scaled_dot_product_attention_math"}),
    (_module, {"torch.nn.functional.multi_head_attention_forward"}),
    (lambda q, k, v: _StandIn().forward(q, k, v), set()),
], ids=["own", "F", "aten math", "aten overload", "nn.MultiheadAttention", "a stand-in of the checks"])
def test_the_tripwires_see_library_attention_by_any_python_name(answer, called):
    with tripwires(answer, exempt=(_StandIn,)) as seen:
        answer(QUERIES, KEYS, VALUES)
    assert set(seen) >= called and (called or not seen), seen


def test_the_tripwires_see_fused_attention_run_by_torchscript():
    """Code TorchScript runs calls no Python: the fused kernel is seen where it is dispatched (inputs of one
    width, which the fused CPU kernel takes; the math path it falls back to otherwise is not seen there)."""
    scripted = torch.jit.script(_scripted)
    with tripwires(scripted) as seen:
        scripted(QUERIES, KEYS, KEYS)
    assert any(name.startswith("torch.ops.aten._scaled_dot_product_") for name in seen), seen


def test_a_students_visible_check_withholds_aten_attention():
    def masked_attention(queries, keys, values, mask=None):
        if mask is not None:
            mask = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
        output, weights = torch.ops.aten._scaled_dot_product_attention_math(queries, keys, values, attn_mask=mask)
        return output.nan_to_num(0.0), weights.nan_to_num(0.0)

    with pytest.raises(AssertionError, match=r"calls torch\.ops\.aten\._scaled_dot_product_attention_math: the "
                                             "contract asks you to implement this part yourself"):
        ch03_masking.check_masked_attention(masked_attention)
