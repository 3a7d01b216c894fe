"""Can one notebook take a neighbour's time? A CPU hog graded beside a correct student of 06_transformer.

    .venv/bin/python benchmarks/fair_time.py [--hogs 200] [--workers 2]

Builds a throw-away course with two submissions of 06_transformer and grades it with the
grading command and ``--workers`` workers, so both are graded at once:

* ``correct``: the solution, whose ``train_sorting_transformer`` has a time limit;
* ``hog``: the solution with an added first cell that starts ``--hogs`` busy processes,
  each in a session of its own (the scheduler's autogroups give every session an equal
  share of the CPU), and one before its last test cell that keeps its kernel (and them)
  alive while the other is graded.

Prints the run's CPU line and each student's score per part. With a CPU cgroup per kernel
(its weight, and a quota of the threads it is given) the correct student keeps full marks;
where none can be made, the run's first lines say so and the time limits are the wall
clock's. Exits 1 if the correct student loses points.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from course import load, make_course, notebook  # noqa: E402
from submissions import write  # noqa: E402

ASSIGNMENT = "06_transformer"


def hogging(solution: dict, hogs: int, seconds: int) -> dict:
    """``solution`` with a first cell that starts ``hogs`` busy processes, each in its own session, and a cell
    before the last test cell that waits ``seconds`` (its kernel and its processes live on meanwhile)."""
    start = (f"import subprocess\nHOGS = [subprocess.Popen(['sh', '-c', 'while :; do :; done'], "
             f"start_new_session=True) for _ in range({hogs})]\n")
    wait = f"import time\ntime.sleep({seconds})\n"
    hog = json.loads(json.dumps(solution))
    cells = [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": source}
             for source in (start, wait)]
    hog["cells"].insert(len(hog["cells"]) - 1, cells[1])
    hog["cells"].insert(0, cells[0])
    return hog


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hogs", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fair-time-") as folder:
        course = make_course(Path(folder) / "course")
        solution = load(notebook(course / "solutions", ASSIGNMENT))
        write(course, "correct", solution, assignment=ASSIGNMENT)
        write(course, "hog", hogging(solution, options.hogs, seconds=100), assignment=ASSIGNMENT)
        started = time.monotonic()
        result = subprocess.run([sys.executable, "-m", "autograder", "grade", ASSIGNMENT, "--course-dir", str(course),
                                 "--secret-file", str(Path(folder) / "secret"),  # made by the command
                                 "--workers", str(options.workers),
                                 "--timeout", "200", "--notebook-timeout", "300"],
                                capture_output=True, text=True, timeout=1800)
        print(f"graded in {time.monotonic() - started:.0f} s (exit {result.returncode})")
        if result.returncode != 0:
            print(result.stdout[-2000:], result.stderr[-2000:])
            return 2
        print("\n".join(line for line in result.stdout.splitlines() if "CPU" in line))
        with (course / "grades" / f"{ASSIGNMENT}.csv").open(newline="") as handle:
            rows = list(csv.DictReader(handle))
    lost = 0.0
    for student in ("correct", "hog"):
        mine = [row for row in rows if row["student"] == student]
        score, total = sum(float(r["score"]) for r in mine), sum(float(r["max_score"]) for r in mine)
        print(f"{student}: {score:g}/{total:g}")
        for row in mine:
            if row["status"] != "passed":
                print(f"    {row['part']}: {row['status']}: {row['message'][:300]}")
        lost = total - score if student == "correct" else lost
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
