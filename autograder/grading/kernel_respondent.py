"""The judge's respondent at grading: the student's sandboxed kernel, asked from outside.

:class:`KernelRespondent` is what the judge (``autograder/judge.py``) asks at grading. It
sends each request to the kernel as bytes (``autograder/wire.py``) in the code of a silent
execution, ``autograder.kernel.serve.serve(...)``, and reads what the kernel sends back through its
``input()`` prompts:

* a *reply*: the answer's result, as untrusted data, size-capped by the kernel client's
  ``MAXMSGSIZE`` and by :class:`~autograder.wire.Limits`, decoded without running code;
* an *oracle* call: an earlier part, or a function of a case, that only the grading side
  has (a reference). The judge computes it here, for the names these requests may call
  (the part's dependencies and the functions among their inputs), on inputs no larger
  than the largest request's allow, and sends the result back as data.

Every request has a deadline, kept here: a kernel that does not answer in time is killed
(``execute.KernelSession.exchange``), and the part that asked is graded as timed out. The
time a request took, for the parts whose limit is a training's, is the CPU time the kernel's
cgroup used meanwhile (:meth:`KernelRespondent.cpu_seconds`): the student's own work, not the
machine's load.
"""

from __future__ import annotations

import base64
import math
import time
from collections import Counter
from typing import Any, Callable, Protocol

import torch

from .. import nested, wire
from ..judge import Respondent
from ..parts import ArgumentCheck, Part, helpers, reference_module
from ..protocol import PROMPT, Reply, Request
from .errors import Deadline, TimedOut
from .kernels import MESSAGE_BYTES
from .sandbox import Limits

#: An oracle call may carry at most this many times the elements of the request it is made
#: for (plus :data:`ORACLE_SLACK`), counted by :func:`_elements`, integers that size a result
#: included: what a dependency is called on derives from the request's inputs, and the grading
#: process must not compute a reference on anything larger. The slack (2**16 elements, 256 KiB
#: of float32) covers the largest legitimate call on a small request, assignment 05's module
#: building its table ``sinusoidal_encoding(max_len, num_hiddens)`` from two integers.
ORACLE_FACTOR, ORACLE_SLACK = 16, 2**16


class AskedKernel(Protocol):
    """What :class:`KernelRespondent` needs of a kernel session (``execute.KernelSession`` is one)."""

    limits: Limits
    oracle_refused: Counter

    def exchange(self, code: str, deadline: float, answer: Callable[[str], str]) -> str: ...

    def cpu_seconds(self) -> float | None: ...

    def memory_mark(self): ...

    def memory_peak(self, mark) -> int | None: ...


class KernelRespondent(Respondent):
    """The answer named ``answer``, pinned at test cell ``test`` in ``session``'s kernel.

    Args:
        deadline: ``time.monotonic()`` by which every request must be answered.
    """

    def __init__(self, session: AskedKernel, declaration: Part | ArgumentCheck, check: str, test: str, answer: str,
                 deadline: float):
        self.session, self.declaration, self.check, self.test, self.answer = session, declaration, check, test, answer
        self.deadline, self.seconds = deadline, max(0.0, deadline - time.monotonic())
        self.chapter = declaration.chapter
        self.codec = wire.Codec(helpers=helpers(self.chapter), oracle_name=self._oracle_name)
        # a meta tensor may claim as many elements as a message could carry bytes, no more
        self.limits = wire.Limits(bytes=MESSAGE_BYTES, elements=MESSAGE_BYTES)
        self._cpu_seconds: float | None = None
        self._peak: int | None = None

    def check_earlier(self, declaration: Part) -> None:
        """Nothing: an earlier part the answer calls is answered here, with its reference (:meth:`_oracle`)."""

    def ask_all(self, requests: list[Request]) -> list[Reply]:
        """The kernel's replies to ``requests``, asked all at once (one round trip); one reply each, in order.

        Raises:
            TimedOut: no reply before the deadline.
            KernelLost: the kernel died (or had died before).
        """
        self._oracles = set(self._dependencies())
        asked = [{"role": r.role, "args": tuple(r.args), "kwargs": dict(r.kwargs), "library": r.library}
                 for r in requests]
        message = wire.pack({"test": self.test, "answer": self.answer, "check": self.check, "requests": asked},
                            self.codec)  # records the oracles among the inputs (_oracle_name)
        largest = max((_elements((r.args, r.kwargs)) for r in requests), default=0)
        self._budget = ORACLE_FACTOR * largest + ORACLE_SLACK
        self._replies: list[Reply] | None = None
        code = (f"__import__('autograder.kernel.serve', fromlist=['serve']).serve({self.chapter!r}, "
                f"{base64.b64encode(message).decode()!r})")
        measured = any(request.measured for request in requests)
        before, mark = self.session.cpu_seconds(), self.session.memory_mark() if measured else None
        try:
            self.session.exchange(code, self.deadline, self._answer)
        except Deadline:
            raise TimedOut(f"checking it took longer than the {self.seconds:.0f} s it had") from None
        finally:
            self._peak = self.session.memory_peak(mark)
        after = self.session.cpu_seconds()
        self._cpu_seconds = None if before is None or after is None else \
            max(0.0, after - before) / self.session.limits.threads
        replies = self._replies or [Reply(error="ReplyError: the kernel sent no reply")]
        if len(replies) != len(requests):  # a reply list of another length answers nothing right
            return [replies[0] if len(replies) == 1 else Reply(error="ReplyError: the kernel's replies do not match "
                                                                     "its requests")] * len(requests)
        return replies

    def cpu_seconds(self) -> float | None:
        """The CPU time the kernel's cgroup used during the last :meth:`ask_all`, divided by the threads the
        kernel is given (its wall time had it kept them busy); ``None`` where no cgroup counts it."""
        return self._cpu_seconds

    def peak_bytes(self) -> int | None:
        """The peak of the kernel's memory during the last :meth:`ask_all` of a measured request, above the least it
        held during it, from the kernel's cgroup (its threads, processes and files in memory included); ``None``
        after other requests, or where no cgroup measures it."""
        return self._peak

    # ---- what the kernel sends

    def _answer(self, prompt: str) -> str:
        """The grader's answer to one ``input()`` prompt of the kernel during a request."""
        if not prompt.startswith(PROMPT):
            return ""  # the student's own input(): nothing to read there
        kind, _, payload = prompt[len(PROMPT):].partition(" ")
        if kind == "reply" and self._replies is None:
            self._replies = self._decode_replies(payload)
            return ""
        if kind == "oracle":
            return self._oracle(payload)
        return ""

    def _decode_replies(self, payload: str) -> list[Reply]:
        try:
            data = wire.unpack(base64.b64decode(payload, validate=True), wire.Codec(), self.limits)
        except (wire.WireError, ValueError) as error:
            return [Reply(error=f"ReplyError: the reply could not be read ({error})")]
        if not isinstance(data, list):
            return [Reply(error=f"ReplyError: the reply was a {type(data).__name__}, not a list of replies")]
        return [Reply.from_data(item) for item in data]

    # ---- oracles: what only the grading side can compute

    def _dependencies(self) -> list[str]:
        depends_on = getattr(self.declaration, "depends_on", {})
        return [f"{d.chapter}:{d.name}" for d in depends_on.values() if isinstance(d, Part)]

    def _oracle_name(self, function: Any) -> str | None:
        """The name under which a reference among a request's inputs is called back (and allowed)."""
        module = reference_module(self.chapter)
        for name, reference in (module.REFERENCES.items() if module else ()):
            if reference is function:
                self._oracles.add(f"{self.chapter}:{name}")
                return f"{self.chapter}:{name}"
        return None

    def _oracle(self, payload: str) -> str:
        """Compute what the kernel asks for, if this request may ask for it; ``ok <data>`` or ``error <why>``."""
        try:
            call = wire.unpack(base64.b64decode(payload, validate=True), wire.Codec(helpers=helpers(self.chapter)),
                               self.limits)
            name, args, kwargs, gradient = _call(call)
        except ValueError as error:  # WireError is one
            return f"error the call could not be read ({error})"
        if name not in self._oracles:
            return f"error `{name}` is not available to this part"
        size = _elements((args, kwargs, gradient))
        if size > self._budget:
            self.session.oracle_refused[name.partition(":")[2]] += 1
            return (f"error the grader refuses to compute it: its arguments are larger than this part's inputs allow "
                    f"({size:,} elements, integers that size a result included; at most {self._budget:,})")
        chapter, _, part = name.partition(":")
        reference = reference_module(chapter).REFERENCES[part]
        try:
            if gradient is None:
                with torch.no_grad():
                    result = reference(*args, **kwargs)
            else:
                result = _vector_jacobian_product(reference, args, kwargs, gradient)
        except Exception as error:  # noqa: BLE001 - the reference's own error, passed on as the answer's
            if _out_of_memory(error):
                return "error the grader ran out of its own memory computing it (the grading worker's data limit)"
            return f"error {type(error).__name__}: {error}"
        return "ok " + base64.b64encode(wire.pack(result)).decode()


def _call(call: Any) -> tuple[str, tuple, dict, Any]:
    """The name, args, kwargs and gradient request (``None`` if none) of an oracle call the kernel sent.

    Raises:
        ValueError: ``call`` is not a dict of a string ``name``, a tuple or list ``args`` and a
            dict ``kwargs`` (a tensor for ``args`` would be unbound into one tensor a row).
    """
    if not isinstance(call, dict) or not isinstance(call.get("name"), str) or \
            not isinstance(call.get("args"), (tuple, list)) or not isinstance(call.get("kwargs"), dict):
        raise ValueError("not a call of a name on args and kwargs")
    return call["name"], tuple(call["args"]), call["kwargs"], call.get("gradient")


def _vector_jacobian_product(reference: Any, args: tuple, kwargs: dict, gradient: Any) -> list[torch.Tensor]:
    """The gradients of ``reference(*args, **kwargs)`` with respect to ``args[i] for i in gradient["wrt"]``,
    given the gradient ``gradient["output"]`` of its result: a training loop's backward pass through an
    earlier part that the grading side computes (``respond._AskedOutside``)."""
    if not isinstance(gradient, dict) or not isinstance(gradient.get("wrt"), list):
        raise ValueError("a malformed gradient request")
    wrt = gradient["wrt"]
    if not all(isinstance(i, int) and 0 <= i < len(args) and isinstance(args[i], torch.Tensor)
               and args[i].is_floating_point() for i in wrt):
        raise ValueError("a gradient asked for an argument that is not a floating-point tensor")
    args = tuple(a.clone().requires_grad_() if i in wrt else a for i, a in enumerate(args))
    with torch.enable_grad():
        result = reference(*args, **kwargs)
        inputs = [args[i] for i in wrt]
        grads = torch.autograd.grad(result, inputs, gradient["output"], allow_unused=True)
    return [torch.zeros_like(x) if g is None else g.detach() for g, x in zip(grads, inputs, strict=True)]


def _elements(value: Any) -> int:
    """What ``value`` (tensors, numbers, in tuples, lists, dicts) may make a reference compute, in elements.

    Its tensors' elements, plus the product of its positive integers (``bool`` is not
    one), anywhere in it: ``sinusoidal_encoding(50_000, 2_000)`` carries no tensor, yet
    asks for a table of 10**8 elements.
    """
    found = nested.leaves(value)
    tensors = sum(leaf.numel() for leaf in found if isinstance(leaf, torch.Tensor))
    integers = [leaf for leaf in found if isinstance(leaf, int) and not isinstance(leaf, bool) and leaf > 0]
    return tensors + (math.prod(integers) if integers else 0)


def _out_of_memory(error: Exception) -> bool:
    """Whether ``error`` says an allocation failed: Python's ``MemoryError``, CUDA's, or the CPU allocator's
    (a ``RuntimeError``)."""
    return isinstance(error, (MemoryError, torch.OutOfMemoryError)) or "can't allocate memory" in str(error)

