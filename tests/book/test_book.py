"""The book builds with warnings as errors, and its parts fit together: every chapter has
its assignment, links its exercise page, and only exercise pages launch Colab or Binder."""

import html
import re

import pytest

from course import ASSIGNMENTS, ROOT
from layout import chapters, pages, repository, toc_parts

pytestmark = pytest.mark.book

LAUNCHERS = ("colab.research.google.com", "mybinder.org")


def test_every_chapter_is_one_page_one_assignment_one_autograder_module():
    assert chapters() == ASSIGNMENTS, "chapters in _toc.yml and assignments in solutions/ differ"
    for chapter in chapters():
        assert (ROOT / "book" / f"{chapter}.md").exists(), f"book/{chapter}.md is missing"
        assert (ROOT / "exercises" / chapter / f"{chapter}.ipynb").exists(), f"exercises/{chapter} is missing"
        assert (ROOT / "autograder" / f"ch{chapter}.py").exists(), f"autograder/ch{chapter}.py is missing"


def test_the_exercises_part_lists_every_student_notebook_in_chapter_order():
    assert toc_parts()["Exercises"] == [f"exercises/{c}/{c}" for c in chapters()]


def test_book_builds_and_every_chapter_has_figures(built_book):
    assert (built_book / "index.html").exists()
    for page in pages():
        assert (built_book / f"{page}.html").exists(), f"{page} was not rendered"
    for chapter in chapters():
        page = (built_book / "book" / f"{chapter}.html").read_text()
        assert page.count("<img") >= 3, f"{chapter} has fewer than 3 figures"
        assert "Traceback (most recent call last)" not in page, f"{chapter} shows a traceback"
        assert not any(launcher in page for launcher in LAUNCHERS), f"{chapter} offers a launch button Colab cannot open"
        _assert_links_its_exercise(built_book, chapter, page)


def _assert_links_its_exercise(built_book, chapter, page):
    """The chapter links the exercise page and offers the student notebook (not the solution)."""
    assert f'href="../exercises/{chapter}/{chapter}.html"' in page, f"{chapter} does not link its exercise page"
    links = re.findall(rf'href="\.\./(_downloads/[^"]*/{chapter}\.ipynb)"', page)
    assert links, f"{chapter} does not offer its exercise notebook for download"
    downloaded = (built_book / links[0]).read_bytes()
    assert downloaded == (ROOT / "exercises" / chapter / f"{chapter}.ipynb").read_bytes()


def test_exercise_pages_show_the_released_notebook_with_launch_and_download(built_book):
    url, branch = repository()
    github_repository = url.removeprefix("https://github.com/")
    for chapter in chapters():
        path = f"exercises/{chapter}/{chapter}.ipynb"
        page = html.unescape((built_book / f"exercises/{chapter}/{chapter}.html").read_text())
        text = re.sub(r"<[^>]+>", "", page)  # the code is highlighted, token by token
        assert "raise NotImplementedError()" in text, f"{chapter}: the exercise page does not show the stubs"
        assert 'class="output' not in page, f"{chapter}: the exercise page was executed"
        assert f"https://colab.research.google.com/github/{github_repository}/blob/{branch}/{path}" in page
        assert f"https://mybinder.org/v2/gh/{github_repository}/{branch}?urlpath=lab/tree/{path}" in page
        assert f'href="../../_sources/{path}"' in page, f"{chapter}: no download button"
        assert (built_book / "_sources" / path).read_bytes() == (ROOT / path).read_bytes()


def test_math_is_served_by_the_book_itself(built_book):
    """No page loads a script from the internet, and the pages with math load MathJax from
    the book's own _static folder, so math renders on an offline network too."""
    for page in pages():
        text = (built_book / f"{page}.html").read_text()
        scripts = re.findall(r'<script[^>]*src="([^"]*)"', text)
        assert not [s for s in scripts if "//" in s], f"{page} loads scripts from the internet: {scripts}"
        if page.startswith(("book/0", "exercises/")) or page == "book/notation":
            assert any(s.split("?")[0].endswith("_static/mathjax/tex-chtml.js") for s in scripts), f"{page} does not load MathJax"
    assert (built_book / "_static/mathjax/output/chtml/fonts/woff-v2").is_dir(), "MathJax's fonts are missing"


def test_figures_are_light_svgs_of_a_page_width(built_book):
    """Every chapter figure is an SVG (sharp at any zoom), light enough to keep pages fast,
    and no wider than the 8.5-inch page the course style is drawn for."""
    for chapter in chapters():
        page = (built_book / "book" / f"{chapter}.html").read_text()
        for source in re.findall(r'<img[^>]*src="\.\./(_images/[^"]+)"', page):
            figure = built_book / source
            assert figure.suffix == ".svg", f"{chapter}: {source} is not an SVG"
            assert figure.stat().st_size < 200_000, f"{chapter}: {source} weighs {figure.stat().st_size} bytes"
            width = re.search(r'<svg[^>]*\bwidth="([\d.]+)pt"', figure.read_text())
            assert width and float(width.group(1)) <= 8.5 * 72, f"{chapter}: {source} is wider than the page"


def test_every_image_says_what_it_shows_in_the_pages_language(built_book):
    """Each image of both editions' chapters, data plots and schematic figures alike, has alt text of its own
    (``_ext/figure_alt.py``, the figures' ``:alt:``), in the page's language, and never its file's path."""
    cjk = re.compile(r"[\u4e00-\u9fff]")
    for folder, language in ((built_book / "book", "en"), (built_book / "zh" / "book", "zh")):
        for chapter in chapters():
            page = (folder / f"{chapter}.html").read_text(encoding="utf-8")
            images = re.findall(r"<img[^>]*>", page)
            assert images, f"{language} {chapter}: no image"
            for image in images:
                alt = html.unescape((re.search(r'\balt="([^"]*)"', image) or [None, ""])[1])
                source = re.search(r'\bsrc="([^"]*)"', image)[1]
                where = f"{language} {chapter}: {source}"
                assert len(alt.split()) >= 8 or len(alt) >= 30, f"{where}: alt text {alt!r}"
                assert "_images" not in alt and not alt.endswith((".svg", ".png")), f"{where}: its path as alt text"
                assert bool(cjk.search(alt)) == (language == "zh"), f"{where}: alt text not in the page's language"
