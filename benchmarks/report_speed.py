"""How long does ``python -m autograder report`` take for a large class?

    .venv/bin/python benchmarks/report_speed.py [--students 300] [--assignments 7] [--from GRADES.csv]

Writes a course folder (in a temporary directory) whose ``grades/`` holds one grades table per
assignment for ``--students`` students, and times :func:`autograder.instructor.report.report`
on one assignment, then on all of them (the students × assignments table included). The rows
are drawn, per student and part, from a real grades table (``--from``, e.g. the one that
``tests/instructor/test_report_class.py`` grades) when given, else from the judge's own message
forms with fresh numbers in each (wrong values at some index, a wrong shape, a raised error,
a timeout), so that grouping has as many distinct texts to normalise as a class would give.
Each student's state file (grading time, each part's time) is written too, as ``grade`` writes it.
Prints the seconds of each run and the page's size.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autograder.instructor.gradebook import CSV_COLUMNS  # noqa: E402
from autograder.instructor.report import read_rows, report  # noqa: E402

PARTS = {"test_masked_softmax": 2.0, "test_causal_mask": 1.0, "test_causal_mask_bottom_right": 1.0,
         "test_padding_mask": 1.0, "test_window_mask": 1.0, "test_masked_attention": 2.5,
         "test_masked_attention_arguments": 0.5}


def drawn_message(part: str, draw: random.Random) -> tuple[str, str]:
    """``(status, message)`` of a wrong answer, in one of the judge's forms, with numbers of its own."""
    name = part.removeprefix("test_")
    b, q, k = draw.randint(1, 6), draw.randint(1, 9), draw.randint(1, 9)
    case = f"\n    hidden case (seed {draw.randrange(10**9)}): batch {b}, {q} queries, {k} keys"
    forms = [("failed", f"{name}: the output: wrong values (largest error {draw.random():.3g} at index "
                        f"({draw.randrange(b)}, {draw.randrange(q)}, {draw.randrange(k)})){case}"),
             ("failed", f"{name}: the output: shape ({b}, {k}), expected ({b}, 1, {k}){case}"),
             ("failed", f"{name}: is not device-agnostic: the output is on cpu, expected meta{case}"),
             ("error", f"{name}: raised IndexError (its message is not shown for a hidden case){case}"),
             ("timeout", "checking it took longer than the 60 s it had")]
    return draw.choices(forms, weights=[6, 2, 1, 1, 0.2])[0]


def synthetic_rows(assignment: str, students: list[str], draw: random.Random) -> list[dict]:
    rows = []
    for student in students:
        skill = draw.random()
        for part, points in PARTS.items():
            right = draw.random() < 0.35 + 0.6 * skill
            status, message = ("passed", "") if right else drawn_message(part, draw)
            rows.append({"student": student, "assignment": assignment, "part": part, "score": points if right else 0,
                         "max_score": points, "status": status, "message": message,
                         "auto_score": points if right else 0})
    return rows


def rows_from(table: Path, assignment: str, students: list[str], draw: random.Random) -> list[dict]:
    """Each student's rows: a real student's, drawn at random from ``table``, under the new name."""
    real = read_rows(table)
    by_student: dict[str, list] = {}
    for row in real:
        by_student.setdefault(row.student, []).append(row)
    pool = list(by_student.values())
    return [{"student": student, "assignment": assignment, "part": r.part, "score": r.score, "max_score": r.max_score,
             "status": r.status, "message": r.message, "auto_score": r.auto_score}
            for student in students for r in draw.choice(pool)]


def write_state(course: Path, assignment: str, rows: list[dict], draw: random.Random) -> None:
    """Each student's state file, as ``grade`` writes it: the grading time and each part's (the report reads them)."""
    folder = course / "grades" / ".state" / assignment
    folder.mkdir(parents=True, exist_ok=True)
    by_student: dict[str, list[dict]] = {}
    for row in rows:
        by_student.setdefault(row["student"], []).append({"part": row["part"], "seconds": draw.uniform(0.05, 3)})
    for student, results in by_student.items():
        (folder / f"{student}.json").write_text(json.dumps({"results": results, "seconds": draw.uniform(2, 40)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=300)
    parser.add_argument("--assignments", type=int, default=7)
    parser.add_argument("--from", dest="table", type=Path, default=None, help="a real grades table to draw rows from")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    draw = random.Random(args.seed)
    students = [f"student{number:04d}" for number in range(args.students)]
    with tempfile.TemporaryDirectory() as folder:
        course = Path(folder)
        names = [f"{number:02d}_assignment" for number in range(1, args.assignments + 1)]
        for name in names:
            rows = (rows_from(args.table, name, students, draw) if args.table else
                    synthetic_rows(name, students, draw))
            (course / "grades").mkdir(exist_ok=True)
            with (course / "grades" / f"{name}.csv").open("w", newline="", encoding="utf-8") as handle:
                writer = csv.DictWriter(handle, fieldnames=CSV_COLUMNS)
                writer.writeheader()
                writer.writerows(rows)
            write_state(course, name, rows, draw)
            for student in students[: int(0.97 * len(students))]:  # a few never hand in
                (course / "submitted" / student / name).mkdir(parents=True)
        for chosen in (names[:1], names):
            started = time.perf_counter()
            page = report(chosen, course_dir=course)
            seconds = time.perf_counter() - started
            print(f"report of {len(chosen)} assignment(s), {args.students} students: {seconds:.2f} s, "
                  f"page {page.stat().st_size / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
