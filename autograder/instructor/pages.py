"""The instructors' HTML pages (the class report, the similarity page): one self-contained document shape that
loads nothing from elsewhere, the escaping of every text put in it, and a write that leaves the whole page or
none."""

from __future__ import annotations

import html
from pathlib import Path

_HTML = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; img-src data:; style-src 'unsafe-inline'">
<style>{style}</style></head>
<body>
{body}
</body></html>
"""


def escape(text: object) -> str:
    """``text`` as HTML text or an attribute's value (quotes escaped too): a student's words are never markup."""
    return html.escape(str(text), quote=True)


def document(title: str, style: str, body: str) -> str:
    """A page titled ``title`` (plain text), styled by ``style`` (CSS), with ``body`` (HTML, escaped already)."""
    return _HTML.format(title=escape(title), style=style, body=body)


def write(path: Path, page: str) -> Path:
    """Write ``page`` at ``path``, whole or not at all (a partial file renamed into place); ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(page, encoding="utf-8")
    partial.replace(path)
    return path
