"""Crafted submissions of ``03_masking`` for the grading command's adversarial catalogue.

Each entry builds one student's notebook from the instructor's solution and says what
grade every part must get. The parts of 03_masking are masked_softmax (2 points),
causal_mask (1), causal_mask_bottom_right (1), padding_mask (1), window_mask (1), masked_attention (2.5) and its
argument checks (0.5). No part is checked through another, so a crafted mistake costs
only the part it is in; and every part is judged outside the student's kernel, so nothing
a submission does inside it can make a wrong answer pass.
"""

from __future__ import annotations

import copy
import json
import textwrap
from pathlib import Path

import nbformat
import torch

from conftest import with_warnings

ASSIGNMENT = "03_masking"
POINTS = {"test_masked_softmax": 2, "test_causal_mask": 1, "test_causal_mask_bottom_right": 1, "test_padding_mask": 1,
          "test_window_mask": 1, "test_masked_attention": 2.5, "test_masked_attention_arguments": 0.5}
PARTS = list(POINTS)

WRONG_WINDOW = """
def window_mask(num_queries, num_keys, radius, device=None):
    i = torch.arange(num_queries, device=device)[:, None]
    j = torch.arange(num_keys, device=device)[None, :]
    return (i - j).abs() < radius  # off by one
"""
RIGHT_WINDOW = """
def window_mask(num_queries, num_keys, radius, device=None):
    i = torch.arange(num_queries, device=device)[:, None]
    j = torch.arange(num_keys, device=device)[None, :]
    return (i - j).abs() <= radius
"""
WRONG_PADDING = """
def padding_mask(valid_lens, num_keys):
    return torch.arange(num_keys, device=valid_lens.device) <= valid_lens[:, None, None]  # off by one
"""
RIGHT_PADDING = """
def padding_mask(valid_lens, num_keys):
    return torch.arange(num_keys, device=valid_lens.device) < valid_lens[:, None, None]
"""


def cells_with(nb: dict, grade_id: str) -> list[dict]:
    return [c for c in nb["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id]


def answer(nb: dict, grade_id: str, code: str) -> dict:
    """A copy of ``nb`` whose answer cell ``grade_id`` holds ``code``."""
    nb = copy.deepcopy(nb)
    cells_with(nb, grade_id)[0]["source"] = textwrap.dedent(code).strip() + "\n"
    return nb


def expect(**changes: str) -> dict[str, str]:
    """Every part ``passed`` except those named (by the answer's name) with another status."""
    return {part: changes.get(part.removeprefix("test_"), "passed") for part in PARTS}


def catalogue(solution: dict, blank: dict, course: Path, port: int) -> dict[str, tuple[object, dict[str, str]]]:
    """``{student: (notebook JSON text, dict or None, {part: expected status})}``.

    ``notebook`` is a dict (written as JSON), a string (written as is: malformed files),
    or ``None`` for a submission folder without the notebook.
    """
    entries: dict[str, tuple[object, dict[str, str]]] = {}

    def add(student, notebook, expected):
        entries[student] = (notebook, expected)

    # 1. honest work
    add("correct", solution, expect())
    add("blank", blank, {p: "failed" for p in PARTS})
    partial = answer(answer(solution, "window_mask", WRONG_WINDOW), "masked_softmax",
                     "def masked_softmax(X, valid_lens):\n    raise NotImplementedError()")
    add("partial", partial, expect(masked_softmax="failed", window_mask="failed"))
    add("warns", with_warnings(solution), expect())

    # 2. edited notebooks
    edited = answer(solution, "window_mask", WRONG_WINDOW)
    cells_with(edited, "test_window_mask")[0]["source"] = "pass\n"
    add("edited_test", edited, expect(window_mask="failed"))
    deleted = answer(solution, "padding_mask", WRONG_PADDING)
    deleted["cells"].remove(cells_with(deleted, "test_padding_mask")[0])
    add("deleted_test", deleted, expect(padding_mask="failed"))
    retyped = copy.deepcopy(solution)
    cell = cells_with(retyped, "window_mask")[0]
    cell["cell_type"] = "markdown"
    cell.pop("outputs", None), cell.pop("execution_count", None)
    add("changed_cell_type", retyped, expect(window_mask="failed"))
    duplicated = answer(solution, "window_mask", WRONG_WINDOW)
    index = duplicated["cells"].index(cells_with(duplicated, "window_mask")[0])
    second = copy.deepcopy(cells_with(solution, "window_mask")[0])
    fake_test = copy.deepcopy(cells_with(solution, "test_padding_mask")[0])
    fake_test["source"] = "print('all good')\n"
    duplicated["cells"][index + 1:index + 1] = [second, fake_test]
    add("duplicated_ids", duplicated, expect())
    points = copy.deepcopy(solution)
    cells_with(points, "test_masked_attention")[0]["metadata"]["nbgrader"]["points"] = 100
    add("edited_points", points, expect())

    # 3. broken files
    add("malformed_json", '{"cells": [ this is not json', {p: "error" for p in PARTS})
    old = nbformat.convert(nbformat.reads(json.dumps(solution), as_version=4), 3)
    add("old_nbformat", nbformat.writes(old, version=3), expect())
    add("missing_notebook", None, {p: "missing" for p in PARTS})
    add("empty_folder", None, {p: "missing" for p in PARTS})

    # 4. runaway code
    add("infinite_loop", answer(solution, "window_mask", "def window_mask(q, k, radius):\n    while True:\n        pass"),
        expect(window_mask="timeout"))
    add("calls_input", answer(solution, "padding_mask", "def padding_mask(valid_lens, num_keys):\n    return input('?')"),
        unsure(padding_mask="failed"))  # the judge answers a student's input() with "", which is no mask
    add("huge_allocation", answer(solution, "padding_mask", "def padding_mask(valid_lens, num_keys):\n"
                                  "    waste = torch.ones(50 * 2**30 // 4)  # 50 GB, touched\n"
                                  "    return torch.arange(num_keys) < valid_lens[:, None, None]"),
        expect(padding_mask="failed"))
    add("output_flood", answer(solution, "window_mask", RIGHT_WINDOW + "\nfor _ in range(200):\n    print('x' * 100_000)\n"),
        expect())

    # 5. exits
    add("sys_exit", answer(solution, "window_mask", "import sys\nsys.exit()\n" + RIGHT_WINDOW), expect(window_mask="error"))
    add("os_exit", answer(solution, "padding_mask", "def padding_mask(valid_lens, num_keys):\n    import os\n    os._exit(0)"),
        expect(padding_mask="error"))
    add("kills_kernel", answer(solution, "window_mask", RIGHT_WINDOW + "\nimport os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"),
        unsure(window_mask="error"))

    # 6. tampering with the checks, the judge or the kernel (each with a wrong answer it would hide): the
    # verdict is made outside the kernel, so each gets its honest grade
    patches = {
        "patches_allclose": "torch.allclose = lambda *args, **kwargs: True\ntorch.equal = lambda *args, **kwargs: True",
        "patches_assert_close": "torch.testing.assert_close = lambda *args, **kwargs: None",
        "patches_assertion_error": "import builtins\nbuiltins.AssertionError = KeyboardInterrupt",
        "patches_autograder": "from autograder import ch03_masking\nch03_masking.check_window_mask = lambda *a, **k: None",
        "patches_traceback": "get_ipython().showtraceback = lambda *args, **kwargs: None",
        "patches_via_alias": "library = [torch][0]\nsetattr(library, 'equal', lambda *a, **k: True)\n"
                             "setattr(library, 'allclose', lambda *a, **k: True)",
        # the checks' code swapped, the judge replaced in the kernel: neither is what decides
        "swaps_check_code": "import pkgutil\nchecks_module = pkgutil.resolve_name('autograder.ch03_masking')\n"
                            "checks_module.check_window_mask.__code__ = (lambda fn, hidden=False: None).__code__\n"
                            "judge_module = pkgutil.resolve_name('autograder.judge')\n"
                            "judge_module.judge = lambda *a, **k: 1",
    }
    # each changes a module in the kernel, which the grader's reading cannot see past (13.): the parts whose points
    # rest on that reading (they forbid library attention) need a look, the wrong answer keeps its failure
    for student, patch in patches.items():
        add(student, answer(solution, "window_mask", WRONG_WINDOW + "\n" + patch), unsure(window_mask="failed"))
    add("tensor_subclass", answer(solution, "window_mask", _always_equal_tensors()), expect(window_mask="failed"))
    # every error reply of the kernel turned into "ok", and the respondent made to reply `True` to everything
    forged = copy.deepcopy(blank)
    after_imports = forged["cells"].index(cells_with(forged, "imports")[0]) + 1
    forged["cells"].insert(after_imports, {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                                           "source": FORGED_REPLIES})
    add("forges_replies", forged, {p: "failed" for p in PARTS})  # flagged, but nothing passed to withhold
    add("calls_references", answer(solution, "window_mask", CALLS_THE_REFERENCE), unsure(window_mask="failed"))

    # what a submission prints or displays never carries a script, a key or a hidden test into the pages
    leaky = copy.deepcopy(solution)
    after_imports = leaky["cells"].index(cells_with(leaky, "imports")[0]) + 1
    leaky["cells"].insert(after_imports, {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                                          "source": LEAKS_AND_INJECTS})
    before_last_test = leaky["cells"].index(cells_with(leaky, "test_masked_attention_arguments")[0])
    leaky["cells"].insert(before_last_test, {"cell_type": "code", "metadata": {}, "outputs": [],
                                             "execution_count": None, "source": LEAKS_AND_INJECTS})
    add("leaks_and_injects", leaky, expect())

    # 7. escaping the sandbox: each cheat works only where the sandbox would leak
    def secret(path: Path) -> str:
        """A right window_mask if ``path`` can be read, a wrong one otherwise."""
        return f"""
        try:
            open({str(path)!r}, 'rb').read(1)
            {RIGHT_WINDOW.strip().replace(chr(10), chr(10) + '            ')}
        except OSError:
            {WRONG_WINDOW.strip().replace(chr(10), chr(10) + '            ')}
        """

    add("reads_solutions", answer(solution, "window_mask", secret(course / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")),
        expect(window_mask="failed"))
    add("reads_gradebook", answer(solution, "window_mask", secret(course / "gradebook.db")), expect(window_mask="failed"))
    add("reads_other_student", answer(solution, "window_mask",
                                      secret(course / "submitted" / "correct" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")),
        expect(window_mask="failed"))
    writes = f"""
        for target in [{str(course / 'pwned.txt')!r}, {str(course / 'gradebook.db')!r},
                       {str(course / 'submitted' / 'correct' / ASSIGNMENT / (ASSIGNMENT + '.ipynb'))!r}]:
            try:
                with open(target, 'a') as handle:
                    handle.write('overwritten')
            except OSError:
                pass
        """
    add("writes_outside", answer(solution, "window_mask", RIGHT_WINDOW + textwrap.dedent(writes)), unsure())
    network = f"""
        import socket
        try:
            socket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'leak')
            {RIGHT_WINDOW.strip().replace(chr(10), chr(10) + '            ')}
        except OSError:
            {WRONG_WINDOW.strip().replace(chr(10), chr(10) + '            ')}
        """
    add("opens_network", answer(solution, "window_mask", network), expect(window_mask="failed"))

    # 8. resources: each works only where a limit would not hold
    add("reads_shadow", answer(solution, "window_mask", secret(Path("/etc/shadow"))), expect(window_mask="failed"))
    add("huge_message", answer(solution, "window_mask", RIGHT_WINDOW + "\nprint('x' * 200_000_000)\n"), expect())
    # messages the grader cannot verify (signed with another key, or not Jupyter messages at all) are dropped
    add("garbles_messages", answer(solution, "window_mask", RIGHT_WINDOW + textwrap.dedent("""
        import sys
        from ipykernel.kernelapp import IPKernelApp
        kernel = IPKernelApp.instance().kernel
        key = kernel.session.key
        kernel.session.key = b'not the key'
        print('signed with another key')
        sys.stdout.flush()
        kernel.session.key = key
        kernel.iopub_socket.send_multipart([b'<IDS|MSG>', b'0' * 64, b'{', b'', b'', b''])
        kernel.iopub_socket.send_multipart([b'no delimiter'])
        """)), unsure())  # the kernel object reached (13.)
    if _cgroups():
        add("fork_bomb", answer(solution, "window_mask", _if_it_leaks("""
            import subprocess
            started = []
            try:
                for _ in range(2000):
                    started.append(subprocess.Popen(['sleep', '60']))
            except OSError:
                pass
            leaked = len(started) >= 1000
            for child in started:
                child.kill()
                child.wait()  # reaped: a zombie keeps its pid, and a full cap would stall this kernel's later parts
            """)), unsure(window_mask="failed"))  # processes started (13.)
        add("disk_flood", answer(solution, "window_mask", _if_it_leaks("""
            import os
            leaked = False
            from ipykernel.kernelapp import IPKernelApp
            folder = os.path.dirname(IPKernelApp.instance().connection_file)  # where the grader's disk is
            try:
                with open(os.path.join(folder, 'flood'), 'wb') as flood:
                    for _ in range(300):
                        flood.write(b'x' * 2**20)
                leaked = True
            except OSError:
                pass
            """)), unsure(window_mask="failed"))  # ipykernel imported (13.)
        add("memory_outside_the_heap", answer(solution, "window_mask", RIGHT_WINDOW + textwrap.dedent("""
            import mmap
            block = mmap.mmap(-1, 6 * 2**30)  # shared memory: not data memory, counted by the cgroup
            for offset in range(0, len(block), 4096):
                block[offset] = 1
            """)), expect(window_mask="error"))

    # 9. answers hard-coded to the visible cases
    add("hard_coded", answer(solution, "window_mask", _hard_coded_window()), expect(window_mask="failed"))

    # 10. text as untrusted bytes: odd characters in what a kernel sends, hidden inputs kept hidden
    # a lone surrogate (JSON's "\ud800") in a message, in printed output, and in a comment that never runs
    add("surrogate_message", answer(solution, "window_mask", "def window_mask(q, k, radius, device=None):\n"
                                                             "    raise ValueError('\\ud800 \\x00 \\x1b[2J odd')"),
        expect(window_mask="failed"))
    add("surrogate_output", answer(solution, "window_mask", RIGHT_WINDOW + "\nprint('\\ud800 \\x00 odd')\n"), expect())
    in_comment = answer(solution, "window_mask", RIGHT_WINDOW + "\n# a comment with a lone surrogate: \ud800\n")
    in_comment["cells"].append({"cell_type": "markdown", "metadata": {}, "source": "never runs: \ud800"})
    add("surrogate_in_comment", in_comment, expect())
    # the hidden inputs the answer saw, raised in a later part's bad-arguments case
    add("leaks_hidden_inputs", _after(_after(solution, "masked_softmax", RECORDS_INPUTS), "test_masked_attention",
                                      RAISES_WHAT_IT_SAW), expect(masked_attention_arguments="failed"))

    # 11. the grader's own memory and workers: oracle arguments, output while judged, oversized files
    add("oversized_notebook", oversized(solution, 21 * 2**20), {p: "error" for p in PARTS})  # default limit: 20 MiB
    # 200,000 one-line cells after an answer (18.7 MiB, under that limit), the last a wrong window_mask: only the
    # first 200 cells a notebook adds are read, the rest left out unread and unrun, so the wrong one changes nothing
    add("many_cells", many_cells(solution, 200_000, WRONG_WINDOW), expect())

    # 12. fair time: CPU share and time limits that measure the student's own work
    # (and, from 11., output while judged: 1 GB printed by an answer while its part is judged, read and dropped)
    add("output_flood_while_judged", answer(solution, "window_mask", floods_while_judged(100, 10)), expect())

    # 13. forgeries of what is observed inside the kernel
    # the respondent replaced in the kernel, to forge what it observes there: answers that change their input in
    # place, create a mask on a fixed device and call library attention. What the kernel observes is advice: the
    # in-place softmax and the fixed-device mask have right results on the CPU (this machine grades there), the
    # library call is found by the grader's reading of the cell, the wrong window_mask keeps its failure, and the
    # parts that forbid library attention need a look for what the reading cannot see past
    forger = _after(solution, "imports", FORGES_THE_RESPONDENT)
    for grade_id, code in (("masked_softmax", IN_PLACE_SOFTMAX), ("causal_mask", FIXED_DEVICE_CAUSAL),
                           ("masked_attention", LIBRARY_ATTENTION), ("window_mask", WRONG_WINDOW)):
        forger = answer(forger, grade_id, code)
    add("forges_the_respondent", forger, unsure(masked_attention="failed", window_mask="failed"))
    # ATen's math attention called directly, in the part that forbids library attention: found by name in the cell
    add("calls_aten_attention", answer(solution, "masked_attention", ATEN_ATTENTION.format(operators="torch.ops.aten")),
        expect(masked_attention="failed"))
    # the same reached by a name built at run time: beyond a static reading, the parts that forbid it need a look
    add("calls_aten_attention_unseen", answer(solution, "masked_attention",
                                              ATEN_ATTENTION.format(operators="getattr(torch, 'o' + 'ps').aten")),
        unsure())

    # 14. the third round: a reply forged through input(), threads, hostile bytes in a reply; each beside its
    # control, the same answers handed in plainly, which must earn at least as much
    for student, notebook in forgeries_through_input(solution).items():
        add(student, notebook, unsure() if student.endswith("forged") else expect(masked_attention="failed"))
    add("sdpa_in_a_thread", answer(solution, "masked_attention", LIBRARY_IN_A_THREAD),
        unsure(masked_attention="failed"))  # library attention named in the answer; threads beyond a reading
    add("sdpa_in_a_thread_control", answer(solution, "masked_attention", LIBRARY_ATTENTION),
        expect(masked_attention="failed"))
    for student, hostile in HOSTILE_REPLIES.items():  # the reply the grader reads is the kernel's first
        add(student, answer(solution, "window_mask", sends_first(hostile)), unsure(window_mask="failed"))
    return entries


FORGED_REPLIES = """
import pkgutil
kernel = get_ipython().kernel
original = kernel.do_execute

async def always_ok(*args, **kwargs):
    reply = await original(*args, **kwargs)
    reply['status'] = 'ok'  # an error in any cell, a check's included, reported as success
    return reply

kernel.do_execute = always_ok
respondent = pkgutil.resolve_name('autograder.kernel.serve')
wire = pkgutil.resolve_name('autograder.wire')
import base64, json

def forged(chapter, message):  # as many replies as requests, each saying True
    raw = base64.b64decode(message)
    header = json.loads(raw[8:8 + int.from_bytes(raw[4:8], 'little')])
    count = len(header['value']['dict']['requests'])
    respondent.exchange('reply', wire.pack([{'result': True}] * count, reply=True))

respondent.serve = forged
"""
#: Everything a kernel might know, printed, and a page's worth of scripts displayed.
LEAKS_AND_INJECTS = """
import os
from IPython.display import HTML, SVG, Javascript, display
print('environment:', dict(os.environ))
print('history:', In)
display(HTML("<script>document.title = 'injected-by-a-student'</script><b>bold</b>"))
display(Javascript("document.title = 'injected-by-a-student'"))
display(SVG('<svg xmlns="http://www.w3.org/2000/svg" onload="alert(\\'injected-by-a-student\\')"></svg>'))
"""
#: An answer that calls the course's own reference, by import and by its file.
CALLS_THE_REFERENCE = """
def window_mask(num_queries, num_keys, radius, device=None):
    try:
        from autograder.reference import ch03_masking as reference
    except ImportError:
        import importlib.util, pathlib, autograder
        path = pathlib.Path(autograder.__file__).parent / 'reference' / 'ch03_masking.py'
        spec = importlib.util.spec_from_file_location('stolen', path)
        reference = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(reference)
    return reference.window_mask(num_queries, num_keys, radius, device)
"""


#: (10.) After masked_softmax's answer: every input the answer is called on is kept, hidden cases' included.
RECORDS_INPUTS = """
SEEN = []
_right_masked_softmax = masked_softmax

def masked_softmax(X, valid_lens):
    SEEN.append(X.detach().cpu().flatten()[:64].tolist())
    return _right_masked_softmax(X, valid_lens)
"""
#: (10.) Before the bad-arguments test: a ValueError that carries what masked_softmax saw, not the argument's name.
RAISES_WHAT_IT_SAW = """
_right_masked_attention = masked_attention

def masked_attention(*args, **kwargs):
    try:
        return _right_masked_attention(*args, **kwargs)
    except ValueError:
        raise ValueError('seen: ' + repr(SEEN[-1])) from None
"""


def _after(nb: dict, grade_id: str, code: str) -> dict:
    """A copy of ``nb`` with a code cell of the student's own holding ``code`` right after cell ``grade_id``."""
    nb = copy.deepcopy(nb)
    index = nb["cells"].index(cells_with(nb, grade_id)[0])
    nb["cells"].insert(index + 1, {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                                   "source": textwrap.dedent(code).strip() + "\n"})
    return nb


def _cgroups() -> bool:
    """Whether kernels get a cgroup here (the resource attacks are expected to fail only then)."""
    from autograder.grading import limits

    return isinstance(limits.available(), limits.Hierarchy)


def _if_it_leaks(attempt: str) -> str:
    """``attempt`` (which sets ``leaked``), then a right ``window_mask`` if it leaked, a wrong one otherwise."""
    return textwrap.dedent(attempt) + "\nif leaked:\n" + textwrap.indent(RIGHT_WINDOW.strip(), "    ") + \
        "\nelse:\n" + textwrap.indent(WRONG_WINDOW.strip(), "    ") + "\n"


def _always_equal_tensors() -> str:
    """A tensor subclass whose ``==`` is always true, built without names the scan flags."""
    return textwrap.dedent("""
        Base = torch.Tensor
        class AlwaysEqual(Base):
            def __eq__(self, other):
                return True
        def window_mask(num_queries, num_keys, radius):
            return AlwaysEqual(torch.zeros(num_queries, num_keys, dtype=torch.bool))
        """)


def _hard_coded_window() -> str:
    """``window_mask`` as a table of the visible cases' answers, zeros for anything else."""
    table = {}
    for q, k in [(4, 4), (3, 5), (5, 3), (1, 1), (3, 3)]:
        for radius in (0, 1, 2, max(q, k)):
            i, j = torch.arange(q)[:, None], torch.arange(k)[None, :]
            table[(q, k, radius)] = ((i - j).abs() <= radius).tolist()
    return f"TABLE = {table!r}\n\ndef window_mask(num_queries, num_keys, radius):\n" \
           f"    key = (num_queries, num_keys, radius)\n" \
           f"    if key in TABLE:\n        return torch.tensor(TABLE[key])\n" \
           f"    return torch.zeros(num_queries, num_keys, dtype=torch.bool)\n"


def write(course: Path, student: str, notebook, assignment: str = ASSIGNMENT) -> None:
    """Place ``student``'s submission of ``assignment`` in nbgrader's ``submitted/`` layout."""
    folder = course / "submitted" / student / assignment
    folder.mkdir(parents=True, exist_ok=True)
    if student == "missing_notebook":
        (folder / "my_work.ipynb").write_text(json.dumps(notebook or {}))
    elif notebook is None:
        return
    elif isinstance(notebook, str):
        (folder / f"{assignment}.ipynb").write_text(notebook)
    else:
        (folder / f"{assignment}.ipynb").write_text(json.dumps(notebook))
    (folder / "timestamp.txt").write_text("2026-11-20 12:00:00.000000 UTC")


# 12. fair time, and output while judged


def floods_while_judged(messages: int, megabytes: int) -> str:
    """A right ``window_mask`` that prints ``messages`` x ``megabytes`` MB on its first call, that is while it
    is judged (test cells do not run at grading)."""
    return RIGHT_WINDOW.replace("def window_mask", "def _right_window_mask") + textwrap.dedent(f"""
        FLOODED = []

        def window_mask(num_queries, num_keys, radius, device=None):
            while len(FLOODED) < {messages}:
                FLOODED.append(print('x' * {megabytes * 10**6}, flush=True))
            return _right_window_mask(num_queries, num_keys, radius, device)
        """)


# 11. (oversized files) A notebook made larger than ``size`` bytes by one cell: refused before it is read.
def oversized(nb: dict, size: int) -> dict:
    """A copy of ``nb`` with one more code cell, a comment of ``size`` bytes."""
    nb = copy.deepcopy(nb)
    nb["cells"].append({"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                        "source": "# " + "x" * size + "\n"})
    return nb


# 11. (many cells) A notebook that adds more cells than are read: the grader's work and its pages stay those of the bound.
def many_cells(nb: dict, count: int, last: str) -> dict:
    """A copy of ``nb`` with ``count`` code cells of one line added after answer cell ``window_mask``, the last of
    them ``last``."""
    nb = copy.deepcopy(nb)
    index = nb["cells"].index(cells_with(nb, "window_mask")[0])
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": "x = 1"}
    nb["cells"][index + 1:index + 1] = [cell] * (count - 1) + [{**cell, "source": textwrap.dedent(last).strip()}]
    return nb


# 13. forgeries of what is observed inside the kernel


#: The parts of 03_masking that forbid library attention: their points rest on the grader's reading of the code.
FORBIDDING = ("test_masked_softmax", "test_masked_attention")


def unsure(**changes: str) -> dict[str, str]:
    """The statuses of a notebook holding code the grader's reading cannot see past (``grading/reading.py``): the
    parts that forbid library attention ``needs a look``, every other part ``passed`` (its points rest on its
    results), except those named (by the answer's name), which keep another status."""
    return {part: changes.get(part.removeprefix("test_"), "needs a look" if part in FORBIDDING else "passed")
            for part in PARTS}


#: A cell that replaces the kernel's respondent: each reply says no library attention was called, sends back the
#: inputs as they were before the call, and makes every replay on the meta device inconclusive (13.).
FORGES_THE_RESPONDENT = """
import copy
import autograder.kernel.serve as respondent
genuine = respondent.respond

def on_meta(value):
    device = value if isinstance(value, torch.device) else getattr(value, 'device', None)
    return isinstance(device, torch.device) and device.type == 'meta'

def forged(declaration, answer, request, earlier=None):
    if any(on_meta(value) for value in [*request.args, *request.kwargs.values()]):
        return respondent.Reply(error='RuntimeError: not supported on meta')  # inconclusive, never a device fault
    before = copy.deepcopy((request.args, request.kwargs))
    request.library = False
    reply = genuine(declaration, answer, request, earlier)
    reply.after, reply.library = before, []
    return reply

respondent.respond = forged
"""
#: masked_softmax that fills the caller's scores in place.
IN_PLACE_SOFTMAX = """
def masked_softmax(X, valid_lens):
    if valid_lens is None:
        return torch.softmax(X, dim=-1)
    lens = valid_lens[:, None, None] if valid_lens.dim() == 1 else valid_lens[:, :, None]
    mask = (torch.arange(X.shape[-1], device=X.device) < lens).expand_as(X)
    has_key = mask.any(dim=-1, keepdim=True)
    X.masked_fill_(~mask, float('-inf'))  # changes the caller's scores
    return torch.softmax(X.masked_fill(~has_key, 0.0), dim=-1) * mask
"""
#: causal_mask with its rows on the CPU whatever device is asked for.
FIXED_DEVICE_CAUSAL = """
def causal_mask(num_queries, num_keys, device=None):
    rows = torch.arange(num_queries)[:, None]  # on the CPU, whatever the device
    return rows >= torch.arange(num_keys, device=device)[None, :]
"""
#: masked_attention's argument checks, then its mask made additive (0 where a key is allowed, -inf elsewhere).
_CHECKED_ARGUMENTS = """
def masked_attention(queries, keys, values, mask=None):
    if keys.shape[-1] != queries.shape[-1]:
        raise ValueError('keys must have the width d of the queries')
    if values.shape[-2] != keys.shape[-2]:
        raise ValueError('values must have one row per key')
    if mask is not None and mask.dtype != torch.bool:
        raise ValueError('mask must be a bool tensor (True = may attend)')
    if mask is not None:
        mask = torch.zeros(mask.shape, dtype=queries.dtype, device=queries.device).masked_fill(~mask, float('-inf'))
"""
#: masked_attention by ATen's math path, reached as ``{operators}`` (it returns the weights too).
ATEN_ATTENTION = _CHECKED_ARGUMENTS + """
    output, weights = {operators}._scaled_dot_product_attention_math(queries, keys, values, attn_mask=mask)
    return output.nan_to_num(0.0), weights.nan_to_num(0.0)
"""
#: masked_attention by torch.nn.functional.scaled_dot_product_attention, its weights computed beside it.
LIBRARY_ATTENTION = "import torch.nn.functional as F\n" + _CHECKED_ARGUMENTS + """
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1]) + (0 if mask is None else mask)
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask).nan_to_num(0.0), weights
"""


# 14. the third round: a reply forged through input(), threads, hostile bytes


#: The reply forged the way a determined student found: the answer, when the grader's request runs it, finds the
#: request on the stack (``sys._getframe``), computes every reply itself, and sends them first through the kernel's
#: ``input()`` with the prompt the grader reads, each saying no library attention was called and the inputs were
#: left alone. Every answer of 03 calls ``_forge()`` first.
FORGES_THROUGH_INPUT = """
import sys, base64
from autograder import wire as _wire

_FORGED = set()

def _forge():
    frame = sys._getframe(1)
    while frame is not None and not ('data' in frame.f_locals and 'declaration' in frame.f_locals):
        frame = frame.f_back
    if frame is None or id(frame.f_locals['data']) in _FORGED:
        return
    data, declaration, answer = frame.f_locals['data'], frame.f_locals['declaration'], frame.f_locals['answer']
    _FORGED.add(id(data))
    replies = []
    for asked in data['requests']:
        role = asked['role']
        function = (declaration.adapt(answer) if role == 'cases' else answer if role == 'arguments'
                    else declaration.probe(role).adapt(answer))
        try:
            result, error = function(*asked['args'], **asked['kwargs']), ''
        except Exception as raised:
            result, error = None, type(raised).__name__ + ': ' + str(raised)
        replies.append({'result': result, 'error': error, 'unanswered': False, 'library': [], 'module': '__main__',
                        'after': (asked['args'], asked['kwargs']), 'missing': ''})
    input(chr(30) + 'autograder reply ' + base64.b64encode(_wire.pack(replies, reply=True)).decode())
"""


def forged_through_input(nb: dict) -> dict:
    """A copy of ``nb`` with :data:`FORGES_THROUGH_INPUT` after its imports and every function and method of its
    answer cells calling ``_forge()`` first."""
    import re

    nb = _after(nb, "imports", FORGES_THROUGH_INPUT)
    for cell in nb["cells"]:
        if cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
            source = "".join(cell["source"])
            cell["source"] = re.sub(r"^( *)(def \w+\(.*\):\n)", r"\1\2\1    _forge()\n", source, flags=re.MULTILINE)
    return nb


def forgeries_through_input(solution: dict) -> dict[str, dict]:
    """``{"input_forged": notebook, "input_forged_control": notebook}``: the solution with masked_softmax filling its
    input in place and masked_attention computed by library attention (its name built from pieces in the forged
    one, where every answer first forges the replies; named plainly in the control)."""
    hidden_library = LIBRARY_ATTENTION.replace("F.scaled_dot_product_attention",
                                               "getattr(F, 'scaled_dot_' + 'product_attention')")
    forged = answer(answer(solution, "masked_softmax", IN_PLACE_SOFTMAX), "masked_attention", hidden_library)
    control = answer(answer(solution, "masked_softmax", IN_PLACE_SOFTMAX), "masked_attention", LIBRARY_ATTENTION)
    return {"input_forged": forged_through_input(forged), "input_forged_control": control}


#: masked_attention whose output is computed by library attention in a thread of its own (where no thread-local
#: watch of the kernel sees it), its weights beside it.
LIBRARY_IN_A_THREAD = "import torch.nn.functional as F\nfrom concurrent.futures import ThreadPoolExecutor\n" + \
    _CHECKED_ARGUMENTS + """
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1]) + (0 if mask is None else mask)
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    with ThreadPoolExecutor(1) as pool:
        output = pool.submit(F.scaled_dot_product_attention, queries, keys, values, attn_mask=mask).result()
    return output.nan_to_num(0.0), weights
"""


#: Replies that once crashed or bloated the grader's decoding, as the code that builds them in the kernel: a 60-byte
#: ``meta`` tensor of 2**124 elements, a size out of int64's range, and a 48 MB header of empty dicts that
#: ``json.loads`` built into 1.2 GB in the grader.
HOSTILE_REPLIES = {
    "reply_meta_2_124": "b'{\"value\": {\"tensor\": null, \"shape\": [4611686018427387904, 4611686018427387904], "
                        "\"dtype\": \"bool\"}, \"buffers\": []}'",
    "reply_size_2_63": "b'{\"value\": {\"tensor\": null, \"shape\": [9223372036854775808], \"dtype\": \"bool\"}, "
                       "\"buffers\": []}'",
    "reply_header_of_empty_dicts": "b'{\"value\": [' + b'{}, ' * 12_000_000 + b'{}], \"buffers\": []}'",
}


def sends_first(header: str) -> str:
    """A right ``window_mask`` that, on its first call (while it is judged), sends as the kernel's reply, through
    ``input()``, a message of the wire's format whose header the expression ``header`` builds."""
    return RIGHT_WINDOW.replace("def window_mask", "def _right_window_mask") + textwrap.dedent(f"""
        import base64
        SENT = []

        def window_mask(num_queries, num_keys, radius, device=None):
            if not SENT:
                header = {header}
                message = b'AGW1' + len(header).to_bytes(4, 'little') + header
                SENT.append(input(chr(30) + 'autograder reply ' + base64.b64encode(message).decode()))
            return _right_window_mask(num_queries, num_keys, radius, device)
        """)
