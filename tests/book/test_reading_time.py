"""The reading-time rule (``_ext/reading_time.py``) on small hand-built pages, on the chapters'
sources, on small solution notebooks, and on the built book.

The hand-built pages are docutils trees shaped as myst-nb renders a chapter: sections,
paragraphs, display math, admonitions, and code cells as containers whose ``nb_element``
says what they hold. Each test builds a page whose time is known from the rule's constants
and checks the count. The folded-code rule is checked on every chapter's source; the
assignments' planning estimates on notebooks written here and on the course's solutions; the
last test reads the built book.
"""

from __future__ import annotations

import json
import re
import sys

import pytest
from docutils import nodes

from course import ROOT
from layout import chapters

sys.path.insert(0, str(ROOT / "_ext"))
import reading_time
from reading_time import MAIN, OPTIONAL, count

CODE_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```", re.S | re.M)


def words(n: int) -> nodes.paragraph:
    return nodes.paragraph("", " ".join(["word"] * n))


def section(title: str, *children: nodes.Node) -> nodes.section:
    return nodes.section("", nodes.title("", title), *children)


def admonition(title: str, *children: nodes.Node) -> nodes.admonition:
    return nodes.admonition("", nodes.title("", title), *children)


def cell(code_lines: int, *, printed_lines: int = 0, figures: int = 0, hide_mode: str | None = None,
         code: str = "x = 1") -> nodes.container:
    """A code cell as myst-nb renders it: a source part and, if it printed or drew, an output part."""
    source = nodes.container("", nodes.literal_block("", "\n".join([code, ""] * code_lines)),
                             nb_element="cell_code_source")
    parts = [source]
    if printed_lines or figures:
        output = nodes.container("", nb_element="cell_code_output")
        if printed_lines:
            output += nodes.literal_block("", "\n".join(["0.25"] * printed_lines))
        output += [nodes.image(uri="figure.svg") for _ in range(figures)]
        parts.append(output)
    container = nodes.container("", *parts, nb_element="cell_code")
    if hide_mode:
        container["hide_mode"] = hide_mode
    return container


def drawn(axes: int) -> nodes.container:
    """A figure as myst-nb renders it: its text form ("with 3 Axes") beside the image shown."""
    figure = nodes.container("", nodes.literal_block("", f"<Figure size 640x480 with {axes} Axes>"),
                             nb_element="mime_bundle")
    figure[0]["mime_type"] = "text/plain"
    figure += nodes.container("", nodes.image(uri="figure.svg"), mime_type="image/svg+xml")
    drawing = cell(3)
    drawing += nodes.container("", figure, nb_element="cell_code_output")
    return drawing


def page(*children: nodes.Node) -> nodes.document:
    document = nodes.document(None, None)
    document += section("A chapter", *children)
    return document


def minutes(load) -> float:
    return round(load.minutes, 6)


def test_prose_is_read_at_the_rules_words_a_minute_titles_included():
    loads = count(page(words(reading_time.WORDS_PER_MINUTE * 2 - 2)))  # the title is two words
    assert (loads[MAIN].words, minutes(loads[MAIN])) == (2 * reading_time.WORDS_PER_MINUTE, 2)
    assert minutes(loads[OPTIONAL]) == 0


def test_a_word_is_what_holds_a_letter_or_a_digit_in_prose_and_in_inline_math():
    formula = nodes.math("", r"Q = X W_q")
    loads = count(page(nodes.paragraph("", "", nodes.Text("so ( "), formula, nodes.Text(" ), 2 -"))))
    assert loads[MAIN].words == 2 + 1 + 3 + 1  # the title, "so", Q, X and W_q, and "2"; not "(", "=", "),", "-"


def test_a_displayed_equation_is_a_unit_of_its_own_not_words():
    display = nodes.math_block("", r"S = \frac{Q K^\top}{\sqrt{d}} .")
    load = count(page(display))[MAIN]
    assert (load.words, load.equations) == (2, 1)
    assert load.minutes == pytest.approx(reading_time.MINUTES_PER_EQUATION + 2 / reading_time.WORDS_PER_MINUTE)


def test_each_row_of_an_aligned_display_is_an_equation_and_rows_of_cases_are_not():
    aligned = r"\begin{aligned} Y &= X + A(X), \\ Z &= Y + F(Y). \end{aligned}"
    cases = r"\kappa(u) = \begin{cases} 1 & |u| \le 1, \\ 0 & \text{otherwise} \end{cases}"
    assert reading_time.equations(aligned) == 2
    assert reading_time.equations(cases) == 1
    assert reading_time.equations(aligned + r" \\") == 2  # a trailing row break opens no row


def test_shown_code_and_printed_output_count_by_lines_and_figures_by_the_panel():
    loads = count(page(cell(20, printed_lines=10, figures=2)))
    assert (loads[MAIN].code_lines, loads[MAIN].printed_lines, loads[MAIN].panels) == (20, 10, 2)
    expected = 30 / reading_time.LINES_PER_MINUTE + 2 * reading_time.MINUTES_PER_PANEL
    assert loads[MAIN].minutes == pytest.approx(expected + 2 / reading_time.WORDS_PER_MINUTE)


def test_a_drawn_figure_counts_its_panels_not_its_text_version():
    load = count(page(drawn(axes=9)))[MAIN]
    assert (load.code_lines, load.printed_lines, load.panels) == (3, 0, 9)
    assert count(page(drawn(axes=1)))[MAIN].panels == 1


def test_a_folded_cell_costs_what_it_shows_not_its_code():
    folded = count(page(cell(40, printed_lines=2, figures=1, hide_mode="input")))[MAIN]
    assert (folded.code_lines, folded.printed_lines, folded.panels) == (0, 2, 1)
    everything_folded = count(page(cell(40, figures=1, hide_mode="all")))[MAIN]
    assert (everything_folded.code_lines, everything_folded.panels) == (0, 0)


def test_a_folded_cell_may_define_drawing_helpers_only():
    document = page(cell(1, hide_mode="input", code="def attention_maps(model, tokens):"),
                    cell(1, hide_mode="all", code="class Sorter(nn.Module):"),
                    cell(1, hide_mode="input", code="def draw_block(ax, boxes):"),
                    cell(1, code="def shown_and_counted(x):"),
                    cell(1, hide_mode="input", code="    def forward(self, x):  # not at the top level"))
    assert [name for name, _ in reading_time.folded_definitions(document)] == ["attention_maps", "Sorter"]


@pytest.mark.parametrize("chapter", chapters())
def test_no_chapter_folds_code_that_its_argument_rests_on(chapter):
    text = (ROOT / "book" / f"{chapter}.md").read_text()
    for match in CODE_CELL.finditer(text):
        body = match.group(1)
        options = body.split("\n---\n", 1)[0] if body.startswith("---\n") else body.split("\n\n", 1)[0]
        if re.search(r"\bhide-(input|cell)\b", options):
            line = text[:match.start()].count("\n") + 1
            assert not reading_time.defined_names(body), (
                f"book/{chapter}.md:{line}: a folded cell defines {reading_time.defined_names(body)}; show it")


def test_optional_boxes_and_sections_are_counted_apart_and_nested_parts_follow_them():
    loads = count(page(
        words(10),
        admonition("Optional: a detour", words(30), cell(5)),
        admonition("Note", words(7)),
        section("Measured: time (optional)", words(20), section("A subsection", words(40))),
    ))
    assert loads[MAIN].words == 2 + 10 + 1 + 7
    assert loads[OPTIONAL].words == 3 + 30 + 3 + 20 + 2 + 40
    assert (loads[MAIN].code_lines, loads[OPTIONAL].code_lines) == (0, 5)


def test_a_cell_tagged_optional_counts_with_the_optional_parts():
    box_code = cell(8, printed_lines=2)
    box_code["cell_metadata"] = {"tags": [reading_time.OPTIONAL_TAG]}
    loads = count(page(admonition("Optional: a detour", words(5)), box_code, cell(3)))
    assert (loads[MAIN].code_lines, loads[OPTIONAL].code_lines, loads[OPTIONAL].printed_lines) == (3, 8, 2)


def test_the_exercises_are_not_reading():
    loads = count(page(words(10), section("Exercise", words(50), cell(9)),
                       section("Exercises to think about", words(500))))
    assert (loads[MAIN].words, loads[MAIN].code_lines, loads[OPTIONAL].words) == (12, 0, 0)


def test_chinese_prose_is_read_by_the_character_and_its_english_names_by_the_word():
    text = "注意力汇聚" * 34 + "的输出 PyTorch 与 Q K"  # 170 + 4 characters, and 3 words
    load = count(page(nodes.paragraph("", text)))[MAIN]
    assert (load.characters, load.words) == (reading_time.CHARACTERS_PER_MINUTE + 4, 2 + 3)  # the title's 2 words
    assert load.minutes == pytest.approx((reading_time.CHARACTERS_PER_MINUTE + 4) / reading_time.CHARACTERS_PER_MINUTE
                                         + 5 / reading_time.WORDS_PER_MINUTE)


def test_the_chinese_editions_optional_parts_and_exercises_are_told_apart_as_the_englishs():
    loads = count(page(
        nodes.paragraph("", "正文" * 10),
        admonition("选读：一段旁支", nodes.paragraph("", "选读" * 15)),
        section("计时的细节（选读）", nodes.paragraph("", "细节" * 20)),
        section("作业", nodes.paragraph("", "作业" * 50), cell(9)),
        section("思考题", nodes.paragraph("", "思考" * 100)),
    ))
    assert (loads[MAIN].characters, loads[MAIN].code_lines) == (20, 0)
    assert loads[OPTIONAL].characters == len("选读：一段旁支") - 1 + 30 + len("计时的细节选读") + 40


def test_a_page_is_counted_once_its_placeholders_are_its_numbers():
    placeholder = reading_time.ReadingTimePlaceholder("", "", path=MAIN)
    document = page(nodes.paragraph("", "", nodes.Text("about "), placeholder), words(178))
    assert count(document)[MAIN].words == 2 + 1 + 178  # the placeholder itself is not read


def minutes_of_code(minutes_: int) -> nodes.container:
    return cell(minutes_ * reading_time.LINES_PER_MINUTE)


def test_a_main_path_over_one_sitting_is_split_at_the_section_nearest_its_middle():
    sitting = reading_time.SITTING_MINUTES
    document = page(section("First", minutes_of_code(sitting // 3)),
                    section("Second", minutes_of_code(sitting * 5 // 6)),
                    section("Aside (optional)", minutes_of_code(sitting)),
                    section("Third", minutes_of_code(sitting // 2)),
                    section("Exercise", minutes_of_code(sitting)))
    parts = reading_time.section_minutes(document)
    assert [title for title, _ in parts] == ["First", "Second", "Aside (optional)", "Third", "Exercise"]
    assert parts[2][1] == parts[-1][1] == 0  # neither is on the main path
    # Two sittings, the middle at 5/6 of one: "Third" starts at 7/6, nearer than "Second" at
    # 1/3; the optional section starts there too, but holds nothing of the main path.
    assert reading_time.sittings(parts) == ["Third"]


def test_a_main_path_within_one_sitting_is_read_at_once():
    document = page(section("First", minutes_of_code(20)), section("Second", minutes_of_code(20)))
    assert reading_time.sittings(reading_time.section_minutes(document)) == []


def notebook(*cells: tuple[str, dict]) -> str:
    return json.dumps({"cells": [{"cell_type": "code", "source": source, "metadata": {"nbgrader": grader}}
                                 for source, grader in cells]})


SOLVED = {"solution": True, "grade": False}
GRADED = {"grade": True, "points": 1.5}


def test_solution_lines_are_the_non_blank_lines_between_the_markers():
    source = "def f(x):\n    ### BEGIN SOLUTION\n    y = x + 1\n\n    return y\n    ### END SOLUTION\nz = 2\n"
    assert reading_time.solution_lines(source) == 2


def test_an_assignment_is_estimated_from_its_lines_and_pasted_code_is_set_apart(tmp_path):
    first, second = tmp_path / "01_first", tmp_path / "02_second"
    first.mkdir()
    second.mkdir()
    body = "### BEGIN SOLUTION\n" + "x = 1\n" * 30 + "### END SOLUTION\n"
    (first / "01_first.ipynb").write_text(notebook(("def split(x):\n" + body, SOLVED), ("check()", GRADED)))
    (second / "02_second.ipynb").write_text(notebook(("def split(x):\n" + body, SOLVED),
                                                     ("def block(x):\n" + body * 3, SOLVED),
                                                     ("check()", GRADED), ("check()", GRADED)))
    solutions = reading_time.read_solutions(tmp_path)
    assert (solutions["01"].lines, solutions["01"].pasted_lines, solutions["01"].graded_parts) == (30, 0, 1)
    assert (solutions["02"].lines, solutions["02"].pasted_lines, solutions["02"].pasted_from) == (90, 30, "01")
    assert (solutions["02"].graded_parts, solutions["02"].points) == (2, 3.0)
    slow, fast = reading_time.SOLUTION_LINES_PER_HOUR
    assert solutions["02"].hours() == (round(2 * 90 / fast) / 2, round(2 * 90 / slow) / 2)


def test_every_solution_notebook_has_a_row_in_the_syllabus():
    syllabus = (ROOT / "book" / "instructors" / "syllabus.md").read_text()
    directive = re.search(r"```\{assignment-times\}\n(.*?)```", syllabus, re.S)
    assert directive, "the syllabus has no {assignment-times} table"
    listed = [line[:2] for line in directive.group(1).splitlines() if line.strip()]
    assert listed == sorted(reading_time.read_solutions(ROOT / "solutions"))


@pytest.mark.slow
def test_every_chapter_states_its_counted_time_and_the_syllabus_plans_by_the_rule(built_book):
    syllabus = (built_book / "book" / "instructors" / "syllabus.html").read_text()
    table = syllabus[syllabus.index('id="reading-time-rule"'):]
    for chapter in chapters():
        first_line = re.search(r"Reading time:</strong> about (\d+) minutes for the main path; the optional "
                               r"parts add about (\d+)", (built_book / "book" / f"{chapter}.html").read_text())
        assert first_line, f"{chapter}'s first line does not give its counted reading time"
        row = re.search(rf'href="\.\./{chapter}\.html".*?</tr>', table, re.S)
        assert row, f"the syllabus's table has no row for {chapter}"
        cells = re.findall(r"<p>(.*?)</p>", row.group(0), re.S)
        assert cells[-3:-1] == list(first_line.groups()), f"{chapter}: the table and the first line disagree"
        main, sittings = int(first_line.group(1)), int(cells[-1].split(":")[0])
        assert (sittings > 1) == (main > reading_time.SITTING_MINUTES) or main == reading_time.SITTING_MINUTES, (
            f"{chapter}: {main} minutes planned in {sittings} sitting(s)")
    for number, solution in reading_time.read_solutions(ROOT / "solutions").items():
        row = re.search(rf"<p>{number} [^<]*</p>.*?</tr>", syllabus, re.S)
        fast, slow = solution.hours()
        assert row and f"<p>{fast:g}–{slow:g} h</p>" in row.group(0), (
            f"assignment {number}: the syllabus does not give {fast:g}–{slow:g} h")


def test_every_chinese_chapter_states_its_own_counted_time(built_book):
    """The Chinese edition counts its own pages (characters, not words): each first line gives two numbers."""
    for chapter in chapters():
        page = (built_book / "zh" / "book" / f"{chapter}.html").read_text(encoding="utf-8")
        first_line = re.search(r"阅读时间.{0,12}主线约需? ?(\d+) ?分钟.{0,6}选读部分另需约 ?(\d+)", page, re.S)
        assert first_line, f"zh/book/{chapter}'s first line does not give its counted reading time"
