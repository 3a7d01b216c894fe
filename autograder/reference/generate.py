"""Write the visible cases of every chapter, with the reference's results, as data.

``python -m autograder.reference.generate`` (run by ``make exercises``) writes
``autograder/cases/<chapter>.json``: for every graded part, its visible calls (inputs in
words and as data) and what the reference returns on them. The checks that students
install read these files instead of calling a reference implementation.

Computed numbers differ in their last bits from one CPU to another (another instruction set,
another summation order), so a case file is *stale* only when it differs from a fresh
generation in more than that: a different part, call, description, shape, dtype or
non-float value, or a float beyond :func:`float_tolerance`. ``main`` rewrites only stale
files, and a test fails on any stale committed file, on every machine.
"""

from __future__ import annotations

import importlib
import json
import math
import pkgutil
import sys
from collections.abc import Iterator
from typing import Any

import torch

from .. import reference
from ..parts import CASES_DIRECTORY, decode, encode

#: How many units of the last place two machines' float results may differ by, relative to
#: the largest magnitude in their tensor: reductions of a few hundred terms summed in another
#: order stay well within it (seen: 9 units of float32 on one output), while a changed input
#: or a changed reference moves values by far more.
LAST_PLACE_UNITS = 64


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


# --------------------------------------------------------------------------------------
# Stale or not: equal up to the rounding of another machine
# --------------------------------------------------------------------------------------


def float_tolerance(values: list[float], dtype: str, allowance: float = 0.0) -> float:
    """How far a float of a stored tensor may move on another machine.

    ``LAST_PLACE_UNITS`` units of the dtype's last place, relative to the tensor's largest
    magnitude, plus ``allowance``: the rounding that the part itself allows a correct result
    (``Part.rounding``, e.g. attention on scores in the thousands).
    """
    eps = torch.finfo(getattr(torch, dtype)).eps
    largest = max((abs(v) for v in values if isinstance(v, float) and math.isfinite(v)), default=0.0)
    return LAST_PLACE_UNITS * eps * largest + allowance


def differences(chapter: str, committed: dict, fresh: dict) -> list[str]:
    """How the ``committed`` cases of ``chapter`` differ from a ``fresh`` generation, beyond rounding.

    Parts, calls, descriptions, shapes, dtypes and every non-float value must be equal; a
    float may differ by :func:`float_tolerance`, which for a part's expected results adds
    the rounding the part allows (computed from the fresh call's inputs).
    """
    if list(committed) != list(fresh):
        return [f"parts {list(committed)} instead of {list(fresh)}"]
    found = []
    for name in fresh:
        if len(committed[name]) != len(fresh[name]):
            found.append(f"{name}: {len(committed[name])} calls instead of {len(fresh[name])}")
            continue
        for index, (old, new) in enumerate(zip(committed[name], fresh[name], strict=True)):
            where = f"{name}, call {index + 1} ({new['description']})"
            if old.keys() != new.keys() or old["description"] != new["description"]:
                found.append(f"{where}: description {old.get('description')!r}")
                continue
            allowance = _rounding_allowance(chapter, name, new)
            for field in ("args", "kwargs", "expected"):
                found += [f"{where}, {field}{path}: {problem}" for path, problem in
                          _differ(old[field], new[field], allowance if field == "expected" else 0.0)]
    return found


def _rounding_allowance(chapter: str, name: str, call: dict) -> float:
    """The absolute rounding that part ``name`` allows a correct result on ``call``'s inputs."""
    part = importlib.import_module(f"autograder.{chapter}").PARTS[name]
    if part.rounding is None:
        return 0.0
    return float(part.rounding(*decode(chapter, call["args"]), **decode(chapter, call["kwargs"])))


def _differ(old: Any, new: Any, allowance: float, path: str = "") -> Iterator[tuple[str, str]]:
    """``(where, what)`` for each difference between two encoded values beyond rounding."""
    if isinstance(new, dict) and "tensor" in new:
        if not (isinstance(old, dict) and "tensor" in old):
            yield path, "a tensor instead of something else"
        elif (old["shape"], old["dtype"]) != (new["shape"], new["dtype"]):
            yield path, f"shape {old['shape']} {old['dtype']} instead of {new['shape']} {new['dtype']}"
        elif new["dtype"].startswith(("float", "bfloat", "complex")):
            tolerance = float_tolerance(new["tensor"], new["dtype"], allowance)
            worst = max((_float_gap(a, b) for a, b in zip(old["tensor"], new["tensor"], strict=True)), default=0.0)
            if worst > tolerance:
                yield path, f"floats differ by up to {worst:.3g} (rounding allows {tolerance:.3g})"
        elif old["tensor"] != new["tensor"]:
            yield path, "different values"
    elif isinstance(new, dict) and isinstance(old, dict):
        if old.keys() != new.keys():
            yield path, f"keys {sorted(old)} instead of {sorted(new)}"
            return
        for key in new:
            yield from _differ(old[key], new[key], allowance, f"{path}.{key}" if key not in ("tuple", "dict") else path)
    elif isinstance(new, list) and isinstance(old, list):
        if len(old) != len(new):
            yield path, f"{len(old)} items instead of {len(new)}"
            return
        for index, (a, b) in enumerate(zip(old, new, strict=True)):
            yield from _differ(a, b, allowance, f"{path}[{index}]")
    elif isinstance(new, float) and isinstance(old, float) and not isinstance(old, bool):
        tolerance = float_tolerance([new], "float32", allowance)  # a plain float, at worst a float32 result
        if _float_gap(old, new) > tolerance:
            yield path, f"{old!r} instead of {new!r}"
    elif type(old) is not type(new) or old != new:
        yield path, f"{old!r} instead of {new!r}"


def _float_gap(a: float | None, b: float | None) -> float:
    """``|a - b|``, 0 for equal non-finite values (stored as ``None`` or as a string), inf otherwise."""
    if isinstance(a, float) and isinstance(b, float) and math.isfinite(a) and math.isfinite(b):
        return abs(a - b)
    return 0.0 if repr(a) == repr(b) else math.inf


def stale(chapter: str) -> list[str]:
    """How the committed case file of ``chapter`` differs from a fresh generation (``[]``: up to date)."""
    path = CASES_DIRECTORY / f"{chapter}.json"
    if not path.exists():
        return [f"{path.name} is missing"]
    return differences(chapter, json.loads(path.read_text(encoding="utf-8")), json.loads(render(visible_cases(chapter))))


def main() -> int:
    """Write the case file of every chapter whose committed one is stale; leave the others as they are."""
    CASES_DIRECTORY.mkdir(exist_ok=True)
    for chapter in chapters():
        path = CASES_DIRECTORY / f"{chapter}.json"
        fresh = render(visible_cases(chapter))
        committed = json.loads(path.read_text(encoding="utf-8")) if path.exists() else None
        shown = path.relative_to(CASES_DIRECTORY.parent.parent)
        if committed is not None and not differences(chapter, committed, json.loads(fresh)):
            print(f"{shown} is up to date (equal up to this machine's rounding)")
            continue
        path.write_text(fresh, encoding="utf-8")
        print(f"wrote {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
