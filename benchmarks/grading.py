"""Grade 40 submissions with sequential ``nbgrader autograde`` and with ``python -m autograder grade``.

    .venv/bin/python benchmarks/grading.py [--submissions 40] [--assignment 03_masking]

Builds a throw-away course with a mix of correct, buggy and blank submissions, grades it
once with each command (each in its own copy of the course), checks that both give the
same total scores, and prints both wall times, their ratio, and the cost per submission
next to the bare cost of starting a kernel and importing torch.

Goal on 2 cores: at least 8x faster than sequential nbgrader, every kernel still in its
sandbox and every part judged outside it. That is only possible below the bare cost: each
kernel is forked, sandboxed, from a warm zygote that has already imported torch
(``autograder/kernel/zygote.py``), so the cost per submission (wall time / submissions)
should come out well under the bare cost of one kernel start plus ``import torch``.

It then grades the same course through a Dask scheduler with 1 and with 2 local
``dask worker`` processes (``--scheduler``; ``--no-dask`` skips this) and prints those times.
"""

from __future__ import annotations

import argparse
import copy
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT / "tests"))
from dask_cluster import Cluster  # noqa: E402  (the tests' local scheduler and workers)
WRONG_WINDOW = ("def window_mask(num_queries, num_keys, radius):\n"
                "    i, j = torch.arange(num_queries)[:, None], torch.arange(num_keys)[None, :]\n"
                "    return (i - j).abs() < radius\n")


def make_course(folder: Path, assignment: str, count: int) -> None:
    """A course with ``count`` submissions: 40% correct, 30% buggy, 30% blank."""
    shutil.copy(ROOT / "nbgrader_config.py", folder)
    shutil.copytree(ROOT / "solutions" / assignment, folder / "solutions" / assignment)
    run(["nbgrader", "generate_assignment", assignment, "--force"], folder)
    solution = json.loads((folder / "solutions" / assignment / f"{assignment}.ipynb").read_text())
    blank = json.loads((folder / "exercises" / assignment / f"{assignment}.ipynb").read_text())
    buggy = copy.deepcopy(solution)
    for cell in buggy["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("grade_id") == "window_mask":
            cell["source"] = WRONG_WINDOW
    for i in range(count):
        kind = "correct" if i % 10 < 4 else "buggy" if i % 10 < 7 else "blank"
        notebook = {"correct": solution, "buggy": buggy, "blank": blank}[kind]
        target = folder / "submitted" / f"s{i:02d}_{kind}" / assignment / f"{assignment}.ipynb"
        target.parent.mkdir(parents=True)
        target.write_text(json.dumps(notebook))


def run(command: list[str], cwd: Path) -> float:
    """Run a command of this environment in ``cwd``; return its wall time."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    start = time.perf_counter()
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return time.perf_counter() - start


def bare_kernel_seconds(repeats: int = 3) -> float:
    """Mean time to start an IPython kernel, import torch in it, and shut it down."""
    from jupyter_client.manager import start_new_kernel

    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        manager, client = start_new_kernel(kernel_name="python3", stderr=subprocess.DEVNULL)
        client.execute_interactive("import torch", timeout=120)
        client.stop_channels()
        manager.shutdown_kernel(now=True)
        times.append(time.perf_counter() - start)
    return sum(times) / len(times)


def totals_from_gradebook(course: Path, assignment: str) -> dict[str, float]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        return {s.student.id: s.score for s in gradebook.find_assignment(assignment).submissions}


def totals_from_csv(course: Path, assignment: str) -> dict[str, float]:
    totals: dict[str, float] = {}
    with (course / "grades" / f"{assignment}.csv").open(newline="") as handle:
        for row in csv.DictReader(handle):
            totals[row["student"]] = totals.get(row["student"], 0.0) + float(row["score"])
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submissions", type=int, default=40)
    parser.add_argument("--assignment", default="03_masking")
    parser.add_argument("--no-dask", action="store_true", help="skip the runs through local Dask workers")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp:
        nbgrader_course, our_course = Path(tmp) / "nbgrader", Path(tmp) / "ours"
        for course in (nbgrader_course, our_course):
            course.mkdir()
            make_course(course, args.assignment, args.submissions)
        print(f"{args.submissions} submissions of {args.assignment} on {cores} cores "
              f"(load average {os.getloadavg()[0]:.1f} before)", flush=True)
        bare = bare_kernel_seconds()
        print(f"bare cost: start a kernel and import torch      {bare:6.2f} s", flush=True)
        ours = run([sys.executable, "-m", "autograder", "grade", args.assignment, "--force"], our_course)
        print(f"python -m autograder grade (workers={cores}):    {ours:6.1f} s", flush=True)
        theirs = run(["nbgrader", "autograde", args.assignment, "--force"], nbgrader_course)
        print(f"nbgrader autograde (sequential):               {theirs:6.1f} s", flush=True)
        same = totals_from_gradebook(nbgrader_course, args.assignment) == totals_from_csv(our_course, args.assignment)
        print(f"same total scores as nbgrader: {'yes' if same else 'NO'}")
        print(f"speed-up over nbgrader: {theirs / ours:.2f}x (goal >= 8x)")
        per = ours / args.submissions
        print(f"cost per submission: {per:.2f} s = {per / bare:.2f}x the bare cost of a kernel and torch; "
              f"nbgrader: {theirs / args.submissions:.2f} s = {theirs / args.submissions / bare:.2f}x")
        for workers in () if args.no_dask else (1, 2):
            folder = Path(tmp) / f"dask{workers}"
            folder.mkdir()
            with Cluster(folder) as cluster:
                for number in range(workers):
                    cluster.add_worker(f"w{number}")
                cluster.wait_for_workers(workers)
                seconds = run([sys.executable, "-m", "autograder", "grade", args.assignment, "--force",
                               "--scheduler", cluster.address], our_course)
            same = totals_from_csv(our_course, args.assignment) == totals_from_gradebook(nbgrader_course, args.assignment)
            print(f"--scheduler, {workers} local Dask worker(s):        {seconds:6.1f} s "
                  f"({theirs / seconds:.2f}x nbgrader; same totals: {'yes' if same else 'NO'})", flush=True)


if __name__ == "__main__":
    main()
