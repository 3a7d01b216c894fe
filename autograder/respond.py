"""The respondent: the only code that calls a student's answer, where the answer lives.

The judge (``judge.py``) never touches an answer. It sends a :class:`Request`: which
declaration (a :class:`~autograder.parts.Part` or an
:class:`~autograder.parts.ArgumentCheck`), which role (the part's cases, one of its
probes, or its bad arguments) and the inputs. :func:`respond` adapts the answer as the
declaration says, calls it quietly, and returns a :class:`Reply`: what it returned or
raised, its inputs as they are after the call, and what it was seen to call.

In a student's notebook the judge calls :func:`respond` directly. In a grading kernel,
:func:`serve` receives the request as bytes (``wire.py``), answers it with the answers the
grader pinned at each test cell (:func:`pin`) and sends the reply back as bytes; whatever
the student's code does to this module changes only its own replies. An earlier part that
an answer calls by name is answered there by the grading process, with its reference,
through :func:`exchange` (the kernel holds no reference).
"""

from __future__ import annotations

import base64
import contextlib
import importlib
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from . import wire
from .core import functions_of, tripwires
from .parts import ArgumentCheck, Part, helpers
from .text import clean

#: The roles a request may ask for besides a probe's name.
CASES, ARGUMENTS = "cases", "arguments"
#: Prompts of the kernel's ``input()`` that carry the respondent's messages to the grader.
PROMPT = "\x1eautograder "


@dataclass
class Request:
    """One call the judge asks for.

    Attributes:
        role: ``"cases"`` (the part's ``adapt``), a probe's name, or ``"arguments"``.
        args, kwargs: the inputs, on the device they are to be used on.
        library: record calls of library attention during the call.
    """

    role: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    library: bool = False


@dataclass
class Reply:
    """What an answer did with a request, as data.

    Attributes:
        result: what it returned (``None`` if it raised).
        error: ``"TypeName: message"`` of what it raised, ``""`` if nothing.
        unanswered: it raised ``NotImplementedError`` (the released stub).
        after: ``(args, kwargs)`` as they are after the call (inputs changed in place show here).
        library: public names of library attention it called (when asked to record them).
        module: the module the answer was defined in.
        missing: why there is no answer to call (``""`` when there is one).
    """

    result: Any = None
    error: str = ""
    unanswered: bool = False
    after: tuple = ((), {})
    library: list[str] = field(default_factory=list)
    module: str = ""
    missing: str = ""

    def as_data(self) -> dict:
        return {"result": self.result, "error": self.error, "unanswered": self.unanswered, "after": self.after,
                "library": list(self.library), "module": self.module, "missing": self.missing}

    @classmethod
    def from_data(cls, data: Any) -> "Reply":
        """A reply from decoded data; anything malformed becomes a reply that says so."""
        if not isinstance(data, dict):
            return cls(error=f"ReplyError: the reply was a {type(data).__name__}, not a reply")
        after = data.get("after")
        after = after if isinstance(after, tuple) and len(after) == 2 else ((), {})
        library = data.get("library")
        return cls(data.get("result"), _text(data.get("error")), data.get("unanswered") is True,
                   (after[0] if isinstance(after[0], (tuple, list)) else (), after[1] if isinstance(after[1], dict) else {}),
                   [_text(n) for n in library] if isinstance(library, list) else [], _text(data.get("module")),
                   _text(data.get("missing")))


def _text(value: Any, limit: int = 2000) -> str:
    """A text field of a reply: cut to ``limit`` characters and storable (:func:`~autograder.text.clean`), or ``""``."""
    return clean(value[:limit]) if isinstance(value, str) else ""


def respond(declaration: Part | ArgumentCheck, answer: Any, request: Request,
            earlier: Callable[[Part], Any] | None = None) -> Reply:
    """Call ``answer`` as ``declaration`` and ``request`` say; the reply as data.

    ``earlier(part)`` gives what answers for an earlier graded part that the answer calls
    by name (``None``: the student's own stays); the checks' own stand-ins always replace
    what they stand in for.
    """
    module = getattr(answer, "__module__", "") or ""
    with warnings.catch_warnings(record=True), _dependencies(declaration, answer, earlier):
        warnings.simplefilter("always")
        try:
            function = _function(declaration, answer, request.role)
            watch = tripwires(answer, declaration.stand_ins()) if request.library else contextlib.nullcontext([])
            with watch as called:
                result = function(*request.args, **request.kwargs)
        except NotImplementedError as error:
            return Reply(error=f"NotImplementedError: {error}", unanswered=True, module=module,
                         after=(request.args, request.kwargs))
        except (Exception, SystemExit) as error:  # noqa: BLE001 - what the answer raised is its reply
            return Reply(error=f"{type(error).__name__}: {error}", module=module, after=(request.args, request.kwargs))
    return Reply(result=result, after=(request.args, request.kwargs), library=list(called), module=module)


def _function(declaration: Part | ArgumentCheck, answer: Any, role: str) -> Callable:
    """What to call: the answer adapted for the part's cases or for a probe, or (for bad
    arguments) the answer itself or the module it builds."""
    if isinstance(declaration, ArgumentCheck):
        if role != ARGUMENTS:
            raise ValueError(f"an argument check has no role {role!r}")
        if declaration.construct is None:
            return answer
        try:
            return answer(*declaration.construct)
        except NotImplementedError:
            raise
        except Exception as error:  # noqa: BLE001
            raise RuntimeError(f"{declaration.part}{declaration.construct} raised {type(error).__name__}: {error}") from None
    if role == CASES:
        return declaration.adapt(answer)
    return declaration.probe(role).adapt(answer)


@contextlib.contextmanager
def _dependencies(declaration: Part | ArgumentCheck, answer: Any, earlier: Callable[[Part], Any] | None):
    """Within the block, what the answer calls by a name of ``declaration.depends_on`` is its stand-in."""
    depends_on = getattr(declaration, "depends_on", {})
    functions = functions_of(answer)
    called = set().union(*(names_used(f.__code__) for f in functions)) if functions else set()
    namespaces = list({id(f.__globals__): f.__globals__ for f in functions}.values())
    swapped: list[tuple[dict, str, Any]] = []
    try:
        for name, dependency in depends_on.items():
            if name not in called:
                continue
            stand_in = dependency if not isinstance(dependency, Part) else (earlier(dependency) if earlier else None)
            if stand_in is None:
                continue
            for namespace in namespaces:
                swapped.append((namespace, name, namespace.get(name, _ABSENT)))
                namespace[name] = stand_in
        yield
    finally:
        for namespace, name, original in reversed(swapped):
            if original is _ABSENT:
                namespace.pop(name, None)
            else:
                namespace[name] = original


_ABSENT = object()


def names_used(code) -> set[str]:
    """The global names a function's code (and the code nested in it) refers to."""
    names = set(code.co_names)
    for constant in code.co_consts:
        if hasattr(constant, "co_names"):
            names |= names_used(constant)
    return names


# --------------------------------------------------------------------------------------
# In a grading kernel: pinned answers, requests and replies as bytes through input()
# --------------------------------------------------------------------------------------

_pinned: dict[str, dict[str, Any]] = {}


def pin(test: str, names: list[str]) -> None:
    """Keep the answers ``names`` as they are now, for the judging of test cell ``test``.

    The grader runs this where the test cell stands in the notebook, so each part is
    judged on the answer as it was defined at that point (as nbgrader would run the cell).
    """
    from IPython import get_ipython

    namespace = get_ipython().user_ns
    _pinned[test] = {name: namespace.get(name, _ABSENT) for name in names}


def serve(chapter: str, message: str) -> None:
    """Answer the grader's requests about ``chapter``'s checks (base64 of a :func:`wire.pack` message)
    and send the replies, one list, in order."""
    try:
        data = wire.unpack(base64.b64decode(message), wire.Codec(helpers=helpers(chapter), oracle=_oracle))
        declaration = getattr(importlib.import_module(f"autograder.{chapter}"), data["check"]).declaration
        answer = _pinned.get(data["test"], {}).get(data["answer"], _ABSENT)
        replies = [_serve_one(declaration, answer, data["answer"], asked) for asked in data["requests"]]
    except Exception as error:  # noqa: BLE001 - the grader reads this as the reply
        replies = [Reply(error=f"RespondentError: {type(error).__name__}: {error}")]
    exchange("reply", wire.pack([reply.as_data() for reply in replies], reply=True))


def _serve_one(declaration: Part | ArgumentCheck, answer: Any, name: str, asked: dict) -> Reply:
    if answer is _ABSENT:
        return Reply(missing=f"`{name}` is not defined when its test cell runs")
    try:
        request = Request(asked["role"], tuple(asked["args"]), dict(asked["kwargs"]), bool(asked["library"]))
    except (KeyError, TypeError) as error:
        return Reply(error=f"RespondentError: a malformed request ({error})")
    return respond(declaration, answer, request, earlier=lambda part: _oracle(f"{part.chapter}:{part.name}", {}))


def exchange(kind: str, payload: bytes) -> str:
    """Send ``payload`` to the grader through the kernel's ``input()``; the grader's answer."""
    return input(f"{PROMPT}{kind} {base64.b64encode(payload).decode()}")


def _oracle(name: str, bound: dict) -> Callable:
    """A function that the grading process computes: an earlier part's reference, or a function of a case.

    The values cross as data. Where a tensor argument needs a gradient (a training loop that
    calls an earlier part, such as a loss), the result is an :class:`_AskedOutside` node:
    its backward pass asks the grading process for the vector–Jacobian product too.
    """

    def ask(args: tuple, kwargs: dict, gradient: dict | None = None) -> Any:
        message = {"name": name, "args": _detach(args), "kwargs": _detach({**bound, **kwargs})}
        if gradient is not None:
            message["gradient"] = _detach(gradient)
        answer = exchange("oracle", wire.pack(message))
        if not answer.startswith("ok "):
            raise RuntimeError(f"the grader could not compute `{name.split(':')[-1]}` here: {answer[:300]}")
        return wire.unpack(base64.b64decode(answer[3:]))

    def call(*args, **kwargs):
        wrt = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.requires_grad]
        if not wrt or not torch.is_grad_enabled():
            return ask(args, kwargs)
        return _AskedOutside.apply(ask, args, kwargs, wrt, *(args[i] for i in wrt))

    call.__name__ = call.__qualname__ = name.split(":")[-1]
    return call


class _AskedOutside(torch.autograd.Function):
    """A tensor result computed outside, whose gradient is computed outside too.

    ``forward(ask, args, kwargs, wrt, *inputs)``: ``inputs`` are ``args[i] for i in wrt``,
    passed again so that autograd tracks them. ``backward`` sends the arguments and the
    gradient of the result, and receives one gradient per input in ``wrt``.
    """

    @staticmethod
    def forward(ctx, ask, args, kwargs, wrt, *inputs):
        ctx.ask, ctx.args, ctx.kwargs, ctx.wrt = ask, args, kwargs, wrt
        result = ask(args, kwargs)
        if not isinstance(result, torch.Tensor):
            raise RuntimeError("a gradient was asked through a result that is not a tensor")
        return result

    @staticmethod
    def backward(ctx, grad_output):
        grads = ctx.ask(ctx.args, ctx.kwargs, {"wrt": ctx.wrt, "output": grad_output})
        if not (isinstance(grads, list) and len(grads) == len(ctx.wrt)
                and all(isinstance(g, torch.Tensor) and g.shape == ctx.args[i].shape for g, i in zip(grads, ctx.wrt))):
            raise RuntimeError("the grader sent no gradient of the right shape for each input")
        return (None, None, None, None, *grads)


def _detach(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, (tuple, list)):
        return type(value)(_detach(v) for v in value)
    if isinstance(value, dict):
        return {k: _detach(v) for k, v in value.items()}
    return value
