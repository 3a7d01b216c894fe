"""The book builds with warnings as errors, and every chapter has its assignment."""

import re
import sys
from pathlib import Path

import pytest
import yaml

from course import ASSIGNMENTS, ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
from book_build import BuildFailed, build_from_scratch  # noqa: E402


def toc_chapters() -> list[str]:
    """Chapter ids in the order of the table of contents, e.g. ``01_nadaraya_watson``."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return [Path(ch["file"]).name for part in toc["parts"] for ch in part["chapters"]]


def test_every_chapter_is_one_page_one_assignment_one_autograder_module():
    chapters = [c for c in toc_chapters() if c[:2].isdigit()]
    assert chapters == ASSIGNMENTS, "chapters in _toc.yml and assignments in solutions/ differ"
    for chapter in chapters:
        assert (ROOT / "book" / f"{chapter}.md").exists(), f"book/{chapter}.md is missing"
        assert (ROOT / "exercises" / chapter / f"{chapter}.ipynb").exists(), f"exercises/{chapter} is missing"
        assert (ROOT / "autograder" / f"ch{chapter}.py").exists(), f"autograder/ch{chapter}.py is missing"


@pytest.fixture(scope="module")
def built_book(tmp_path_factory):
    """The HTML of a fresh build, every chapter executed, warnings (and cell errors) fatal."""
    folder = tmp_path_factory.mktemp("book")
    try:
        _, seconds = build_from_scratch(folder)
    except BuildFailed as failure:
        pytest.fail(f"the book does not build:\n{failure}")
    executed = sorted(Path(chapter).stem for chapter in seconds)
    assert executed == sorted(c for c in toc_chapters() if c[:2].isdigit()), "not every chapter was executed"
    return folder / "_build" / "html"


def test_book_builds_and_every_chapter_has_figures(built_book):
    assert (built_book / "index.html").exists()
    for chapter in toc_chapters():
        page = built_book / "book" / f"{chapter}.html"
        assert page.exists(), f"{chapter} was not rendered"
        if chapter[:2].isdigit():
            html = page.read_text()
            assert html.count("<img") >= 3, f"{chapter} has fewer than 3 figures"
            assert "Traceback (most recent call last)" not in html, f"{chapter} shows a traceback"
            _assert_links_its_exercise(built_book, chapter, html)


def _assert_links_its_exercise(built_book, chapter, html):
    """The chapter offers the student notebook (not the solution) for download."""
    links = re.findall(rf'href="\.\./(_downloads/[^"]*/{chapter}\.ipynb)"', html)
    assert links, f"{chapter} does not link its exercise notebook"
    downloaded = (built_book / links[0]).read_bytes()
    assert downloaded == (ROOT / "exercises" / chapter / f"{chapter}.ipynb").read_bytes()
