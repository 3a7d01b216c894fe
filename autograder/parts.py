"""What a graded part is, and where its cases come from: the declarations both sides read.

Each chapter's checks module (``autograder/chNN_*.py``) declares its graded parts as data:

* a :class:`Part`: how to call an answer on a case (``adapt``), how to compare what comes
  back with the reference's result (``compare``, ``extra``), and :class:`Probe`\\ s, looks at
  an answer with inputs of the checks' own (a module's layers, dropout, memory);
* an :class:`ArgumentCheck`: bad inputs and the argument each one gets wrong.

One declaration drives both sides of a check. The *respondent* (``kernel/respond.py``) is the
only code that calls an answer: where the answer lives (a student's notebook, or a
sandboxed grading kernel) it adapts the answer and calls it on inputs it is sent. The
*judge* (``judge.py``) draws the inputs, computes the expected results and decides, from
what the respondent sends back as data. In a student's notebook both run in one process
(instant feedback); at grading the judge runs in the grading process and never in the
student's.

**Visible cases** are data: their inputs and the reference's results are stored in
``autograder/cases/<chapter>.json`` (``python -m autograder.reference.generate``), so the
checks that students install hold no reference implementation. **Hidden cases** exist only
on the grading side (``autograder.reference``): they are drawn from a seed derived from a
student's key (from the course secret), the chapter and the part (:func:`hidden_seed`), so
that grading the same notebook twice gives the same grade and two students get different
inputs.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import json
import random
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from . import wire
from .core import Case, expect_same_results

#: The key of hidden cases drawn in this process when no other is given (a student running
#: hidden checks where the references are installed, a test): random, so that nobody learns
#: the hidden cases by running the checks. The grading command passes each student's key.
SEED_KEY = secrets.token_hex(16)
CASES_DIRECTORY = Path(__file__).resolve().parent / "cases"


@dataclass
class Call:
    """One call of a graded answer.

    Attributes:
        description: the inputs in words, for messages, e.g. ``"queries (4,), keys (6,)"``.
        args, kwargs: the arguments; tensors are moved to each device in turn, and a
            ``torch.device`` among them is replaced by that device.
        expected: the reference's result (stored with visible calls); ``None`` for hidden
            calls, whose expected result the judge computes with the reference.
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
class Probe:
    """A look at an answer on inputs of the checks' own, judged from what comes back.

    The respondent calls ``adapt(answer)(*call.args, **call.kwargs)`` for each of the
    probe's calls and sends back the result as data; the judge calls
    ``check(case, args, kwargs, result)``, which fails the case with a message.

    A probe *decides* points (``decides=True``) only where the grader establishes what it
    checks itself: results of the answer on inputs the judge drew (``hidden``, from the
    student's key at grading) compared with what the judge computes (``compare``, against the
    reference's own reply to the same call), or the working memory of the call measured from
    outside the answer's process (``memory``). Any other probe is *advice*: a message that
    helps an honest student, shown with the part's verdict and never changing a point (a
    module's layers, permutation equivariance, the calls a decoder receives), since what an
    answer's process reports about itself can be made up by that process.

    Attributes:
        name: what is looked at, e.g. ``"layers"``; unique within its part.
        calls: the probe's calls in a student's visible check (fixed inputs).
        adapt: turns the answer into the function called on each call (in the respondent).
        check: the assertions on one call's result (in the judge).
        decides: whether a failure costs the part its points (else it is advice).
        hidden: ``hidden(seed) -> calls`` drawn from the part's hidden seed at grading, so that
            what a deciding probe is asked cannot be known in advance (``None``: ``calls()``).
        compare: ``compare(case, result, expected)``: the answer's reply against the
            reference's reply to the same call, where the references are installed.
        memory: bytes of working memory the call may take above the answer's process's
            baseline (``None``: not measured). The call is asked alone; at grading the
            kernel's cgroup measures its peak from outside.
    """

    name: str
    calls: Callable[[], list[Call]]
    adapt: Callable[[Any], Callable]
    check: Callable[[Case, tuple, dict, Any], None]
    decides: bool = False
    hidden: Callable[[int], list[Call]] | None = None
    compare: Callable[[Case, Any, Any], None] | None = None
    memory: int | None = None

    def __post_init__(self) -> None:
        if (self.hidden is not None or self.compare is not None or self.memory is not None) and not self.decides:
            raise ValueError(f"{self.name}: inputs drawn at grading, a comparison with the reference or a memory "
                             "budget are for a probe that decides points (decides=True)")


@dataclass
class Part:
    """What is special about one graded part; everything else is the judge's.

    Attributes:
        name: the contract's name, e.g. ``"nadaraya_watson"``.
        chapter: the checks module, e.g. ``"ch01_nadaraya_watson"``.
        arguments: names of the positional arguments, for messages about inputs changed in place.
        outputs: what each returned tensor is called in messages.
        adapt: turns an answer (a function or a class) into the function called on a case;
            applied by the respondent to the student's answer and by the judge to the reference.
        compare: ``compare(case, result, expected)``; by default type, shape, dtype,
            device and values of every output within ``atol``/``rtol``.
        extra: ``extra(case, args, kwargs, result)``: assertions special to the part,
            made by the judge on every call after the comparison.
        advise: ``advise(case, args, kwargs, result)``: assertions on what the answer's process
            reports about itself (a training's backward passes), whose failures are advice.
        probes: the part's :class:`Probe`\\ s, judged before its cases.
        on_devices: call on every device (``False``: on the CPU only, for functions
            whose inputs carry no device).
        meta: replay each call on the ``meta`` device.
        forbid_library: the part's points are for implementing it, not for delegating it to
            library attention: at grading the grader reads the code handed in for library
            attention the answer can reach (``grading/reading.py``) and withholds the points,
            or marks the part "needs a look" where the code is beyond a static reading; in the
            answer's process the calls are watched too, as advice.
        depends_on: ``{global name: what stands in for it}`` for what the answer calls by
            name while it is checked: an earlier graded :class:`Part` (the grading side
            answers such calls with its reference, from outside the student's process; on
            a student's machine the student's own is checked first), or a stand-in of the
            checks' own (a class or function) that replaces it on both sides.
        compare_with_reference: ``False`` for parts judged by their properties alone
            (statistics, a trained model): no expected result is computed or stored, and
            ``compare`` gets ``None`` for it.
        rounding: ``rounding(*args, **kwargs)``: an absolute tolerance added to ``atol`` for
            one call, as far as float32 rounding alone may move a correct result on those
            inputs (e.g. :func:`~autograder.core.attention_rounding`); ``None``: nothing added.
        first: ``first(case, result, expected) -> (result, expected)``: before the default
            comparison, checks what it cannot (a cache's length after each step, in words) and
            returns what is left to compare as tensors; ``None``: nothing checked first.
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
    advise: Callable | None = None
    probes: tuple[Probe, ...] = ()
    on_devices: bool = True
    meta: bool = True
    forbid_library: bool = False
    depends_on: dict[str, Any] = field(default_factory=dict)
    compare_with_reference: bool = True
    rounding: Callable[..., float] | None = None
    first: Callable[[Case, Any, Any], tuple[Any, Any]] | None = None

    def __post_init__(self) -> None:
        if (self.rounding is not None or self.first is not None) and self.compare is not None:
            raise ValueError(f"{self.name}: `rounding` and `first` belong to the default comparison; a part with its "
                             "own `compare` must do their work there")
        if len({probe.name for probe in self.probes}) != len(self.probes):
            raise ValueError(f"{self.name}: two probes share a name")

    def probe(self, name: str) -> Probe:
        return next(probe for probe in self.probes if probe.name == name)

    def compare_results(self, case: Case, result: Any, expected: Any, slack: float = 0.0) -> None:
        """Compare one call's result with the expected one; ``slack`` is added to ``atol``."""
        if self.compare is not None:
            self.compare(case, result, expected)
            return
        if self.first is not None:
            result, expected = self.first(case, result, expected)
        expect_same_results(case, result, expected, self.outputs, atol=self.atol + slack, rtol=self.rtol)

    def stand_ins(self) -> tuple:
        """The checks' own stand-ins among the dependencies (they may call library attention)."""
        return tuple(dependency for dependency in self.depends_on.values() if not isinstance(dependency, Part))

    def stand_ins_by_name(self) -> set[str]:
        """The names the checks' own stand-ins replace while the part is judged (an earlier graded part's name is
        not among them: the student's own earlier part may still run, through another name)."""
        return {name for name, dependency in self.depends_on.items() if not isinstance(dependency, Part)}


@dataclass
class ArgumentCheck:
    """The ``ValueError``\\ s of a part, graded apart from its results.

    Attributes:
        part: the graded part's name, e.g. ``"masked_attention"``.
        chapter: the checks module.
        calls: ``() -> [(argument, args, kwargs), ...]``: bad inputs and the argument they
            get wrong; each must raise ``ValueError`` with a message that names it.
        construct: for a module whose ``forward`` is checked, the arguments it is built
            with (``None``: the answer itself is called, a class included).
    """

    part: str
    chapter: str
    calls: Callable[[], list[tuple[str, tuple, dict]]]
    construct: tuple | None = None

    @property
    def name(self) -> str:
        return self.part


# --------------------------------------------------------------------------------------
# Where cases come from
# --------------------------------------------------------------------------------------


def hidden_seed(chapter: str, part: str, key: str | None = None) -> int:
    """The seed of a part's hidden cases for the student whose key is ``key``.

    The grading command derives each student's key from the course secret, the assignment
    and the student (``instructor/secret.py``); the seed mixes in the chapter and the part.
    The same key gives the same seed on every run. Without a key: this process's own.
    """
    digest = hashlib.sha256(f"{SEED_KEY if key is None else key}/{chapter}/{part}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def probe_calls(part: Part, probe: Probe, hidden: bool, key: str | None = None) -> list[Call]:
    """A probe's calls: drawn from the student's key for a hidden check of a probe that has ``hidden``
    draws (each call's ``seed`` is the probe's), else its fixed ``calls()``."""
    if not (hidden and probe.hidden is not None):
        return probe.calls()
    seed = hidden_seed(part.chapter, f"{part.name}/{probe.name}", key)
    calls = probe.hidden(seed)
    for call in calls:
        call.seed = seed
    return calls


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


def mistakes_of(part: Part) -> tuple[tuple[str, Callable], ...]:
    """The known mistakes of ``part`` (the reference module's ``MISTAKES``): ``((description, function), ...)``;
    ``()`` without the grading side or where none are declared."""
    module = reference_module(part.chapter)
    return () if module is None else getattr(module, "MISTAKES", {}).get(part.name, ())


def hidden_calls(part: Part, key: str | None = None) -> tuple[list[Call], Any]:
    """``(calls, reference)``: the part's hidden calls for the student whose key is ``key``, and its reference."""
    module = reference_module(part.chapter)
    if module is None:
        raise RuntimeError(f"{part.name}: hidden checks run only where the course's references are installed "
                           "(the grading side); run the visible checks with hidden=False")
    seed = hidden_seed(part.chapter, part.name, key)
    calls = module.HIDDEN[part.name](seed)
    for call in calls:
        call.seed = seed
    return calls, module.REFERENCES.get(part.name)


def visible_calls(part: Part) -> list[Call]:
    """The part's visible calls, read from the chapter's case file."""
    return [Call(raw["description"], decode(part.chapter, raw["args"]), decode(part.chapter, raw["kwargs"]),
                 decode(part.chapter, raw["expected"])) for raw in json.loads(_case_file(part.chapter))[part.name]]


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
# Visible cases as JSON: the wire's data with tensors inline, helpers by name
# --------------------------------------------------------------------------------------


def helpers(chapter: str) -> dict[str, Callable]:
    """``HELPERS`` of a chapter's checks module: functions a case may pass by name (none if absent)."""
    return getattr(importlib.import_module(f"autograder.{chapter}"), "HELPERS", {})


def encode(chapter: str, value: Any) -> Any:
    """``value`` as JSON-ready data; functions must be helpers of the chapter's checks module."""
    try:
        return wire.to_data(value, wire.Codec(helpers=helpers(chapter)))
    except wire.WireError as error:
        raise ValueError(f"a visible case of {chapter} passes something that is not data or one of its HELPERS "
                         f"({error})") from None


def decode(chapter: str, data: Any) -> Any:
    """The inverse of :func:`encode`."""
    return wire.from_data(data, wire.Codec(helpers=helpers(chapter)))
