"""The GPU machine's check (``benchmarks/gpu_check.sh``, ``make gpu-check``) works here, on the CPU.

A GPU machine is lent only sometimes, for minutes: its script must not fail there for a reason
this machine could have shown. These tests run its CPU fallback end to end, and check that the
catalogue's answers, turned into notebook cells, grade as the one-bug matrix says they should.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import time

import nbformat
import pytest
import torch

import catalogue_ch03
import catalogue_ch04
import gpu_check
import one_bug
from autograder.grading.in_process import grade_in_process
from course import ROOT


def test_a_catalogue_answer_is_put_in_right_after_the_cell_it_replaces():
    solution = json.loads(json.dumps(one_bug.source("04_multihead")))
    wrong = catalogue_ch04._NoOutputProjection  # a subclass of the catalogue's MHA, which uses its split and merge
    nb = gpu_check.with_answers(solution, {"MultiHeadAttention": wrong})
    assert len(nb["cells"]) == len(solution["cells"]) + 1
    where = gpu_check.defined_names(solution)["MultiHeadAttention"]
    cell = nb["cells"][where + 1]
    assert "metadata" in cell and "nbgrader" not in cell["metadata"], "a cell the student added, not an answer cell"
    namespace = {}
    exec(compile(cell["source"], "<cell>", "exec"), namespace)  # noqa: S102 (the course's own catalogue)
    answer = namespace["MultiHeadAttention"]
    assert answer.__name__ == wrong.__name__ and {"MHA", "split", "merge"} <= set(namespace)


def test_a_helper_that_would_replace_a_notebook_name_is_refused():
    with pytest.raises(ValueError, match="would replace the notebook's own"):
        gpu_check.answer_cell(catalogue_ch03._off_by_one, "masked_softmax", {"softmax_lengths", "masked_softmax"})


def test_the_catalogue_notebooks_grade_as_the_check_expects_in_process():
    """Right answers earn every point; a wrong one loses points in its own cells only (no kernel here)."""
    solution = json.loads(json.dumps(one_bug.source("03_masking")))
    chapter = importlib.import_module("autograder.ch03_masking")
    full = one_bug.points("03_masking")
    cases = gpu_check.submissions("03_masking", solution, wrong_limit=3)
    assert len(cases) == 5 and sum(bool(loses) for _, loses in cases.values()) == 3
    for student, (nb, loses) in cases.items():
        results = grade_in_process(one_bug.source("03_masking"), nbformat.from_dict(nb), chapter, key=student)
        lost = {result.part for result in results if result.score < full[result.part]}
        if loses:
            assert lost and lost <= loses, f"{student} lost points in {lost}, not only in {loses}"
        else:
            assert not lost, f"{student} lost points in {lost}"


@pytest.mark.gpu
@pytest.mark.sandbox
@pytest.mark.nbgrader
@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: `make gpu-check` runs the real thing")
def test_the_cpu_fallback_runs_every_step_and_prints_one_summary(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "GPU_CHECK_PYTHON": sys.executable}
    started = time.monotonic()
    done = subprocess.run(["bash", "benchmarks/gpu_check.sh"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    seconds = time.monotonic() - started
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "no GPU: CPU fallback" in done.stdout
    summary = (tmp_path / "gpu_check.txt").read_text()
    assert summary in done.stdout, "the summary printed and the one written to $OUT differ"
    # one line per step: its name, ok or FAILED, its seconds, what it found
    rows = re.findall(r"^(install|grade \w+|tests on cpu|attention|decoding)\s+(ok|FAILED)\s+\d+ s  (.*)$", summary,
                      re.MULTILINE)
    assert [name for name, _, _ in rows] == ["install", "grade 03_masking", "grade 04_multihead", "tests on cpu",
                                             "attention", "decoding"], summary
    assert all(status == "ok" for _, status, _ in rows), summary
    found = {name: detail for name, _, detail in rows}
    assert "nothing to install" in found["install"]
    assert "full marks" in found["grade 03_masking"] and "each judged on cpu" in found["grade 04_multihead"]
    assert "passed" in found["tests on cpu"] and "goal" in found["attention"] and "cache ratio" in found["decoding"]
    assert re.search(r"^sandbox: (bubblewrap|OFF: graded with --no-sandbox)", summary, re.MULTILINE)
    assert re.search(r"^result: ok, 6/6 steps ok in [\d.]+ min \(CPU fallback", summary, re.MULTILINE)
    assert (tmp_path / "gpu_check.log").stat().st_size > 0
    assert seconds < 480, f"the CPU fallback took {seconds:.0f} s"
