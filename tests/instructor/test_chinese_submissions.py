"""A class taught in Chinese hands in the Chinese notebooks (``zh/exercises/``); the same grading command grades
them, and the same answers get the same grades and the same messages as in English."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from course import ROOT, load, make_course, notebook, submit
from submissions import WRONG_WINDOW, answer

A = "03_masking"

pytestmark = [pytest.mark.sandbox, pytest.mark.nbgrader]


def graded(course: Path, secret: Path) -> bytes:
    """Grade ``course``'s submissions of A; its grades table."""
    done = subprocess.run([sys.executable, "-m", "autograder", "grade", A, "--course-dir", str(course),
                           "--secret-file", str(secret)], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    return (course / "grades" / f"{A}.csv").read_bytes()


def test_a_chinese_and_an_english_notebook_with_the_same_answers_grade_identically(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("cd" * 32 + "\n")
    grades = {}
    for edition, folder in (("en", ROOT / "solutions"), ("zh", ROOT / "zh" / "solutions")):
        course = make_course(tmp_path / edition)
        solved = load(notebook(folder, A))
        assert any("掩蔽" in "".join(c["source"]) for c in solved["cells"] if c["cell_type"] == "markdown") == \
            (edition == "zh")
        # the same student, the same hidden inputs: one answer right, one wrong, one left blank
        handed_in = answer(answer(solved, "window_mask", WRONG_WINDOW), "padding_mask",
                           "def padding_mask(valid_lens, num_keys):\n    raise NotImplementedError()")
        submit(course, "ada", A, handed_in)
        grades[edition] = graded(course, secret)
    statuses = {row["part"]: row["status"] for row in csv.DictReader(grades["en"].decode().splitlines())}
    assert statuses["test_window_mask"] == "failed" and statuses["test_padding_mask"] == "failed"
    assert statuses["test_masked_softmax"] == "passed"
    assert grades["zh"] == grades["en"], "the same answers got other grades or messages in Chinese (byte for byte)"
