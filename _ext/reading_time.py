"""Sphinx extension: every chapter's reading time, counted from the rendered page by one rule.

A time typed by hand goes stale as soon as a section grows; this one is counted from the
page as it is built, outputs included, so the first line of a chapter cannot disagree
with the chapter. The rule, stated in the syllabus by ``{reading-time}`rule```:

* prose: 180 words a minute, a word being any group of characters between spaces that
  holds a letter or a digit (so math counts too: $Q = X W_q$ is three words);
* code shown on the page, and printed output: 10 lines a minute (blank lines not
  counted); a folded cell (``hide-input``) is not counted, since the main path does not
  need it opened, but what it prints or draws is;
* each figure: half a minute.

The **main path** is everything but the optional parts, which are counted apart:
admonitions whose title begins with "Optional" and sections whose title ends with
"(optional)". The exercise sections are not reading and are not counted; the syllabus
times the assignments separately.

In a page, ``{reading-time}`main``` and ``{reading-time}`optional``` become the rounded
minutes of the two paths, and ``{reading-time}`rule``` the rule in words;
``{reading-times}`` (a directive) becomes a table of every chapter's counts, for the syllabus. ``sphinx-build`` also logs each page's counts.
"""

from __future__ import annotations

import dataclasses

from docutils import nodes
from docutils.parsers.rst import Directive
from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)

WORDS_PER_MINUTE = 180
LINES_PER_MINUTE = 10
MINUTES_PER_FIGURE = 0.5

MAIN, OPTIONAL, NOT_READING = "main", "optional", "not reading"
EXERCISE_TITLES = ("Exercise", "Exercises to think about")
FOLDED_INPUT = ("input", "input+output", "all")
FOLDED_OUTPUT = ("output", "input+output", "all")


@dataclasses.dataclass
class Load:
    """What one path of a page asks of its reader."""

    words: int = 0
    code_lines: int = 0
    printed_lines: int = 0
    figures: int = 0

    @property
    def minutes(self) -> float:
        return (self.words / WORDS_PER_MINUTE + (self.code_lines + self.printed_lines) / LINES_PER_MINUTE
                + self.figures * MINUTES_PER_FIGURE)


def rule() -> str:
    """The rule in one sentence, as the syllabus states it."""
    return (f"prose at {WORDS_PER_MINUTE} words a minute (a word is anything between spaces with a "
            f"letter or a digit in it, so math counts too), code shown on the page and printed output "
            f"at {LINES_PER_MINUTE} lines a minute (folded code not counted), and {MINUTES_PER_FIGURE:g} "
            f"minutes for each figure")


def count(doctree: nodes.Node) -> dict[str, Load]:
    """The loads of the main path and of the optional parts of one page."""
    loads = {MAIN: Load(), OPTIONAL: Load(), NOT_READING: Load()}
    _count(doctree, MAIN, loads)
    del loads[NOT_READING]
    return loads


def _count(node: nodes.Node, path: str, loads: dict[str, Load]) -> None:
    path = _path_of(node, path)
    if isinstance(node, nodes.Element) and node.get("nb_element") == "cell_code":
        _count_cell(node, loads[path])
    elif isinstance(node, nodes.literal_block):
        loads[path].code_lines += _lines(node.astext())
    elif isinstance(node, nodes.image):
        loads[path].figures += 1
    elif isinstance(node, nodes.Text):
        loads[path].words += _words(node.astext())
    elif not isinstance(node, (nodes.comment, nodes.raw, nodes.system_message, ReadingTimePlaceholder)):
        for child in node.children:
            _count(child, path, loads)


def _path_of(node: nodes.Node, path: str) -> str:
    """The path a node's content belongs to: its parent's, unless the node opens another."""
    if path == NOT_READING or not isinstance(node, (nodes.section, nodes.admonition)):
        return path
    title = node.next_node(nodes.title)
    heading = title.astext().strip() if title is not None and title.parent is node else ""
    if isinstance(node, nodes.section) and heading in EXERCISE_TITLES:
        return NOT_READING
    if isinstance(node, nodes.section) and heading.endswith("(optional)"):
        return OPTIONAL
    if isinstance(node, nodes.admonition) and heading.startswith("Optional"):
        return OPTIONAL
    return path


def _count_cell(cell: nodes.Element, load: Load) -> None:
    """A notebook cell: its source lines unless folded, and its outputs unless folded."""
    folded = cell.get("hide_mode")
    for part in cell.children:
        element = part.get("nb_element")
        if element == "cell_code_source" and folded not in FOLDED_INPUT:
            load.code_lines += _lines(part.astext())
        elif element == "cell_code_output" and folded not in FOLDED_OUTPUT:
            _count_output(part, load)


def _count_output(node: nodes.Node, load: Load) -> None:
    """Figures and printed lines; of a bundle of one output in several formats, the one shown."""
    if isinstance(node, nodes.Element) and node.get("nb_element") == "mime_bundle":
        shown = sorted(node.children, key=lambda format: not format.get("mime_type", "").startswith("image/"))
        if shown:
            _count_output(shown[0], load)
    elif isinstance(node, nodes.image):
        load.figures += 1
    elif isinstance(node, nodes.literal_block):
        load.printed_lines += _lines(node.astext())
    else:
        for child in node.children:
            _count_output(child, load)


def _words(text: str) -> int:
    return sum(1 for token in text.split() if any(character.isalnum() for character in token))


def _lines(code: str) -> int:
    return sum(1 for line in code.splitlines() if line.strip())


# Placeholders, filled once the page (or, for the table, every page) has been read.

class ReadingTimePlaceholder(nodes.Inline, nodes.TextElement):
    """``{reading-time}`main``` until the page is counted."""


class ReadingTimesTable(nodes.General, nodes.Element):
    """``{reading-times}`` until every chapter is counted."""


def reading_time_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``{reading-time}`main```, ``{reading-time}`optional``` or ``{reading-time}`rule```."""
    if text == "rule":
        return [nodes.Text(rule())], []
    if text not in (MAIN, OPTIONAL):
        message = inliner.reporter.error(f"reading-time takes 'main', 'optional' or 'rule', not {text!r}",
                                         line=lineno)
        return [inliner.problematic(rawtext, rawtext, message)], [message]
    return [ReadingTimePlaceholder(rawtext, "", path=text)], []


class ReadingTimesDirective(Directive):
    """A table of every page that shows its reading time: words, code lines, outputs, minutes."""

    def run(self):
        env = self.state.document.settings.env
        env.course_reading_tables = getattr(env, "course_reading_tables", set()) | {env.docname}
        return [ReadingTimesTable()]


def record_reading_time(app: Sphinx, doctree: nodes.document) -> None:
    """Count a page just read; fill its placeholders; keep its counts for the table."""
    placeholders = list(doctree.findall(ReadingTimePlaceholder))
    if not placeholders:
        return
    loads = count(doctree)
    docname = app.env.docname
    app.env.course_reading_times = getattr(app.env, "course_reading_times", {})
    app.env.course_reading_times[docname] = {path: dataclasses.asdict(load) for path, load in loads.items()}
    for placeholder in placeholders:
        placeholder.replace_self(nodes.Text(str(round(loads[placeholder["path"]].minutes))))
    logger.info(f"reading time of {docname}: main {loads[MAIN].minutes:.1f} min ({_describe(loads[MAIN])}), "
                f"optional {loads[OPTIONAL].minutes:.1f} min")


def _describe(load: Load) -> str:
    return (f"{load.words} words, {load.code_lines} code lines, {load.printed_lines} printed lines, "
            f"{load.figures} figures")


def fill_table(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    times = getattr(app.env, "course_reading_times", {})
    for table in doctree.findall(ReadingTimesTable):
        table.replace_self(_table(app, docname, times))


def _table(app: Sphinx, docname: str, times: dict) -> nodes.table:
    header = ("chapter", "words", "code lines", "printed lines", "figures", "main path (min)",
              "optional parts (min)")
    rows = []
    for page in sorted(times):
        main, optional = Load(**times[page][MAIN]), Load(**times[page][OPTIONAL])
        title = nodes.reference("", app.env.titles[page].astext(),
                                refuri=app.builder.get_relative_uri(docname, page))
        rows.append((title, str(main.words), str(main.code_lines), str(main.printed_lines),
                     str(main.figures), str(round(main.minutes)), str(round(optional.minutes))))
    return _docutils_table(header, rows)


def _docutils_table(header, rows) -> nodes.table:
    group = nodes.tgroup(cols=len(header))
    group += [nodes.colspec(colwidth=1) for _ in header]
    group += nodes.thead("", _row(header))
    group += nodes.tbody("", *(_row(row) for row in rows))
    return nodes.table("", group)


def _row(cells) -> nodes.row:
    row = nodes.row()
    for cell in cells:
        content = cell if isinstance(cell, nodes.Node) else nodes.Text(cell)
        row += nodes.entry("", nodes.paragraph("", "", content))
    return row


def purge(app: Sphinx, env, docname: str) -> None:
    getattr(env, "course_reading_times", {}).pop(docname, None)
    getattr(env, "course_reading_tables", set()).discard(docname)


def reread_tables(app: Sphinx, env, added, changed, removed) -> list[str]:
    """A page with the table is read again whenever any page is, so its table is never stale."""
    return sorted(getattr(env, "course_reading_tables", set())) if added | changed | removed else []


def merge(app: Sphinx, env, docnames, other) -> None:
    env.course_reading_times = getattr(env, "course_reading_times", {})
    env.course_reading_times.update(getattr(other, "course_reading_times", {}))
    env.course_reading_tables = getattr(env, "course_reading_tables", set()) | getattr(other, "course_reading_tables", set())


def setup(app: Sphinx) -> dict:
    app.add_node(ReadingTimePlaceholder)
    app.add_node(ReadingTimesTable)
    app.add_role("reading-time", reading_time_role)
    app.add_directive("reading-times", ReadingTimesDirective)
    app.connect("doctree-read", record_reading_time)
    app.connect("doctree-resolved", fill_table)
    app.connect("env-purge-doc", purge)
    app.connect("env-merge-info", merge)
    app.connect("env-get-outdated", reread_tables)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
