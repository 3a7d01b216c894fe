"""The judge: draws a part's inputs, asks for the answer's results, and decides.

The judge never calls an answer. It hands each call to a *respondent* (``kernel/respond.py``) and
decides from the :class:`~autograder.protocol.Reply` that comes back, as data. In a student's
notebook the respondent is :class:`LocalRespondent`, in the same process (the visible checks,
instant feedback). At grading it is ``grading/kernel_respondent.py``'s, which asks the student's
sandboxed kernel and receives bytes: nothing the kernel sends is more than its answer.

A part's points rest only on what the judge establishes itself:

* the answer's results on inputs the judge drew, compared here with the reference's results
  computed here (each case on the CPU, and on CUDA when present; a deciding probe's call);
* what is measured from outside the answer's process: the working memory of a call (the
  kernel's cgroup at grading) and its time (the kernel's CPU time);
* at grading, the code handed in, read by the grader (``grading/reading.py``: library
  attention, and code beyond a static reading).

What the answer's process reports about itself (the library attention it saw called, its
inputs after the call, its replay on PyTorch's ``meta`` device, a module's layers, the backward
passes of a training) is *advice*: :class:`Judged` carries it with a passed part, to help an
honest student, and it never changes a point.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import torch

from . import nested
from .core import Case, CheckFailed, advice_lines, devices, tensors_in, to_device
from .kernel.measure import tensor_peak
from .kernel.respond import names_called, respond
from .parts import ArgumentCheck, Call, Part, Probe, hidden_calls, mistakes_of, probe_calls, reference_of, visible_calls
from .protocol import ARGUMENTS, CASES, Reply, Request
from .text import excerpt

# Errors that show a computation mixed tensors from two devices.
_DEVICE_MISMATCH = ("is not on the expected device", "Expected all tensors to be on the same device")


class NotDefined(CheckFailed):
    """The answer a check is called on does not exist (its cell raised, or never defined it)."""


class KnownMistake(CheckFailed):
    """A case failed, and the answer's results are those of a mistake the grading side declares (its message
    names it after :data:`KNOWN_MISTAKE`)."""


class JudgeFault(Exception):
    """The course's own code failed while it judged an answer: a fault of the grader, never the student's.

    Raised for anything but :class:`~autograder.core.CheckFailed` (and ``NotImplementedError``,
    the released stub) that a check raises on data of the kinds it expects; the grading command
    reports the submission as not graded, with the traceback, instead of grading it.
    """


class NeedsALook(Exception):
    """What a part's points rest on could not be established here (a memory peak no cgroup measures): its
    points wait for an instructor, who reads the message, never for the answer's word."""


@dataclass(frozen=True)
class Judged:
    """A part that passed: how many of its calls were judged, and the advice on it (messages that help an
    honest student, from what the answer's process reported about itself; never a point)."""

    cases: int
    advice: tuple[str, ...] = ()


class Respondent(Protocol):
    """Where an answer lives: :meth:`ask_all` calls it on each request, in order, and returns the replies.

    A respondent that can count the answer's own CPU time during :meth:`ask_all` says it by a
    method ``cpu_seconds() -> float | None`` (the kernel's, ``grading/kernel_respondent.py``, and
    :class:`LocalRespondent`); without it the judge times the call by the wall clock. One that can
    measure the working memory of the last :meth:`ask_all` says it by ``peak_bytes() -> int | None``
    (the kernel's from its cgroup, from outside; :class:`LocalRespondent`'s by the tensors created).
    """

    def ask_all(self, requests: list[Request]) -> list[Reply]: ...

    def check_earlier(self, declaration: Part) -> None: ...


class LocalRespondent:
    """An answer in this process (a student's notebook, a test): requests are answered directly.

    Where the references are installed, an earlier part that the answer calls by name is
    answered by its reference; where they are not (a student's install), the student's own
    earlier part is checked first (:meth:`check_earlier`).

    Args:
        observes_for_the_judge: this process is the judge's own, so what it observes of the answer
            (library attention called, inputs changed, the ``meta`` replay, a probe's look) decides,
            as in a student's visible check; ``False`` takes it as a kernel's word, advice only, as
            at grading (the course's tests of the grading path).
    """

    def __init__(self, declaration: Part | ArgumentCheck, answer: Any, observes_for_the_judge: bool = True):
        self.declaration, self.answer = declaration, answer
        self.observes_for_the_judge = observes_for_the_judge
        self._cpu_seconds: float | None = None
        self._peak: int | None = None

    def ask_all(self, requests: list[Request]) -> list[Reply]:
        before = time.process_time()
        measured = any(request.measured for request in requests)
        with tensor_peak(*[(r.args, r.kwargs) for r in requests]) if measured else contextlib.nullcontext([None]) as peak:
            replies = [respond(self.declaration, self.answer, request, earlier=reference_of) for request in requests]
        self._cpu_seconds = (time.process_time() - before) / torch.get_num_threads()
        self._peak = peak[0]
        return replies

    def peak_bytes(self) -> int | None:
        """The peak bytes of the tensors created and held at once during the last :meth:`ask_all` of a measured
        request (this process's own count: a student's visible check, where the answer is the student's own to
        trust); ``None`` after others."""
        return self._peak

    def cpu_seconds(self) -> float | None:
        """The CPU time this process used during the last :meth:`ask_all`, divided by PyTorch's threads (its wall
        time had it kept them busy), as a grading kernel's is measured: the answer's own work, not the machine's
        load."""
        return self._cpu_seconds

    def check_earlier(self, declaration: Part) -> None:
        """Without the references, an earlier part the answer calls must pass its own visible check first."""
        from .kernel.measure import functions_of

        called = names_called(self.answer)
        namespace = {k: v for f in functions_of(self.answer) for k, v in f.__globals__.items()}
        for name, dependency in declaration.depends_on.items():
            if name not in called or not isinstance(dependency, Part) or reference_of(dependency) is not None:
                continue
            if name not in namespace:
                raise CheckFailed(f"{declaration.name}: uses `{dependency.name}`, which is not defined in this "
                                     f"notebook; write (or paste) your `{dependency.name}` first, then run this cell again")
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    judge(dependency, LocalRespondent(dependency, namespace[name]))
            except (CheckFailed, NotImplementedError) as problem:
                first_line = str(problem).splitlines()[0] if str(problem) else type(problem).__name__
                raise CheckFailed(
                    f"{declaration.name}: calls your `{dependency.name}`, which does not pass its own check yet "
                    f"({first_line}); fix `{dependency.name}` first, then run this cell again") from None


def checks(declaration: Part | ArgumentCheck) -> Callable[[Callable], Callable]:
    """The decorator of a chapter's ``check_<part>(answer, hidden=False)``: its body is the judge's.

    The decorated function keeps its name and docstring (what a student reads with
    ``help``) and carries ``.declaration``, by which the grader finds what a test cell checks.
    A pass prints its ✔ line and the advice, if any.
    """

    def decorate(function: Callable) -> Callable:
        @functools.wraps(function)
        def check(answer: Any, hidden: bool = False) -> None:
            judged = judge(declaration, LocalRespondent(declaration, answer), hidden=hidden)
            # on stdout, which nbgrader does not penalise
            counts = [(judged.cases, hidden and isinstance(declaration, Part))]
            print(passed_line(declaration, counts, devices()) + advice_lines(judged.advice))

        check.declaration = declaration
        return check

    return decorate


def passed_line(declaration: Part | ArgumentCheck, counts: list[tuple[int, bool]], where: list[torch.device]) -> str:
    """The ✔ line of a passed check, saying what was checked: a part's results (on which devices, and replayed on
    ``meta`` where it is), or its bad arguments. ``counts``: ``(cases judged, hidden)`` of each call of the check."""
    judged = " and ".join(f"{cases} {'hidden' if hidden else 'visible'} case{'s' * (cases != 1)}"
                          for cases, hidden in counts)
    if isinstance(declaration, ArgumentCheck):
        return f"✔ {declaration.name}, bad arguments: passed, ValueError naming the argument on {judged}, on cpu"
    on = " and ".join(device.type for device in (where if declaration.on_devices else where[:1]))
    return (f"✔ {declaration.name}: passed, results right on {judged}, on {on}"
            + (", replayed on meta" if declaration.meta else ""))


def judge(declaration: Part | ArgumentCheck, respondent: Respondent, *, hidden: bool = False, key: str | None = None,
          where: list[torch.device] | None = None) -> Judged:
    """Judge one part (its visible cases, or its hidden ones for the student whose key is ``key``).

    Every call of the part (its probes, each case on each device and on ``meta``) is asked
    for at once, in order, except a probe whose memory is measured, asked alone when its turn to
    be judged comes (a wrong answer is not measured); the replies are judged in order: the first
    problem is the one reported, as if the calls had been made one by one.

    Args:
        where: the devices the answer runs on (default: the CPU, and CUDA where present).

    Returns:
        the calls judged, and the advice on the answer (what its own process reported).

    Raises:
        CheckFailed: the first problem found, as a message for the student.
        NotImplementedError: the answer is still the released stub.
        NeedsALook: what the points rest on could not be measured here.
        JudgeFault: the course's own code failed on data of its own making (not the student's fault).
    """
    if isinstance(declaration, ArgumentCheck):
        questions = _argument_questions(declaration)
    else:
        respondent.check_earlier(declaration)
        questions = _questions(declaration, hidden, key, where if where is not None else devices())
    for question in questions:
        question.observed_here = getattr(respondent, "observes_for_the_judge", False)
    together = [question for question in questions if not question.measured]
    started = time.perf_counter()
    replies = respondent.ask_all([question.request for question in together])
    wall = time.perf_counter() - started  # measured here, around the kernel: for a part of one call, its time
    cpu = respondent.cpu_seconds() if hasattr(respondent, "cpu_seconds") else None  # the kernel's own, where known
    seconds, clock = (wall, "wall-clock time") if cpu is None else (cpu, "CPU time")
    if len(replies) != len(together):
        raise JudgeFault(f"{declaration.name}: {len(replies)} replies to {len(together)} calls")
    for question, reply in zip(together, replies, strict=True):
        question.case.seconds, question.case.clock, question.reply = seconds, clock, reply
    for question in sorted(questions, key=_judging_order):
        if question.measured:  # asked alone, once every call before it in the order has passed
            _ask_measured(question, respondent)
        try:
            question.judge(question, question.reply)
        except CheckFailed as failure:
            raise _with_advice(failure, questions) from None
    return Judged(sum(question.counts for question in questions), _advice_of(questions))


def _judging_order(question: "_Question") -> int:
    """Probes that look at what the answer is (its layers: advice at grading) first, so that a structural slip is
    told as such; then the cases; then the probes that decide on results or measurements, which a wrong result
    would fail for a reason less plain than the cases give; the replays on ``meta`` last."""
    if question.probe is not None:
        return 2 if question.probe.decides else 0
    return 1 if question.part is not None else 3


def _advice_of(questions: list["_Question"]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(text for question in questions for text in question.advice))


def _with_advice(failure: CheckFailed, questions: list["_Question"]) -> CheckFailed:
    """``failure``, with the advice gathered so far after it (what the answer's process reported may say why)."""
    advice = _advice_of(questions)
    if not advice:
        return failure
    told = type(failure)(str(failure) + "".join(f"\n    advice: {text}" for text in advice))
    told.returned = failure.returned
    return told


def _ask_measured(question: "_Question", respondent: Respondent) -> None:
    """Ask ``question`` alone, and keep the working memory its call took, as the respondent measured it."""
    replies = respondent.ask_all([question.request])
    if len(replies) != 1:
        raise JudgeFault(f"{question.case.part}: {len(replies)} replies to 1 call")
    question.reply = replies[0]
    question.peak = respondent.peak_bytes() if hasattr(respondent, "peak_bytes") else None


@dataclass
class _Question:
    """One call to ask for, and how to judge its reply; the fields after ``counts`` are what its ``judge`` reads."""

    case: Case
    request: Request
    judge: Callable[["_Question", Reply], None]
    kept: tuple = ((), {})  # the inputs as sent, whatever the answer does to them
    counts: int = 0  # how many of the part's device runs it is
    probe: Probe | None = None  # a probe's call: the probe
    part: Part | None = None  # a case on a device, or a probe's call: its part; a case: its call, the device
    call: Call | None = None
    device: torch.device | None = None
    expected_by: Callable | None = None  # the reference adapted, for a hidden case (visible: its call's expected)
    argument: str = ""  # a bad call: the argument it gets wrong
    reply: Reply | None = None  # the reply, once the answer has answered every call
    peers: list["_Question"] | None = None  # a case: every case question of its part (known mistakes are told apart on them)
    peak: int | None = None  # a measured probe: the working memory its call took, in bytes, where measured
    advice: list[str] = field(default_factory=list)  # what the answer's process reported, as advice
    observed_here: bool = False  # the answer's process is the judge's own: what it observes decides

    @property
    def measured(self) -> bool:
        """Whether the call's working memory is measured (asked alone, after the others)."""
        return self.probe is not None and self.probe.memory is not None


def _questions(part: Part, hidden: bool, key: str | None, where: list[torch.device]) -> list[_Question]:
    """The part's probes, then each case on each device and on ``meta``. Where the part forbids library
    attention, the answer's process watches for it too, as advice."""
    questions = [_Question(Case(part.name, call.description, call.seed),
                           Request(probe.name, call.args, call.kwargs, library=part.forbid_library,
                                   measured=probe.memory is not None),
                           _judge_probe, _copy((call.args, call.kwargs)), probe=probe, part=part, call=call)
                 for probe in part.probes for call in probe_calls(part, probe, hidden, key)]
    if hidden:
        calls, reference = hidden_calls(part, key)
        expected_by = part.adapt(reference) if reference is not None and part.compare_with_reference else None
    else:
        calls, expected_by = visible_calls(part), None
    where = where if part.on_devices else [torch.device("cpu")]
    for index, call in enumerate(calls):
        for device in where:
            args, kwargs = to_device(call.args, device), to_device(call.kwargs, device)
            library = part.forbid_library and index == 0 and device == where[0]
            questions.append(_Question(Case(part.name, f"{call.description}, on {device.type}", call.seed),
                                       Request(CASES, args, kwargs, library=library), _judge_case,
                                       _copy((args, kwargs)), counts=1,
                                       part=part, call=call, device=device, expected_by=expected_by))
        if part.meta:
            questions.append(_Question(Case(part.name, f"{call.description}, on the meta device", call.seed),
                                       Request(CASES, to_device(call.args, "meta"), to_device(call.kwargs, "meta")),
                                       _judge_meta))
    peers = [question for question in questions if question.part is not None and question.probe is None]
    for question in peers:
        question.peers = peers
    return questions


def _judge_case(question: _Question, reply: Reply) -> None:
    """A case's reply: the result right (decides); the library attention seen and the inputs after the call,
    as the answer's process reports them (advice)."""
    case, part, call = question.case, question.part, question.call
    result = answer_of(case, reply)
    _advise(question, lambda: _expect_own_code(case, reply))
    _advise(question, lambda: _expect_no_library_where_watched(question, reply))
    args, kwargs = question.kept
    _advise(question, lambda: _expect_inputs_unchanged(case, part, question.kept, reply.after))
    expected_by = question.expected_by
    expected = expected_by(*args, **kwargs) if expected_by is not None else to_device(call.expected, question.device)
    try:
        if expected is not None or part.compare is not None:
            slack = part.rounding(*args, **kwargs) if part.rounding is not None else 0.0
            try:
                _judged(case, result, lambda got: part.compare_results(case, got, expected, slack),
                        None if expected is None else lambda: expected)
            except CheckFailed as failure:
                _name_a_known_mistake(question, result, failure)
                raise
        if part.extra is not None:
            _judged(case, result, lambda got: part.extra(case, args, kwargs, got),
                    None if expected is None else lambda: expected)
    except CheckFailed as failure:
        if not case.hidden and not isinstance(failure, KnownMistake):  # the same case for every student: what
            failure.returned = returned_digest(case, result)  # came back tells unnamed wrong answers apart
        raise
    if part.advise is not None:
        _advise(question, lambda: part.advise(case, args, kwargs, result))


#: A returned value is rounded to this share of its tensor's largest magnitude before it is digested.
DIGEST_ROUNDING = 1e-2


def returned_digest(case: Case, result: Any) -> str | None:
    """A short digest of what an answer returned on the visible ``case``: the case, then each tensor's shape and
    dtype and its values rounded to :data:`DIGEST_ROUNDING` of its largest finite magnitude (float noise from a
    different order of operations rounds away; a different wrong answer almost never does), other values as
    written. Two answers that fail the same case with the same digest returned the same thing. ``None`` where
    the result cannot be read so (the student's data: it never fails the judge)."""
    digest = hashlib.sha256(case.inputs.encode())
    try:
        for leaf in nested.leaves(result):
            if isinstance(leaf, torch.Tensor):
                digest.update(f"\n{tuple(leaf.shape)} {leaf.dtype}\n".encode() + _rounded(leaf))
            else:
                digest.update(f"\n{type(leaf).__name__} {excerpt(repr(leaf), limit=200)}".encode())
    except Exception:  # noqa: BLE001 - a sparse, nested or odd tensor: the failure stays, undigested
        return None
    return digest.hexdigest()[:12]


def _rounded(tensor: torch.Tensor) -> bytes:
    """A tensor's values, rounded as :func:`returned_digest` says, as bytes (none for a tensor on ``meta``)."""
    if tensor.device.type == "meta":
        return b""
    tensor = torch.view_as_real(tensor.detach()) if tensor.is_complex() else tensor.detach()
    values = tensor.to("cpu", torch.float64)
    finite = values[values.isfinite()]
    scale = finite.abs().max().item() if finite.numel() else 0.0
    steps = (values / (scale * DIGEST_ROUNDING if scale > 0 else 1.0)).round() + 0.0  # + 0.0: no -0
    return steps.numpy().tobytes()


def _advise(question: _Question, check: Callable[[], None]) -> None:
    """Run a check of what the answer's process observed of itself. Where that process is the judge's own (a
    student's notebook: :class:`LocalRespondent`), what it observed is the judge's to decide by, and a failure
    fails; where it is a kernel's, the failure is advice, never a point (a reply it cannot read is its problem
    too)."""
    if question.observed_here:
        check()
        return
    try:
        check()
    except CheckFailed as problem:
        question.advice.append(_advice_text(question.case, problem))
    except Exception as error:  # noqa: BLE001 - what the answer's process reported could not be read: advice
        question.advice.append(f"{question.case.part}: what its process reported could not be read "
                               f"({type(error).__name__}: {excerpt(error)})")


def _advice_text(case: Case, problem: CheckFailed) -> str:
    """A failed advisory check as one line: its problem, then the case in brackets."""
    first, _, rest = str(problem).partition("\n")
    where = rest.strip()
    return f"{first} ({where})" if where else first


#: What joins a failure's first line to the known mistake the answer's result matches (the class report keeps
#: what follows it as it is).
KNOWN_MISTAKE = "; it matches a known mistake: "


def _name_a_known_mistake(question: _Question, result: Any, failure: CheckFailed) -> None:
    """Where the grading side declares the part's known mistakes (``MISTAKES`` of its reference module), raise
    ``failure`` with its first line naming the mistake that the answer is, as far as the part's cases show;
    return where none is (or on a student's machine, which has no references).

    A mistake is the answer's only if it gives the answer's results on this case and on every other case of the
    part that the answer answered: a different wrong answer often agrees with a known mistake on the case that
    fails (a beam that stops at its first finished hypothesis, and the libraries' beam), and a name it does not
    deserve sends a student to fix the wrong thing. Of several that match everywhere, the first declared.
    """
    matching = [(description, mistake) for description, mistake in mistakes_of(question.part)
                if _matches(question, result, mistake)]
    if not matching:
        return
    answered = [(peer, peer.reply.result) for peer in question.peers or () if peer is not question
                and peer.reply is not None and not (peer.reply.error or peer.reply.missing or peer.reply.unanswered)]
    everywhere = [known for known in matching if all(_matches(peer, got, known[1]) for peer, got in answered)]
    if not everywhere:
        return
    problem, newline, rest = str(failure).partition("\n")
    raise KnownMistake(f"{problem}{KNOWN_MISTAKE}{everywhere[0][0]}{newline}{rest}") from None


def _matches(question: _Question, result: Any, mistake: Callable) -> bool:
    """Whether ``result`` passes the part's comparison with ``mistake``'s result on the case's inputs (a
    mistake that raises, or a comparison that cannot be made, is no match)."""
    part, (args, kwargs) = question.part, _copy(question.kept)
    try:
        slack = part.rounding(*args, **kwargs) if part.rounding is not None else 0.0
        part.compare_results(question.case, result, part.adapt(mistake)(*args, **kwargs), slack)
    except Exception:  # noqa: BLE001 - not this mistake
        return False
    return True


def _judge_meta(question: _Question, reply: Reply) -> None:
    """The replay on ``meta``, as the answer's process reports it: a tensor made on a fixed device is advice."""
    _advise(question, lambda: _expect_meta_result(question.case, reply))


def answer_of(case: Case, reply: Reply) -> Any:
    """What the answer returned; fails the case if it raised or was not written."""
    _expect_an_answer(case, reply)
    if reply.error:
        case.fail(f"raised {kernel_error(reply.error, hidden=case.hidden)}")
    return reply.result


def kernel_error(error: str, hidden: bool = False) -> str:
    """What a grade shows of ``"TypeName: message"`` that an answer raised: the message's :func:`excerpt`;
    for a hidden case the type alone (the grader's own words: the message could quote the hidden input)."""
    kind, _, message = error.partition(": ")
    kind = excerpt(kind, limit=60)
    if hidden:
        return f"{kind} (its message is not shown for a hidden case)"
    return f"{kind}: {excerpt(message)}" if message else kind


def _expect_an_answer(case: Case, reply: Reply) -> None:
    """The answer exists and is written (not the released stub)."""
    if reply.missing:
        raise NotDefined(f"{case.part}: {excerpt(reply.missing)}")
    if reply.unanswered:
        raise NotImplementedError(f"{case.part}: not answered yet (it still raises NotImplementedError)")


def _expect_own_code(case: Case, reply: Reply) -> None:
    """Advice: the module the answer's process says the answer comes from is not the autograder's (the grader
    reads the code handed in for the course's own code where that decides, ``grading/reading.py``)."""
    if reply.module.startswith("autograder"):
        case.fail(f"is from the autograder package (`{excerpt(reply.module, limit=60)}`); write your own "
                  "implementation in the notebook")


def _judged(case: Case, result: Any, assertion: Callable[[Any], None], reference: Callable[[], Any] | None) -> None:
    """Run a check's ``assertion`` on a reply's ``result``; ``reference()`` gives the reference's own result for the
    same call, where the judge has it.

    A :class:`CheckFailed` is the answer's fault. So is any other exception, as the rule of a judge
    goes: what the student's process sent is the student's data, and a check that cannot read it
    fails the case, saying so. It is the course's fault (:class:`JudgeFault`) only where the same
    assertion fails the same way on the reference's result, data of the course's own making.
    """
    try:
        assertion(result)
    except (CheckFailed, NotImplementedError):
        raise
    except Exception as error:  # noqa: BLE001 - sorted below: the student's data, or the course's code
        if reference is not None:
            _expect_the_check_reads(case, assertion, reference, error)
        case.fail(f"returned something that cannot be checked ({type(error).__name__}: {excerpt(error)})")


def _expect_the_check_reads(case: Case, assertion: Callable[[Any], None], reference: Callable[[], Any],
                            error: Exception) -> None:
    """Raise :class:`JudgeFault` if ``assertion`` cannot read the reference's own result either (``error``, raised
    on the answer's, is then the check's bug); return where it can."""
    try:
        assertion(reference())
    except CheckFailed:
        return  # it read the reference's result (and told it from this call's expected one)
    except Exception as fault:  # noqa: BLE001 - the check fails on data of the course's own: its fault
        raise JudgeFault(f"{case.part}: the check's own code failed on {case.inputs}: "
                         f"{type(fault).__name__}: {fault} ({where_raised(fault)})") from error


def where_raised(error: BaseException) -> str:
    """``file:line in function`` of the innermost frame of ``error``'s traceback, for the instructor."""
    import traceback

    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return "no traceback"
    frame = frames[-1]
    return f"{frame.filename}:{frame.lineno} in {frame.name}"


def kind_of(value: Any) -> Any:
    """The structure of a result, without its values: ``"tensor"``, ``"number"``, a tuple of the kinds of
    a tuple's or list's items, a dict's keys with their kinds, else the type's name."""
    return nested.fold(value, _kind_of_leaf, _kinds_of_items)


def _kind_of_leaf(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return "tensor"
    if isinstance(value, (bool, int, float)):
        return "number"
    return type(value).__name__


def _kinds_of_items(container: Any, kinds: Any) -> tuple:
    """A container's kind from its items' (:func:`nested.fold`): a tuple of them, a dict's sorted by key."""
    if isinstance(container, dict):
        return tuple(sorted((str(key), kind) for key, kind in kinds.items()))
    return tuple(kinds)


def _copy(value: Any) -> Any:
    """A copy of the tensors in ``value`` (tuples, lists, dicts of them), everything else as is."""
    return nested.map_leaves(value, lambda leaf: leaf.detach().clone() if isinstance(leaf, torch.Tensor) else leaf)


def _expect_inputs_unchanged(case: Case, part: Part, kept: tuple, after: tuple) -> None:
    """The tensors the answer was given, as it sent them back, equal those that were sent."""
    (args, kwargs), (args_after, kwargs_after) = kept, after
    named = [(part.arguments[i] if i < len(part.arguments) else f"argument {i + 1}", value, after_value)
             for i, (value, after_value) in enumerate(zip(args, args_after, strict=False))]  # the kernel's word: any length
    named += [(name, value, kwargs_after.get(name)) for name, value in kwargs.items()]
    for name, before, now in named:
        if isinstance(before, torch.Tensor) and isinstance(now, torch.Tensor):
            same = now.shape == before.shape and torch.equal(now.detach().nan_to_num(0), before.nan_to_num(0))
            case.check(same, f"modifies its input `{name}` in place; work on new tensors instead "
                             "(e.g. x = x - 1, not x -= 1)")


def _expect_no_library_where_watched(question: _Question, reply: Reply) -> None:
    """Advice, where the question watched for library attention (a case or a probe of a part that forbids it):
    the answer's process saw none called."""
    if question.request.library:
        _expect_no_library_attention(question.case, reply)


def _expect_no_library_attention(case: Case, reply: Reply) -> None:
    case.check(not reply.library, f"calls {sorted(set(reply.library))[0] if reply.library else ''}: the contract asks "
                                  "you to implement this part yourself rather than delegate its core to a library "
                                  "implementation; at grading the grader reads your code for it and withholds the "
                                  "points")


def _expect_meta_result(case: Case, reply: Reply) -> None:
    """The replay on ``meta``: a device mismatch fails; an operation ``meta`` cannot run is inconclusive."""
    if reply.error or reply.unanswered or reply.missing:
        if any(text in reply.error for text in _DEVICE_MISMATCH):
            case.fail(wrong_device_message(reply.error.split(": ", 1)[-1]))
        return  # an operation meta tensors do not support: inconclusive
    for t in tensors_in(reply.result):
        case.check(t.device.type == "meta", wrong_device_message(f"returned a tensor on {t.device}"))


def wrong_device_message(detail: Any) -> str:
    return (
        "is not device-agnostic: it creates a tensor on a fixed device instead of the device of its "
        f"inputs ({detail}). Pass device=x.device (and dtype=x.dtype), or use torch.zeros_like / x.new_zeros."
    )


# --------------------------------------------------------------------------------------
# Probes and argument checks
# --------------------------------------------------------------------------------------


def _judge_probe(question: _Question, reply: Reply) -> None:
    """A probe's reply: where the probe decides, its check on the result (or on the working memory measured)
    and the result against the reference's; otherwise its check is advice."""
    probe, case = question.probe, question.case
    _advise(question, lambda: _expect_no_library_where_watched(question, reply))
    if not probe.decides:
        _advise(question, lambda: probe.check(case, *question.kept, answer_of(case, reply)))
        return
    result = answer_of(case, reply)
    reference = _reference_reply(question)
    if probe.memory is not None:
        if question.peak is None:
            raise NeedsALook(f"{case.part}: its results are right, but the working memory of its '{probe.name}' call "
                             "could not be measured from outside the kernel on this grading machine (no memory "
                             "cgroup); read the answer and give the points by hand if it keeps within "
                             f"{probe.memory / 2**20:.0f} MiB")
        _judged(case, question.peak, lambda peak: probe.check(case, *question.kept, peak), None)
    else:
        _judged(case, result, lambda got: probe.check(case, *question.kept, got), reference)
    if probe.compare is not None and reference is not None:
        _judged(case, result, lambda got: probe.compare(case, got, reference()), reference)


def _reference_reply(question: _Question) -> Callable[[], Any] | None:
    """The reference's own reply to a probe's call, computed here once when first asked for; ``None`` where the
    references are not installed (a student's machine)."""
    reference = reference_of(question.part)
    if reference is None:
        return None
    args, kwargs = _copy(question.kept)
    return functools.cache(lambda: question.probe.adapt(reference)(*args, **kwargs))


def _argument_questions(check: ArgumentCheck) -> list[_Question]:
    """Each bad call, which must raise ``ValueError`` with a message that names its argument."""
    built = "" if check.construct is None else f"{check.part}{check.construct}, then "
    return [_Question(Case(check.part, f"{built}bad arguments{_shown(kwargs)}"), Request(ARGUMENTS, args, kwargs),
                      _judge_argument, counts=1, argument=argument)
            for argument, args, kwargs in check.calls()]


def _shown(kwargs: dict) -> str:
    """``": window=0"`` for the keyword arguments of a bad call that are not tensors."""
    shown = [f"{name}={value!r}" for name, value in kwargs.items() if not isinstance(value, torch.Tensor)]
    return f": {', '.join(shown)}" if shown else ""


def _judge_argument(question: _Question, reply: Reply) -> None:
    """A bad call's reply: the ``ValueError`` it raised, and the argument its message names (decides)."""
    case, argument = question.case, question.argument
    _expect_an_answer(case, reply)
    _advise(question, lambda: _expect_own_code(case, reply))
    kind, _, message = reply.error.partition(": ")
    if kind == "ValueError":
        case.check(argument in message, f"the ValueError should name `{argument}`; its message was: {excerpt(message)}")
    elif reply.error:
        case.fail(f"should raise ValueError naming `{argument}`, raised {kernel_error(reply.error)}")
    else:
        case.fail(f"should raise ValueError naming `{argument}`, but returned normally")
