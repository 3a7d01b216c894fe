"""The class report (``autograder/instructor/report.py``) on hand-written grades tables: the grouping of
messages, the numbers per part, and the page."""

from __future__ import annotations

import csv
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.instructor.gradebook import CSV_COLUMNS, Course
from autograder.instructor.report import Row, load, mistake_groups, mistake_of, part_summaries, report

ROOT = Path(__file__).resolve().parents[2]
A = "03_masking"

WEIGHTS = ("masked_softmax: the weights: wrong values (largest error {e} at index ({i}, {j}, {k}))\n"
           "    hidden case (seed {seed}): X of shape ({b}, 4, 7), valid_lens {lens}")
SHAPE = "padding_mask: the mask: shape ({b}, {k}), expected ({b}, 1, {k})\n    hidden case (seed {seed}): valid_lens {lens}"


def words(page: str) -> str:
    """What a reader sees of a piece of the page: its text, without tags."""
    return re.sub(r"<[^>]+>", "", page)


def row(student, part, score, max_score, status="passed", message="", auto_score=None):
    return {"student": student, "assignment": A, "part": part, "score": score, "max_score": max_score,
            "status": status, "message": message, "auto_score": score if auto_score is None else auto_score}


def write_course(root: Path, rows: list[dict], submitted: list[str], state: dict[str, float] | None = None,
                 part_seconds: dict[tuple[str, str], float] | None = None, assignment: str = A,
                 returned: dict[tuple[str, str], str] | None = None, unanswered: dict[str, dict] | None = None,
                 fingerprints: dict[str, str] | None = None) -> Path:
    """A course whose ``grades/`` holds ``rows`` and, as ``grade`` writes them, state files with each student's
    grading seconds (``state``), each part's (``part_seconds``, by student and part), what a failed part returned
    (``returned``), which answers were left blank (``unanswered``) and the submission's fingerprint."""
    grades = root / "grades"
    grades.mkdir(parents=True)
    with (grades / f"{assignment}.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    for student in submitted:
        (root / "submitted" / student / assignment).mkdir(parents=True)
    for student in {r["student"] for r in rows}:
        results = [{"part": r["part"], "seconds": (part_seconds or {}).get((student, r["part"])),
                    "returned": (returned or {}).get((student, r["part"]))} for r in rows if r["student"] == student]
        path = grades / ".state" / assignment / f"{student}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"fingerprint": (fingerprints or {}).get(student, f"x-{student}"),
                                    "results": results, "seconds": (state or {}).get(student),
                                    "unanswered": (unanswered or {}).get(student, {"an_answer": False})}))
    return root


def test_messages_that_differ_only_in_numbers_fall_into_one_group():
    one = Row("ada", "test_masked_softmax", 0, 2, "failed",
              WEIGHTS.format(e=0.25, i=0, j=1, k=3, seed=11, b=2, lens="[3, 1]"), 0, None)
    two = Row("bob", "test_masked_softmax", 0, 2, "failed",
              WEIGHTS.format(e="1.5e-02", i=1, j=0, k=6, seed=99, b=5, lens="[7, 2, 0, 4, 4]"), 0, None)
    assert mistake_of(one) == mistake_of(two) == "the weights: wrong values (largest error # at index (#…))"
    shapes = [Row(s, "test_padding_mask", 0, 1, "failed", SHAPE.format(b=b, k=k, seed=b, lens="[1]"), 0, None)
              for s, b, k in (("ada", 2, 5), ("bob", 3, 8))]
    assert mistake_of(shapes[0]) == mistake_of(shapes[1]) == "the mask: shape (#…), expected (#…)"


def test_different_mistakes_stay_apart_and_names_with_digits_are_not_numbers():
    def first(message):
        return mistake_of(Row("ada", "test_causal_mask", 0, 1, "failed", message, 0, None))

    texts = {first("causal_mask: the mask: dtype torch.float32, expected torch.bool\n    case: 3 queries"),
             first("causal_mask: the mask: dtype torch.int64, expected torch.bool\n    case: 5 queries"),
             first("causal_mask: the mask has wrong entries at (0, 1): the values that a strict mask gives"),
             first("causal_mask: the mask has wrong entries at (2, 4): the values that a transposed mask gives"),
             first("causal_mask: is not device-agnostic")}
    assert len(texts) == 5
    assert "torch.float32" in "".join(texts) and "torch.int64" in "".join(texts)


def class_rows() -> tuple[list[dict], list[str]]:
    """Six students, two parts: full marks, two of one mistake, one of another, a blank, a timeout, an override."""
    rows = []
    for student in ("ada", "bob", "cy", "dee", "eve", "fay"):
        rows.append(row(student, "test_padding_mask", 1, 1))
    wrong = {"bob": WEIGHTS.format(e=0.3, i=0, j=1, k=2, seed=1, b=2, lens="[1, 2]"),
             "cy": WEIGHTS.format(e=0.07, i=1, j=2, k=0, seed=2, b=3, lens="[0, 2, 4]"),
             "dee": "masked_softmax: raised ValueError: =HYPERLINK(\"http://evil\") <script>alert(1)</script>"}
    rows += [row("ada", "test_masked_softmax", 2, 2)]
    rows += [row(s, "test_masked_softmax", 0, 2, "failed" if s != "dee" else "error", m) for s, m in wrong.items()]
    rows += [row("eve", "test_masked_softmax", 0, 2, "timeout", "checking it took longer than the 60 s it had"),
             row("fay", "test_masked_softmax", 2, 2, "failed", "not answered (the cell still raises "
                 "NotImplementedError)", auto_score=0)]
    return rows, ["ada", "bob", "cy", "dee", "eve", "fay", "gus"]  # gus handed in, and was not graded


def test_the_page_counts_groups_and_keeps_trouble_apart(tmp_path):
    rows, submitted = class_rows()
    course = write_course(tmp_path / "course", rows, submitted, state={"ada": 3.5, "bob": 9.25})
    path = report([A], course_dir=course)
    assert path == course / "grades" / f"report-{A}.html"
    page = path.read_text(encoding="utf-8")
    assert "7 submitted: 0 blank, 0 did not run; 6 graded, 1 not graded, 0 missing" in page
    group = "the weights: wrong values (largest error # at index (#…))"
    mistakes = page[page.index("Mistakes the class made"):page.index("What went wrong with grading")]
    assert mistakes.count(group) == 1, "two messages that differ in numbers are one group"
    at = page.index(group)
    assert "2 (33%)" in page[at:at + 300] and "bob, cy" in words(page[at:page.index("</tr>", at)])
    assert "timeout: checking it took longer than the # s it had" in page
    assert page.index("What went wrong with grading") < page.index("timeout: checking"), "a timeout is trouble"
    assert "Not graded: the grader failed on 1 submissions" in page and "gus" in page
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;" in page, "a student's text is escaped"
    assert "Grading one submission took 6.4 s (median); the slowest, bob's, 9.2 s." in page
    assert "<td class='override'>2</td>" in page, "fay's score set by hand is marked"
    assert "http://" not in page.replace("http://evil", ""), "the page loads nothing from elsewhere"
    assert page.count("data:image/png;base64,") == 2, "the histogram and the parts' bars are embedded"


def test_several_assignments_get_a_table_across_them(tmp_path):
    rows, submitted = class_rows()
    course = write_course(tmp_path / "course", rows, submitted)
    other = "04_multihead"
    with (course / "grades" / f"{other}.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows({**row(s, "test_split_heads", 1, 1), "assignment": other} for s in ("ada", "bob"))
    for student in ("ada", "bob"):
        (course / "submitted" / student / other).mkdir(parents=True)
    path = report(["03", "04"], course_dir=course)
    page = path.read_text(encoding="utf-8")
    assert path.name == f"report-{A}+{other}.html"
    assert "Across assignments" in page
    missed = page[page.index(f">{other}</a></td>"):]
    assert "5: cy, dee, eve, fay, gus" in words(missed[:missed.index("</tr>")])


def test_an_assignment_never_graded_is_refused(tmp_path):
    (tmp_path / "grades").mkdir()
    with pytest.raises(FileNotFoundError, match="run `python -m autograder grade 05_positional_encoding` first"):
        report(["05_positional_encoding"], course_dir=tmp_path)


def test_the_command_writes_the_page_and_says_where(tmp_path):
    rows, submitted = class_rows()
    course = write_course(tmp_path / "course", rows, submitted)
    done = subprocess.run([sys.executable, "-m", "autograder", "report", A, "--course-dir", str(course)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"class report: {course / 'grades' / f'report-{A}.html'}"
    helped = subprocess.run([sys.executable, "-m", "autograder", "report", "--help"], cwd=ROOT, capture_output=True,
                            text=True, timeout=300)
    assert "self-contained" in helped.stdout and "--output" in helped.stdout


def test_a_mistake_the_judge_recognised_leads_its_group_as_declared():
    from autograder.judge import KNOWN_MISTAKE

    message = (f"masked_attention: output: wrong values (largest error 0.61 at index (1, 0, 2)){KNOWN_MISTAKE}"
               "scores not scaled by 1/√d\n    hidden case (seed 5): queries (2, 1, 3, 8)")
    row = Row("ada", "test_masked_attention", 0, 2.5, "failed", message, 0, None)
    assert mistake_of(row) == "scores not scaled by 1/√d (output: wrong values (largest error # at index (#…)))"


def test_a_training_part_is_shown_against_its_time_limit(tmp_path):
    from autograder.ch06_transformer import TIME_LIMITS

    (part, limit), = TIME_LIMITS.items()
    times = {"ada": 0.2 * limit, "bob": 0.5 * limit, "cy": 0.9 * limit}
    rows = [{**row(s, f"test_{part}", 3, 3), "assignment": "06_transformer"} for s in times]
    course = write_course(tmp_path / "course", rows, list(times), assignment="06_transformer",
                          part_seconds={(s, f"test_{part}"): t for s, t in times.items()})
    page = report(["06"], course_dir=course).read_text(encoding="utf-8")
    assert (f"<code>{part}</code>: the kernel's CPU time per submission against its limit of {limit:g} s "
            f"(median {times['bob']:.1f} s, slowest {times['cy']:.1f} s). Over 80% of the limit: 1 (cy).") in page
    assert page.count("data:image/png;base64,") == 3, "the histogram, the parts' bars and the times"


# ---- the report an instructor acts on ----

OUTPUT = ("masked_attention: output: wrong values (largest error {e} at index (0, 0, {i}, 1))\n"
          "    case: queries (2, 1, 3, 8), keys (2, 1, 6, 8), values (2, 1, 6, 4), mask None, on cpu")
ANSWER_CELLS = ("masked_softmax", "causal_mask", "causal_mask_bottom_right", "padding_mask", "window_mask",
                "masked_attention")


def source_notebook(course: Path) -> None:
    """The assignment's source notebook in the course (the statements, the answer cells' ids)."""
    (course / "source" / A).mkdir(parents=True)
    (course / "source" / A / f"{A}.ipynb").write_bytes((ROOT / "solutions" / A / f"{A}.ipynb").read_bytes())


def submitted_notebook(course: Path, student: str, code: str) -> None:
    """``student``'s notebook of the assignment: the solution with ``code`` as the masked_attention answer."""
    nb = json.loads((ROOT / "solutions" / A / f"{A}.ipynb").read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("grade_id") == "masked_attention":
            cell["source"] = code
    (course / "submitted" / student / A / f"{A}.ipynb").write_text(json.dumps(nb), encoding="utf-8")


def a_class() -> tuple[list[dict], dict, dict]:
    """Ten students on three parts: two unnamed mistakes on masked_attention that read alike (two students
    each), a blank notebook, one that did not run; ``(rows, returned, unanswered)``."""
    students = ["ada", "bob", "cy", "dee", "eve", "fay", "gus", "hal", "ivy", "jo"]
    parts = [("test_padding_mask", 1), ("test_masked_attention", 2.5), ("test_masked_attention_arguments", 0.5)]
    rows, returned = [], {}
    for student in students:
        for part, points in parts:
            rows.append(row(student, part, points, points))
    def fail(student, part, message, status="failed", digest=None):
        at = next(i for i, r in enumerate(rows) if (r["student"], r["part"]) == (student, part))
        rows[at] = row(student, part, 0, rows[at]["max_score"], status, message)
        if digest:
            returned[(student, part)] = digest
    for student, error, digest in (("bob", 0.339, "unscaled-by-d"), ("cy", 0.338, "unscaled-by-d"),
                                   ("dee", 1.56, "keys-from-queries"), ("eve", 1.57, "keys-from-queries")):
        fail(student, "test_masked_attention", OUTPUT.format(e=error, i=len(student)), digest=digest)
    fail("fay", "test_padding_mask", "padding_mask: the mask: shape (2, 5), expected (2, 1, 5)")
    fail("gus", "test_padding_mask", "padding_mask: the mask: shape (3, 8), expected (3, 1, 8)")
    fail("bob", "test_padding_mask", "padding_mask: the mask: dtype torch.int64, expected torch.bool")
    for part, _ in parts:  # hal left every answer blank; ivy's notebook did not run
        fail("hal", part, "not answered (the cell still raises NotImplementedError)")
        fail("ivy", part, "`masked_attention` is not defined (the answer cell `imports` raised SyntaxError)", "error")
    unanswered = {"hal": dict.fromkeys(ANSWER_CELLS, True)}
    return rows, returned, unanswered


def test_two_unnamed_mistakes_in_one_part_are_two_groups(tmp_path):
    rows, returned, unanswered = a_class()
    course = write_course(tmp_path / "course", rows, sorted({r["student"] for r in rows}), returned=returned,
                          unanswered=unanswered)
    groups = [g for g in mistake_groups(load(Course.open(course), A)) if g.part == "test_masked_attention"]
    assert [g.students for g in groups] == [["bob", "cy"], ["dee", "eve"]]
    assert [g.text for g in groups] == [
        f"output: wrong values (largest error # at index (#…)) [returned values {k} of 2 on the same visible case]"
        for k in (1, 2)]
    assert [re.search(r"largest error ([\d.]+)", g.example).group(1) for g in groups] == ["0.339", "1.56"], \
        "each group's example is one of its own"


def test_blank_and_broken_notebooks_are_counted_once_and_left_out_of_mistakes_and_discrimination(tmp_path):
    rows, returned, unanswered = a_class()
    course = write_course(tmp_path / "course", rows, sorted({r["student"] for r in rows}), returned=returned,
                          unanswered=unanswered)
    graded = load(Course.open(course), A)
    assert (graded.blank, graded.did_not_run) == (["hal"], ["ivy"])
    assert not any({"hal", "ivy"} & set(g.students) for g in mistake_groups(graded))
    kept = [r for r in graded.rows if r.student not in ("hal", "ivy")]
    totals = {s: sum(r.score for r in kept if r.student == s) for s in {r.student for r in kept}}
    padding = [r for r in kept if r.part == "test_padding_mask"]
    expected = statistics.correlation([r.score for r in padding], [totals[r.student] - r.score for r in padding])
    summary, = [s for s in part_summaries(graded) if s.name == "padding_mask"]
    assert summary.discrimination == pytest.approx(expected)
    assert summary.full_marks == pytest.approx(5 / 10), "full marks still count every graded student"
    page = words(report([A], course_dir=course).read_text(encoding="utf-8"))
    assert "10 submitted: 1 blank, 1 did not run; 10 graded, 0 not graded, 0 missing" in page
    assert "over the 8 students who handed in answers that ran (blank notebooks and notebooks that did not run" in page
    assert "Only 8 students: with fewer than about 30" in page


def test_mistakes_follow_the_assignment_and_bad_arguments_sit_under_their_part(tmp_path):
    rows, returned, unanswered = a_class()
    rows = [r for r in rows if r["part"] != "test_padding_mask"] + [r for r in rows if r["part"] == "test_padding_mask"]
    rows.append(row("jo", "test_masked_attention_arguments", 0, 0.5, "failed",
                    "masked_attention: a mask of dtype torch.float32 did not raise ValueError"))
    rows.remove(row("jo", "test_masked_attention_arguments", 0.5, 0.5))
    course = write_course(tmp_path / "course", rows, sorted({r["student"] for r in rows}), returned=returned,
                          unanswered=unanswered)
    source_notebook(course)  # the assignment's order: its test cells'
    page = report([A], course_dir=course).read_text(encoding="utf-8")
    mistakes = words(page[page.index("Mistakes the class made"):page.index("What went wrong with grading")])
    order = [mistakes.index(text) for text in ("padding_maskthe mask: shape", "padding_maskthe mask: dtype",
                                               "masked_attentionoutput: wrong values",
                                               "masked_attention · bad argumentsa mask of dtype")]
    assert order == sorted(order), "in the assignment's order, the largest group first within a part"
    table = page[page.index("Parts, hardest first"):page.index("Mistakes the class made")]
    names = [words(cell) for cell in re.findall(r"<tr[^>]*><td>(.*?)</td>", table)]
    assert sorted(names) == ["masked_attention", "masked_attention · bad arguments", "padding_mask"]
    assert names.index("masked_attention · bad arguments") == names.index("masked_attention") + 1, \
        "the bad arguments' row comes right after its part's"


def test_every_student_group_and_part_links_to_what_it_names_offline(tmp_path):
    rows, returned, unanswered = a_class()
    students = sorted({r["student"] for r in rows})
    course = write_course(tmp_path / "course", rows, students, returned=returned, unanswered=unanswered)
    source_notebook(course)
    for student in students:
        submitted_notebook(course, student, f"def masked_attention(q, k, v, mask=None):\n    return '<{student}>'")
    for step, suffix in (("autograded", "ipynb"), ("feedback", "html")):
        (course / step / "bob" / A).mkdir(parents=True)
        (course / step / "bob" / A / f"{A}.{suffix}").write_text("{}")
    path = report([A], course_dir=course)
    page = path.read_text(encoding="utf-8")
    ids = set(re.findall(r"id='([^']+)'", page))
    links = re.findall(r"href='([^']+)'", page)
    inside = [link[1:] for link in links if link.startswith("#")]
    assert inside and all(target in ids for target in inside), "a link inside the page leads nowhere"
    files = [link for link in links if not link.startswith("#")]
    assert sorted(files) == [f"../autograded/bob/{A}/{A}.ipynb", f"../feedback/bob/{A}/{A}.html"]
    assert all((path.parent / link).resolve().is_file() for link in files)
    assert all(f"#{A}-student-{s}" in links for s in ("bob", "cy", "dee", "eve")), "the students of each group"
    assert f"#{A}-statement-test_masked_attention" in links and "6. Masked attention" in page
    assert f"#{A}-mistake-1" in links
    answers = page[page.index("Answers behind each mistake"):]
    group = answers[answers.index("output: wrong values"):]
    assert "return &#x27;&lt;bob&gt;&#x27;" in group[:group.index("</div>")], "a group's code, escaped"


def test_a_folder_renamed_after_grading_is_named(tmp_path):
    rows = [row(s, "test_padding_mask", 1, 1) for s in ("ada", "bob", "bobby")]
    course = write_course(tmp_path / "course", rows, ["ada", "bobby"], fingerprints={"bob": "f1", "bobby": "f1"})
    page = words(report([A], course_dir=course).read_text(encoding="utf-8"))
    assert "bob has no folder now, and bobby's folder holds the same files" in page
    assert "nbgrader db student remove bob" in page


def test_a_number_names_the_whole_id_of_an_assignment_not_graded_yet(tmp_path):
    rows, submitted = class_rows()
    course = write_course(tmp_path / "course", rows, submitted)
    (course / "source" / "05_positional_encoding").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="run `python -m autograder grade 05_positional_encoding` first"):
        report(["03", "05"], course_dir=course)
