"""One notebook cannot hurt the class: 30 correct students graded beside one that attacks the grader.

    .venv/bin/python benchmarks/class_safety.py [--students 30] [--workers 2] [--timeout 60]

Builds a throw-away course of ``05_positional_encoding`` with ``--students`` copies of the
solution and one attacker, and grades it with ``python -m autograder grade`` (``--workers``
workers). The attacker combines what a student's code does by accident or on purpose:

* **a CPU hog**: 200 busy processes, each in a session of its own (the kernel's autogroup
  scheduling would give each session an equal share of the machine), started by its first
  judged call and alive until its kernel is ended;
* **an oracle bomb**: its ``PositionalEncoding`` calls ``sinusoidal_encoding(50_000, 2_000)``,
  which the grader computes with its reference (a 100-million-value table);
* **an output flood** while it is judged: 450 prints of 10 MB from ``sinusoidal_encoding``;
* **odd bytes**: ``relative_offset_matrix`` raises a ``ValueError`` whose message holds a lone
  surrogate, NUL and a terminal escape.

Prints every correct student's total, the attacker's grade per part with its message, the
run's summary (what it says of the attacker), the wall time and the grader's peak memory
(the largest resident size of any process of the grading command, kernels excluded: they
run in cgroups of their own, but ``ru_maxrss`` of the command's children counts the largest
single process). Exits 1 if a correct student lost a point.
"""

from __future__ import annotations

import argparse
import copy
import csv
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
ASSIGNMENT = "05_positional_encoding"

#: After the imports: 200 busy processes, each in a new session, alive until the kernel is ended.
HOG = """
import os

def start_hogs():
    for _ in range(200):
        if os.fork() == 0:
            os.setsid()
            while True:
                pass
"""
#: After sinusoidal_encoding's answer: the right table; its first call while judged prints 4.5 GB,
#: then starts the hog (started earlier, it would slow down the attacker's own cells most).
FLOOD = """
_right_table = sinusoidal_encoding
FLOODED = []

def sinusoidal_encoding(*args, **kwargs):
    if JUDGED and not FLOODED:
        FLOODED.append(True)
        try:
            for _ in range(450):
                print('x' * 10_000_000)
        finally:  # the flood may end in a MemoryError: its backlog is held in the kernel's own memory
            start_hogs()
    return _right_table(*args, **kwargs)
"""
#: After PositionalEncoding's answer: the right module, which first asks the grader for a huge table.
ORACLE_BOMB = """
_RightPositionalEncoding = PositionalEncoding

class PositionalEncoding(_RightPositionalEncoding):
    def __init__(self, *args, **kwargs):
        sinusoidal_encoding(50_000, 2_000)  # answered by the grader's reference while judged
        super().__init__(*args, **kwargs)
"""
#: After relative_offset_matrix's answer: a message no UTF-8 file can hold.
ODD_BYTES = """
def relative_offset_matrix(*args, **kwargs):
    raise ValueError('\\ud800 \\x00 \\x1b[2J odd bytes')
"""
#: Before the last test cell: from here on the answers are being judged (the cells above have run).
JUDGING = "JUDGED = True"


def attacker(solution: dict) -> dict:
    """The solution with the attacks added as cells of the student's own."""
    notebook = copy.deepcopy(solution)
    for grade_id, code in (("imports", HOG + "\nJUDGED = False\n"), ("sinusoidal_encoding", FLOOD),
                           ("PositionalEncoding", ORACLE_BOMB), ("relative_offset_matrix", ODD_BYTES)):
        _add_after(notebook, grade_id, code)
    _add_after(notebook, "LearnedPositionalEmbedding", JUDGING)  # after the last answer: nothing runs it again
    return notebook


def _add_after(notebook: dict, grade_id: str, code: str) -> None:
    ids = [cell["metadata"].get("nbgrader", {}).get("grade_id") for cell in notebook["cells"]]
    notebook["cells"].insert(ids.index(grade_id) + 1, {"cell_type": "code", "metadata": {}, "outputs": [],
                                                       "execution_count": None, "source": code.strip() + "\n"})


def make_course(folder: Path, students: int) -> None:
    shutil.copy(ROOT / "nbgrader_config.py", folder)
    shutil.copytree(ROOT / "solutions" / ASSIGNMENT, folder / "solutions" / ASSIGNMENT)
    run(["nbgrader", "generate_assignment", ASSIGNMENT, "--force"], folder)
    solution = json.loads((folder / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_text())
    submissions = {f"s{i:02d}": solution for i in range(students)} | {"attacker": attacker(solution)}
    for student, notebook in submissions.items():
        target = folder / "submitted" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
        target.parent.mkdir(parents=True)
        target.write_text(json.dumps(notebook))


def run(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, errors="replace")
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=30)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=60, help="the per-part time limit (--timeout)")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="class-safety-") as scratch:
        course = Path(scratch) / "course"
        course.mkdir()
        make_course(course, options.students)
        started = time.monotonic()
        result = run([sys.executable, "-m", "autograder", "grade", ASSIGNMENT, "--course-dir", str(course),
                      "--secret-file", str(Path(scratch) / "secret"), "--workers", str(options.workers),
                      "--timeout", str(options.timeout)], course)
        seconds = time.monotonic() - started
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        with (course / "grades" / f"{ASSIGNMENT}.csv").open(newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
    totals, best = defaultdict(float), defaultdict(float)
    for row in rows:
        totals[row["student"]] += float(row["score"])
        best[row["student"]] += float(row["max_score"])
    correct = [s for s in totals if s != "attacker"]
    full = [s for s in correct if totals[s] == best[s]]
    print(f"{len(full)} of {len(correct)} correct students at full marks "
          f"({', '.join(f'{s} {totals[s]:g}/{best[s]:g}' for s in correct if s not in full) or 'none lost a point'})")
    print(f"attacker: {totals['attacker']:g}/{best['attacker']:g}")
    for row in rows:
        if row["student"] == "attacker":
            print(f"  {row['part']}: {row['status']} {row['score']}/{row['max_score']}  {row['message'][:150]!r}")
    print("the run's summary:")
    print("  " + "\n  ".join(result.stdout.strip().splitlines()[-8:]))
    print(f"wall time {seconds:.0f} s for {len(totals)} submissions on {options.workers} workers; "
          f"the grader's largest process peaked at {peak:.0f} MB")
    return 0 if len(full) == len(correct) else 1


if __name__ == "__main__":
    sys.exit(main())
