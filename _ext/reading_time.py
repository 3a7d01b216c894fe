"""Sphinx extension: every chapter's reading time, counted from the rendered page by one rule,
and every assignment's planning estimate, counted from its solution notebook.

A time typed by hand goes stale as soon as a section grows; this one is counted from the
page as it is built, outputs included, so the first line of a chapter cannot disagree
with the chapter. The rule, stated in the syllabus by ``{reading-time}`rule``` (which cites
the sources named here):

* **prose**: ``WORDS_PER_MINUTE``, a word being any group of characters between spaces
  that holds a letter or a digit (inline math counts: $Q = X W_q$ is three words). Carver (1992) puts reading to learn, his "learning gear", at about 200
  words a minute for ordinary prose, and reading to memorize at about 138. Text with
  mathematics is read more slowly than ordinary prose: experts go back and forth between
  consecutive lines to infer what a step leaves out (Inglis & Alcock 2012), and first-year
  students who were good general readers, reading passages of their mathematics textbooks
  with the strategies that serve other text, often could not carry out the tasks the passages
  explained (Shepherd, Selden & Selden 2012). Neither study gives a rate, so the rule takes
  one between Carver's learning and memorizing gears.
* **Chinese prose** (the Chinese edition, ``zh/``): each Chinese character at
  ``CHARACTERS_PER_MINUTE``, the rest of the text (English names, inline math) in words as above.
  The rate keeps the English rule's ratio to each language's standardized reading speed: the
  IReST texts are read at about 228 words a minute in English and 255 characters a minute in
  Chinese (Trauzettel-Klosinski & Dietz 2012), and 150 / 228 × 255 ≈ 170.
* **display equations**: ``MINUTES_PER_EQUATION`` each, not counted as words.
  A display is where a step of the argument is made, and it is read symbol by symbol and
  checked against the line before (Inglis & Alcock 2012); one row of an aligned display is
  one equation (rows of a matrix or of cases are not).
* **code and printed output**: ``LINES_PER_MINUTE`` (blank lines not counted), the careful
  end of code review's pace: in the Cisco code-review study, reviews slower than 300 lines
  an hour found defects best, and rates up to 500 were still good (Cohen 2006). Printed
  output is read at the same pace, since it is what the text's claims are checked against.
* **figures**: ``MINUTES_PER_PANEL`` per panel, not per image: a panel is one of the axes
  that matplotlib reports for the figure ("with 3 Axes"), a colour bar included, since the
  scale is read with the heatmap; an image that is not a matplotlib figure is one panel. No study gives this rate; it is the time to read a panel's axes and
  find in it what the text says.
* **folded code**: a folded cell (``hide-input`` or ``hide-cell``) may only draw, print and
  time with what the shown code defines; it defines no function or class of its own, except
  a drawing helper (a name beginning with ``draw_``, ``show_`` or ``plot_``). Any cell whose
  code computes what the argument rests on is therefore shown and counted; a folded cell's
  code is not counted, what it prints or draws is. The build warns (and, with
  ``--warningiserror``, fails) on a folded cell that breaks this.

The **main path** is everything but the optional parts, which are counted apart:
admonitions whose title begins with "Optional" (Chinese: "选读"), sections whose title ends with
"(optional)" (Chinese: "（选读）"), and code cells tagged ``optional``, which belong to the optional box before
them (a notebook cell cannot sit inside a box). The exercise sections are not reading and are not counted; the assignments
are timed from their solution notebooks (below). A main path longer than
``SITTING_MINUTES`` is planned over several sittings, split between sections: the Cisco
study also found that reviewers' attention drops after about an hour.

In a page, ``{reading-time}`main``` and ``{reading-time}`optional``` become the rounded
minutes of the two paths, and ``{reading-time}`rule``` the rule in words;
``{reading-times}`` (a directive) becomes a table of every chapter's counts and sittings, for
the syllabus. ``sphinx-build`` also logs each page's counts.

``{assignment-times}`` (a directive whose lines read ``NN name: measured notebook run``)
becomes the table of assignments: graded parts and points, lines of solution code (the
non-blank lines between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` of
``solutions/NN_*/NN_*.ipynb``) and the planning estimate, those lines at
``SOLUTION_LINES_PER_HOUR``, rounded to half hours. Code that a notebook asks to paste
from an earlier assignment (a solution cell, not graded, that defines only names an earlier
notebook defines) is listed apart and not in the estimate.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import Directive
from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)

WORDS_PER_MINUTE = 150  # between Carver's learning (200) and memorizing (138) gears
CHARACTERS_PER_MINUTE = 170  # Chinese: the same ratio to the IReST norms (255 characters vs 228 words a minute)
MINUTES_PER_EQUATION = 1.0
LINES_PER_MINUTE = 5  # 300 lines an hour, the Cisco study's best rate of review
MINUTES_PER_PANEL = 0.5
SITTING_MINUTES = 60  # about an hour of careful reading at a time
SOLUTION_LINES_PER_HOUR = (15, 25)  # tested lines of solution code, slow and fast

MAIN, OPTIONAL, NOT_READING = "main", "optional", "not reading"
EXERCISE_TITLES = ("Exercise", "Exercises to think about", "作业", "思考题")  # English, then the Chinese edition's
OPTIONAL_SECTION, OPTIONAL_BOX = ("(optional)", "（选读）"), ("Optional", "选读")
FOLDED_INPUT = ("input", "input+output", "all")
FOLDED_OUTPUT = ("output", "input+output", "all")
DRAWING_HELPERS = ("draw_", "show_", "plot_")
OPTIONAL_TAG = "optional"  # a code cell of an optional box (MyST cannot put a cell inside a box)

CJK = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")  # Chinese characters (CJK ideographs)
DEFINITION = re.compile(r"^(?:async\s+)?(?:def|class)\s+(\w+)", re.M)
AXES = re.compile(r"with (\d+) Axes")
NESTED_ROWS = re.compile(r"\\begin\{(cases|[pbvBV]?matrix|smallmatrix|array)\}.*?\\end\{\1\}", re.S)
ENVIRONMENT = re.compile(r"\\(?:begin|end)\{[^}]*\}")


@dataclasses.dataclass
class Load:
    """What one path of a page asks of its reader."""

    words: int = 0
    characters: int = 0  # Chinese characters
    equations: int = 0
    code_lines: int = 0
    printed_lines: int = 0
    panels: int = 0

    @property
    def minutes(self) -> float:
        return (self.words / WORDS_PER_MINUTE + self.characters / CHARACTERS_PER_MINUTE
                + self.equations * MINUTES_PER_EQUATION
                + (self.code_lines + self.printed_lines) / LINES_PER_MINUTE + self.panels * MINUTES_PER_PANEL)


def rule() -> str:
    """The rule in one sentence, as the syllabus states it."""
    return (f"prose at {WORDS_PER_MINUTE} words a minute (a word is anything between spaces with a "
            f"letter or a digit in it, inline math included), {MINUTES_PER_EQUATION:g} minute for each "
            f"displayed equation (each row of an aligned display), code shown on the page and printed "
            f"output at {LINES_PER_MINUTE} lines a minute, and {MINUTES_PER_PANEL:g} minutes for each "
            f"panel of a figure; a folded cell only draws or prints with what the shown code defines, so "
            f"its code is not counted")


def rule_in_chinese() -> str:
    """The rule in one sentence, as the Chinese edition states it."""
    return (f"中文正文每分钟 {CHARACTERS_PER_MINUTE} 个汉字（其中的英文名称与行内公式按每分钟 {WORDS_PER_MINUTE} "
            f"个词计），每个独立显示的公式 {MINUTES_PER_EQUATION:g} 分钟（对齐公式的每一行各算一个），页面上显示的"
            f"代码与打印输出每分钟 {LINES_PER_MINUTE} 行，图中每个子图 {MINUTES_PER_PANEL:g} 分钟；折叠的单元格只用于"
            f"绘图或打印，其代码不计入")


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
    elif isinstance(node, nodes.math_block):
        loads[path].equations += equations(node.astext())
    elif isinstance(node, nodes.literal_block):
        loads[path].code_lines += _lines(node.astext())
    elif isinstance(node, nodes.image):
        loads[path].panels += 1
    elif isinstance(node, nodes.Text):
        loads[path].words += _words(node.astext())
        loads[path].characters += len(CJK.findall(node.astext()))
    elif not isinstance(node, (nodes.comment, nodes.raw, nodes.system_message, ReadingTimePlaceholder)):
        for child in node.children:
            _count(child, path, loads)


def _path_of(node: nodes.Node, path: str) -> str:
    """The path a node's content belongs to: its parent's, unless the node opens another."""
    if path == NOT_READING:
        return path
    if isinstance(node, nodes.Element) and OPTIONAL_TAG in node.get("cell_metadata", {}).get("tags", []):
        return OPTIONAL
    if not isinstance(node, (nodes.section, nodes.admonition)):
        return path
    heading = _heading(node)
    if isinstance(node, nodes.section) and heading in EXERCISE_TITLES:
        return NOT_READING
    if isinstance(node, nodes.section) and heading.endswith(OPTIONAL_SECTION):
        return OPTIONAL
    if isinstance(node, nodes.admonition) and heading.startswith(OPTIONAL_BOX):
        return OPTIONAL
    return path


def _heading(node: nodes.Element) -> str:
    title = node.next_node(nodes.title)
    return title.astext().strip() if title is not None and title.parent is node else ""


def equations(latex: str) -> int:
    """The equations of one display: one per row of an aligned display, at least one."""
    rows = re.split(r"\\\\", ENVIRONMENT.sub("", NESTED_ROWS.sub("x", latex)))
    return max(1, sum(1 for row in rows if any(character.isalnum() for character in row)))


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
    """Panels and printed lines; of a bundle of one output in several formats, the one shown."""
    if isinstance(node, nodes.Element) and node.get("nb_element") == "mime_bundle":
        images = [format for format in node.children if format.get("mime_type", "").startswith("image/")]
        if images:
            load.panels += _panels(node)
        elif node.children:
            _count_output(node.children[0], load)
    elif isinstance(node, nodes.image):
        load.panels += 1
    elif isinstance(node, nodes.literal_block):
        load.printed_lines += _lines(node.astext())
    else:
        for child in node.children:
            _count_output(child, load)


def _panels(bundle: nodes.Element) -> int:
    """A drawn figure's panels: the axes its text form reports, or one."""
    axes = AXES.search(bundle.astext())
    return int(axes.group(1)) if axes else 1


def _words(text: str) -> int:
    """The words of ``text``, its Chinese characters set aside (they are counted one by one)."""
    return sum(1 for token in CJK.sub(" ", text).split() if any(character.isalnum() for character in token))


def _lines(code: str) -> int:
    return sum(1 for line in code.splitlines() if line.strip())


# The folded-code rule.

def folded_definitions(doctree: nodes.Node) -> list[tuple[str, nodes.Element]]:
    """``(name, source)`` of each function or class that a folded cell defines, drawing helpers
    apart: each breaks the rule."""
    sources = doctree.findall(lambda node: isinstance(node, nodes.literal_block)
                              and node.parent.get("nb_element") == "cell_code_source"
                              and node.parent.parent.get("hide_mode") in FOLDED_INPUT)
    return [(name, source) for source in sources for name in defined_names(source.astext())]


def defined_names(code: str) -> list[str]:
    """The functions and classes a piece of code defines, drawing helpers apart."""
    return [name for name in DEFINITION.findall(code) if not name.startswith(DRAWING_HELPERS)]


# Sittings: a main path longer than one sitting, split between its sections.

def section_minutes(doctree: nodes.Node) -> list[tuple[str, float]]:
    """``(title, main-path minutes)`` of each section of the page's first level, its opening
    counted with the first one."""
    top = doctree.next_node(nodes.section)
    parts: list[tuple[str, float]] = [("", 0.0)]
    for child in top.children if top is not None else []:
        if isinstance(child, nodes.section):
            parts.append((_heading(child), 0.0))
        title, minutes = parts[-1]
        parts[-1] = (title, minutes + count(child)[MAIN].minutes)
    opening = parts.pop(0)[1]
    return [(parts[0][0], parts[0][1] + opening)] + parts[1:] if parts else [("", opening)]


def sittings(parts: list[tuple[str, float]]) -> list[str]:
    """The sections that open the second and later sittings, each the section with main-path
    content that starts nearest an equal share; none if one sitting holds it all."""
    total = sum(minutes for _, minutes in parts)
    needed = math.ceil(total / SITTING_MINUTES)
    starts, before = [], 0.0
    for index, (title, minutes) in enumerate(parts):
        if index and minutes:
            starts.append((before, title))
        before += minutes
    if needed < 2 or not starts:
        return []
    openers = []
    for k in range(1, needed):
        _, title = min(starts, key=lambda start: abs(start[0] - k * total / needed))
        if title not in openers:
            openers.append(title)
    return openers


# Placeholders, filled once the page (or, for the table, every page) has been read.

class ReadingTimePlaceholder(nodes.Inline, nodes.TextElement):
    """``{reading-time}`main``` until the page is counted."""


class ReadingTimesTable(nodes.General, nodes.Element):
    """``{reading-times}`` until every chapter is counted."""


def reading_time_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``{reading-time}`main```, ``{reading-time}`optional``` or ``{reading-time}`rule```."""
    if text == "rule":
        chinese = getattr(inliner.document.settings.env.config, "course_edition", "en") == "zh"
        return [nodes.Text(rule_in_chinese() if chinese else rule())], []
    if text not in (MAIN, OPTIONAL):
        message = inliner.reporter.error(f"reading-time takes 'main', 'optional' or 'rule', not {text!r}",
                                         line=lineno)
        return [inliner.problematic(rawtext, rawtext, message)], [message]
    return [ReadingTimePlaceholder(rawtext, "", path=text)], []


class ReadingTimesDirective(Directive):
    """A table of every page that shows its reading time: its counts, minutes and sittings."""

    def run(self):
        env = self.state.document.settings.env
        env.course_reading_tables = getattr(env, "course_reading_tables", set()) | {env.docname}
        return [ReadingTimesTable()]


def record_reading_time(app: Sphinx, doctree: nodes.document) -> None:
    """Count a page just read; fill its placeholders; keep its counts for the table."""
    placeholders = list(doctree.findall(ReadingTimePlaceholder))
    if not placeholders:
        return
    docname = app.env.docname
    for name, source in folded_definitions(doctree):
        logger.warning(f"a folded cell defines {name!r}: show the cell (its code is part of the "
                       f"argument) or move the definition to a shown cell", location=source)
    loads = count(doctree)
    app.env.course_reading_times = getattr(app.env, "course_reading_times", {})
    app.env.course_reading_times[docname] = {
        **{path: dataclasses.asdict(load) for path, load in loads.items()},
        "sittings": sittings(section_minutes(doctree))}
    for placeholder in placeholders:
        placeholder.replace_self(nodes.Text(str(round(loads[placeholder["path"]].minutes))))
    logger.info(f"reading time of {docname}: main {loads[MAIN].minutes:.1f} min ({_describe(loads[MAIN])}), "
                f"optional {loads[OPTIONAL].minutes:.1f} min")


def _describe(load: Load) -> str:
    return (f"{load.words} words, {load.characters} Chinese characters, {load.equations} equations, {load.code_lines} code lines, "
            f"{load.printed_lines} printed lines, {load.panels} panels")


def fill_table(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    times = getattr(app.env, "course_reading_times", {})
    for table in doctree.findall(ReadingTimesTable):
        table.replace_self(_table(app, docname, times))


def _table(app: Sphinx, docname: str, times: dict) -> nodes.table:
    header = ("chapter", "words", "equations", "code lines", "printed lines", "figure panels",
              "main path (min)", "optional parts (min)", f"sittings (of {SITTING_MINUTES} min at most)")
    rows = []
    for page in sorted(times):
        main, optional = Load(**times[page][MAIN]), Load(**times[page][OPTIONAL])
        title = nodes.reference("", app.env.titles[page].astext(),
                                refuri=app.builder.get_relative_uri(docname, page))
        rows.append((title, str(main.words), str(main.equations), str(main.code_lines),
                     str(main.printed_lines), str(main.panels), str(round(main.minutes)),
                     str(round(optional.minutes)), _sittings_text(times[page]["sittings"])))
    return _docutils_table(header, rows)


def _sittings_text(openers: list[str]) -> str:
    if not openers:
        return "1"
    return f"{len(openers) + 1}: " + ", ".join(f"from “{title}”" for title in openers)


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


# Assignments: the planning estimate, from the solution notebooks.

@dataclasses.dataclass
class Solution:
    """What one solution notebook asks a student to write."""

    graded_parts: int = 0
    points: float = 0.0
    lines: int = 0
    pasted_lines: int = 0
    pasted_from: str = ""

    def hours(self) -> tuple[float, float]:
        """The planning estimate, rounded to half hours: at the faster rate, then the slower."""
        slow, fast = SOLUTION_LINES_PER_HOUR
        return _half_hours(self.lines / fast), _half_hours(self.lines / slow)


def _half_hours(hours: float) -> float:
    return max(0.5, math.floor(hours * 2 + 0.5) / 2)


def solution_lines(source: str) -> int:
    """Non-blank lines between ``### BEGIN SOLUTION`` and ``### END SOLUTION``."""
    lines, inside = 0, False
    for line in source.splitlines():
        marker = line.strip()
        if marker.startswith("### BEGIN SOLUTION"):
            inside = True
        elif marker.startswith("### END SOLUTION"):
            inside = False
        elif inside and marker:
            lines += 1
    return lines


def read_solutions(folder: Path) -> dict[str, Solution]:
    """``{"07": Solution, ...}`` for every ``NN_*/NN_*.ipynb`` under ``folder``, in order."""
    solutions, defined_before = {}, {}
    for notebook in sorted(folder.glob("[0-9][0-9]_*/[0-9][0-9]_*.ipynb")):
        number = notebook.name[:2]
        cells = json.loads(notebook.read_text())["cells"]
        solutions[number] = _solution(cells, defined_before)
        defined_before[number] = {name for cell in cells if cell["cell_type"] == "code"
                                  for name in DEFINITION.findall(_source(cell))}
    return solutions


def _solution(cells: list[dict], defined_before: dict[str, set[str]]) -> Solution:
    solution = Solution()
    for cell in cells:
        grader = cell.get("metadata", {}).get("nbgrader", {})
        if grader.get("grade"):
            solution.graded_parts += 1
            solution.points += grader.get("points", 0)
        lines = solution_lines(_source(cell))
        source = _pasted_from(cell, grader, defined_before)
        if lines and source:
            solution.pasted_lines += lines
            solution.pasted_from = source
        else:
            solution.lines += lines
    return solution


def _pasted_from(cell: dict, grader: dict, defined_before: dict[str, set[str]]) -> str:
    """The earlier assignment an ungraded solution cell copies, if it defines only what that one did."""
    names = set(DEFINITION.findall(_source(cell)))
    if grader.get("grade") or not grader.get("solution") or not names:
        return ""
    return next((number for number, defined in defined_before.items() if names <= defined), "")


def _source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


class AssignmentTimesDirective(Directive):
    """The assignments' table; each content line is ``NN name: measured notebook run``."""

    has_content = True

    def run(self):
        env = self.state.document.settings.env
        folder = Path(env.srcdir) / "solutions"
        solutions = read_solutions(folder)
        for notebook in folder.glob("[0-9][0-9]_*/[0-9][0-9]_*.ipynb"):
            env.note_dependency(str(notebook))
        lines = [line for line in self.content if line.strip()]
        missing = [line for line in lines if line[:2] not in solutions]
        if missing:
            raise self.error(f"no solution notebook {folder}/NN_*/NN_*.ipynb for: {missing}")
        rows = [_assignment_row(line, solutions) for line in lines]
        header = ("assignment", "graded parts", "lines of solution code", "notebook run (measured)",
                  "planning estimate")
        return [_docutils_table(header, rows)]


def _assignment_row(line: str, solutions: dict[str, Solution]) -> tuple[str, ...]:
    name, run = (part.strip() for part in line.rsplit(":", 1))
    solution = solutions[name[:2]]
    lines = str(solution.lines)
    if solution.pasted_lines:
        lines += f", plus {solution.pasted_lines} pasted from assignment {solution.pasted_from}"
    fast, slow = solution.hours()
    points = f"{solution.points:g} points"
    return (name, f"{solution.graded_parts} ({points})", lines, run, f"{fast:g}–{slow:g} h")


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
    app.add_directive("assignment-times", AssignmentTimesDirective)
    app.connect("doctree-read", record_reading_time)
    app.connect("doctree-resolved", fill_table)
    app.connect("env-purge-doc", purge)
    app.connect("env-merge-info", merge)
    app.connect("env-get-outdated", reread_tables)
    # env_version: the counts kept between builds changed shape (panels, equations, sittings).
    return {"env_version": 3, "parallel_read_safe": True, "parallel_write_safe": True}
