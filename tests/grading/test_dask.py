"""Grading on a Dask cluster: a real ``dask scheduler`` and two ``dask worker`` processes on localhost.

The cluster grades the same submissions as this machine's process pool and must give the
same grades; a worker killed while it holds submissions costs only their retry.
"""

from __future__ import annotations

import csv
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import submissions as S
from course import load, make_course, notebook, submit
from dask_cluster import Cluster

pytestmark = [pytest.mark.dask, pytest.mark.sandbox, pytest.mark.nbgrader]

A = S.ASSIGNMENT


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """Eight submissions of 03_masking (right, blank, a wrong window), graded once by the local pool."""
    root = make_course(tmp_path_factory.mktemp("dask-course"))
    solution, blank = load(notebook(root / "solutions", A)), load(notebook(root / "exercises", A))
    wrong = S.answer(solution, "window_mask", S.WRONG_WINDOW)
    for number in range(8):
        submit(root, f"s{number}", A, [solution, blank, wrong][number % 3])
    local = run(root, "--workers", "2")
    assert local.returncode == 0, local.stdout + local.stderr
    return root


@pytest.fixture
def cluster(tmp_path):
    cluster = Cluster(tmp_path)
    cluster.add_worker("w1")
    cluster.add_worker("w2")
    try:
        cluster.wait_for_workers(2)
        yield cluster
    finally:
        cluster.close()


def run(course: Path, *options: str, wait: bool = True):
    command = [sys.executable, "-m", "autograder", "grade", A, "--course-dir", str(course),
               "--secret-file", str(course / "secret"), *options]
    if not wait:
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return subprocess.run(command, capture_output=True, text=True, timeout=900)


def grades(course: Path) -> dict[tuple[str, str], tuple[str, str]]:
    with (course / "grades" / f"{A}.csv").open(newline="") as handle:
        return {(r["student"], r["part"]): (r["status"], r["score"]) for r in csv.DictReader(handle)}


def copy_of(course: Path, folder: Path) -> Path:
    """The course with its submissions and secret, without the local run's grades."""
    copy = folder / "copy"
    shutil.copytree(course, copy, ignore=shutil.ignore_patterns("grades", "autograded", "gradebook.db"))
    return copy


def test_a_dask_cluster_gives_the_grades_of_the_local_pool(course, cluster, tmp_path):
    copy = copy_of(course, tmp_path)
    result = run(copy, "--scheduler", cluster.address, "-v")
    assert result.returncode == 0, result.stdout + result.stderr
    assert grades(copy) == grades(course)
    assert len(grades(copy)) == 8 * len(S.PARTS)
    graded_by = {name for name in ("w1", "w2") if f"graded by {name}" in result.stdout}
    assert graded_by == {"w1", "w2"}, f"both workers should grade: {result.stdout[-3000:]}"
    # the autograded notebooks were written by the instructor's process, where nbgrader looks
    assert (copy / "autograded" / "s0" / A / f"{A}.ipynb").is_file()


def test_a_worker_killed_mid_run_costs_only_a_retry(course, cluster, tmp_path):
    copy = copy_of(course, tmp_path)
    grading = run(copy, "--scheduler", cluster.address, "-v", wait=False)
    deadline = time.monotonic() + 300
    while cluster.processing().get("w1", 0) == 0:  # kill w1 while it holds a submission
        assert grading.poll() is None and time.monotonic() < deadline, "w1 never got a submission"
        time.sleep(0.1)
    cluster.kill("w1")
    output, _ = grading.communicate(timeout=900)
    assert grading.returncode == 0, output
    assert grades(copy) == grades(course), output
    assert "graded by w2" in output  # w2 graded what w1 held when it died


def test_a_lost_scheduler_is_a_clear_error(tmp_path):
    copy = make_course(tmp_path / "course")  # one submission to grade is enough: none is
    submit(copy, "s0", A, load(notebook(copy / "solutions", A)))
    result = run(copy, "--scheduler", "tcp://127.0.0.1:9", "--scheduler-timeout", "3", "--force")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "tcp://127.0.0.1:9" in result.stderr and "Traceback" not in result.stderr
    # the wait the error names (Dask's "... after 3 s"), not the default 60 s: --scheduler-timeout was applied,
    # whatever a loaded machine adds to the wall time
    assert re.search(r"after 3(\.0)? ?s\b", result.stderr), result.stderr
    assert not (copy / "grades" / ".state").exists()  # nothing recorded
