"""The instructors' grading command, ``python -m autograder grade``, against crafted submissions.

One course holds the whole adversarial catalogue of ``submissions.py`` and is graded in
one run, so every crafted submission is graded beside the others: each must get the
right grade for every part, and none may change anything outside its sandbox.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import submissions as S
from autograder.grading.execute import MAX_RESTARTS
from course import ASSIGNMENTS, load, make_course, nbgrader, notebook

pytestmark = [pytest.mark.sandbox, pytest.mark.nbgrader]

A = S.ASSIGNMENT


def grade_command(course: Path, *options: str, assignment: str = A) -> list[str]:
    """The grading command for ``course``, with the course secret in a file beside it."""
    return [sys.executable, "-m", "autograder", "grade", assignment, "--course-dir", str(course),
            "--secret-file", str(course.parent / f"{course.name}.secret"), *options]


def grade(course: Path, *options: str, assignment: str = A) -> subprocess.CompletedProcess:
    """Run the grading command on ``course``; fail with its output if it fails."""
    result = subprocess.run(grade_command(course, *options, assignment=assignment), capture_output=True, text=True,
                            timeout=1200)
    assert result.returncode == 0, f"grading failed:\n{result.stdout}\n{result.stderr}"
    return result


def read_rows(course: Path, assignment: str = A) -> dict[tuple[str, str], dict]:
    """``{(student, part): row}`` of ``grades/<assignment>.csv``."""
    with (course / "grades" / f"{assignment}.csv").open(newline="") as handle:
        return {(row["student"], row["part"]): row for row in csv.DictReader(handle)}


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Listener:
    """A TCP server on localhost that counts the connections it receives."""

    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.5)
        self.port = self.server.getsockname()[1]
        self.connections = 0
        self.running = True
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while self.running:
            try:
                self.server.accept()[0].close()
                self.connections += 1
            except OSError:
                pass

    def close(self):
        self.running = False
        self.server.close()


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The catalogue, graded once with two workers and a 15 s cell limit."""
    course = make_course(tmp_path_factory.mktemp("grading"))
    listener = Listener()
    solution, blank = load(notebook(course / "solutions", A)), load(notebook(course / "exercises", A))
    entries = S.catalogue(solution, blank, course, listener.port)
    for student, (nb, _) in entries.items():
        S.write(course, student, nb)
    guarded = [notebook(course / "solutions", A), notebook(course / "submitted" / "correct", A)]
    before = {path: digest(path) for path in guarded}
    started = time.monotonic()
    result = grade(course, "--workers", "2", "--timeout", "15")
    print(f"graded {len(entries)} crafted submissions in {time.monotonic() - started:.0f} s")
    yield course, entries, result, listener, before
    listener.close()


def test_every_crafted_submission_gets_the_right_grade_for_every_part(graded):
    course, entries, _, _, _ = graded
    rows = read_rows(course)
    wrong = []
    for student, (_, expected) in entries.items():
        for part, status in expected.items():
            row = rows.get((student, part))
            score = S.POINTS[part] if status == "passed" else 0
            got = (row["status"], float(row["score"]), float(row["max_score"])) if row else None
            if got != (status, score, S.POINTS[part]):
                wrong.append(f"{student} {part}: expected {status} {score}/{S.POINTS[part]}, got {got} "
                             f"({row and row['message'][:200]})")
    assert not wrong, "\n".join(wrong)


def test_messages_say_what_went_wrong(graded):
    course, _, _, _, _ = graded
    rows = read_rows(course)
    assert "not answered" in rows[("blank", "test_causal_mask")]["message"]
    assert "window_mask" in rows[("partial", "test_window_mask")]["message"]
    assert "time limit" in rows[("infinite_loop", "test_window_mask")]["message"] or \
        "longer than" in rows[("infinite_loop", "test_window_mask")]["message"]
    assert "the mask has wrong entries" in rows[("patches_allclose", "test_window_mask")]["message"]
    assert "expected a torch.Tensor, got bool" in rows[("forges_replies", "test_causal_mask")]["message"]
    assert "raised" in rows[("calls_references", "test_window_mask")]["message"]
    assert "not valid notebook JSON" in rows[("malformed_json", "test_causal_mask")]["message"]


def test_odd_text_from_a_kernel_is_stored_replaced_and_hidden_inputs_stay_out_of_the_grades(graded):
    course, _, _, _, _ = graded
    rows = read_rows(course)
    message = rows[("surrogate_message", "test_window_mask")]["message"]
    assert "raised ValueError" in message and "\ufffd" in message and "\x1b" not in message, message
    for student in ("surrogate_output", "surrogate_in_comment"):  # stored as UTF-8, read back
        json.loads(notebook(course / "autograded" / student, A).read_text(encoding="utf-8"))
    leaked = rows[("leaks_hidden_inputs", "test_masked_attention_arguments")]["message"]
    assert "seen: [" in leaked and "[…]" in leaked, leaked  # the kernel's words, with the numbers elided
    assert not re.search(r"(\d+\.\d+, ){4}", leaked), leaked


def test_nothing_outside_a_sandbox_was_read_written_or_contacted(graded):
    course, _, _, listener, before = graded
    assert not (course / "pwned.txt").exists()
    assert {path: digest(path) for path in before} == before
    assert listener.connections == 0


def test_nbgrader_export_and_feedback_work_on_the_gradebook(graded):
    course, entries, _, _, _ = graded
    rows = read_rows(course)
    nbgrader(course, "export")
    with (course / "grades.csv").open(newline="") as handle:
        exported = {row["student_id"]: float(row["raw_score"]) for row in csv.DictReader(handle) if row["assignment"] == A}
    totals = {s: sum(float(rows[(s, p)]["score"]) for p in S.PARTS) for s in entries}
    assert exported == totals
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:  # nbgrader's "No response." comments
        comments = {s: {c.auto_comment for c in gradebook.find_submission_notebook(A, A, s).comments}
                    for s in ("blank", "correct")}
    assert comments == {"blank": {"No response."}, "correct": {None}}
    nbgrader(course, "generate_feedback", A, "--student", "partial")
    html = (course / "feedback" / "partial" / A / f"{A}.html").read_text()
    assert "window_mask" in html and "BEGIN HIDDEN TESTS" not in html and "hidden=True" not in html


def test_nothing_a_kernel_printed_carries_a_script_a_key_or_a_hidden_test_into_the_pages(graded):
    course, _, _, _, _ = graded
    nbgrader(course, "generate_feedback", A, "--student", "leaks_and_injects")
    pages = {"autograded": notebook(course / "autograded" / "leaks_and_injects", A).read_text(),
             "feedback": (course / "feedback" / "leaks_and_injects" / A / f"{A}.html").read_text()}
    for name, text in pages.items():
        assert "environment:" in text and "history:" in text, f"{name}: the student's own prints are kept"
        for secret in ("hidden=True", "HIDDEN TESTS", "SEED_KEY", "fromlist=['serve']", "fromlist=['pin']"):
            assert secret not in text, f"{name} holds {secret!r}"
    assert not _executable(pages["feedback"], "injected-by-a-student"), "the feedback page runs the student's script"


def _executable(page: str, marker: str) -> list[str]:
    """What in an HTML page could run ``marker``: a script holding it, or an element attribute (onload=…) that does.

    Text (a cell's source, printed output) is escaped and runs nothing, whatever it says.
    """
    from html.parser import HTMLParser

    found = []

    class Finder(HTMLParser):
        script = False

        def handle_starttag(self, tag, attrs):
            self.script = tag == "script"
            found.extend(f"<{tag} {name}=…>" for name, value in attrs if value and marker in value)

        def handle_endtag(self, tag):
            self.script = False

        def handle_data(self, data):
            if self.script and marker in data:
                found.append("<script>")

    Finder().feed(page)
    return found


def test_a_kernel_out_of_memory_is_told_so(graded):
    course, entries, _, _, _ = graded
    if "memory_outside_the_heap" not in entries:
        pytest.skip("no cgroup here: the kernel's memory outside the heap is not limited")
    message = read_rows(course)[("memory_outside_the_heap", "test_window_mask")]["message"]
    assert "ran out of its 4096 MiB of memory" in message, message


def test_the_run_says_which_limits_applied(graded):
    _, _, result, _, _ = graded
    assert "limits per kernel" in result.stdout, result.stdout[:1000]


def test_a_flood_of_output_is_cut_off(graded):
    course, _, _, _, _ = graded
    path = notebook(course / "autograded" / "output_flood", A)
    assert path.stat().st_size < 5_000_000
    assert "[output cut off" in path.read_text()


def test_unchanged_submissions_are_not_graded_again(graded):
    course, entries, _, _, _ = graded
    result = grade(course, "--workers", "2", "--timeout", "15")  # the settings the grades were made with
    assert f"{len(entries)} submissions, 0 to grade" in result.stdout
    assert "graded 0 submissions" in result.stdout


def test_a_killed_run_resumes_to_the_grades_of_an_uninterrupted_one(tmp_path):
    course = make_course(tmp_path)
    solution, blank = load(notebook(course / "solutions", A)), load(notebook(course / "exercises", A))
    expected = {"ada": 9.0, "ben": 0.0, "cy": 9.0, "dee": 0.0}  # the assignment's 9 points, or none
    for student, total in expected.items():
        S.write(course, student, solution if total else blank)
    command = grade_command(course, "--workers", "1")
    run = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    states = course / "grades" / ".state" / A
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and len(list(states.glob("*.json"))) < 1 and run.poll() is None:
        time.sleep(0.2)
    os.killpg(run.pid, signal.SIGKILL)
    run.wait()
    done = len(list(states.glob("*.json")))
    assert 1 <= done < len(expected), "the run should have been killed halfway"
    result = grade(course, "--workers", "1")
    assert f"{len(expected) - done} to grade" in result.stdout
    rows = read_rows(course)
    assert len(rows) == len(expected) * len(S.PARTS)
    assert {s: sum(float(rows[(s, p)]["score"]) for p in S.PARTS) for s in expected} == expected
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        submissions = gradebook.find_assignment(A).submissions
        assert sorted(s.student.id for s in submissions) == sorted(expected)
        assert {s.student.id: s.score for s in submissions} == expected


#: A cell of 4 s under the 5 s cell limit: run, then replayed after the kill that follows it, it takes the 8 s of the
#: notebook's limit whatever a new kernel's start costs, so the cells after it are never reached in time.
SLOW_PADDING = "import time\ntime.sleep(4)\n" + S.RIGHT_PADDING
KILL = "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"


def test_replays_are_held_to_the_deadlines_and_the_next_student_is_graded(tmp_path):
    """A kernel killed again and again, each time replaying a slow cell, stops at the notebook's limit."""
    course = make_course(tmp_path)
    solution = load(notebook(course / "solutions", A))
    spinning = S.answer(S.answer(solution, "padding_mask", SLOW_PADDING), "window_mask", KILL + S.RIGHT_WINDOW)
    index = spinning["cells"].index(S.cells_with(spinning, "padding_mask")[0])
    spinning["cells"].insert(index + 1, {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                                         "source": KILL})
    S.write(course, "replays", spinning)
    S.write(course, "zz_next", solution)
    result = grade(course, "--workers", "1", "--timeout", "5", "--notebook-timeout", "8", "-v")
    rows = read_rows(course)
    statuses = {part: rows[("replays", part)]["status"] for part in S.PARTS}
    assert statuses == {"test_masked_softmax": "needs a look", "test_causal_mask": "passed",  # os.kill: unsure
                        "test_causal_mask_bottom_right": "passed",
                        "test_padding_mask": "error",  # the killer added after its answer counts with it
                        "test_window_mask": "timeout", "test_masked_attention": "timeout",  # never reached in time
                        "test_masked_attention_arguments": "error"}, statuses  # its answer was never defined
    for part in ("test_masked_attention", "test_masked_attention_arguments"):
        assert "time limit of 8 s was reached" in rows[("replays", part)]["message"]
    # the deadline stopped the replays, not the allowance of restarts
    assert not any("lost too often" in row["message"] for row in rows.values()), rows
    assert sum(float(rows[("zz_next", part)]["score"]) for part in S.PARTS) == 9
    # Its time, against the solution's graded in the same run (so on a loaded machine, both slower): at most the
    # notebook's limit twice (cells, then judging) and, generously, a whole notebook's grading per kernel started
    # (the first and at most MAX_RESTARTS more in each phase).
    seconds = {student: float(took) for student, took in
               re.findall(r"(\S+): [\d.]+/[\d.]+, graded by .* in ([\d.]+) s", result.stdout)}
    assert set(seconds) == {"replays", "zz_next"}, result.stdout
    starts = 1 + 2 * MAX_RESTARTS
    assert seconds["replays"] < 2 * 8 + starts * seconds["zz_next"], (
        f"the replays took {seconds['replays']:.0f} s, the solution {seconds['zz_next']:.0f} s: "
        "the notebook's limit (twice 8 s) was not kept")


def test_kernels_in_sandboxes_of_their_own_are_judged_alike(tmp_path):
    """Where no zygote runs, each kernel gets its own bubblewrap sandbox: the same grades, references as sealed."""
    course = make_course(tmp_path)
    solution = load(notebook(course / "solutions", A))
    S.write(course, "correct", solution)
    S.write(course, "calls_references", S.answer(solution, "window_mask", S.CALLS_THE_REFERENCE))
    command = grade_command(course, "--workers", "1")
    result = subprocess.run(command, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "AUTOGRADER_ZYGOTE": "0"})
    assert result.returncode == 0, result.stdout + result.stderr
    rows = read_rows(course)
    assert sum(float(rows[("correct", part)]["score"]) for part in S.PARTS) == 9
    assert {part: rows[("calls_references", part)]["status"] for part in S.PARTS} == S.unsure(window_mask="failed")
    assert "not in a grading kernel" in rows[("calls_references", "test_window_mask")]["message"] or \
        "No such file" in rows[("calls_references", "test_window_mask")]["message"]


def test_without_the_sandbox_the_solution_gets_full_marks_and_a_wrong_answer_loses_its_part(tmp_path):
    """``--no-sandbox`` (a machine without bubblewrap, the instructor's choice): kernels forked from a zygote
    without namespaces, nothing to seal, the same grades; the run's first lines say the sandbox is off."""
    course = make_course(tmp_path)
    solution = load(notebook(course / "solutions", A))
    S.write(course, "correct", solution)
    S.write(course, "wrong_window", S.answer(solution, "window_mask", S.WRONG_WINDOW))
    result = subprocess.run(grade_command(course, "--workers", "1", "--no-sandbox"), capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = read_rows(course)
    assert sum(float(rows[("correct", part)]["score"]) for part in S.PARTS) == 9
    assert {part: rows[("wrong_window", part)]["status"] for part in S.PARTS} == S.expect(window_mask="failed")
    assert "sandbox OFF" in result.stdout + result.stderr


def test_bad_arguments_get_clear_errors(tmp_path):
    command = [sys.executable, "-m", "autograder", "grade", A, "--course-dir", str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode != 0 and "source notebook" in (result.stdout + result.stderr)
    result = subprocess.run(command + ["--workers", "0"], capture_output=True, text=True)
    assert result.returncode == 2 and "--workers" in result.stderr


def test_an_unedited_notebook_is_graded_as_the_source_itself():
    import nbformat

    from autograder.grading.notebooks import assemble

    source = nbformat.read(notebook(Path(__file__).parents[2] / "solutions", A), as_version=4)
    assembled = assemble(source, source)
    assert [c.source for c in assembled.notebook.cells] == [c.source for c in source.cells]
    assert "extra" not in assembled.roles


# --------------------------------------------------------------------------------------
# Grades an instructor can defend: reproducible, proportionate, one bug costs once
# --------------------------------------------------------------------------------------

SCORING = "02_attention_scoring"
K_T_SLIP = """
def scaled_dot_product_scores(queries, keys):
    if queries.dim() < 2 or keys.dim() < 2 or keys.shape[-1] != queries.shape[-1]:
        raise ValueError("queries and keys must be (..., n, d) of one width d")
    return queries @ keys.T / math.sqrt(queries.shape[-1])  # .T reverses every axis of a batch
"""
NO_VALIDATION = """
def scaled_dot_product_scores(queries, keys):
    return queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])
"""
TUNED_TO_THE_VISIBLE_CASES = """
def attention(queries, keys, values, score_fn=scaled_dot_product_scores):
    if values.shape[-2] != keys.shape[-2]:
        raise ValueError("values must have one row per key")
    weights = torch.softmax(score_fn(queries, keys), dim=-1)
    if "autograder.ch02" in getattr(score_fn, "__module__", ""):  # the visible cases' scores
        return weights @ values, weights
    return weights @ values * 1.01, weights
"""


#: additive_scores building every (query, key) pair: a (q, k, dq + dk) tensor, 256 MiB on the memory probe's inputs.
ALL_PAIRS = """
def additive_scores(queries, keys, W_q, W_k, w_v):
    if W_q.shape[0] != queries.shape[-1] or W_k.shape[0] != keys.shape[-1] or W_k.shape[1] != W_q.shape[1]:
        raise ValueError("W_k must be (dk, h), with the h of W_q")
    if w_v.shape != (W_q.shape[1],):
        raise ValueError("w_v must be (h,)")
    q, k = queries.shape[-2], keys.shape[-2]
    pairs = torch.cat([queries.unsqueeze(-2).expand(*queries.shape[:-1], k, queries.shape[-1]),
                       keys.unsqueeze(-3).expand(*keys.shape[:-2], q, k, keys.shape[-1])], dim=-1)
    return torch.tanh(pairs @ torch.cat([W_q, W_k])) @ w_v
"""
PAIRS_IN_A_THREAD = ALL_PAIRS.replace("def additive_scores(", "def _every_pair(") + """
from concurrent.futures import ThreadPoolExecutor

def additive_scores(queries, keys, W_q, W_k, w_v):
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(_every_pair, queries, keys, W_q, W_k, w_v).result()
"""


PAIRS_IN_ROOM_LET_GO = ALL_PAIRS.replace("def additive_scores(", "def _every_pair(") + """
ROOM = [torch.ones(600 * 2**20 // 4)]  # 600 MiB held between calls

def additive_scores(queries, keys, W_q, W_k, w_v):
    ROOM.clear()  # let go, so that the pairs fit where it was
    scores = _every_pair(queries, keys, W_q, W_k, w_v)
    ROOM.append(torch.ones(600 * 2**20 // 4))
    return scores
"""


@pytest.fixture(scope="module")
def scoring_course(tmp_path_factory):
    """Assignment 02 graded twice (the second time with --force) with the same secret."""
    course = make_course(tmp_path_factory.mktemp("scoring"))
    solution = load(notebook(course / "solutions", SCORING))
    submissions = {
        "correct": solution,
        "k_t_slip": S.answer(solution, "scaled_dot_product_scores", K_T_SLIP),
        "no_validation": S.answer(solution, "scaled_dot_product_scores", NO_VALIDATION),
        "twin_a": S.answer(solution, "attention", TUNED_TO_THE_VISIBLE_CASES),
        "twin_b": S.answer(solution, "attention", TUNED_TO_THE_VISIBLE_CASES),
        # the third round: every (query, key) pair built at once, in a thread of its own (where no thread-local
        # watch inside the kernel sees it), beside its control, the same in the main thread
        "pairs_in_a_thread": S.answer(solution, "additive_scores", PAIRS_IN_A_THREAD),
        "pairs_in_a_thread_control": S.answer(solution, "additive_scores", ALL_PAIRS),
        # memory held between calls and let go during each, to make room for the pairs unseen
        "pairs_in_room_let_go": S.answer(solution, "additive_scores", PAIRS_IN_ROOM_LET_GO),
    }
    for student, nb in submissions.items():
        S.write(course, student, nb, assignment=SCORING)
    grade(course, "--workers", "2", assignment=SCORING)
    first = (course / "grades" / f"{SCORING}.csv").read_bytes()
    grade(course, "--workers", "2", "--force", assignment=SCORING)
    return course, first


def test_regrading_gives_byte_identical_grades(scoring_course):
    course, first = scoring_course
    assert (course / "grades" / f"{SCORING}.csv").read_bytes() == first


def test_one_bug_costs_once_and_argument_checks_are_graded_apart(scoring_course):
    course, _ = scoring_course
    rows = read_rows(course, SCORING)
    lost = {student: {part for (s, part), row in rows.items() if s == student and row["status"] != "passed"}
            for student in ("correct", "k_t_slip", "no_validation")}
    assert lost == {"correct": set(), "k_t_slip": {"test_scaled_dot_product_scores"},
                    "no_validation": {"test_scaled_dot_product_scores_arguments"}}
    assert float(rows[("no_validation", "test_scaled_dot_product_scores")]["score"]) == 1.5


def test_memory_taken_in_a_thread_counts_as_the_kernels_own(scoring_course):
    """The kernel's cgroup measures the call's memory from outside, threads included, above the least the kernel
    held during the call (memory let go to make room counts): the attacks earn no more than their control."""
    course, _ = scoring_course
    rows = read_rows(course, SCORING)
    for student in ("pairs_in_a_thread", "pairs_in_a_thread_control", "pairs_in_room_let_go"):
        row = rows[(student, "test_additive_scores")]
        assert row["status"] == "failed" and "took more than the 32 MiB of working memory it may take" in \
            row["message"], row["message"]
    assert rows[("pairs_in_a_thread", "test_attention")]["status"] == "needs a look"  # threads: beyond a reading
    total = {s: sum(float(r["score"]) for (who, _), r in rows.items() if who == s)
             for s in ("pairs_in_a_thread", "pairs_in_a_thread_control")}
    assert total["pairs_in_a_thread"] <= total["pairs_in_a_thread_control"], total


def test_two_students_get_different_hidden_cases(scoring_course):
    course, _ = scoring_course
    rows = read_rows(course, SCORING)
    messages = [rows[(twin, "test_attention")]["message"] for twin in ("twin_a", "twin_b")]
    seeds = [re.search(r"hidden case \(seed (\d+)\)", message) for message in messages]
    assert all(seeds), f"only the hidden cases catch this answer: {messages}"
    assert seeds[0].group(1) != seeds[1].group(1), "two students were graded on the same hidden inputs"


# --------------------------------------------------------------------------------------
# Every assignment through the grading command, sandbox and all
# --------------------------------------------------------------------------------------

LATER = [a for a in ASSIGNMENTS if a >= "04"]


@pytest.fixture(scope="module")
def later_assignments(tmp_path_factory):
    """Assignments 04 onwards, each with the solution and the blank exercise, and for 05 and 06 the crafted
    submissions of the tests below, each assignment graded by one run of the command."""
    course = make_course(tmp_path_factory.mktemp("later"))
    crafted = {POSITIONS: positions_crafted, TRANSFORMER: transformer_crafted}
    for assignment in LATER:
        solution = load(notebook(course / "solutions", assignment))
        students = {"solution": solution, "blank": load(notebook(course / "exercises", assignment))}
        students |= crafted[assignment](solution) if assignment in crafted else {}
        for student, nb in students.items():
            S.write(course, student, nb, assignment=assignment)
        result = grade(course, "--workers", "2", assignment=assignment)
        assert "NOT graded" not in result.stdout, result.stdout
    return course


@pytest.mark.parametrize("assignment", LATER)
def test_the_grading_command_gives_the_solution_full_marks_and_the_blank_exercise_none(later_assignments, assignment):
    rows = read_rows(later_assignments, assignment)
    solution = {part: row for (student, part), row in rows.items() if student == "solution"}
    blank = {part: row for (student, part), row in rows.items() if student == "blank"}
    assert solution and set(solution) == set(blank)
    lost = {part: (row["status"], row["message"][:300]) for part, row in solution.items() if row["status"] != "passed"}
    assert not lost, f"the solution loses points: {lost}"
    assert all(row["status"] == "failed" and float(row["score"]) == 0 for row in blank.values()), blank


# --------------------------------------------------------------------------------------
# Work a time limit covers happens inside the timed call
# --------------------------------------------------------------------------------------

#: A cell added after the answer: the training done there, before the test cell; the answer then returns it.
TRAINED_BEFORE_THE_CALL = """
_trained_before = train_sorting_transformer(seed=0)

def train_sorting_transformer(seed=0):
    return _trained_before
"""
#: The same, with one backward pass of nothing inside the call (the kernel's count of backward passes is advice).
TRAINED_BEFORE_WITH_A_DUMMY_BACKWARD = TRAINED_BEFORE_THE_CALL.replace(
    "    return _trained_before", "    torch.zeros(1, requires_grad=True).sum().backward()\n    return _trained_before")
#: chunked_attention by library attention, the answer's process kept from reporting it (a name built from pieces in
#: the forged notebook, named plainly in its control).
LIBRARY_CHUNKS = """
import torch.nn.functional as F

def chunked_attention(queries, keys, values, chunk_size, mask=None):
    if chunk_size < 1:
        raise ValueError("chunk_size must be at least 1")
    output = F.scaled_dot_product_attention(queries.float(), keys.float(), values.float(), attn_mask=mask)
    if mask is not None:
        output = output * mask.any(dim=-1, keepdim=True)
    return output.nan_to_num(0.0).to(queries.dtype)
"""
#: A block whose output in training mode has another shape: the dropout probe's comparison cannot be made.
BLOCK_OF_ANOTHER_SHAPE_IN_TRAINING = """
_right_block = TransformerEncoderBlock

class TransformerEncoderBlock(_right_block):
    def forward(self, X, valid_lens=None):
        Y = super().forward(X, valid_lens)
        return Y[:, :-1] if self.training else Y
"""


def _added_after(nb: dict, grade_id: str, code: str) -> dict:
    nb = json.loads(json.dumps(nb))
    index = nb["cells"].index(S.cells_with(nb, grade_id)[0])
    nb["cells"].insert(index + 1, {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                                   "source": code})
    return nb


TRANSFORMER = "06_transformer"


def transformer_crafted(solution: dict) -> dict[str, dict]:
    """06's crafted submissions: a training done before the call with a backward pass of nothing in it; a block whose
    training output has another shape (its trainer left unanswered: nothing to train); the third round's worst
    forgery, replies forged through input() for library attention and that training, beside its control."""
    control = S.answer(_added_after(solution, "train_sorting_transformer", TRAINED_BEFORE_WITH_A_DUMMY_BACKWARD),
                       "chunked_attention", LIBRARY_CHUNKS)
    hidden = LIBRARY_CHUNKS.replace("F.scaled_dot_product_attention", "getattr(F, 'scaled_dot_' + 'product_attention')")
    untrained = S.answer(solution, "train_sorting_transformer", "def train_sorting_transformer(seed=0):\n"
                                                                "    raise NotImplementedError")
    return {"precomputed_with_a_backward": _added_after(solution, "train_sorting_transformer",
                                                        TRAINED_BEFORE_WITH_A_DUMMY_BACKWARD),
            "block_of_another_shape": _added_after(untrained, "TransformerEncoderBlock", BLOCK_OF_ANOTHER_SHAPE_IN_TRAINING),
            "input_forged": S.forged_through_input(S.answer(control, "chunked_attention", hidden)),
            "input_forged_control": control}


def test_a_training_done_before_the_timed_call_fails_however_it_is_dressed_and_the_solution_passes(later_assignments):
    """The task depends on the seed the grader passes, so a model trained beforehand sorts in the wrong order, with
    a backward pass of nothing in the call; a block whose training output has another shape fails its own part,
    never the submission's grading; the worst forgery earns no more than its control."""
    rows = read_rows(later_assignments, TRANSFORMER)
    assert all(row["status"] == "passed" for (student, _), row in rows.items() if student == "solution")
    cheat = rows[("precomputed_with_a_backward", "test_train_sorting_transformer")]
    assert cheat["status"] == "failed" and float(cheat["score"]) == 0
    assert re.search(r"the model sorts [\d.]+% of the digits of fresh sequences correctly, in the order of seed",
                     cheat["message"]), cheat["message"]
    block = {part: row["status"] for (student, part), row in rows.items() if student == "block_of_another_shape"}
    assert block == {"test_TransformerEncoderBlock": "failed", "test_chunked_attention": "passed",
                     "test_chunked_attention_arguments": "passed", "test_train_sorting_transformer": "failed"}, block
    forged, control = ({part: (row["status"], float(row["score"])) for (student, part), row in rows.items()
                        if student == who} for who in ("input_forged", "input_forged_control"))
    assert control == {"test_TransformerEncoderBlock": ("passed", 3.0), "test_chunked_attention": ("failed", 0.0),
                       "test_chunked_attention_arguments": ("passed", 0.5),
                       "test_train_sorting_transformer": ("failed", 0.0)}, control
    assert forged == {"test_TransformerEncoderBlock": ("needs a look", 0.0),  # its results, beyond a reading
                      "test_chunked_attention": ("failed", 0.0),  # PyTorch's math path: the whole score matrix
                      "test_chunked_attention_arguments": ("passed", 0.5),
                      "test_train_sorting_transformer": ("failed", 0.0)}, forged


# --------------------------------------------------------------------------------------
# The grader's own memory and workers: oracle arguments, oversized files, the host's disk
# --------------------------------------------------------------------------------------

POSITIONS = "05_positional_encoding"
#: A module whose output in training mode has another shape (the third round: it once made the judge fail).
ENCODING_OF_ANOTHER_SHAPE_IN_TRAINING = """
_right_encoding = PositionalEncoding

class PositionalEncoding(_right_encoding):
    def forward(self, X):
        Y = super().forward(X)
        return Y[:, :-1] if self.training else Y
"""
#: A module that asks the grader's reference, through its earlier part, for a table of 10**8 elements.
ORACLE_BOMB = "super().__init__()\n        self.bomb = sinusoidal_encoding(50_000, 2_000)  # 10**8 elements"


def positions_crafted(solution: dict) -> dict[str, dict]:
    """05's crafted submissions: an oracle bomb beside three correct students, and a module whose output in training
    mode has another shape."""
    bomb = json.loads(json.dumps(solution))
    cell = S.cells_with(bomb, "PositionalEncoding")[0]
    cell["source"] = "".join(cell["source"]).replace("super().__init__()", ORACLE_BOMB, 1)
    assert ORACLE_BOMB in cell["source"]
    return {"ada": solution, "ben": solution, "cy": solution, "bomb": bomb,
            "of_another_shape": _added_after(solution, "PositionalEncoding", ENCODING_OF_ANOTHER_SHAPE_IN_TRAINING)}


def test_an_oracle_bomb_fails_its_own_part_and_the_class_graded_beside_it_gets_full_marks(later_assignments):
    """Two integers that size the reference's result count against the part's budget: refused, the worker unharmed;
    a module of another shape in training fails its own part."""
    rows = read_rows(later_assignments, POSITIONS)
    shaped = {part: row["status"] for (student, part), row in rows.items() if student == "of_another_shape"}
    assert shaped.pop("test_PositionalEncoding") == "failed" and set(shaped.values()) == {"passed"}, shaped
    for student in ("ada", "ben", "cy"):
        lost = {part: row["message"][:200] for (s, part), row in rows.items() if s == student and row["status"] != "passed"}
        assert not lost, f"{student} loses points beside the bomb: {lost}"
    bombed = {part: row for (s, part), row in rows.items() if s == "bomb" and row["status"] != "passed"}
    assert set(bombed) == {"test_PositionalEncoding"}, bombed  # its argument checks call the kernel's own table
    message = bombed["test_PositionalEncoding"]["message"]
    assert "the grader refuses to compute it" in message and "sinusoidal_encoding" in message, message


def test_a_bubblewrapped_kernel_cannot_flood_the_disk_and_an_oversized_notebook_is_refused_unread(tmp_path):
    """Without the zygote each kernel gets its own bubblewrap sandbox: its /tmp/work is memory of a fixed size too,
    so 1.5 GiB written there fails (out of space, or the kernel out of its 1 GiB). A notebook over 1 MiB is not read."""
    course = make_course(tmp_path)
    solution = load(notebook(course / "solutions", A))
    S.write(course, "correct", solution)
    S.write(course, "disk_flood", S.answer(solution, "window_mask", S._if_it_leaks(DISK_FLOOD)))
    S.write(course, "oversized", S.oversized(solution, 2**20))
    command = grade_command(course, "--workers", "2", "--memory-mb", "1024", "--max-notebook-mb", "1")
    result = subprocess.run(command, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "AUTOGRADER_ZYGOTE": "0"})
    assert result.returncode == 0, result.stdout + result.stderr
    rows = read_rows(course)
    assert {part: rows[("correct", part)]["status"] for part in S.PARTS} == S.expect()
    flooded = {part: rows[("disk_flood", part)]["status"] for part in S.PARTS}
    assert flooded.pop("test_window_mask") in ("failed", "error"), "1.5 GiB were written"  # out of space, or of memory
    assert flooded == {part: status for part, status in S.unsure().items() if part != "test_window_mask"}  # files written
    for part in S.PARTS:
        row = rows[("oversized", part)]
        assert row["status"] == "error" and "MiB, more than the 1 MiB a submission may be" in row["message"], row


#: Writes 1.5 GiB in the kernel's working folder, 128 MiB a file (a file may have 256 MiB).
DISK_FLOOD = """
leaked = False
try:
    for number in range(12):
        with open(f'flood-{number}', 'wb') as flood:
            for _ in range(128):
                flood.write(b'x' * 2**20)
    leaked = True
except OSError:
    pass
"""


def test_a_notebook_of_many_cells_is_read_up_to_its_bound_and_its_pages_stay_small(graded):
    """200,000 added cells (before --max-added-cells: a 31 MB autograded notebook, a 76 MB feedback page that took
    minutes and GBs): the first 200 are read, the run's summary and the notebook say what was left out."""
    course, _, result, _, _ = graded
    assert ("many_cells: 200,000 cells added to the notebook, more than the 200 read: the last 199,800 were left out "
            "(not run, not shown)") in result.stdout, result.stdout
    path = notebook(course / "autograded" / "many_cells", A)
    cells = load(path)["cells"]
    assert len(cells) == len(load(notebook(course / "solutions", A))["cells"]) + 200 + 1 and path.stat().st_size < 2**17
    assert cells[-1]["cell_type"] == "markdown" and "the last 199,800 were left out" in "".join(cells[-1]["source"])
    nbgrader(course, "generate_feedback", A, "--student", "many_cells")
    page = course / "feedback" / "many_cells" / A / f"{A}.html"
    assert page.stat().st_size < 4 * 2**20 and "the last 199,800 were left out" in page.read_text()


def test_an_oversized_notebook_is_refused_with_its_size_and_the_limit(graded):
    course, _, _, _, _ = graded
    message = read_rows(course)[("oversized_notebook", "test_window_mask")]["message"]
    assert "the notebook is 21.0 MiB, more than the 20 MiB a submission may be: it was not read" in message, message
