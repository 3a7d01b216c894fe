"""Is every student graded alike? Grade the catalogued answers, right and wrong, as many students.

Every hidden case is drawn from a seed derived from a student's key, so a check that is
right for the cases one run happens to draw may still fail a correct answer for one student
in a thousand (a tolerance too tight for float32 rounding, an edge case drawn too rarely),
or let a wrong answer through for another (cases that happen not to tell it apart). This
script grades the answers of the checks' tests (``tests/catalogue_chNN.py``: correct ones
written differently from the reference, and the wrong ones of ``WRONG``) on the hidden
cases of ``--students`` keys and prints, for each correct answer, how many students it
would have lost points for, and for each wrong answer, how many it would have passed.
Every count should be 0, and the exit status is 1 otherwise; the test suite runs the same
grading for a dozen keys on every run.

    python benchmarks/fair_grading.py --students 2000 --chapters 03 04

Checks that train a model (seconds each) are left out unless ``--training`` is given; with
it, each student's training (on the seed drawn from the student's key, as at grading) is
also printed: its seed, wall time, backward passes and the accuracy it reported.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import torch

from autograder.judge import KNOWN_MISTAKE, LocalRespondent, judge
from autograder.parts import hidden_calls


def training_checks(chapter: str) -> set:
    """The checks of chapter ``chapter``'s catalogue that train a model (seconds each)."""
    return set(getattr(importlib.import_module(f"catalogue_ch{chapter}"), "TRAINING_CHECKS", ()))


def correct_answers(chapter: str, training: bool) -> list[tuple]:
    """``(check, answer)`` of chapter ``chapter``'s catalogue (``"03"``), training checks optional."""
    catalogue, slow = importlib.import_module(f"catalogue_ch{chapter}"), training_checks(chapter)
    return [(check, answer) for check, answer, _ in catalogue.CORRECT if training or check not in slow]


def wrong_answers(chapter: str, training: bool) -> list[tuple]:
    """``(name, check, answer)`` of chapter ``chapter``'s catalogued wrong answers, training checks optional."""
    catalogue, slow = importlib.import_module(f"catalogue_ch{chapter}"), training_checks(chapter)
    return [(name, check, answer) for name, check, answer, _ in catalogue.WRONG if training or check not in slow]


def verdicts(check, answer, keys: list[str], observed: bool = True) -> list[tuple[str, str | None]]:
    """``[(key, None if answer passes the key's hidden cases (probes included), else the first line
    of the message)]``. ``observed=False``: what the answer's process observes of itself is advice, as it is at
    grading, where a kernel reports it (a known mistake is then named from the results alone)."""
    found = []
    for key in keys:
        try:
            judge(check.declaration, LocalRespondent(check.declaration, answer, observes_for_the_judge=observed),
                  hidden=True, key=key)
        except AssertionError as problem:
            found.append((key, str(problem).splitlines()[0]))
        else:
            found.append((key, None))
    return found


def passes_over_students(check, answer, keys: list[str]) -> list[str]:
    """The keys on whose hidden cases the wrong answer ``answer`` is not refused."""
    return [key for key, message in verdicts(check, answer, keys) if message is None]


def failures_over_students(check, answer, keys: list[str]) -> list[tuple[str, str]]:
    """``[(key, first line of the message)]`` for every key on whose hidden cases ``answer`` fails."""
    return [(key, message) for key, message in verdicts(check, answer, keys) if message is not None]


def trainings_over_students(check, answer, keys: list[str]) -> None:
    """Print, per key, the hidden case's training: its seed, wall time, backward passes, reported accuracy.

    The judge's own call comes after and reuses the training (one per answer and seed).
    """
    part = check.declaration
    for key in keys:
        (call, *_), _ = hidden_calls(part, key)
        started = time.perf_counter()
        reported, _, passes = part.adapt(answer)(*call.args)
        print(f"    {key}: {part.name}(seed={call.args[0]}) {time.perf_counter() - started:.1f} s, "
              f"{passes} backward passes, reported accuracy {reported}")


def grade_correct_answers(chapter: str, keys: list[str], training: bool) -> int:
    """Print, per correct answer of ``chapter``, for how many keys it failed; return the failures in all."""
    total = 0
    for check, answer in correct_answers(chapter, training):
        if check in training_checks(chapter):
            trainings_over_students(check, answer, keys)
        failed = failures_over_students(check, answer, keys)
        total += len(failed)
        print(f"ch{chapter} {check.__name__}({answer.__name__}): failed {len(failed)} of {len(keys)} students")
        for key, message in failed[:3]:
            print(f"    {key}: {message}")
    return total


def grade_wrong_answers(chapter: str, keys: list[str], training: bool) -> int:
    """Print, per wrong answer of ``chapter``, for how many keys it passed, and for how many its message at grading
    names another mistake than its own (the catalogue's ``KNOWN_MISTAKES``: its own, or none); return the passes
    and the misnamings in all."""
    total = 0
    known = getattr(importlib.import_module(f"catalogue_ch{chapter}"), "KNOWN_MISTAKES", {})
    for name, check, answer in wrong_answers(chapter, training):
        passed = [key for key, message in verdicts(check, answer, keys) if message is None]
        found = verdicts(check, answer, keys, observed=False)  # as the grader names it, from results
        misnamed = [key for key, message in found if message is not None and _named(message) != known.get(name)]
        total += len(passed) + len(misnamed)
        print(f"ch{chapter} {check.__name__} wrong: {name}: passed {len(passed)} of {len(keys)} students"
              + (f" ({', '.join(passed[:3])}{', ...' if len(passed) > 3 else ''})" if passed else "")
              + f"; named {known.get(name, 'no known mistake')!r}, otherwise for {len(misnamed)}"
              + (f" ({misnamed[0]}: {found[keys.index(misnamed[0])][1]})" if misnamed else ""))
    return total


def _named(message: str) -> str | None:
    """The known mistake a message's first line names, or ``None``."""
    _, joined, named = message.partition(KNOWN_MISTAKE)
    return named if joined else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=500, help="keys to grade each answer for (default 500)")
    parser.add_argument("--chapters", nargs="+", default=["01", "02", "03", "04", "05", "06", "07", "08"])
    parser.add_argument("--training", action="store_true", help="include the checks that train a model")
    options = parser.parse_args()
    if options.students < 1:
        parser.error("--students must be at least 1")
    torch.set_num_threads(1)
    keys = [f"fairness-{i}" for i in range(options.students)]
    failed_in_all = passed_in_all = 0
    for chapter in options.chapters:
        started = time.monotonic()
        failed_in_all += grade_correct_answers(chapter, keys, options.training)
        passed_in_all += grade_wrong_answers(chapter, keys, options.training)
        print(f"ch{chapter}: {time.monotonic() - started:.0f} s", flush=True)
    print(f"correct answers failed {failed_in_all} times in all; wrong answers passed or were named another mistake "
          f"{passed_in_all} times in all")
    return 1 if failed_in_all or passed_in_all else 0


if __name__ == "__main__":
    sys.exit(main())
