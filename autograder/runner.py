"""The case runner: the one path every ``check_<part>`` of every chapter goes through.

A chapter's checks module describes each graded part as a :class:`Part` (what its
results are called, how to call an answer, the assertions special to it) and hands the
student's answer to :func:`run`, which does everything that is the same for every part:

* it refuses the autograder's own code, and library attention where the part forbids it;
* it calls the answer on every case, on the CPU, on CUDA when present, and replays it on
  PyTorch's ``meta`` device (tensors created on a fixed device);
* it checks that inputs are left unchanged and compares the results with the expected ones;
* a part that builds on an earlier one runs with the earlier part's reference, or says
  which earlier part to fix first (one bug costs once).

**Visible cases** are data: their inputs and the reference's results are stored in
``autograder/cases/<chapter>.json``, written from the references by
``python -m autograder.reference.generate`` when the exercises are generated, so the
checks students install hold no reference implementation. **Hidden cases** exist only on
the grading side (``autograder.reference``): they are drawn from a seed derived from the
course secret, the assignment, the student and the part (:func:`hidden_seed`), so
grading the same notebook twice gives the same grade and two students get different inputs.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import importlib.util
import json
import math
import os
import random
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from .core import (
    Case,
    check_on_meta,
    devices,
    expect_own_code,
    expect_same_results,
    functions_of,
    passed,
    to_device,
    tripwires,
    unchanged,
)

#: The environment variable through which the grading command hands a kernel the key of
#: one student's hidden cases (derived from the course secret; never the secret itself).
SEED_KEY_VARIABLE = "AUTOGRADER_SEED_KEY"
#: This kernel's key, read once when the checks are imported (before any student code
#: runs, so changing the environment later changes nothing). Without a key (a notebook run
#: outside the grading command) hidden cases differ from run to run, so that nobody can
#: learn them by running the checks.
SEED_KEY = os.environ.get(SEED_KEY_VARIABLE) or secrets.token_hex(16)
CASES_DIRECTORY = Path(__file__).resolve().parent / "cases"


@dataclass
class Call:
    """One call of a graded answer.

    Attributes:
        description: the inputs in words, for messages, e.g. ``"queries (4,), keys (6,)"``.
        args, kwargs: the arguments; tensors are moved to each device in turn, and a
            ``torch.device`` among them is replaced by that device.
        expected: the reference's result (stored with visible calls); ``None`` for hidden
            calls, whose expected result the reference computes on each device.
        seed: the part's seed for a hidden call, ``None`` for a visible one.
    """

    description: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    expected: Any = None
    seed: int | None = None


def _identity(answer: Any) -> Callable:
    return answer


@dataclass
class Part:
    """What is special about one graded part; everything else is :func:`run`'s.

    Attributes:
        name: the contract's name, e.g. ``"nadaraya_watson"``.
        chapter: the checks module, e.g. ``"ch01_nadaraya_watson"``.
        arguments: names of the positional arguments, for messages about inputs changed in place.
        outputs: what each returned tensor is called in messages.
        adapt: turns an answer (a function or a class) into the function called on a case;
            applied to the student's answer and to the reference alike.
        compare: ``compare(case, result, expected)``; by default type, shape, dtype,
            device and values of every output within ``atol``/``rtol``.
        extra: ``extra(case, args, kwargs, result)``: assertions special to the part,
            made on every call after the comparison.
        before: ``before(answer)``: assertions made once, before the cases (structure of
            a module, memory, use of a generator).
        on_devices: call on every device (``False``: on the CPU only, for functions
            whose inputs carry no device).
        meta: replay each call on the ``meta`` device.
        forbid_library: withhold the points if the answer calls library attention.
        depends_on: ``{global name: what stands in for it}`` for what the answer calls by
            name: an earlier graded :class:`Part` (its reference on the grading side; on a
            student's machine the student's own, checked first), or a stand-in of the
            checks' own (a class or function) that replaces it on both sides.
        compare_with_reference: ``False`` for parts judged by their properties alone
            (statistics, a trained model): no expected result is computed or stored, and
            ``compare`` gets ``None`` for it.
        rounding: ``rounding(*args, **kwargs)``: an absolute tolerance added to ``atol`` for
            one call, as far as float32 rounding alone may move a correct result on those
            inputs (e.g. :func:`~autograder.core.attention_rounding`); ``None``: nothing added.
    """

    name: str
    chapter: str
    arguments: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ("the output",)
    atol: float = 1e-5
    rtol: float = 1e-4
    adapt: Callable[[Any], Callable] = _identity
    compare: Callable | None = None
    extra: Callable | None = None
    before: Callable | None = None
    on_devices: bool = True
    meta: bool = True
    forbid_library: bool = False
    depends_on: dict[str, Any] = field(default_factory=dict)
    compare_with_reference: bool = True
    rounding: Callable[..., float] | None = None

    def __post_init__(self) -> None:
        if self.rounding is not None and self.compare is not None:
            raise ValueError(f"{self.name}: `rounding` widens the default comparison; a part with its own "
                             "`compare` must allow for rounding there")

    def compare_results(self, case: Case, result: Any, expected: Any, slack: float = 0.0) -> None:
        """Compare one call's result with the expected one; ``slack`` is added to ``atol``."""
        if self.compare is not None:
            self.compare(case, result, expected)
        else:
            expect_same_results(case, result, expected, self.outputs, atol=self.atol + slack, rtol=self.rtol)


# --------------------------------------------------------------------------------------
# Running a part
# --------------------------------------------------------------------------------------


def run(part: Part, answer: Any, hidden: bool = False) -> None:
    """Check ``answer`` on the part's visible cases, or its hidden ones; print a ✔ line.

    Raises:
        AssertionError: the first problem found, as a message for the student.
        NotImplementedError: the answer is still the released stub.
    """
    expect_own_code(Case(part.name, "the answer"), answer)
    if part.before is not None:
        part.before(answer)
    calls, reference = hidden_calls(part) if hidden else (visible_calls(part), None)
    function = part.adapt(answer)
    expected_by = None if reference is None or not part.compare_with_reference else part.adapt(reference)
    count = 0
    with earlier_parts(part, answer):
        if part.forbid_library and calls:
            _expect_no_library_attention(part, answer, function, calls[0], exempt=_stand_ins(part))
        for call in calls:
            count += _run_call(part, function, expected_by, call)
    passed(part.name, count, hidden)


def _run_call(part: Part, function: Callable, expected_by: Callable | None, call: Call) -> int:
    """One call on every device, then on ``meta``; returns the number of device runs."""
    where = devices() if part.on_devices else [torch.device("cpu")]
    for device in where:
        case = Case(part.name, f"{call.description}, on {device.type}", call.seed)
        args, kwargs = to_device(call.args, device), to_device(call.kwargs, device)
        with unchanged(case, **_tensor_arguments(part, args, kwargs)):
            result = case.call(function, *args, **kwargs)
        if expected_by is not None:
            expected = expected_by(*args, **kwargs)
        else:
            expected = to_device(call.expected, device)
        if expected is not None or part.compare is not None:
            slack = part.rounding(*args, **kwargs) if part.rounding is not None else 0.0
            part.compare_results(case, result, expected, slack)
        if part.extra is not None:
            part.extra(case, args, kwargs, result)
    if part.meta:
        check_on_meta(Case(part.name, f"{call.description}, on the meta device", call.seed), function,
                      *call.args, **call.kwargs)
    return len(where)


def _tensor_arguments(part: Part, args: tuple, kwargs: dict) -> dict[str, torch.Tensor]:
    """The tensor arguments of a call by name (``argument 3`` past the part's known names)."""
    named = {}
    for index, value in enumerate(args):
        if isinstance(value, torch.Tensor):
            named[part.arguments[index] if index < len(part.arguments) else f"argument {index + 1}"] = value
    named.update({name: value for name, value in kwargs.items() if isinstance(value, torch.Tensor)})
    return named


def _stand_ins(part: Part) -> tuple:
    """The checks' own stand-ins among the part's dependencies (they may call library attention)."""
    return tuple(dependency for dependency in part.depends_on.values() if not isinstance(dependency, Part))


def _expect_no_library_attention(part: Part, answer: Any, function: Callable, call: Call, exempt: tuple = ()) -> None:
    """Withhold the points, saying why, if the answer calls library attention (stand-ins in ``exempt`` may)."""
    case = Case(part.name, call.description, call.seed)
    with tripwires(answer, exempt) as called:
        case.call(function, *call.args, **call.kwargs)
    case.check(
        not called,
        f"calls {sorted(set(called))[0] if called else ''}: the contract asks you to implement this part "
        "yourself rather than delegate its core to a library implementation, so its points are withheld",
    )


@contextlib.contextmanager
def earlier_parts(part: Part, answer: Any) -> Iterator[None]:
    """Within the block, the earlier parts the answer calls are ones known to be right.

    Where the references are installed (the grading side), each earlier part the answer
    calls by a global name is replaced by its reference for the duration, so a mistake
    there is graded once, in its own part. Where they are not (a student's install), the
    student's own earlier part is checked on its visible cases first, and if it fails the
    message names it as the part to fix first. A stand-in of the checks' own (not a
    :class:`Part`) replaces the name on both sides.
    """
    functions = functions_of(answer)
    namespaces = list({id(f.__globals__): f.__globals__ for f in functions}.values())
    called = set().union(*(_names_used(f.__code__) for f in functions)) if functions else set()
    used = {name: dep for name, dep in part.depends_on.items() if name in called}
    swapped: list[tuple[dict, str, Any]] = []
    try:
        for name, dependency in used.items():
            reference = reference_of(dependency) if isinstance(dependency, Part) else dependency
            if reference is None:
                _expect_earlier_part_right(part, dependency, next((ns[name] for ns in namespaces if name in ns), None))
                continue
            for namespace in namespaces:
                swapped.append((namespace, name, namespace.get(name, _ABSENT)))
                namespace[name] = reference
        yield
    finally:
        for namespace, name, original in reversed(swapped):
            if original is _ABSENT:
                namespace.pop(name, None)
            else:
                namespace[name] = original


_ABSENT = object()


def _names_used(code) -> set[str]:
    """The global names a function's code (and the code nested in it) refers to."""
    names = set(code.co_names)
    for constant in code.co_consts:
        if hasattr(constant, "co_names"):
            names |= _names_used(constant)
    return names


def _expect_earlier_part_right(part: Part, dependency: Part, earlier: Any) -> None:
    if earlier is None:
        raise AssertionError(f"{part.name}: uses `{dependency.name}`, which is not defined in this notebook; "
                             f"write (or paste) your `{dependency.name}` first, then run this cell again")
    try:
        with contextlib.redirect_stdout(None):
            run(dependency, earlier)
    except (AssertionError, NotImplementedError) as problem:
        first_line = str(problem).splitlines()[0] if str(problem) else type(problem).__name__
        raise AssertionError(
            f"{part.name}: calls your `{dependency.name}`, which does not pass its own check yet "
            f"({first_line}); fix `{dependency.name}` first, then run this cell again"
        ) from None


def expect_value_errors(part: str, answer: Callable, calls: list[tuple[str, tuple, dict]]) -> None:
    """The argument checks of a part: each call must raise ``ValueError`` naming its argument.

    Args:
        calls: ``(argument, args, kwargs)``: bad inputs and the argument they get wrong.
    """
    case = Case(part, "bad arguments")
    expect_own_code(case, answer)
    for argument, args, kwargs in calls:
        case.expect_value_error(answer, argument, *args, **kwargs)
    passed(part, len(calls), False)


def expect_module_value_errors(part: str, cls: type, constructor: tuple, calls: list[tuple[str, tuple, dict]]) -> None:
    """The argument checks of a module's ``forward``: ``cls(*constructor)``, then :func:`expect_value_errors`."""
    case = Case(part, f"{part}{constructor}")
    expect_own_code(case, cls)
    expect_value_errors(part, case.call(cls, *constructor), calls)


# --------------------------------------------------------------------------------------
# Where cases come from
# --------------------------------------------------------------------------------------


def hidden_seed(chapter: str, part: str) -> int:
    """The seed of a part's hidden cases for the student being graded.

    The grading command sets ``AUTOGRADER_SEED_KEY`` in each student's kernel to a key
    derived from the course secret, the assignment and the student (:data:`SEED_KEY`); the
    seed mixes in the part. The same key gives the same seed on every run.
    """
    digest = hashlib.sha256(f"{SEED_KEY}/{chapter}/{part}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def derived_seeds(seed: int, count: int = 3) -> list[int]:
    """``count`` seeds drawn from ``seed``: one per group of hidden cases of a part."""
    rng = random.Random(seed)
    return [rng.randrange(2**31) for _ in range(count)]


def reference_module(chapter: str):
    """``autograder.reference.<chapter>``, or ``None`` where the references are not installed."""
    if importlib.util.find_spec("autograder.reference") is None:
        return None
    return importlib.import_module(f"autograder.reference.{chapter}")


def reference_of(part: Part) -> Any:
    """The reference answer of ``part``, or ``None`` without the grading side."""
    module = reference_module(part.chapter)
    return None if module is None else module.REFERENCES.get(part.name)


def hidden_calls(part: Part) -> tuple[list[Call], Any]:
    """``(calls, reference)``: the part's hidden calls for this student, and its reference."""
    module = reference_module(part.chapter)
    if module is None:
        raise RuntimeError(f"{part.name}: hidden checks run only where the course's references are installed "
                           "(the grading side); run the visible checks with hidden=False")
    seed = hidden_seed(part.chapter, part.name)
    calls = module.HIDDEN[part.name](seed)
    for call in calls:
        call.seed = seed
    return calls, module.REFERENCES.get(part.name)


def visible_calls(part: Part) -> list[Call]:
    """The part's visible calls, read from the chapter's case file."""
    return [Call(**decode(part.chapter, raw)) for raw in json.loads(_case_file(part.chapter))[part.name]]


@functools.lru_cache(maxsize=None)
def _case_file(chapter: str) -> str:
    """The text of a chapter's case file (parsed afresh by each check: nothing shared to alter)."""
    path = CASES_DIRECTORY / f"{chapter}.json"
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RuntimeError(f"the visible cases of {chapter} are missing ({path}): reinstall the course's checks, "
                           "or run `make exercises` in the course repository") from None


# --------------------------------------------------------------------------------------
# Visible cases as JSON: tensors, tuples, devices, dtypes and the chapter's helpers
# --------------------------------------------------------------------------------------


def encode(chapter: str, value: Any) -> Any:
    """``value`` as JSON-ready data; functions must be helpers of the chapter's checks module."""
    if isinstance(value, torch.Tensor):
        flat = value.detach().cpu().reshape(-1)
        return {"tensor": flat.tolist(), "shape": list(value.shape), "dtype": str(value.dtype).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, tuple):
        return {"tuple": [encode(chapter, v) for v in value]}
    if isinstance(value, list):
        return [encode(chapter, v) for v in value]
    if isinstance(value, dict):
        return {"dict": {k: encode(chapter, v) for k, v in value.items()}}
    if callable(value):
        helpers = _helpers(chapter)
        name = next((n for n, f in helpers.items() if f is value), None)
        if name is None:
            raise ValueError(f"a visible case of {chapter} passes {value!r}, which is not one of its HELPERS")
        return {"helper": name}
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    raise TypeError(f"cannot store {type(value).__name__} in a visible case")


def _helpers(chapter: str) -> dict[str, Callable]:
    """``HELPERS`` of a chapter's checks module: functions a visible case may pass (none if absent)."""
    return getattr(importlib.import_module(f"autograder.{chapter}"), "HELPERS", {})


def decode(chapter: str, data: Any) -> Any:
    """The inverse of :func:`encode`."""
    if isinstance(data, list):
        return [decode(chapter, v) for v in data]
    if not isinstance(data, dict):
        return data
    if "tensor" in data:
        dtype = getattr(torch, data["dtype"])
        return torch.tensor(data["tensor"], dtype=dtype).reshape(data["shape"])
    if "device" in data:
        return torch.device(data["device"])
    if "dtype" in data:
        return getattr(torch, data["dtype"])
    if "tuple" in data:
        return tuple(decode(chapter, v) for v in data["tuple"])
    if "dict" in data:
        return {k: decode(chapter, v) for k, v in data["dict"].items()}
    if "helper" in data:
        return _helpers(chapter)[data["helper"]]
    if "float" in data:
        return float(data["float"])
    return {k: decode(chapter, v) for k, v in data.items()}
