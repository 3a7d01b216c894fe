"""What the judge asks of an answer and what comes back: :class:`Request` and :class:`Reply`.

Shared by both sides. The judge (``judge.py``), in a student's notebook or in the grading
worker, sends requests; where the answer lives (``kernel/respond.py``) the reply is made.
At grading both cross the sandbox's boundary as bytes (``wire.py``), so a reply is read
here as untrusted data: :meth:`Reply.from_data` turns anything malformed into a reply that
says so, and cuts and cleans its text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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
        library: record calls of library attention during the call (advice).
        measured: the call's working memory is measured (it is asked alone); the grader's own
            flag, never sent to the kernel, whose cgroup it measures from outside.
    """

    role: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    library: bool = False
    measured: bool = False


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
