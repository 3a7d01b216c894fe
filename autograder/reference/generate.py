"""Write the visible cases of every chapter, with the reference's results, as data.

``python -m autograder.reference.generate`` (run by ``make exercises``) writes
``autograder/cases/<chapter>.json``: for every graded part, its visible calls (inputs in
words and as data) and what the reference returns on them. The checks that students
install read these files instead of calling a reference implementation. A test checks
that the committed files equal a fresh generation.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import sys

import torch

from .. import reference
from ..runner import CASES_DIRECTORY, encode


def chapters() -> list[str]:
    """The chapters that have references, e.g. ``["ch01_nadaraya_watson", ...]``."""
    return sorted(m.name for m in pkgutil.iter_modules(reference.__path__) if m.name.startswith("ch"))


def visible_cases(chapter: str) -> dict[str, list[dict]]:
    """``{part: [call as JSON-ready data, ...]}`` with the reference's results."""
    checks = importlib.import_module(f"autograder.{chapter}")
    module = importlib.import_module(f"autograder.reference.{chapter}")
    cases = {}
    for name, make_calls in module.VISIBLE.items():
        part = checks.PARTS[name]
        reference_answer = module.REFERENCES.get(name)
        expected_by = None if reference_answer is None or not part.compare_with_reference else part.adapt(reference_answer)
        stored = []
        for call in make_calls():
            torch.manual_seed(0)  # a reference that draws (a module's initial weights) draws the same
            expected = None if expected_by is None else expected_by(*call.args, **call.kwargs)
            stored.append({"description": call.description, "args": encode(chapter, tuple(call.args)),
                           "kwargs": encode(chapter, dict(call.kwargs)), "expected": encode(chapter, expected)})
        cases[name] = stored
    return cases


def render(cases: dict[str, list[dict]]) -> str:
    """The case file's text: one line per call, so that a change shows as a readable diff."""
    parts = []
    for name, calls in cases.items():
        lines = ",\n".join("  " + json.dumps(call, ensure_ascii=False) for call in calls)
        parts.append(f"{json.dumps(name)}: [\n{lines}\n]")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def main() -> int:
    CASES_DIRECTORY.mkdir(exist_ok=True)
    for chapter in chapters():
        path = CASES_DIRECTORY / f"{chapter}.json"
        path.write_text(render(visible_cases(chapter)), encoding="utf-8")
        print(f"wrote {path.relative_to(CASES_DIRECTORY.parent.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
