"""The reading-time rule (``_ext/reading_time.py``) on small hand-built pages, and on the book.

The hand-built pages are docutils trees shaped as myst-nb renders a chapter: sections,
paragraphs, admonitions, and code cells as containers whose ``nb_element`` says what they
hold. Each test builds a page whose time is known from the rule's constants and checks the
count; the last test reads the built book.
"""

from __future__ import annotations

import re
import sys

import pytest
from docutils import nodes

from course import ROOT
from layout import chapters

sys.path.insert(0, str(ROOT / "_ext"))
import reading_time  # noqa: E402
from reading_time import MAIN, OPTIONAL, count  # noqa: E402

MAIN_PATH_LIMIT_MINUTES = 35


def words(n: int) -> nodes.paragraph:
    return nodes.paragraph("", " ".join(["word"] * n))


def section(title: str, *children: nodes.Node) -> nodes.section:
    return nodes.section("", nodes.title("", title), *children)


def admonition(title: str, *children: nodes.Node) -> nodes.admonition:
    return nodes.admonition("", nodes.title("", title), *children)


def cell(code_lines: int, *, printed_lines: int = 0, figures: int = 0, hide_mode: str | None = None) -> nodes.container:
    """A code cell as myst-nb renders it: a source part and, if it printed or drew, an output part."""
    source = nodes.container("", nodes.literal_block("", "\n".join(["x = 1", ""] * code_lines)),
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


def test_a_word_is_what_holds_a_letter_or_a_digit_in_prose_and_in_math():
    formula = nodes.math("", r"Q = X W_q")
    loads = count(page(nodes.paragraph("", "", nodes.Text("so ( "), formula, nodes.Text(" ), 2 -"))))
    assert loads[MAIN].words == 2 + 1 + 3 + 1  # the title, "so", Q, X and W_q, and "2"; not "(", "=", "),", "-"


def test_shown_code_and_printed_output_count_by_lines_and_figures_by_the_figure():
    loads = count(page(cell(20, printed_lines=10, figures=2)))
    assert (loads[MAIN].code_lines, loads[MAIN].printed_lines, loads[MAIN].figures) == (20, 10, 2)
    expected = 30 / reading_time.LINES_PER_MINUTE + 2 * reading_time.MINUTES_PER_FIGURE
    assert loads[MAIN].minutes == pytest.approx(expected + 2 / reading_time.WORDS_PER_MINUTE)


def test_a_figure_with_a_text_version_is_one_figure_not_a_printed_line():
    figure = nodes.container("", nodes.literal_block("", "<Figure size 640x480 with 1 Axes>"),
                             nb_element="mime_bundle")
    figure[0]["mime_type"] = "text/plain"
    figure += nodes.container("", nodes.image(uri="figure.svg"), mime_type="image/svg+xml")
    drawn = cell(3)
    drawn += nodes.container("", figure, nb_element="cell_code_output")
    load = count(page(drawn))[MAIN]
    assert (load.code_lines, load.printed_lines, load.figures) == (3, 0, 1)


def test_a_folded_cell_costs_what_it_shows_not_its_code():
    folded = count(page(cell(40, figures=1, hide_mode="input")))[MAIN]
    assert (folded.code_lines, folded.figures) == (0, 1)
    everything_folded = count(page(cell(40, figures=1, hide_mode="all")))[MAIN]
    assert (everything_folded.code_lines, everything_folded.figures) == (0, 0)


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


def test_the_exercises_are_not_reading():
    loads = count(page(words(10), section("Exercise", words(50), cell(9)),
                       section("Exercises to think about", words(500))))
    assert (loads[MAIN].words, loads[MAIN].code_lines, loads[OPTIONAL].words) == (12, 0, 0)


def test_a_page_is_counted_once_its_placeholders_are_its_numbers():
    placeholder = reading_time.ReadingTimePlaceholder("", "", path=MAIN)
    document = page(nodes.paragraph("", "", nodes.Text("about "), placeholder), words(178))
    assert count(document)[MAIN].words == 2 + 1 + 178  # the placeholder itself is not read


@pytest.mark.slow
def test_every_chapter_states_its_counted_time_and_its_main_path_fits_one_sitting(built_book):
    syllabus = (built_book / "book" / "instructors" / "syllabus.html").read_text()
    table = syllabus[syllabus.index('id="reading-time-rule"'):]
    for chapter in chapters():
        first_line = re.search(r"Reading time:</strong> about (\d+) minutes for the main path; the optional "
                               r"parts add about (\d+)", (built_book / "book" / f"{chapter}.html").read_text())
        assert first_line, f"{chapter}'s first line does not give its counted reading time"
        main, optional = map(int, first_line.groups())
        assert 10 <= main <= MAIN_PATH_LIMIT_MINUTES, f"{chapter}: main path {main} min by the rule"
        row = re.search(rf'href="\.\./{chapter}\.html".*?</tr>', table, re.S)
        assert row, f"the syllabus's table has no row for {chapter}"
        assert re.findall(r"<p>(\d+)</p>", row.group(0))[-2:] == [str(main), str(optional)]
