"""Sphinx extension: the Chinese edition's table of the checks' English message phrases (``{check-messages}``).

The checks speak English in both editions. ``zh/messages.yml`` lists the phrases a student meets most in their
messages (``benchmarks/message_phrases.py`` counts them on the catalogued wrong answers), each with its Chinese
meaning; the directive renders them as a table on ``zh/book/messages.md``, which every Chinese notebook links.
A phrase is taken from the checks' own message templates: the build fails on one that no longer occurs in the
installed package's source (``autograder``), so the page cannot drift from what the checks print.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from docutils import nodes
from docutils.parsers.rst import Directive
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "zh" / "messages.yml"


def _package() -> Path:
    """The folder of the installed ``autograder`` package, whose checks the chapters run (a book built from a
    copy of the pages has no ``autograder/`` beside them)."""
    import autograder

    return Path(autograder.__file__).parent


def phrases(table: Path = TABLE) -> dict[str, str]:
    """``{English phrase: Chinese}`` of ``zh/messages.yml``, in its order."""
    entries = yaml.safe_load(table.read_text(encoding="utf-8"))
    return {entry["en"]: entry["zh"] for entry in entries}


def package_source(package: Path | None = None) -> str:
    """The text of every module of the package (the reference answers' included), where the messages are written."""
    return "\n".join(path.read_text(encoding="utf-8") for path in sorted((package or _package()).rglob("*.py")))


def drifted(table: dict[str, str], source: str) -> list[str]:
    """The phrases of ``table`` that the package's source no longer holds."""
    return [english for english in table if english not in source]


class CheckMessages(Directive):
    """A two-column table: each English phrase (as code, since it is what the message prints) and its meaning."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        table = phrases()
        missing = drifted(table, package_source())
        if missing:
            raise ExtensionError(f"zh/messages.yml: phrases no check prints any more: {missing}")
        grid = nodes.tgroup(cols=2)
        grid += [nodes.colspec(colwidth=1), nodes.colspec(colwidth=1)]
        head = nodes.thead()
        head += self._row(nodes.Text("检查的提示（英文）"), nodes.Text("意思"))
        body = nodes.tbody()
        for english, chinese in table.items():
            body += self._row(nodes.literal(english, english), nodes.Text(chinese))
        grid += [head, body]
        return [nodes.table("", grid)]

    @staticmethod
    def _row(*cells: nodes.Node) -> nodes.row:
        row = nodes.row()
        for content in cells:
            entry = nodes.entry()
            entry += nodes.paragraph("", "", content)
            row += entry
        return row


def setup(app: Sphinx) -> dict:
    app.add_directive("check-messages", CheckMessages)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
