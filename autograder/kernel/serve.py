"""In a grading kernel: the answers pinned at each test cell, and requests and replies as bytes.

Runs inside the student's sandboxed kernel, beside the student's code, which can change
anything here: whatever it does changes only its own replies, which the grader reads as
untrusted data. The grader asks through the kernel's ``input()``: it runs
:func:`serve` with a request (base64 of a :func:`wire.pack` message), and the replies come
back as the prompt of an ``input()`` call (:func:`exchange`). An earlier part that an answer
calls by name is answered by the grading process with its reference, through the same
channel (:func:`_oracle`): the kernel holds no reference.
"""

from __future__ import annotations

import base64
import importlib
from typing import Any, Callable

import torch

from .. import nested, wire
from ..parts import ArgumentCheck, Part, helpers
from ..protocol import PROMPT, Reply, Request
from .respond import ABSENT, missing, respond

_pinned: dict[str, dict[str, Any]] = {}


def pin(test: str, names: list[str]) -> None:
    """Keep the answers ``names`` as they are now, for the judging of test cell ``test``.

    The grader runs this where the test cell stands in the notebook, so each part is
    judged on the answer as it was defined at that point (as nbgrader would run the cell).
    """
    from IPython import get_ipython

    namespace = get_ipython().user_ns
    _pinned[test] = {name: namespace.get(name, ABSENT) for name in names}


def serve(chapter: str, message: str) -> None:
    """Answer the grader's requests about ``chapter``'s checks (base64 of a :func:`wire.pack` message)
    and send the replies, one list, in order."""
    try:
        data = wire.unpack(base64.b64decode(message), wire.Codec(helpers=helpers(chapter), oracle=_oracle))
        declaration = getattr(importlib.import_module(f"autograder.{chapter}"), data["check"]).declaration
        answer = _pinned.get(data["test"], {}).get(data["answer"], ABSENT)
        replies = [_serve_one(declaration, answer, data["answer"], asked) for asked in data["requests"]]
    except Exception as error:  # noqa: BLE001 - the grader reads this as the reply
        replies = [Reply(error=f"RespondentError: {type(error).__name__}: {error}")]
    exchange("reply", wire.pack([reply.as_data() for reply in replies], reply=True))


def _serve_one(declaration: Part | ArgumentCheck, answer: Any, name: str, asked: dict) -> Reply:
    if answer is ABSENT:
        return missing(name)
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
                and all(isinstance(g, torch.Tensor) and g.shape == ctx.args[i].shape for g, i in zip(grads, ctx.wrt, strict=True))):
            raise RuntimeError("the grader sent no gradient of the right shape for each input")
        return (None, None, None, None, *grads)


def _detach(value: Any) -> Any:
    """``value`` with its tensors (in tuples, lists, dicts) detached from autograd's graph, to be sent."""
    return nested.map_leaves(value, lambda leaf: leaf.detach() if isinstance(leaf, torch.Tensor) else leaf)
