"""The respondent: the only code that calls a student's answer, where the answer lives.

The judge (``judge.py``) never touches an answer. It sends a :class:`~autograder.protocol.Request`:
which declaration (a :class:`~autograder.parts.Part` or an
:class:`~autograder.parts.ArgumentCheck`), which role (the part's cases, one of its probes,
or its bad arguments) and the inputs. :func:`respond` adapts the answer as the declaration
says, calls it quietly, and returns a :class:`~autograder.protocol.Reply`: what it returned
or raised, its inputs as they are after the call, and what it was seen to call.

Runs in the student's process: in a notebook the judge calls :func:`respond` directly; in a
grading kernel ``serve.py`` calls it for requests that arrive as bytes.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Callable

from ..parts import ArgumentCheck, Part
from ..protocol import ARGUMENTS, CASES, Reply, Request
from .measure import functions_of, tripwires


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
    called = names_called(answer)
    namespaces = list({id(f.__globals__): f.__globals__ for f in functions_of(answer)}.values())
    swapped: list[tuple[dict, str, Any]] = []
    try:
        for name, dependency in depends_on.items():
            if name not in called:
                continue
            stand_in = dependency if not isinstance(dependency, Part) else (earlier(dependency) if earlier else None)
            if stand_in is None:
                continue
            for namespace in namespaces:
                swapped.append((namespace, name, namespace.get(name, ABSENT)))
                namespace[name] = stand_in
        yield
    finally:
        for namespace, name, original in reversed(swapped):
            if original is ABSENT:
                namespace.pop(name, None)
            else:
                namespace[name] = original


#: What stands for a name that is not defined (in a namespace, or when a test cell runs).
ABSENT = object()


def missing(name: str) -> Reply:
    """The reply to every request about an answer ``name`` that is not defined when its test cell runs."""
    return Reply(missing=f"`{name}` is not defined when its test cell runs")


def names_called(answer: Any) -> set[str]:
    """The global names that the code of ``answer`` (a function, or a class's methods) refers to."""
    return set().union(*(_names_used(function.__code__) for function in functions_of(answer)))


def _names_used(code) -> set[str]:
    """The global names a function's code (and the code nested in it) refers to."""
    names = set(code.co_names)
    for constant in code.co_consts:
        if hasattr(constant, "co_names"):
            names |= _names_used(constant)
    return names
