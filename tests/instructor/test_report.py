"""The class report (``autograder/instructor/report.py``) on hand-written grades tables: the grouping of
messages, the numbers per part, and the page."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.instructor.gradebook import CSV_COLUMNS
from autograder.instructor.report import Row, mistake_of, report

ROOT = Path(__file__).resolve().parents[2]
A = "03_masking"

WEIGHTS = ("masked_softmax: the weights: wrong values (largest error {e} at index ({i}, {j}, {k}))\n"
           "    hidden case (seed {seed}): X of shape ({b}, 4, 7), valid_lens {lens}")
SHAPE = "padding_mask: the mask: shape ({b}, {k}), expected ({b}, 1, {k})\n    hidden case (seed {seed}): valid_lens {lens}"


def row(student, part, score, max_score, status="passed", message="", auto_score=None):
    return {"student": student, "assignment": A, "part": part, "score": score, "max_score": max_score,
            "status": status, "message": message, "auto_score": score if auto_score is None else auto_score}


def write_course(root: Path, rows: list[dict], submitted: list[str], state: dict[str, float] | None = None,
                 part_seconds: dict[tuple[str, str], float] | None = None, assignment: str = A) -> Path:
    """A course whose ``grades/`` holds ``rows`` and, as ``grade`` writes them, state files with each student's
    grading seconds (``state``) and each part's (``part_seconds``, by student and part)."""
    grades = root / "grades"
    grades.mkdir(parents=True)
    with (grades / f"{assignment}.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    for student in submitted:
        (root / "submitted" / student / assignment).mkdir(parents=True)
    for student in {r["student"] for r in rows}:
        results = [{"part": r["part"], "seconds": (part_seconds or {}).get((student, r["part"]))}
                   for r in rows if r["student"] == student]
        path = grades / ".state" / assignment / f"{student}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"fingerprint": "x", "results": results, "seconds": (state or {}).get(student)}))
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
    assert "7 submitted, 6 graded, 1 not graded, 0 missing" in page
    group = "the weights: wrong values (largest error # at index (#…))"
    assert page.count(group) == 1, "two messages that differ in numbers are one group"
    at = page.index(group)
    assert "2 (33%)" in page[at:at + 200] and "bob, cy" in page[at:page.index("</tr>", at)]
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
    missed = page[page.index(f"<td>{other}</td>"):]
    assert "5: cy, dee, eve, fay, gus" in missed[:missed.index("</tr>")]


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
