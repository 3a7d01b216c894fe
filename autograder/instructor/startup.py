"""What ``python -m autograder`` does before it imports the grading code: read its command line and, to
grade on this machine, start the kernels' zygote.

Importing the grading code takes seconds (PyTorch, nbgrader), and so does the zygote's
start (it imports PyTorch too, in its sandbox: ``autograder/kernel/zygote.py``). Started
first, the zygote gets ready while this process imports, instead of after it. So this
module imports only the settings, the sandbox's limits and the kernels' module.
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import os
import shutil
from pathlib import Path

from traitlets.config.loader import Config

from ..grading import kernels
from ..grading.sandbox import Limits
from .settings import GradeSettings, resolve, setting_names, setting_type


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m autograder", description="Grade nbgrader submissions of the course.")
    commands = parser.add_subparsers(dest="command", required=True)
    grading = commands.add_parser("grade", help="grade every submission of an assignment",
                                  description="Each option can also be set in the course's nbgrader_config.py, "
                                              "e.g. c.GradeSettings.timeout = 60; the command line wins.")
    grading.add_argument("assignment", help="assignment id, e.g. 03_masking")
    grading.add_argument("--course-dir", type=Path, default=Path("."), help="nbgrader course directory (default: .)")
    grading.add_argument("--force", action="store_true", help="regrade submissions that have not changed")
    grading.add_argument("-v", "--verbose", action="count", default=0,
                         help="log settings, where each submission was graded, and the time each phase of the "
                              "run took, start-up and grading (-vv: debug)")
    for name in setting_names():
        _add_setting(grading, name)
    release = commands.add_parser("publish", help="write the student repository of a course run for credit")
    release.add_argument("destination", type=Path, help="folder of the student repository (made, or updated)")
    release.add_argument("--course-dir", type=Path, default=Path("."), help="the course repository (default: .)")
    release.add_argument("--language", choices=["en", "zh"], default="en",
                         help="the edition of the notebooks: en, or zh for the Chinese ones (zh/exercises/) and a "
                              "Chinese README (default: en)")
    release.add_argument("--assignments", nargs="+", default=None, metavar="ID",
                         help="the assignments to release, by id or number (e.g. 01 02); earlier releases stay "
                              "(default: all)")
    cases = commands.add_parser("cases", help="show the hidden inputs one student was graded on (regrade requests)")
    cases.add_argument("assignment", help="assignment id, e.g. 03_masking")
    cases.add_argument("student", help="the student's id, as in submitted/<student>/")
    cases.add_argument("--part", default=None, help="one graded part, e.g. masked_softmax: also print its tensors")
    cases.add_argument("--course-dir", type=Path, default=Path("."),
                       help="nbgrader course directory, whose nbgrader_config.py may name the secret (default: .)")
    cases.add_argument("--any-student", action="store_true",
                       help="show the cases of a student who has no submission (a mistyped name is refused otherwise)")
    cases.add_argument("--secret-file", type=Path, default=None, help="the course secret (as for grade)")
    summary = commands.add_parser("report", help="what the class got right and wrong: one HTML page per run",
                                  description="Read grades/<assignment>.csv (after grade) and write one self-contained "
                                              "HTML page: scores, each part's difficulty, the mistakes the class "
                                              "made, grading problems, times, scores set by hand.")
    summary.add_argument("assignments", nargs="+", metavar="ASSIGNMENT",
                         help="assignment ids or numbers, e.g. 03_masking (several: a students x assignments table too)")
    summary.add_argument("--course-dir", type=Path, default=Path("."), help="nbgrader course directory (default: .)")
    summary.add_argument("--output", type=Path, default=None,
                         help="where to write the page (default: grades/report-<assignment>.html)")
    _add_export(commands)
    _add_similarity(commands)
    return parser.parse_args(argv)


def _add_export(commands: argparse._SubParsersAction) -> None:
    """``export ASSIGNMENT --to canvas|moodle``: the options of :func:`autograder.instructor.export.export`."""
    lms = commands.add_parser(
        "export", help="write an assignment's totals as Canvas's or Moodle's gradebook import reads them",
        description="Write one CSV file for the LMS's gradebook import (Canvas: Grades > Import; Moodle: Grades > "
                    "Import > CSV file): each student's total from grades/ASSIGNMENT.csv (scores set by hand "
                    "included), with the LMS's own identifier. A student whose submission was not graded, or who "
                    "matches no roster row, or two, is left out and named, every other student written, and the "
                    "command exits with 1.")
    lms.add_argument("assignment", help="assignment id, e.g. 03_masking")
    lms.add_argument("--to", required=True, choices=["canvas", "moodle"], help="the LMS that imports the file")
    lms.add_argument("--roster", type=Path, default=None,
                     help="the LMS's export of its gradebook, for its students and their identifiers (Canvas: "
                          "Grades > Export; Moodle: Grades > Export > Plain text file). Moodle needs it; Canvas can "
                          "do without: its user ids are read from the zip of hand-ins in downloaded/ASSIGNMENT/archive/")
    lms.add_argument("--missing-as-zero", action="store_true",
                     help="give 0 to a roster student without a submission (default: an empty cell, which the import "
                          "leaves ungraded)")
    lms.add_argument("--title", default=None,
                     help="the assignment's exact title in the LMS, for the column of scores (Canvas matches a column "
                          "to an assignment by its title and makes a new assignment of a title it does not know; "
                          "needed unless the roster has a column that names the assignment)")
    lms.add_argument("--course-dir", type=Path, default=Path("."), help="nbgrader course directory (default: .)")
    lms.add_argument("--output", type=Path, default=None,
                     help="the CSV file to write (default: grades/<to>-ASSIGNMENT.csv in the course directory)")


def _add_similarity(commands: argparse._SubParsersAction) -> None:
    """``similarity ASSIGNMENT``: the options of :func:`autograder.instructor.similarity.similarity_page`."""
    alike = commands.add_parser(
        "similarity", help="after grading: which submissions share code beyond what the exercise gives",
        description="Compare every pair of notebooks handed in (read as text, never run), statement by statement, "
                    "with the released notebook's code and code most of the class shares set aside; a pair is "
                    "flagged when the parts the two hand in alike are together rarer, by the class's own answers, "
                    "than chance explains in a class of its size. Writes grades/similarity-ASSIGNMENT.html, the "
                    "flagged pairs side by side. A flag is a reason to look, not a verdict; nothing changes a grade.")
    alike.add_argument("assignment", help="assignment id or number, e.g. 04_multihead")
    alike.add_argument("--course-dir", type=Path, default=Path("."), help="nbgrader course directory (default: .)")
    alike.add_argument("--threshold", type=float, default=None,
                       help="flag pairs whose evidence (nats: their alike parts met together by one pair in "
                            "e**THRESHOLD of the class) is at least this (default: ln(pairs / 2), 10.0 for 300 "
                            "students; lower finds more, and flags more honest pairs)")
    alike.add_argument("--json", action="store_true",
                       help="print the flagged pairs as JSON (students, score, one_pair_in, shared, parts) instead of a "
                            "summary")
    alike.add_argument("--output", type=Path, default=None,
                       help="where to write the page (default: grades/similarity-ASSIGNMENT.html)")


def _add_setting(parser: argparse.ArgumentParser, name: str) -> None:
    """One option per setting, from its declaration: ``memory_mb`` -> ``--memory-mb``, help and all.

    Options default to ``None`` ("not given"), so that ``nbgrader_config.py`` applies
    unless the command line says otherwise.
    """
    trait = GradeSettings.class_traits()[name]
    flag = "--" + name.replace("_", "-")
    kind = setting_type(name)
    if kind is bool:
        parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=trait.help)
        return
    choices = getattr(trait, "values", None)
    parser.add_argument(flag, type=kind, default=None, choices=choices, help=trait.help)


def start_zygote(argv: list[str]) -> None:
    """For ``grade`` on this machine: spawn the zygote ``grade()`` will likely wait for (``kernels.spawn``).

    Its limits are those the command line asks for, with ``device auto`` guessed. The
    course's ``nbgrader_config.py`` is not read here (it imports nbgrader: a second); where
    it asks for other limits, or a Dask scheduler, or where PyTorch decides ``auto``
    otherwise, ``grade()`` stops this zygote unused and spawns the right one, if any. Settings
    ``grade()`` refuses, or a missing bubblewrap, start nothing here: ``grade()`` says why.
    """
    args = parse_args(argv)
    if args.command != "grade":
        return
    try:
        settings, _ = resolve(Config(), **{name: getattr(args, name) for name in setting_names()})
    except ValueError:
        return
    if settings.scheduler_address is None and (shutil.which("bwrap") or not settings.sandbox):
        kernels.spawn(requested_limits(settings, local=True, device=_likely_device(settings.device)))


def requested_limits(settings: GradeSettings, local: bool, device: str | None = None) -> Limits:
    """The sandbox limits the settings ask for, unchecked; ``device``, if given, instead of the setting's."""
    threads = max(1, (os.cpu_count() or 1) // settings.workers) if local else 1
    return Limits(cell_seconds=settings.timeout, notebook_seconds=settings.notebook_timeout or 5 * settings.timeout,
                  memory_mb=settings.memory_mb, processes=settings.processes, threads=threads,
                  device=device or settings.device, sandbox=settings.sandbox, gpu_memory_mb=settings.gpu_memory_mb,
                  added_cells=settings.max_added_cells, code_kb=settings.max_code_kb)


def _likely_device(device: str) -> str:
    """``auto`` as PyTorch will likely decide it, without importing it: ``cuda`` where both an NVIDIA device and
    PyTorch's CUDA library are here."""
    if device != "auto":
        return device
    torch = importlib.util.find_spec("torch")
    folders = (torch.submodule_search_locations or []) if torch is not None else []
    library = any(glob.glob(os.path.join(folder, "lib", "libtorch_cuda*.so")) for folder in folders)
    return "cuda" if library and glob.glob("/dev/nvidia[0-9]*") else "cpu"
