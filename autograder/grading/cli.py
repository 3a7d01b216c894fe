"""``python -m autograder grade ASSIGNMENT``: grade every submission, in parallel, in sandboxes.

(``python -m autograder publish DEST`` writes the student repository: see ``publish.py``.)

Each submission is graded by a worker process of its own, whose kernel runs in the
sandbox (``sandbox.py``). The main process is the only one that writes: after each
submission it records the scores in the gradebook, then a state file with the
submission's fingerprint, and at the end the CSV. A run that is killed and started again
regrades exactly the submissions without an up-to-date state file, so nothing is lost
and nothing is counted twice.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import multiprocessing
import os
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import nbformat

from .. import __version__
from .grade import STATUSES, PartResult, grade_submission
from .gradebook import Course, ensure_assignment, read_timestamp, record, write_csv
from .notebooks import parts_of
from .publish import PublishError, publish
from .sandbox import Limits, SandboxUnavailable, check_bubblewrap
from .secret import default_path, fingerprint, load_or_create, student_key


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m autograder", description="Grade nbgrader submissions of the course.")
    commands = parser.add_subparsers(dest="command", required=True)
    grade = commands.add_parser("grade", help="grade every submission of an assignment")
    grade.add_argument("assignment", help="assignment id, e.g. 03_masking")
    grade.add_argument("--course-dir", type=Path, default=Path("."), help="nbgrader course directory (default: .)")
    grade.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="submissions graded at once (default: cores)")
    grade.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto", help="where the checks run (default: auto)")
    grade.add_argument("--timeout", type=float, default=120.0, help="seconds one cell may run (default: 120)")
    grade.add_argument("--notebook-timeout", type=float, default=None, help="seconds one notebook may run (default: 5 x --timeout)")
    grade.add_argument("--memory-mb", type=int, default=4096, help="memory of one submission's kernel (default: 4096)")
    grade.add_argument("--secret-file", type=Path, default=None,
                       help="the course secret behind the hidden cases; made on first use, keep it out of every "
                            f"repository (default: $AUTOGRADER_SECRET_FILE or {default_path()})")
    grade.add_argument("--force", action="store_true", help="regrade submissions that have not changed")
    grade.add_argument("--no-sandbox", action="store_true", help="run student code without bubblewrap (unsafe)")
    release = commands.add_parser("publish", help="write the student repository of a course run for credit")
    release.add_argument("destination", type=Path, help="folder of the student repository (made, or updated)")
    release.add_argument("--course-dir", type=Path, default=Path("."), help="the course repository (default: .)")
    cases = commands.add_parser("cases", help="show the hidden inputs one student was graded on (regrade requests)")
    cases.add_argument("assignment", help="assignment id, e.g. 03_masking")
    cases.add_argument("student", help="the student's id, as in submitted/<student>/")
    cases.add_argument("--part", default=None, help="one graded part, e.g. masked_softmax: also print its tensors")
    cases.add_argument("--secret-file", type=Path, default=None, help="the course secret (as for grade)")
    args = parser.parse_args(argv)
    if args.command in ("publish", "cases"):
        return args
    if args.workers < 1 or args.timeout <= 0 or args.memory_mb < 256:
        parser.error("--workers must be >= 1, --timeout > 0 and --memory-mb >= 256")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # nbgrader creates a new gradebook with the `alembic` command of this environment
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    try:
        if args.command == "publish":
            return publish_student_repository(args)
        if args.command == "cases":
            return show_hidden_cases(args)
        return grade_assignment(args)
    except (SandboxUnavailable, FileNotFoundError, ValueError, PublishError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def show_hidden_cases(args: argparse.Namespace) -> int:
    """``cases ASSIGNMENT STUDENT``: the hidden inputs a grading run gives this student, part by part."""
    import importlib

    import torch

    from .. import runner

    path = args.secret_file or default_path()
    if not path.exists():
        raise FileNotFoundError(f"no grading secret at {path}: the hidden cases depend on it (--secret-file)")
    secret, _ = load_or_create(path)
    runner.SEED_KEY = student_key(secret, args.assignment, args.student)
    try:
        checks = importlib.import_module(f"autograder.ch{args.assignment}")
    except ModuleNotFoundError:
        raise ValueError(f"no checks for assignment {args.assignment!r}") from None
    if args.part is not None and args.part not in checks.PARTS:
        raise ValueError(f"{args.assignment} has no part {args.part!r}; its parts: {', '.join(checks.PARTS)}")
    parts = list(checks.PARTS.values()) if args.part is None else [checks.PARTS[args.part]]
    torch.set_printoptions(precision=4, linewidth=100)
    for part in parts:
        calls, _ = runner.hidden_calls(part)
        print(f"{part.name}: seed {runner.hidden_seed(part.chapter, part.name)}, {len(calls)} hidden calls")
        for number, call in enumerate(calls, start=1):
            print(f"  {number}. {call.description}")
            if args.part is not None:
                for value in (*call.args, *call.kwargs.values()):
                    if isinstance(value, torch.Tensor):
                        print("     " + str(value).replace("\n", "\n     "))
    return 0


def publish_student_repository(args: argparse.Namespace) -> int:
    """``publish DEST``: exercises and visible checks, without references or solutions."""
    written = publish(args.course_dir, args.destination)
    print(f"published {len(written)} files to {args.destination.resolve()}: exercises/, the visible checks "
          "(autograder/ without reference/ and grading/), binder/, pyproject.toml, README.md")
    return 0


def grade_assignment(args: argparse.Namespace) -> int:
    """Grade new and changed submissions of ``args.assignment``; print a summary."""
    started = time.monotonic()
    course = Course.open(args.course_dir)
    source_path = course.source_notebook(args.assignment)
    source = nbformat.read(source_path, as_version=4)
    limits = _limits(args)
    secret = _secret(args.secret_file or default_path())
    ensure_assignment(course, args.assignment, source_path)
    students = course.students(args.assignment)
    if not students:
        raise FileNotFoundError(f"no submissions of {args.assignment} under {course.root / course.coursedir.submitted_directory}")
    fingerprints = {s: _fingerprint(course, args.assignment, s, source_path, secret) for s in students}
    todo = [s for s in students if args.force or _state(course, args.assignment, s).get("fingerprint") != fingerprints[s]]
    print(f"{args.assignment}: {len(students)} submissions, {len(todo)} to grade "
          f"({len(students) - len(todo)} unchanged), {args.workers} workers, device {limits.device}, "
          f"sandbox {'on' if limits.sandbox else 'OFF'}", flush=True)
    progress = _Progress(len(todo))
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=args.workers, mp_context=context) as pool:
        jobs = {pool.submit(_grade_one, course.root, args.assignment, s, str(source_path),
                            dataclasses.replace(limits, seed_key=student_key(secret, args.assignment, s))): s
                for s in todo}
        for job in as_completed(jobs):
            student = jobs[job]
            results, unanswered = _collect(job, source)
            _save(course, args.assignment, student, source_path, results, unanswered, fingerprints[student])
            progress.step(student, results)
    rows = _rows(course, args.assignment, students)
    csv_path = course.root / "grades" / f"{args.assignment}.csv"
    write_csv(csv_path, rows)
    _summary(rows, len(todo), len(students) - len(todo), time.monotonic() - started, csv_path, course.db_url)
    return 0


def _limits(args: argparse.Namespace) -> Limits:
    import torch

    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    elif device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device is available here")
    if not args.no_sandbox:
        check_bubblewrap()
    threads = max(1, (os.cpu_count() or 1) // args.workers)
    notebook_seconds = args.notebook_timeout or 5 * args.timeout
    return Limits(cell_seconds=args.timeout, notebook_seconds=notebook_seconds, memory_mb=args.memory_mb,
                  threads=threads, device=device, sandbox=not args.no_sandbox)


def _secret(path: Path) -> bytes:
    """The course secret, made on first use (and said so, since regrades need the same file)."""
    secret, created = load_or_create(path)
    if created:
        print(f"made a new grading secret in {path}: keep it (regrades need it) and out of every repository",
              flush=True)
    return secret


def _grade_one(root: Path, assignment: str, student: str, source_path: str, limits: Limits) -> tuple[list[dict], dict]:
    """In a worker process: grade one student, store the autograded notebook.

    Returns:
        ``(rows, unanswered)``: the part results as dicts, and which answers were left blank.
    """
    course = Course.open(root)
    source = nbformat.read(source_path, as_version=4)
    submitted = course.folder("submitted", assignment, student)
    results, autograded, unanswered = grade_submission(source, submitted / Path(source_path).name, limits)
    if autograded is not None:
        folder = course.folder("autograded", assignment, student)
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f".{Path(source_path).name}.partial"
        nbformat.write(autograded, str(partial))
        os.replace(partial, folder / Path(source_path).name)
        if (submitted / "timestamp.txt").exists():
            (folder / "timestamp.txt").write_text((submitted / "timestamp.txt").read_text())
    return [r.as_dict() for r in results], unanswered


def _collect(job, source) -> tuple[list[PartResult], dict[str, bool]]:
    """A worker's results; if the worker itself failed, every part is an error saying why."""
    try:
        rows, unanswered = job.result()
        return [PartResult(**row) for row in rows], unanswered
    except Exception as error:
        failed = [PartResult(p.grade_id, 0.0, p.points, "error", f"grader error: {type(error).__name__}: {error}")
                  for p in parts_of(source)]
        return failed, {}


def _save(course: Course, assignment: str, student: str, source_path: Path, results: list[PartResult],
          unanswered: dict[str, bool], fingerprint: str) -> None:
    """Gradebook first, then the state file that marks the submission as done."""
    submitted = course.folder("submitted", assignment, student)
    record(course, assignment, source_path.stem, student, results, unanswered, read_timestamp(submitted))
    state = {"fingerprint": fingerprint, "results": [r.as_dict() for r in results]}
    path = _state_path(course, assignment, student)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".partial").write_text(json.dumps(state))
    os.replace(path.with_suffix(".partial"), path)


def _fingerprint(course: Course, assignment: str, student: str, source_path: Path, secret: bytes) -> str:
    """A hash of everything a grade depends on: the submission, the source, the grader, the secret."""
    digest = hashlib.sha256(f"{__version__}\n{fingerprint(secret)}\n".encode())
    digest.update(source_path.read_bytes())
    folder = course.folder("submitted", assignment, student)
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _state_path(course: Course, assignment: str, student: str) -> Path:
    return course.root / "grades" / ".state" / assignment / f"{student}.json"


def _state(course: Course, assignment: str, student: str) -> dict:
    try:
        return json.loads(_state_path(course, assignment, student).read_text())
    except (OSError, ValueError):
        return {}


def _rows(course: Course, assignment: str, students: list[str]) -> list[dict]:
    """One CSV row per student and part, from the state files."""
    rows = []
    for student in students:
        for result in _state(course, assignment, student).get("results", []):
            rows.append({"student": student, "assignment": assignment, **result})
    return rows


class _Progress:
    """A progress bar on a terminal, one line per submission otherwise."""

    def __init__(self, total: int):
        self.total, self.done, self.started = total, 0, time.monotonic()
        self.tty = sys.stderr.isatty()

    def step(self, student: str, results: list[PartResult]) -> None:
        self.done += 1
        score = sum(r.score for r in results)
        best = sum(r.max_score for r in results)
        elapsed = time.monotonic() - self.started
        if self.tty:
            filled = int(30 * self.done / max(1, self.total))
            print(f"\r[{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total} {elapsed:5.0f} s  "
                  f"{student}: {score:g}/{best:g}   ", end="" if self.done < self.total else "\n", file=sys.stderr, flush=True)
        else:
            print(f"[{self.done}/{self.total}] {student}: {score:g}/{best:g} ({elapsed:.0f} s)", flush=True)


def _summary(rows: list[dict], graded: int, unchanged: int, seconds: float, csv_path: Path, db_url: str) -> None:
    statuses = Counter(row["status"] for row in rows)
    parts = ", ".join(f"{statuses[s]} {s}" for s in STATUSES if statuses[s])
    print(f"graded {graded} submissions in {seconds:.1f} s ({unchanged} unchanged, not regraded)")
    print(f"parts: {parts or 'none'}")
    print(f"grades: {csv_path}\ngradebook: {db_url}")
