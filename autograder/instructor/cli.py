"""``python -m autograder``: the instructors' commands.

* ``grade ASSIGNMENT``: grade every new or changed submission, in parallel, in sandboxes,
  on this machine or a Dask cluster; a command-line face of
  :func:`autograder.instructor.grade.grade`, whose settings (``settings.py``) become
  its options, each readable from the course's ``nbgrader_config.py`` too;
* ``publish DEST``: write the student repository (``publish.py``);
* ``cases ASSIGNMENT STUDENT``: the hidden inputs one student was graded on;
* ``export ASSIGNMENT --to canvas|moodle``: the totals as the LMS's gradebook imports them (``export.py``);
* ``report ASSIGNMENT...``: the class report, one HTML page (``report.py``);
* ``similarity ASSIGNMENT``: the pairs of submissions that share code, one HTML page (``similarity.py``).
"""

from __future__ import annotations

import argparse
import difflib
import logging
import os
import sys

from ..grading.errors import GradingEnvironmentError
from ..grading.sandbox import SandboxUnavailable
from .grade import grade, summary
from .gradebook import Course, GradebookError, environment_on_path
from .publish import PublishError, publish
from .secret import load_or_create, student_key
from .settings import resolve, setting_names
from .startup import parse_args  # read by python -m autograder before it imports this module: startup.py


def main(argv: list[str] | None = None, import_seconds: float | None = None) -> int:
    """Run the command ``argv`` says; ``import_seconds``: how long ``python -m autograder`` took to import
    the grading code (``grade -v`` says)."""
    args = parse_args(argv)
    os.environ["PATH"] = environment_on_path(os.environ)["PATH"]  # for nbgrader, run in this process
    try:
        if args.command == "publish":
            return publish_student_repository(args)
        if args.command == "cases":
            return show_hidden_cases(args)
        if args.command == "export":
            return export_for_lms(args)
        if args.command == "report":
            return write_report(args)
        if args.command == "similarity":
            return write_similarity(args)
        return grade_assignment(args, import_seconds)
    except (SandboxUnavailable, FileNotFoundError, ValueError, PublishError, ConnectionError,
            GradingEnvironmentError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except GradebookError as error:  # a course laid out wrong: the message alone, status 1
        print(error, file=sys.stderr)
        return 1


def grade_assignment(args: argparse.Namespace, import_seconds: float | None = None) -> int:
    """``grade ASSIGNMENT``: :func:`grade` with the options given; 1 if some submission is left ungraded."""
    if args.verbose:
        _log_to_stdout(logging.DEBUG if args.verbose > 1 else logging.INFO)
        if import_seconds is not None:
            logging.getLogger("autograder.grading").info("time: imports %.1f s (the grading code: PyTorch, nbgrader; "
                                                         "the run's phases follow at its end)", import_seconds)
    settings = {name: getattr(args, name) for name in setting_names()}
    report = grade(args.assignment, course_dir=args.course_dir, force=args.force, **settings)
    print(summary(report), flush=True)
    return 1 if report.not_graded else 0


def write_report(args: argparse.Namespace) -> int:
    """``report ASSIGNMENT...``: the class report (``report.py``), its path printed."""
    from .report import report

    path = report(args.assignments, course_dir=args.course_dir, output=args.output)
    print(f"class report: {path}")
    return 0


def write_similarity(args: argparse.Namespace) -> int:
    """``similarity ASSIGNMENT``: the page of similar submissions (``similarity.py``), its path printed; with
    ``--json``, the flagged pairs as JSON on stdout instead of the summary."""
    from .similarity import page_path, similarity, to_json, write_page

    if args.threshold is not None and not args.threshold >= 0:
        raise ValueError(f"--threshold is evidence in nats, 0 or more, not {args.threshold}")
    analysis = similarity(args.assignment, course_dir=args.course_dir, threshold=args.threshold)
    path = write_page(analysis, args.output or page_path(args.course_dir, analysis.assignment))
    if args.json:
        print(to_json(analysis.pairs))
        return 0
    grouped = [group for group in analysis.groups() if len(group) > 2]
    print(f"{len(analysis.students)} notebooks compared, {len(analysis.pairs)} pairs flagged at "
          f"{analysis.threshold:.1f}" + (f", {len(grouped)} groups of three or more" if grouped else ""))
    print(f"similarity page: {path}")
    return 0


def export_for_lms(args: argparse.Namespace) -> int:
    """``export ASSIGNMENT --to canvas|moodle``: the totals as the LMS imports them (``export.py``); 1 if some
    student is left out of the file (named on stderr), every other student written."""
    from .export import export

    result = export(args.assignment, to=args.to, course_dir=args.course_dir, roster=args.roster,
                    missing_as_zero=args.missing_as_zero, output=args.output, title=args.title)
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for line in result.omissions():
        print(f"warning: {line}", file=sys.stderr)
    print(f"{args.to}: {result.path}")
    print(result.summary())
    return 1 if result.left_out else 0


def show_hidden_cases(args: argparse.Namespace) -> int:
    """``cases ASSIGNMENT STUDENT``: the hidden inputs a grading run gives this student, part by part."""
    import importlib

    import torch

    from .. import parts as declarations

    course = Course.open(args.course_dir)
    # the secret the grading command uses: --secret-file, else the course config, else the default
    path = resolve(course.config, secret_file=args.secret_file)[0].secret_path
    if not path.exists():
        raise FileNotFoundError(f"no grading secret at {path}: the hidden cases depend on it (--secret-file)")
    _expect_submission(args, course)
    secret, _ = load_or_create(path)
    key = student_key(secret, args.assignment, args.student)
    try:
        checks = importlib.import_module(f"autograder.ch{args.assignment}")
    except ModuleNotFoundError:
        raise ValueError(f"no checks for assignment {args.assignment!r}") from None
    if args.part is not None and args.part not in checks.PARTS:
        raise ValueError(f"{args.assignment} has no part {args.part!r}; its parts: {', '.join(checks.PARTS)}")
    parts = list(checks.PARTS.values()) if args.part is None else [checks.PARTS[args.part]]
    torch.set_printoptions(precision=4, linewidth=100)
    for part in parts:
        calls, _ = declarations.hidden_calls(part, key)
        print(f"{part.name}: seed {declarations.hidden_seed(part.chapter, part.name, key)}, {len(calls)} hidden calls")
        for number, call in enumerate(calls, start=1):
            print(f"  {number}. {call.description}")
            if args.part is not None:
                for value in (*call.args, *call.kwargs.values()):
                    if isinstance(value, torch.Tensor):
                        print("     " + str(value).replace("\n", "\n     "))
    return 0


def _expect_submission(args: argparse.Namespace, course: Course) -> None:
    """Refuse a student without a submission of the assignment in ``course`` (any name draws cases: a typo
    would show someone else's), unless ``--any-student``."""
    if args.any_student:
        return
    students = course.students(args.assignment)
    if args.student not in students:
        near = difflib.get_close_matches(args.student, students, n=3)
        raise ValueError(f"{args.student!r} has no submission of {args.assignment} in "
                         f"{course.root / course.coursedir.submitted_directory}"
                         + (f" (did you mean {', '.join(near)}?)" if near else "")
                         + "; --any-student shows the cases of any name")


def _log_to_stdout(level: int) -> None:
    """``-v``: the grading log (settings, workers, each submission) on stdout, with times."""
    log = logging.getLogger("autograder.grading")
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S"))
    log.addHandler(handler)
    log.setLevel(level)
    log.propagate = False


def publish_student_repository(args: argparse.Namespace) -> int:
    """``publish DEST``: exercises and visible checks, without references or solutions."""
    release = publish(args.course_dir, args.destination, assignments=args.assignments, language=args.language)
    for warning in release.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    where = args.destination.resolve()
    if not release.committed:
        print(f"nothing changed in {where} since its last release: nothing committed")
        return 0
    print(f"released {', '.join(release.assignments)} to {where} ({len(release.written)} files: exercises/, the "
          "visible checks without reference/ and grading/, binder/, pyproject.toml, README.md), committed; "
          "push it to the students' repository")
    return 0
