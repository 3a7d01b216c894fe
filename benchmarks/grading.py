"""Grade 20 submissions with sequential ``nbgrader autograde`` and with ``python -m autograder grade``.

    .venv/bin/python benchmarks/grading.py [--submissions 20] [--repeats 3] [--assignment 03_masking] [--no-dask]

Builds throw-away courses with a mix of correct, buggy and blank submissions, grades them
with each command (every run in a fresh copy of its course), checks that both give the
same total scores, and prints both wall times, their ratio, and the cost per submission
next to the bare cost of starting a kernel and importing torch.

A class of 20 mostly waits for the grader's start, so the run's cost is split in two:

* **fixed**, paid once per run: Python and the grading code's imports, the course, the
  sandbox check, the zygote's start, the process's exit;
* **marginal**, paid per submission.

Both are measured two ways: by grading half the submissions too and drawing the line
through the two wall times (``time = fixed + submissions x marginal``, medians of
``--repeats`` runs), and from the phases the command itself times (``-v``: its imports,
each phase of its start, the grading, and what is left of the wall time, Python's start
and exit).

Goal on 2 cores: at least 10x faster than sequential nbgrader at 20 submissions, every
kernel still in its sandbox and every part judged outside it. That is only possible below
the bare cost: each kernel is forked, sandboxed, from a warm zygote that has already
imported torch (``autograder/kernel/zygote.py``), so the marginal cost should come out well
under the bare cost of one kernel start plus ``import torch``.

It then grades the same course through a Dask scheduler with 1 and with 2 local
``dask worker`` processes (``--scheduler``; ``--no-dask`` skips this) and prints those times.
"""

from __future__ import annotations

import argparse
import copy
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
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


def run(command: list[str], cwd: Path) -> tuple[float, str]:
    """Run a command of this environment in ``cwd``; return its wall time and what it printed on stdout."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    start = time.perf_counter()
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return time.perf_counter() - start, result.stdout


def fresh_copy(pristine: Path, runs: Path) -> Path:
    """A new copy of the course at ``pristine``, never graded, under ``runs``."""
    target = runs / f"{pristine.name}-run{sum(1 for _ in runs.iterdir())}"
    shutil.copytree(pristine, target)
    return target


@dataclass
class OurRun:
    """One run of ``python -m autograder grade -v``: its course, wall time, and the phases it timed itself."""

    course: Path
    seconds: float
    phases: dict[str, float]

    def fixed_and_marginal(self, submissions: int) -> tuple[float, float]:
        """``(fixed, marginal)`` as the run's own phases say: ``grading`` and ``recording`` are shared by the
        submissions (the last one's tail included), the rest of the wall time is fixed."""
        shared = self.phases["grading"] + self.phases["recording"]
        return self.seconds - shared, shared / submissions

    def breakdown(self) -> str:
        """Each phase's seconds, and the rest of the wall time: Python's start (the zygote spawned) and exit."""
        rest = self.seconds - sum(self.phases.values())
        return ", ".join(f"{name} {seconds:.1f} s" for name, seconds in
                         {**self.phases, "Python's start and exit": rest}.items())


def grade_ours(pristine: Path, runs: Path, assignment: str) -> OurRun:
    """Grade a fresh copy of ``pristine`` with ``python -m autograder grade -v``."""
    course = fresh_copy(pristine, runs)
    seconds, output = run([sys.executable, "-m", "autograder", "grade", assignment, "-v"], course)
    return OurRun(course, seconds, said_phases(output))


def said_phases(output: str) -> dict[str, float]:
    """The seconds ``-v`` says each phase took: ``time: imports 3.5 s ...``, then ``time: course 0.1 s, ...``."""
    phases = {"imports": float(re.search(r"time: imports (\d+\.\d+) s", output).group(1))}
    line = re.findall(r"time: (course .*)", output)[-1]
    phases.update((name.strip(), float(value)) for name, value in re.findall(r"([^,]+) (\d+\.\d+) s(?=,|$)", line))
    return phases


def median_run(pristine: Path, runs: Path, assignment: str, repeats: int) -> OurRun:
    """The run of median wall time among ``repeats`` runs, each on a fresh copy of ``pristine``."""
    ranked = sorted((grade_ours(pristine, runs, assignment) for _ in range(repeats)), key=lambda r: r.seconds)
    return ranked[len(ranked) // 2]


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
    parser.add_argument("--submissions", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3, help="runs of ours per class size (the median counts)")
    parser.add_argument("--assignment", default="03_masking")
    parser.add_argument("--no-dask", action="store_true", help="skip the runs through local Dask workers")
    args = parser.parse_args()
    count, half = args.submissions, args.submissions // 2
    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp) / "runs"
        runs.mkdir()
        courses = {size: Path(tmp) / f"class{size}" for size in (half, count)}
        for size, folder in courses.items():
            folder.mkdir()
            make_course(folder, args.assignment, size)
        print(f"{count} submissions of {args.assignment} on {os.cpu_count()} cores "
              f"(load average {os.getloadavg()[0]:.1f} before)", flush=True)
        bare = bare_kernel_seconds()
        print(f"bare cost: start a kernel and import torch      {bare:6.2f} s", flush=True)
        ours = {size: median_run(folder, runs, args.assignment, args.repeats) for size, folder in courses.items()}
        marginal = report_ours(ours, half, count)
        nbgrader_course = fresh_copy(courses[count], runs)
        theirs, _ = run(["nbgrader", "autograde", args.assignment], nbgrader_course)
        print(f"nbgrader autograde (sequential), {count} submissions: {theirs:6.1f} s", flush=True)
        expected = totals_from_gradebook(nbgrader_course, args.assignment)
        same = expected == totals_from_csv(ours[count].course, args.assignment)
        print(f"same total scores as nbgrader: {'yes' if same else 'NO'}")
        print(f"speed-up over nbgrader at {count} submissions: {theirs / ours[count].seconds:.2f}x (goal >= 10x)")
        print(f"marginal cost: {marginal:.2f} s per submission = {marginal / bare:.2f}x the bare cost of a kernel "
              f"and torch; nbgrader: {theirs / count:.2f} s = {theirs / count / bare:.2f}x")
        if not args.no_dask:
            report_dask(fresh_copy(courses[count], runs), args.assignment, theirs, expected)


def report_ours(ours: dict[int, OurRun], half: int, count: int) -> float:
    """Print our wall times, and the fixed and marginal costs both ways; return the marginal cost of the line."""
    for size, result in ours.items():
        print(f"python -m autograder grade, {size} submissions:   {result.seconds:6.1f} s "
              f"(median run: {result.breakdown()})", flush=True)
    marginal = (ours[count].seconds - ours[half].seconds) / (count - half)
    print(f"  the line through both: fixed {ours[count].seconds - count * marginal:.1f} s + {marginal:.2f} s "
          "per submission")
    fixed, per = ours[count].fixed_and_marginal(count)
    print(f"  its own phases, {count} submissions: fixed {fixed:.1f} s (all but grading and recording) + "
          f"{per:.2f} s per submission (grading and recording)")
    return marginal


def report_dask(course: Path, assignment: str, theirs: float, expected: dict[str, float]) -> None:
    """Grade ``course`` through a local Dask scheduler with 1, then 2 workers, and print the times."""
    for workers in (1, 2):
        folder = course.parent / f"dask{workers}"
        folder.mkdir()
        with Cluster(folder) as cluster:
            for number in range(workers):
                cluster.add_worker(f"w{number}")
            cluster.wait_for_workers(workers)
            seconds, _ = run([sys.executable, "-m", "autograder", "grade", assignment, "--force",
                              "--scheduler", cluster.address], course)
        same = totals_from_csv(course, assignment) == expected
        print(f"--scheduler, {workers} local Dask worker(s):        {seconds:6.1f} s "
              f"({theirs / seconds:.2f}x nbgrader; same totals: {'yes' if same else 'NO'})", flush=True)


if __name__ == "__main__":
    main()
