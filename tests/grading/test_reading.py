"""The code handed in, read by the grader: the library attention an answer reaches, and what no reading sees past.

In the style of nbgrader's preprocessor tests: small cells and notebooks built by hand, fed to
the grader's reading of a submission's own cells (``grading/reading.py``) and to the verdict that
holds a part that forbids library attention against it (``grading/verdict.py``); then the
tripwires that see library attention inside the answer's process (``kernel/measure.py``), whose
word is advice only. The crafted submissions graded by the real command are in ``submissions.py``
(sections 13 and 14).
"""

from __future__ import annotations

import importlib
import math
from pathlib import Path

import nbformat
import pytest
import torch
import torch.nn.functional as F
from nbformat.v4 import new_code_cell
from test_grader_units import ANSWER_1, RIGHT_SQUARE, answered, source_notebook

import catalogue_ch01
import catalogue_ch02
import catalogue_ch03
import catalogue_ch04
import catalogue_ch05
import catalogue_ch06
import catalogue_ch07
import catalogue_ch08
import submissions as S
from autograder import ch03_masking
from autograder.grading.in_process import grade_in_process
from autograder.grading.notebooks import assemble
from autograder.grading.reading import read, read_source
from autograder.instructor.grade import GradeReport, summary
from autograder.kernel.measure import tripwires

ROOT = Path(__file__).resolve().parents[2]

# --------------------------------------------------------------------------------------
# What a reading cannot see past, in one cell
# --------------------------------------------------------------------------------------

UNSURE = {
    "respondent replaced": ("import autograder.kernel.serve as r\nr.respond = lambda *a, **k: None", 2,
                            "autograder.kernel.serve"),
    "augmented assignment into a module": ("from autograder import ch03_masking as c\nc.CHAPTER += 'x'", 2,
                                           "autograder.ch03_masking"),
    "torch patched": ("torch.softmax = lambda *a, **k: 0", 1, "changes torch"),
    "deleted from a module": ("import autograder.judge\ndel autograder.judge.judge", 2, "autograder.judge"),
    "setattr through sys.modules": ("import sys\nsetattr(sys.modules['autograder.kernel.measure'], 'tripwires', print)",
                                    2, "sys.modules"),
    "vars()": ("import autograder.kernel.serve as r\nvars(r)['respond'] = print", 2, "vars"),
    "globals()": ("globals()['helper'] = print", 1, "globals"),
    "__dict__": ("import autograder.kernel.serve as r\nr.__dict__.update(respond=print)", 2, "__dict__"),
    "importlib": ("import importlib\nm = importlib.import_module('torch.nn.functional')", 1, "importlib"),
    "__import__": ("m = __import__('torch')", 1, "__import__"),
    "a name built from pieces": ("import torch.nn.functional as F\nf = getattr(F, 'scaled_dot_' + 'product_attention')",
                                 2, "built at run time"),
    "getattr kept as a value": ("look = getattr\nf = look(F, 'x')", 1, "getattr as a value"),
    "a function's code swapped": ("f.__code__ = g.__code__", 1, "__code__"),
    "a module reached as an attribute, kept in a list": ("import torch\nh = [torch.nn.modules.linear.F][0]", 2,
                                                         "torch.nn.modules.linear.F"),
    "a module reached as an attribute, passed through a call": (
        "import torch\nm = (lambda x: x)(torch.nn.modules.linear.F)", 2, "torch.nn.modules.linear.F"),
    "a frame": ("import sys\nframe = sys._getframe(1)", 2, "sys._getframe"),
    "a frame's globals": ("def f(e):\n    return e.__traceback__.tb_frame.f_globals", 2, "frame"),
    "input()": ("def f(x):\n    input('\\x1eautograder reply ...')\n    return x", 2, "input"),
    "a thread pool": ("from concurrent.futures import ThreadPoolExecutor", 1, "threads"),
    "threading": ("import threading", 1, "threads"),
    "gc's objects": ("import gc\nobjects = gc.get_objects()", 2, "garbage collector"),
    "exec": ("exec('y = 1')", 1, "exec"),
    "ATen by a name built at run time": ("attention = getattr(torch, 'o' + 'ps').aten", 1, "built at run time"),
    "torch._C": ("mode = torch._C._get_torch_function_mode()", 1, "private"),
    "a private module imported": ("from torch.utils._python_dispatch import TorchDispatchMode", 1, "private"),
    "the kernel object": ("kernel = get_ipython().kernel", 1, "the kernel"),
    "ipykernel": ("from ipykernel.kernelapp import IPKernelApp", 1, "the kernel"),
    "a shell command beyond a look": ("!pip install einops", 1, "the shell (system)"),
    "another magic": ("%run helper.py", 1, "%run"),
    "a file written": ("open('json.py', 'w').write('x = 1')", 1, "writes a file"),
    "a module the grader cannot find": ("import course_helpers_i_wrote", 1, "cannot find"),
    "library attention kept where the reading cannot follow it": ("import torch.nn.functional as F\n"
                                                                   "register(F.scaled_dot_product_attention)",
                                                                   2, "keeps F.scaled_dot_product_attention"),
    "a name that once held a module, changed": ("import autograder.kernel.serve as r\nr = object()\nr.respond = 1", 3,
                                                "changes autograder.kernel.serve"),  # a name keeps every path it held
    "a module hidden in a container": ("import torch.nn.functional as F\nm = [F][0]\nm.scaled_dot_product_attention(q, k, v)",
                                       2, "keeps the module torch.nn.functional"),
    "a module as a default argument": ("import torch.nn.functional as F\ndef f(q, m=F):\n    return m.softmax(q, -1)", 2,
                                       "keeps the module torch.nn.functional"),
    "exec hidden by an annotation": ("exec: object\nexec('x = 1')", 2, "exec"),
    "importlib hidden by a dead branch": ("import importlib\nif False:\n    importlib = None\n"
                                          "m = importlib.import_module('torch')", 1, "importlib"),  # each line
    "a hook on every module's calls": ("torch.nn.modules.module.register_module_forward_hook(print)", 1,
                                       "hooks on every module's calls"),
    "every name of a module": ("from autograder.ch03_masking import *", 1, "imports every name"),
    "the configuration magic": ("%config InlineBackend.figure_format = 'png'", 1, "%config"),
    "a name built at run time on a module a class holds": ("class Box:\n    import torch.nn.functional as M\n"
                                                           "    def get(self):\n"
                                                           "        return getattr(self.M, 'scaled_' + 'dot')", 4,
                                                           "built at run time"),
    "code nested too deeply to read": ("x = " + "+".join(["1"] * 600), 1, "nested too deeply"),
    "a timing magic's body": ("%%time\nimport importlib", 2, "importlib"),
    "a cell that does not parse": ("def f(:\n    pass\ntorch._C._nn.x = 1", 3, "does not parse"),
}

CLEAN = {
    "the checks imported and called": "from autograder import ch03_masking as checks\nchecks.check_causal_mask(causal_mask)",
    "import lines": "import torch.nn.functional as F\nimport autograder.ch03_masking\nfrom autograder.plots import use_course_style",
    "library attention called to compare, at the top level": "print((attention(q, k, v) - F.scaled_dot_product_attention(q, k, v)).abs().max())",
    "attributes of tensors and modules": "print(torch.__version__)\nx = torch.zeros(2)\nx._version\nx.grad = None\nself.w = 1",
    "super().__init__": "class M(torch.nn.Module):\n    def __init__(self):\n        super().__init__()",
    "getattr and setattr on self": "class M:\n    def f(self, name):\n        setattr(self, name, 1)\n        return getattr(self, name)",
    "getattr with a name written out": "softmax = getattr(torch, 'softmax')",
    "timing and plotting magics": "%matplotlib inline\n%timeit x = 1\nget_ipython().run_line_magic('time', 'x = 1')",
    "a comment": "# torch._C and autograder.kernel.serve.respond = 1 in a comment\nx = 1",
    "the student's own names": "respond = 1\nkernel = 3\nthreads = 4",
    "one thread for PyTorch": "torch.set_num_threads(1)",
    "getattr and setattr on a student's objects": "for name in ('weight', 'bias'):\n    getattr(model, name)\n"
                                                  "    setattr(config, name, 1)",
    "a namespace of types": "from types import SimpleNamespace\nconfig = SimpleNamespace(d=4)",
    "autoreload": "%load_ext autoreload\n%autoreload 2",
    "a look at the GPU": "!nvidia-smi",
    "a collection of garbage": "import gc\ngc.collect()",
    "help on a module": "help(torch.nn.functional)",
    "a file read": "text = open('notes.txt').read()",
}


@pytest.mark.parametrize("source, line, words", UNSURE.values(), ids=UNSURE.keys())
def test_the_reading_names_what_it_cannot_see_past(source, line, words):
    found = read_source(source).unsure
    assert found and found[0].line == line, found
    assert any(words in finding.what for finding in found), found


@pytest.mark.parametrize("source", CLEAN.values(), ids=CLEAN.keys())
def test_the_reading_leaves_ordinary_code_alone(source):
    reading = read_source(source)
    library = [found for bindings in reading.bindings.values() for binding in bindings for found in binding.library]
    assert reading.unsure == [] and library == [], (reading.unsure, library)


# --------------------------------------------------------------------------------------
# Library attention an answer reaches
# --------------------------------------------------------------------------------------

IMPORTS = "import math\nimport torch\nimport torch.nn.functional as F\nfrom torch import nn\n"
REACHES = {
    "called": ("def attention(q, k, v):\n    return F.scaled_dot_product_attention(q, k, v)", "attention",
               "calls F.scaled_dot_product_attention"),
    "through a helper": ("def helper(q, k, v):\n    return F.scaled_dot_product_attention(q, k, v)\n"
                         "def attention(q, k, v):\n    return helper(q, k, v)", "attention", "scaled_dot_product_attention"),
    "bound to another name": ("sdpa = F.scaled_dot_product_attention\ndef attention(q, k, v):\n    return sdpa(q, k, v)",
                              "attention", "uses F.scaled_dot_product_attention"),
    "imported under another name": ("from torch.nn.functional import scaled_dot_product_attention as s\n"
                                    "def attention(q, k, v):\n    return s(q, k, v)", "attention", "scaled_dot_product"),
    "kept in a list": ("store = []\nstore.append(F.scaled_dot_product_attention)\n"
                       "def attention(q, k, v):\n    return store[0](q, k, v)", "attention", "scaled_dot_product"),
    "left in a global by another function": ("helper = None\ndef setup():\n    global helper\n"
                                             "    helper = F.scaled_dot_product_attention\nsetup()\n"
                                             "def attention(q, k, v):\n    return helper(q, k, v)", "attention",
                                             "scaled_dot_product"),
    "a method set from outside": ("class A:\n    pass\nA.forward = lambda self, q, k, v: F.scaled_dot_product_attention(q, k, v)",
                                  "A", "scaled_dot_product"),
    "getattr with the name written out": ("def attention(q, k, v):\n    return getattr(F, 'scaled_dot_product_attention')(q, k, v)",
                                          "attention", "scaled_dot_product"),
    "aliased inside the function": ("def attention(q, k, v):\n    m = torch.nn.functional\n"
                                    "    return m.scaled_dot_product_attention(q, k, v)", "attention", "scaled_dot_product"),
    "past an annotation that binds nothing": ("torch: object\ndef attention(q, k, v):\n"
                                              "    return torch.nn.functional.scaled_dot_product_attention(q, k, v)",
                                              "attention", "scaled_dot_product"),
    "past a dead branch": ("if False:\n    torch = None\ndef attention(q, k, v):\n"
                           "    return torch.nn.functional.scaled_dot_product_attention(q, k, v)", "attention",
                           "scaled_dot_product"),
    "past a class attribute of the same name": ("class S:\n    F = None\ndef attention(q, k, v):\n"
                                                "    return F.scaled_dot_product_attention(q, k, v)", "attention",
                                                "scaled_dot_product"),
    "a name bound after the definition": ("def attention(q, k, v):\n    return G.scaled_dot_product_attention(q, k, v)\n"
                                          "import torch.nn.functional as G", "attention", "scaled_dot_product"),
    "defined inside match": ("match 0:\n    case _:\n        def attention(q, k, v):\n"
                             "            return F.scaled_dot_product_attention(q, k, v)", "attention",
                             "scaled_dot_product"),
    "a table a function fills": ("table = {}\ndef register():\n    table['f'] = F.scaled_dot_product_attention\n"
                                 "register()\ndef attention(q, k, v):\n    return table['f'](q, k, v)", "attention",
                                 "scaled_dot_product"),
    "a class a function fills": ("class Box:\n    pass\ndef fill():\n    Box.f = F.scaled_dot_product_attention\nfill()\n"
                                 "def attention(q, k, v):\n    return Box.f(q, k, v)", "attention", "scaled_dot_product"),
    "appended in a with statement's header": ("import contextlib\nstore = []\n"
                                              "with contextlib.nullcontext(store.append(F.scaled_dot_product_attention)):\n"
                                              "    pass\ndef attention(q, k, v):\n    return store[0](q, k, v)",
                                              "attention", "scaled_dot_product"),
    "appended in a walrus": ("store = []\nif (_ := store.append(F.scaled_dot_product_attention)):\n    pass\n"
                             "def attention(q, k, v):\n    return store[0](q, k, v)", "attention", "scaled_dot_product"),
    "through the course's module": ("from autograder import ch03_masking as checks\ndef attention(q, k, v):\n"
                                    "    return checks.F.scaled_dot_product_attention(q, k, v)", "attention",
                                    "scaled_dot_product"),
    "through d2l's own import": ("from d2l import torch as d2l\ndef attention(q, k, v):\n"
                                 "    return d2l.F.scaled_dot_product_attention(q, k, v)", "attention",
                                 "scaled_dot_product"),
    "through torch.nn.modules": ("def attention(q, k, v):\n    return torch.nn.modules.MultiheadAttention(4, 1)(q, k, v)",
                                 "attention", "MultiheadAttention"),
    "a module a class holds": ("class Box:\n    import torch.nn.functional as M\ndef attention(q, k, v):\n"
                               "    return Box.M.scaled_dot_product_attention(q, k, v)", "attention", "scaled_dot_product"),
    "bound in a timing magic": ("%time attend = F.scaled_dot_product_attention\ndef attention(q, k, v):\n"
                                "    return attend(q, k, v)", "attention", "scaled_dot_product"),
    "getattr by its name on a value the reading cannot follow": (
        "def attention(q, k, v, lib=None):\n    return getattr(lib, 'scaled_dot_product_attention')(q, k, v)",
        "attention", "getattr(…).scaled_dot_product_attention"),
    "a module reached as an attribute": ("G = torch.nn.modules.linear.F\ndef attention(q, k, v):\n"
                                         "    return G.scaled_dot_product_attention(q, k, v)", "attention",
                                         "scaled_dot_product"),
    "ATen's math path": ("def attention(q, k, v):\n    return torch.ops.aten._scaled_dot_product_attention_math(q, k, v)",
                         "attention", "torch.ops.aten._scaled_dot_product_attention_math"),
    "nn.MultiheadAttention inside a module": ("class MultiHeadAttention(nn.Module):\n    def __init__(self):\n"
                                              "        super().__init__()\n        self.inner = nn.MultiheadAttention(4, 2)",
                                              "MultiHeadAttention", "nn.MultiheadAttention"),
    "nn.MultiheadAttention as a base class": ("class MultiHeadAttention(nn.MultiheadAttention):\n    pass",
                                              "MultiHeadAttention", "MultiheadAttention"),
    "d2l's masked softmax": ("from d2l import torch as d2l\ndef masked_softmax(X, valid_lens):\n"
                             "    return d2l.masked_softmax(X, valid_lens)", "masked_softmax", "d2l.torch.masked_softmax"),
    "the course's own multi-head attention": ("from autograder import ch06_transformer as checks\n"
                                              "MultiHeadAttention = checks.FallbackMultiHeadAttention", "MultiHeadAttention",
                                              "FallbackMultiHeadAttention"),
    "a subclass of the course's": ("from autograder import ch06_transformer as checks\n"
                                   "class MultiHeadAttention(checks.FallbackMultiHeadAttention):\n    pass",
                                   "MultiHeadAttention", "FallbackMultiHeadAttention"),
    "the course's decoder": ("from autograder import ch07_decoding as checks\n"
                             "def step(q, k, v, cache=None):\n    return checks.TinyDecoder()(q)", "step", "TinyDecoder"),
}
NOT_REACHED = {
    "compared at the top level": ("def attention(q, k, v):\n    return q\n"
                                  "print(attention(q, k, v) - F.scaled_dot_product_attention(q, k, v))", "attention"),
    "a local of the same name": ("out = F.scaled_dot_product_attention(q, k, v)\n"
                                 "def attention(q, k, v):\n    out = torch.softmax(q @ k.mT, -1)\n    return out @ v", "attention"),
    "another answer's library": ("def other(q, k, v):\n    return F.scaled_dot_product_attention(q, k, v)\n"
                                 "def attention(q, k, v):\n    return torch.softmax(q @ k.mT, -1) @ v", "attention"),
    "a first draft replaced by the student's own": ("def attention(q, k, v):\n"
                                                    "    return F.scaled_dot_product_attention(q, k, v)\n"
                                                    "def attention(q, k, v):\n"
                                                    "    return torch.softmax(q @ k.mT, -1) @ v", "attention"),
    "softmax and friends": ("def attention(q, k, v):\n    w = F.softmax(q @ k.mT / math.sqrt(q.shape[-1]), -1)\n"
                            "    return F.dropout(w) @ v", "attention"),
}


@pytest.mark.parametrize("source, answer, words", REACHES.values(), ids=REACHES.keys())
def test_the_library_attention_an_answer_reaches_is_found(source, answer, words):
    found = read_source(IMPORTS + source).library(answer)
    assert found and any(words in finding.what for finding in found), found


@pytest.mark.parametrize("source, answer", NOT_REACHED.values(), ids=NOT_REACHED.keys())
def test_library_attention_the_answer_does_not_reach_is_not_its(source, answer):
    assert read_source(IMPORTS + source).library(answer) == []


def test_an_earlier_part_an_answer_calls_is_followed_the_checks_stand_ins_are_not():
    """The kernel replaces an earlier graded part only where the answer names it: through another name the student's
    own runs, so the reading follows it; the checks' own stand-ins may call library attention, and are not followed."""
    from autograder import ch04_multihead, ch06_transformer

    assert ch04_multihead.MODULE.stand_ins_by_name() == set()  # split_heads, merge_heads: earlier parts, followed
    assert ch06_transformer.BLOCK.stand_ins_by_name() == {"MultiHeadAttention"}
    reading = read_source(IMPORTS + "def split_heads(X, h, *rest):\n"
                          "    return F.scaled_dot_product_attention(*rest) if rest else X\n"
                          "class MultiHeadAttention(nn.Module):\n    sh = split_heads\n"
                          "    def forward(self, q, k, v):\n        return self.sh(None, 0, q, k, v)")
    assert reading.library("MultiHeadAttention", skip=ch04_multihead.MODULE.stand_ins_by_name())


def test_what_the_grader_replaces_while_judging_is_not_followed():
    """The block's ``MultiHeadAttention`` is the course's stand-in while the block is judged: not the block's."""
    reading = read_source(IMPORTS + "from autograder import ch06_transformer as checks\n"
                          "MultiHeadAttention = checks.FallbackMultiHeadAttention\n"
                          "class Block(nn.Module):\n    def forward(self, X):\n        return MultiHeadAttention(4, 2)(X, X, X)")
    assert reading.library("Block")
    assert reading.library("Block", skip={"MultiHeadAttention"}) == []


# --------------------------------------------------------------------------------------
# A notebook's reading
# --------------------------------------------------------------------------------------


def test_only_the_students_cells_are_read_with_names_the_instructors_cells_bound():
    source = source_notebook(setup="import torch\nfrom autograder import ch03_masking as checks\n"
                                   "checks.CHAPTER = checks.CHAPTER  # the instructor's own: never read")
    submission = answered(padding_mask=RIGHT_SQUARE + "\nchecks.check_padding_mask = print")
    found = read(assemble(source, submission)).unsure
    assert len(found) == 1
    finding = found[0]
    assert (finding.where, finding.line) == ("answer cell `padding_mask`", 3)
    assert "autograder.ch03_masking" in finding.what
    assert str(finding).startswith(f"answer cell `padding_mask` (cell {finding.cell + 1}), line 3: ")


def test_a_cell_the_student_added_is_read_and_named_so():
    submission = answered()
    submission.cells.insert(ANSWER_1, new_code_cell("import autograder.kernel.serve as r\nr.respond = None"))
    found = read(assemble(source_notebook(), submission)).unsure
    assert [(f.where, f.line) for f in found] == [("a cell the student added", 2)]


SOLUTIONS = sorted(ROOT.glob("solutions/0*/*.ipynb")) + sorted(ROOT.glob("zh/solutions/0*/*.ipynb"))


@pytest.mark.parametrize("path", SOLUTIONS, ids=[str(p.relative_to(ROOT)) for p in SOLUTIONS])
def test_no_solution_notebook_is_unsure_or_reaches_library_attention(path):
    source = nbformat.read(path, as_version=4)
    assembled = assemble(source, source)
    reading = read(assembled)
    chapter = importlib.import_module(f"autograder.ch{path.stem}")
    answers = {call.answer for calls in assembled.checks.values() for call in calls
               if getattr(getattr(chapter, call.check).declaration, "forbid_library", False)}
    assert reading.unsure == [] and {a: reading.library(a) for a in answers if reading.library(a)} == {}


CATALOGUES = (catalogue_ch01, catalogue_ch02, catalogue_ch03, catalogue_ch04, catalogue_ch05, catalogue_ch06,
              catalogue_ch07, catalogue_ch08)


def _right_answers():
    for catalogue in CATALOGUES:
        for check, answer, _ in catalogue.CORRECT:
            yield pytest.param(check, answer,
                               id=f"{catalogue.__name__}:{check.__name__}:{getattr(answer, '__name__', answer)}")


@pytest.mark.parametrize("check, answer", list(_right_answers()))
def test_no_catalogued_right_answer_is_unsure_or_reaches_library_attention(check, answer):
    """The allowlist keeps honest answers clean: each right answer of the catalogues, and what it calls in its
    module, read as the student's cells they would be."""
    import inspect

    source = inspect.getsource(inspect.getmodule(answer))
    reading = read_source(source)
    name = answer.__name__
    if getattr(check.declaration, "forbid_library", False):
        assert reading.library(name) == [], reading.library(name)
    lines = _lines_reached(source, reading, name)
    assert [f for f in reading.unsure if f.line in lines] == []


def _lines_reached(source: str, reading, name: str) -> set[int]:
    """The lines of the top-level definitions in ``source`` that ``name`` reaches through the global names it uses."""
    import ast

    reached, waiting = set(), [name]
    while waiting:
        current = waiting.pop()
        if current not in reached:
            reached.add(current)
            waiting += sorted(used for binding in reading.standing(current) for used in binding.uses)
    return {line for node in ast.parse(source).body if getattr(node, "name", None) in reached
            for line in range(node.lineno, node.end_lineno + 1)}


# --------------------------------------------------------------------------------------
# The verdict: library attention withholds the points, a reading unsure needs a look
# --------------------------------------------------------------------------------------

MASKING = "03_masking"


def _graded_03(**answers: str) -> dict:
    """``{part: result}`` of the solution of 03 with ``answers`` (by grade id) put in, judged here."""
    path = ROOT / "solutions" / MASKING / f"{MASKING}.ipynb"
    source = nbformat.read(path, as_version=4)
    submission = nbformat.read(path, as_version=4)
    for cell in submission.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell.source = answers[grade_id]
    return {r.part: r for r in grade_in_process(source, submission, importlib.import_module("autograder.ch03_masking"),
                                                as_kernel=True)}


def _solution_cell(grade_id: str) -> str:
    source = nbformat.read(ROOT / "solutions" / MASKING / f"{MASKING}.ipynb", as_version=4)
    return next(c.source for c in source.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


LIBRARY_MASKED_ATTENTION = S.LIBRARY_ATTENTION  # the weights computed, the output by F.scaled_dot_product_attention


def test_an_answer_that_reaches_library_attention_has_its_points_withheld_and_only_those():
    results = _graded_03(masked_attention=LIBRARY_MASKED_ATTENTION)
    result = results["test_masked_attention"]
    assert (result.status, result.score) == ("failed", 0.0), result
    assert "calls F.scaled_dot_product_attention (answer cell `masked_attention`" in result.message
    assert "its points are withheld" in result.message
    assert {part for part, r in results.items() if r.status != "passed"} == {"test_masked_attention"}


def test_a_reading_unsure_puts_the_parts_that_forbid_library_attention_before_an_instructor_and_no_other():
    threads = "from concurrent.futures import ThreadPoolExecutor\n" + _solution_cell("window_mask")
    results = _graded_03(window_mask=threads)
    looks = {part for part, r in results.items() if r.status == "needs a look"}
    assert looks == {"test_masked_softmax", "test_masked_attention"}  # the parts that forbid library attention
    assert all(r.status == "passed" for part, r in results.items() if part not in looks)
    message = results["test_masked_softmax"].message
    assert "imports concurrent.futures (threads or processes)" in message and "answer cell `window_mask`" in message
    assert results["test_masked_softmax"].score == 0


def test_a_wrong_answer_keeps_its_failure_whatever_the_reading():
    wrong = _solution_cell("masked_softmax").replace("float('-inf')", "0.0").replace('float("-inf")', "0.0")
    results = _graded_03(masked_softmax="import threading\n" + wrong)
    assert results["test_masked_softmax"].status == "failed"


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


def test_in_a_students_own_notebook_the_library_attention_the_process_sees_fails_the_check():
    """Where the answer's process is the judge's own (a student's visible check), what it sees decides."""
    def masked_attention(queries, keys, values, mask=None):
        if mask is not None:
            mask = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
        output, weights = torch.ops.aten._scaled_dot_product_attention_math(queries, keys, values, attn_mask=mask)
        return output.nan_to_num(0.0), weights.nan_to_num(0.0)

    with pytest.raises(AssertionError, match=r"calls torch\.ops\.aten\._scaled_dot_product_attention_math: the "
                                             "contract asks you to implement this part yourself"):
        ch03_masking.check_masked_attention(masked_attention)


def test_at_grading_what_the_kernel_sees_is_advice_shown_with_the_verdict():
    """Judged as a kernel's word (grading), library attention the process saw is advice; the reading decides."""
    from autograder.judge import LocalRespondent, judge

    declaration = ch03_masking.check_masked_attention.declaration
    answer = _in_namespace(LIBRARY_MASKED_ATTENTION, "masked_attention")
    judged = judge(declaration, LocalRespondent(declaration, answer, observes_for_the_judge=False))
    assert judged.cases > 0
    assert any("calls torch.nn.functional.scaled_dot_product_attention" in text for text in judged.advice), judged.advice


def _in_namespace(source: str, name: str):
    namespace = {"torch": torch, "math": math}
    exec(compile(source, "<cell>", "exec"), namespace)  # noqa: S102 (the test's own code)
    return namespace[name]
