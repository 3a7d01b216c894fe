"""Text that a student's process sent, made safe to store and to show.

Anything a kernel sends (an exception's message, a printed line, a module's name) and
anything a submitted file holds is untrusted text: it may hold lone surrogates (from a
``"\\ud800"`` escape in JSON or in Python), which no UTF-8 file, CSV or database accepts; NUL
characters, which PostgreSQL refuses; terminal escapes, which would redraw an instructor's
console; and, where a student's code saw a hidden case, that case's numbers. So:

* :func:`clean` makes any text encodable, everywhere it is stored (the autograded
  notebook, the CSV, the gradebook) or printed;
* :func:`excerpt` is what a message of the kernel's may show of itself in a grade: cut short,
  one line, with long runs of numbers and long unbroken tokens elided, so that an answer
  cannot carry a hidden input into the feedback through its own messages.
"""

from __future__ import annotations

import re
from typing import Any

from . import nested

#: What stands for a character that cannot be kept.
REPLACEMENT = "\ufffd"
#: The longest excerpt of a kernel's message shown in a grade, in characters.
EXCERPT_CHARACTERS = 160
#: A run of more numbers than this, in a kernel's message, is elided.
NUMBERS_KEPT = 4
#: A token (no space in it) longer than this, in a kernel's message, is elided (encoded data).
TOKEN_CHARACTERS = 40

# Lone surrogates, NUL, and the C0/C1 controls except tab and newline (terminal escapes among them).
_UNSAFE = re.compile("[\ud800-\udfff\x00]")
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
# One number (an integer, a decimal, an exponent, nan or inf), with a sign.
_NUMBER = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+|nan|inf)"
# More than NUMBERS_KEPT numbers in a row, separated by spaces, commas, brackets, semicolons.
_SEPARATOR = r"[\s,;\[\]()]+"
_NUMBER_RUN = re.compile(rf"{_NUMBER}(?:{_SEPARATOR}{_NUMBER}){{{NUMBERS_KEPT},}}")
_LONG_TOKEN = re.compile(rf"\S{{{TOKEN_CHARACTERS + 1},}}")


def clean(text: Any, *, controls: bool = False) -> str:
    """``text`` (a ``str``, else its ``str()``) with every character that cannot be stored replaced by U+FFFD.

    Lone surrogates and NUL are always replaced; with ``controls``, the control characters
    other than tab and newline too (for one-line messages, the console and the CSV; a
    notebook's own outputs keep their colours).
    """
    text = text if isinstance(text, str) else str(text)
    return (_CONTROLS if controls else _UNSAFE).sub(REPLACEMENT, text)


def clean_tree(value: Any) -> Any:
    """``value`` (JSON data: dicts, lists, strings, numbers) with every string, keys included, :func:`clean`\\ ed."""
    return nested.map_leaves(value, lambda leaf: clean(leaf) if isinstance(leaf, str) else leaf, into=(list, dict),
                             keys=True)


def excerpt(text: Any, limit: int = EXCERPT_CHARACTERS) -> str:
    """What a grade may show of a message that came from the student's process.

    One line of at most ``limit`` characters (``[…]`` marks a cut), with runs of more than
    :data:`NUMBERS_KEPT` numbers and tokens longer than :data:`TOKEN_CHARACTERS` replaced by
    ``[…]``; safe to store anywhere (:func:`clean`).
    """
    text = " ".join(clean(text, controls=True).split())
    text = _NUMBER_RUN.sub(lambda run: f"{_first_numbers(run.group())} […]", text)
    text = _LONG_TOKEN.sub("[…]", text)
    return text if len(text) <= limit else text[:limit - 4].rstrip() + " […]"


def _first_numbers(run: str) -> str:
    """The first :data:`NUMBERS_KEPT` numbers of a run of numbers and separators, as they were written."""
    kept = re.match(rf"{_NUMBER}(?:{_SEPARATOR}{_NUMBER}){{{NUMBERS_KEPT - 1}}}", run)
    return kept.group() if kept else ""
