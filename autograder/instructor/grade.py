"""``grade()``: grade every new or changed submission of an assignment, here or on a Dask cluster.

The process that calls :func:`grade` is the only one that writes: the autograded
notebooks, the gradebook, the state files and the CSV. Workers (processes of this
machine, or Dask workers anywhere) get a submission's bytes and return its results;
each runs the submission's kernel in its own sandbox (``sandbox.py``). After each
submission the scores go into the gradebook, then a state file with the submission's
fingerprint marks it done, so a run that is killed and started again regrades exactly the
submissions without an up-to-date state file: nothing is lost, nothing counted twice.

A worker that is lost (its machine or process dies) costs only a new try of the
submissions it held: Dask runs them again on another worker, this machine's pool forks a
new process for it (``forks.py``; each fork grades one submission, under a data limit of
its own, ``--grader-memory-mb``), and a submission whose grading failed for a reason of the
grader's own gets no grade and no state file, so the next run grades it. A submitted
notebook larger than ``--max-notebook-mb`` is never read: every part is an error.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import os
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import nbformat

from .. import __version__
from ..grading import kernels
from ..grading.errors import GradingEnvironmentError
from ..grading.forks import ForkPool, failure
from ..grading.notebooks import clearing_options, release
from ..grading.sandbox import Limits
from ..grading.sandbox import policy as sandbox_policy
from ..grading.verdict import PartResult, PartStatus
from ..grading.worker import Oversized, _on_this_machine, code_fingerprint, grade_task, warm_up
from ..parts import reference_module
from ..text import clean
from .gradebook import Course, ensure_assignment, manual_scores, read_timestamp, record, write_csv
from .secret import fingerprint, load_or_create, student_key
from .settings import GradeSettings, resolve, takes_settings
from .startup import requested_limits

log = logging.getLogger("autograder.grading")


@dataclass
class GradeReport:
    """What a run of :func:`grade` did.

    Attributes:
        graded: students graded in this run.
        unchanged: students whose grades were already up to date.
        not_graded: students the grader itself failed on (lost workers, a broken
            worker environment), with the reason: rerun to grade them.
        rows: every student's part results, as in the CSV.
        csv_path: the grades table; ``db_url``: the gradebook.
        notes: per student graded in this run, what the submission did to the grader (output
            flooded while judged, oracle calls refused, a file refused unread), if anything.
        phases: seconds per phase of the run, in order (:class:`Phases`): the start-up's, then
            ``grading`` (waiting for the workers), ``recording`` (their results, in the
            gradebook and the state files) and ``grades table``.
    """

    assignment: str
    graded: list[str]
    unchanged: list[str]
    not_graded: dict[str, str]
    rows: list[dict]
    csv_path: Path
    db_url: str
    seconds: float
    settings: dict = field(default_factory=dict)
    notes: dict[str, list[str]] = field(default_factory=dict)
    phases: dict[str, float] = field(default_factory=dict)


class Phases:
    """Where a run's time goes: each phase ends where the next begins, timed with ``time.monotonic``."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.mark = time.monotonic()

    def end(self, name: str) -> None:
        """The phase ``name`` ends now; it began where the last one ended (a name met again adds up)."""
        now = time.monotonic()
        self.seconds[name] = self.seconds.get(name, 0.0) + now - self.mark
        self.mark = now


def timing(phases: dict[str, float]) -> str:
    """``phases`` as one line: ``imports 9.1 s, course 0.3 s, ...``."""
    return ", ".join(f"{name} {seconds:.1f} s" for name, seconds in phases.items())


@takes_settings
def grade(assignment: str, *, course_dir: str | Path = ".", force: bool = False, progress: bool = True,
          **given) -> GradeReport:
    """Grade the new and changed submissions of ``assignment`` in the nbgrader course at ``course_dir``.

    ``given`` are the settings, as keywords: each trait of ``GradeSettings`` (``settings.py``,
    where each is declared with its help), listed below. Every setting left at ``None``
    comes from the course's ``nbgrader_config.py`` (``c.GradeSettings.<name>``), else from
    its default. ``force`` regrades unchanged submissions too; ``progress`` prints one line
    per graded submission.

    Raises:
        TypeError: a keyword that is not a setting; ValueError: a bad setting, or a source
        notebook nbgrader cannot release (``BrokenSource``, naming the cell);
        FileNotFoundError: no submissions; GradebookError: not one source notebook;
        SandboxUnavailable: bubblewrap does not work here (and ``sandbox`` is on).
    """
    started, clock = time.monotonic(), Phases()
    course = Course.open(Path(course_dir))
    settings, origins = resolve(course.config, **given)
    for name, origin in origins.items():
        log.info("setting %s = %r (%s)", name, getattr(settings, name), origin)
    source_path = course.source_notebook(assignment)
    source = nbformat.read(source_path, as_version=4)
    clearing = clearing_options(course.config)
    release(source, clearing)  # a source nbgrader cannot release stops the run here, naming its cell
    clock.end("course")
    address = settings.scheduler_address
    limits = _limits(settings, local=address is None)
    clock.end("sandbox check")
    secret = _secret(settings.secret_path, origins["secret_file"], first_run=not (course.root / "grades" / ".state").exists())
    ensure_assignment(course, assignment, source_path)
    students = course.students(assignment)
    clock.end("gradebook")
    if not students:
        raise FileNotFoundError(f"no submissions of {assignment} under {course.root / course.coursedir.submitted_directory}")
    # what a grade depends on besides the submission: the grading code and the limits it ran under
    grading = json.dumps({"code": code_fingerprint(), "cell_seconds": limits.cell_seconds,
                          "notebook_seconds": limits.notebook_seconds, "memory_mb": limits.memory_mb,
                          "processes": limits.processes, "gpu_memory_mb": limits.gpu_memory_mb,
                          "device": limits.device, "sandbox": limits.sandbox,
                          "max_notebook_mb": settings.max_notebook_mb, "added_cells": limits.added_cells,
                          "code_kb": limits.code_kb, "clearing": clearing}, sort_keys=True)
    fingerprints = {s: _fingerprint(course, assignment, s, source_path, secret, grading) for s in students}
    todo = [s for s in students if force or read_state(course, assignment, s).get("fingerprint") != fingerprints[s]]
    # the zygote this run waits for, starting while it goes on (python -m autograder spawned it first: startup.py)
    kernels.spawn(limits if todo and not address else None)
    where = f"Dask scheduler {address}" if address else f"{settings.workers} workers"
    print(f"{assignment}: {len(students)} submissions, {len(todo)} to grade ({len(students) - len(todo)} unchanged), "
          f"{where}, device {limits.device}, sandbox {'on' if limits.sandbox else 'OFF'}", flush=True)
    for line in sandbox_policy(limits).describe() if not address else ["limits: each Dask worker's, as its machine "
                                                                        "allows (its log says which)"]:
        print(line, flush=True)
    largest = settings.max_notebook_mb * 2**20
    tasks = {s: (nbformat.writes(source), source_path.name,
                 _submission_bytes(course, assignment, s, source_path.name, largest),
                 limits, student_key(secret, assignment, s), clearing) for s in todo}
    clock.end("submissions")
    bar = _Progress(len(todo), enabled=progress)
    graded, not_graded, notes = [], {}, {}
    results = (_dask_results(tasks, address, settings.scheduler_timeout) if address else
               _local_results(tasks, settings.workers, limits, settings.grader_memory_mb, clock))
    try:
        for student, outcome in results:
            problem = outcome if isinstance(outcome, str) else _refusal(outcome)
            if problem and problem.startswith(f"{GradingEnvironmentError.__name__}: "):
                raise GradingEnvironmentError(problem.split(": ", 1)[1])  # every submission would fail: stop
            if problem:
                log.warning("%s: not graded: %s", student, problem)
                not_graded[student] = problem
                continue
            clock.end("grading")  # this far, waiting for the workers; recording is this process's own work
            try:
                _save(course, assignment, student, source_path, outcome, fingerprints[student])
            except (UnicodeError, ValueError) as error:  # one student's records, not the run: said, and regraded next run
                log.warning("%s: not graded: its results could not be stored: %s", clean(student), error)
                not_graded[student] = f"its results could not be stored ({type(error).__name__}: {error})"
                continue
            finally:
                clock.end("recording")
            graded.append(student)
            if outcome["notes"]:
                notes[student] = outcome["notes"]
            bar.step(student, outcome["results"], outcome["worker"], outcome["seconds"])
    finally:
        results.close()  # stops the workers' queue if recording failed
    clock.end("grading")
    rows = _rows(course, assignment, students)
    csv_path = course.root / "grades" / f"{assignment}.csv"
    write_csv(csv_path, rows)
    clock.end("grades table")
    log.info("time: %s", timing(clock.seconds))
    report = GradeReport(assignment, graded, [s for s in students if s not in todo], not_graded, rows, csv_path,
                         course.db_url, time.monotonic() - started,
                         {name: getattr(settings, name) for name in origins}, notes, clock.seconds)
    return report


def _refusal(outcome: dict) -> str:
    """Why a worker's result must not be recorded, or ``""``."""
    if outcome["code"] != code_fingerprint():
        return (f"worker {outcome['worker']} runs other grading code (fingerprint {outcome['code']}, here "
                f"{code_fingerprint()}): install the same course environment on every worker")
    return ""


# --------------------------------------------------------------------------------------
# Where submissions are graded: this machine's processes, or a Dask cluster
# --------------------------------------------------------------------------------------


def _local_results(tasks: dict[str, tuple], workers: int, limits: Limits, memory_mb: int,
                   clock: Phases) -> Iterator[tuple[str, dict | str]]:
    """``(student, outcome)`` as each finishes, from forks of this process (``forks.py``), ``workers`` at once.

    The outcome is the task's dict, or a string saying why the grader failed. Each fork has
    ``memory_mb`` MiB of data memory; it forks its kernels from one zygote, spawned
    earlier (``kernels.spawn``) and waited for here, and finds the checks, their references
    and what a fork uses first (``worker.warm_up``) already here, done while the zygote
    starts. ``clock`` times that, and the wait for the zygote.
    """
    if not tasks:
        return
    _import_checks(next(iter(tasks.values()))[1])
    warm_up()
    clock.end("checks and warm-up")
    kernels.prestart(limits)
    clock.end("zygote (the rest of its start)")
    yield from ForkPool(grade_task, workers, memory_mb * 2**20).results(tasks)


def _import_checks(notebook_name: str) -> None:
    """Import the assignment's checks and their references here, once, rather than in every fork."""
    chapter = f"ch{Path(notebook_name).stem}"
    try:
        importlib.import_module(f"autograder.{chapter}")
    except ModuleNotFoundError:
        return  # no checks: each submission's grading says so
    reference_module(chapter)


def _dask_results(tasks: dict[str, tuple], address: str, wait: float) -> Iterator[tuple[str, dict | str]]:
    """``(student, outcome)`` as each finishes, from the workers of the Dask scheduler at ``address``.

    ``wait`` seconds for the scheduler to answer, then as many for a first worker.

    A task whose worker is lost runs again on another (Dask's ``allowed-failures``, 3 by
    default); past that, its outcome says so and the submission is left for the next run.
    """
    from distributed import Client, as_completed

    if not tasks:
        return
    try:
        client = Client(address, timeout=f"{wait}s")
    except (OSError, TimeoutError) as error:
        raise ConnectionError(f"cannot reach the Dask scheduler at {address}: {error}") from None
    with client:
        try:
            client.wait_for_workers(1, timeout=wait)
        except TimeoutError:
            raise ConnectionError(f"the Dask scheduler at {address} has no worker (waited {wait:g} s; "
                                  "--scheduler-timeout)") from None
        workers = client.scheduler_info()["workers"]
        log.info("Dask scheduler %s: %d workers (%s)", address, len(workers),
                 ", ".join(str(w.get("name", a)) for a, w in workers.items()))
        run = uuid.uuid4().hex[:8]
        futures = {client.submit(grade_task, *arguments, key=f"grade-{student}-{run}", pure=False): student
                   for student, arguments in tasks.items()}
        try:
            for future in as_completed(futures):
                student, outcome = futures.pop(future), _outcome(future)
                future.release()  # the cluster forgets a result once it is here (a course of thousands)
                yield student, outcome
        finally:
            client.cancel(list(futures))  # those not done


def _outcome(job) -> dict | str:
    """A finished job's result, or why it has none (the grader failed, not the student)."""
    try:
        return job.result()
    except Exception as error:  # noqa: BLE001 - a lost worker, a broken environment: grade it in the next run
        return failure(error)


# --------------------------------------------------------------------------------------
# The caller's side: inputs, records, state
# --------------------------------------------------------------------------------------


def _limits(settings: GradeSettings, local: bool) -> Limits:
    """The sandbox limits; on this machine, the device and bubblewrap are checked now, not per task."""
    limits = requested_limits(settings, local)
    return _on_this_machine(limits) if local else limits


def _secret(path: Path, origin: str, first_run: bool) -> bytes:
    """The course secret, made on first use; where it comes from is said on every run.

    On a course's first grading run, a secret that was already there is one made for
    something else, perhaps an earlier cohort, whose hidden inputs would then repeat: the
    run says so.
    """
    secret, created = load_or_create(path)
    where = {"argument": "--secret-file", "nbgrader_config.py": "c.GradeSettings.secret_file in nbgrader_config.py",
             "default": "AUTOGRADER_SECRET_FILE" if os.environ.get("AUTOGRADER_SECRET_FILE") else "the default place"}
    if created:
        print(f"made a new grading secret in {path} ({where[origin]}): keep it (regrades need it) and out of every "
              "repository", flush=True)
        return secret
    made = datetime.fromtimestamp(path.stat().st_mtime).strftime("%Y-%m-%d")
    print(f"grading secret: {path} ({where[origin]}, made {made})", flush=True)
    if first_run:
        print(f"warning: this is the course's first grading run, yet its secret {path} was made before it ({made}): "
              "if it is an earlier course's, its hidden inputs repeat here; move it away (a new one is made) unless "
              "it is this course's", flush=True)
    return secret


def _submission_bytes(course: Course, assignment: str, student: str, name: str,
                      largest: int) -> bytes | Oversized | None:
    """The submitted notebook's bytes; ``None`` if there is none; :class:`Oversized`, unread, if it has more
    than ``largest`` bytes."""
    path = course.folder("submitted", assignment, student) / name
    if not path.is_file():
        return None
    size = path.stat().st_size
    return Oversized(size, largest) if size > largest else path.read_bytes()


def _save(course: Course, assignment: str, student: str, source_path: Path, outcome: dict, fingerprint: str) -> None:
    """Autograded notebook, then gradebook, then the state file that marks the submission as done."""
    results = [PartResult(**row) for row in outcome["results"]]
    submitted = course.folder("submitted", assignment, student)
    if outcome["autograded"] is not None:
        folder = course.folder("autograded", assignment, student)
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f".{source_path.name}.partial"
        partial.write_text(outcome["autograded"], encoding="utf-8")
        os.replace(partial, folder / source_path.name)
        if (submitted / "timestamp.txt").exists():
            (folder / "timestamp.txt").write_text((submitted / "timestamp.txt").read_text())
    record(course, assignment, source_path.stem, student, results, outcome["unanswered"], read_timestamp(submitted))
    state = {"fingerprint": fingerprint, "results": [r.as_dict() for r in results], "seconds": outcome["seconds"],
             "worker": outcome["worker"], "unanswered": outcome["unanswered"]}
    path = _state_path(course, assignment, student)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".partial").write_text(json.dumps(state))
    os.replace(path.with_suffix(".partial"), path)


def _fingerprint(course: Course, assignment: str, student: str, source_path: Path, secret: bytes,
                 grading: str) -> str:
    """A hash of everything a grade depends on: the submission, the source, the secret, and
    ``grading`` (the grading code and the limits), so that a changed timeout regrades."""
    digest = hashlib.sha256(f"{__version__}\n{fingerprint(secret)}\n{grading}\n".encode())
    digest.update(source_path.read_bytes())
    folder = course.folder("submitted", assignment, student)
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            digest.update(str(path.relative_to(folder)).encode() + b"\0")
            with path.open("rb") as handle:  # in blocks: a submitted file of any size is hashed, never held
                for block in iter(lambda: handle.read(2**20), b""):
                    digest.update(block)
    return digest.hexdigest()


def _state_path(course: Course, assignment: str, student: str) -> Path:
    return course.root / "grades" / ".state" / assignment / f"{student}.json"


def read_state(course: Course, assignment: str, student: str) -> dict:
    """A submission's state file (its fingerprint, results and grading time), or ``{}``."""
    try:
        return json.loads(_state_path(course, assignment, student).read_text())
    except (OSError, ValueError):
        return {}


def _rows(course: Course, assignment: str, students: list[str]) -> list[dict]:
    """One CSV row per student and part, from the state files and the gradebook.

    ``score`` is the gradebook's (a score overridden by hand in the formgrader wins);
    ``auto_score`` is the grader's.
    """
    overridden = manual_scores(course, assignment)
    rows = []
    for student in students:
        for result in read_state(course, assignment, student).get("results", []):
            score = overridden.get((student, result["part"]), result["score"])
            rows.append({"student": student, "assignment": assignment, **result, "score": score,
                         "auto_score": result["score"]})
            for measured in ("seconds", "returned"):  # in the state file (the report reads them); the table: grades
                rows[-1].pop(measured, None)
    return rows


class _Progress:
    """A progress bar on a terminal, one line per submission otherwise."""

    def __init__(self, total: int, enabled: bool = True):
        self.total, self.done, self.started, self.enabled = total, 0, time.monotonic(), enabled
        self.tty = sys.stderr.isatty()

    def step(self, student: str, results: list[dict], worker: str, seconds: float) -> None:
        self.done += 1
        score = sum(r["score"] for r in results)
        best = sum(r["max_score"] for r in results)
        elapsed = time.monotonic() - self.started
        student = clean(student, controls=True)  # a folder's name: any bytes
        log.info("%s: %g/%g, graded by %s in %.1f s", student, score, best, worker, seconds)
        if not self.enabled:
            return
        if self.tty:
            filled = int(30 * self.done / max(1, self.total))
            print(f"\r[{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total} {elapsed:5.0f} s  "
                  f"{student}: {score:g}/{best:g}   ", end="" if self.done < self.total else "\n", file=sys.stderr, flush=True)
        else:
            print(f"[{self.done}/{self.total}] {student}: {score:g}/{best:g} ({elapsed:.0f} s)", flush=True)


def summary(report: GradeReport) -> str:
    """The lines the command prints at the end of a run."""
    statuses = Counter(row["status"] for row in report.rows)
    parts = ", ".join(f"{statuses[s]} {s}" for s in PartStatus if statuses[s])
    lines = [f"graded {len(report.graded)} submissions in {report.seconds:.1f} s "
             f"({len(report.unchanged)} unchanged, not regraded)",
             f"parts: {parts or 'none'}"]
    by_hand = [row for row in report.rows if row["score"] != row["auto_score"]]
    if by_hand:
        lines.append(f"{len(by_hand)} scores set by hand in the gradebook count instead of the grader's "
                     "(the CSV's auto_score column keeps the grader's)")
    flagged = sorted({row["student"] for row in report.rows if row["status"] == PartStatus.NEEDS_A_LOOK})
    if flagged:
        lines.append(f"{len(flagged)} submissions need a look (their own cells hold code the grader's reading cannot "
                     "see past, or a measurement this machine cannot make; points withheld on the parts that rest on "
                     "it, each message says where): " + clean(", ".join(flagged), controls=True))
    if report.notes:
        lines.append("what submissions did to the grader (each held to its own limits; the rest of the class is "
                     "graded as usual): " + "; ".join(clean(f"{student}: {', '.join(notes)}", controls=True)
                                                      for student, notes in sorted(report.notes.items())))
    if report.not_graded:
        lines.append("NOT graded, the grader failed (run the command again to grade them): "
                     + "; ".join(clean(f"{s}: {why}", controls=True) for s, why in sorted(report.not_graded.items())))
    lines += [f"grades: {report.csv_path}", f"gradebook: {report.db_url}"]
    return "\n".join(lines)
