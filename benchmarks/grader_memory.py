"""How much memory does the grader hold of a kernel that floods it with output while it is judged?

    .venv/bin/python benchmarks/grader_memory.py [--messages 450] [--megabytes 10]

Grades one submission of 03_masking in this process, as a grading worker does, whose
``window_mask`` is right but prints ``--messages`` x ``--megabytes`` MB on its first call,
that is while the grader judges it. Prints the grade of every part and this process's peak
resident memory before and after. The grader reads what a kernel sends while it is judged
and keeps none of it (``execute.KernelSession._exchange``), and its sockets queue a few
messages at most (``kernels.SandboxedKernelManager.client``): the peak should grow by tens
of megabytes, not by the flood's gigabytes. What the grader does not read yet waits in the
kernel's own memory: a flood of gigabytes may make the answer itself raise ``MemoryError``
(its kernel's limit), which is its own grade. ``--check MB`` exits 1 above that growth.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from autograder.grading.sandbox import Limits  # noqa: E402
from autograder.grading.verdict import grade_submission  # noqa: E402
from submissions import answer, floods_while_judged  # noqa: E402

ASSIGNMENT = "03_masking"


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, in MB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=450)
    parser.add_argument("--megabytes", type=int, default=10)
    parser.add_argument("--check", type=float, help="exit 1 if the peak grew by more than this many MB")
    options = parser.parse_args()
    solution_path = ROOT / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    source, solution = nbformat.read(solution_path, as_version=4), json.loads(solution_path.read_text())
    limits = Limits(cell_seconds=120, notebook_seconds=600)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{ASSIGNMENT}.ipynb"
        path.write_text(json.dumps(solution))  # a first grading: the zygote started, the grader's imports done
        grade_submission(source, path, limits, key="warm-up")
        before = peak_rss_mb()
        path.write_text(json.dumps(answer(solution, "window_mask", floods_while_judged(options.messages,
                                                                                       options.megabytes))))
        graded = grade_submission(source, path, limits, key="flood")
        after = peak_rss_mb()
    for result in graded.results:
        print(f"{result.part}: {result.status} {result.score}/{result.max_score} {result.message[:120]}")
    print(f"flood while judged: {options.messages} x {options.megabytes} MB printed; the grader noted: "
          f"{'; '.join(graded.notes) or 'nothing'}")
    print(f"grader's peak RSS: {before:.0f} MB before the flooding submission, {after:.0f} MB after "
          f"(+{after - before:.0f} MB)")
    return 1 if options.check is not None and after - before > options.check else 0


if __name__ == "__main__":
    sys.exit(main())
