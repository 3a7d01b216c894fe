"""Cells of the CSV files the course writes, safe to open in a spreadsheet.

A spreadsheet (Excel, LibreOffice, Google Sheets) runs a cell that starts with ``=``,
``+``, ``-`` or ``@`` as a formula, and a tab or carriage return at the start can hide one
(OWASP, "CSV Injection"). The course's CSV files hold text that no instructor wrote: what a
submission's code raised (the grades' ``message``), a student's folder name (any name an
LMS download or a hand copy gave it). So every text cell goes through :func:`inert`, which
puts a single quote before such a cell: the spreadsheet shows it as text. Numbers stay
numbers; a negative number is a number, not a formula.

:func:`plain` undoes it, for the course's own code that reads a CSV back (the grades table's
``student`` column names a folder under ``submitted/``). A text that itself starts with a
quote and one of those characters reads back without its quote: no folder or message is
expected to start so.
"""

from __future__ import annotations

from typing import Any

#: The first characters that make a spreadsheet read a cell as a formula (or hide one).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
#: What goes before such a cell.
QUOTE = "'"


def inert(value: Any) -> Any:
    """``value`` as a spreadsheet will not run it: a text that starts as a formula gets a ``'`` before it.

    ``int`` and ``float`` values (a negative score among them) and ``None`` are returned
    unchanged; any other value is treated as its text.
    """
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return value
    text = value if isinstance(value, str) else str(value)
    return QUOTE + text if text.startswith(FORMULA_STARTS) else text


def plain(text: str) -> str:
    """A cell written by :func:`inert`, read back as it was."""
    if text.startswith(QUOTE) and text[1:2] and text[1:].startswith(FORMULA_STARTS):
        return text[1:]
    return text
