"""The book's figures: the schematic ones drawn from their source in both editions, placed, numbered, described;
and an alt text for every image a chapter's code draws, in each edition's language.

The schematic figures are drawn by ``book/figures/schematics.py`` from its code and ``labels.yml``; the
build draws again any whose source changed (``_ext/schematic_figures.py``), and these tests fail while a
figure in the repository is older than its source, when the two editions' figures differ in anything but
their labels, or when a figure is placed without alt text, caption or a reference from the prose.
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from course import ROOT

sys.path.insert(0, str(ROOT / "_ext"))
from schematic_figures import schematics  # the drawing module, loaded as the build loads it

BOOKS = {"en": ROOT / "book", "zh": ROOT / "zh" / "book"}
CHAPTERS = sorted(p.stem for p in (ROOT / "book").glob("0[1-9]_*.md"))
CJK = re.compile(r"[\u4e00-\u9fff]")
# A schematic figure as a page places it: the directive, its options, its caption.
FIGURE = re.compile(r"^```\{figure\} figures/(?P<file>[\w-]+)\.svg\n(?P<options>(?::[\w-]+:[^\n]*\n)+)\n"
                    r"(?P<caption>[\s\S]*?)\n```", re.MULTILINE)


def placed(language: str, chapter: str) -> list[dict[str, str]]:
    """The schematic figures a page places, in order: file, options (name, alt, …) and caption."""
    text = (BOOKS[language] / f"{chapter}.md").read_text(encoding="utf-8")
    found = []
    for match in FIGURE.finditer(text):
        options = dict(re.findall(r"^:([\w-]+): ?(.*)$", match.group("options"), re.MULTILINE))
        found.append({"file": match.group("file"), **options, "caption": match.group("caption").strip(),
                      "page": text})
    return found


def shapes(path: Path) -> bytes:
    """An SVG drawn by matplotlib without its text (each ``<g id="text_…">``): what both editions must share."""
    root = ET.fromstring(path.read_text(encoding="utf-8"))

    def strip(node):
        for child in list(node):
            if (child.get("id") or "").startswith("text_"):
                node.remove(child)
            else:
                strip(child)

    strip(root)
    return ET.tostring(root)


@pytest.mark.parametrize("language", BOOKS)
def test_every_figure_is_drawn_from_its_current_source(language):
    assert schematics().stale(language) == [], (
        "a figure's source changed and its file was not drawn again: run .venv/bin/python book/figures/schematics.py")


def test_a_changed_label_makes_its_figure_stale(tmp_path, monkeypatch):
    module = schematics()
    table = module.labels()
    table["three-masks"]["causal"]["en"] += " (changed)"
    monkeypatch.setattr(module, "labels", lambda: table)
    assert module.stale("en") == ["three-masks"] and module.stale("zh") == ["three-masks"]


def test_the_editions_figures_differ_only_in_their_labels():
    module = schematics()
    for name in module.FIGURES:
        english, chinese = (module.FOLDERS[language] / f"{name}.svg" for language in BOOKS)
        assert english.read_bytes() != chinese.read_bytes(), f"{name}: the Chinese figure has the English labels"
        assert shapes(english) == shapes(chinese), f"{name}: the two editions' figures differ beyond their labels"
        assert "<text" not in english.read_text() + chinese.read_text(), f"{name}: text not drawn as outlines"


def test_every_label_has_both_languages():
    for figure, entries in schematics().labels().items():
        for key, words in entries.items():
            assert set(words) == set(BOOKS) and all(words.values()), f"{figure}/{key}: {words}"
            assert CJK.search(words["zh"]) and not CJK.search(words["en"]), f"{figure}/{key}: {words}"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_each_chapter_places_its_schematic_figures_alike_in_both_editions(chapter):
    english, chinese = placed("en", chapter), placed("zh", chapter)
    assert english, f"{chapter} has no schematic figure"
    assert [(f["file"], f["name"]) for f in english] == [(f["file"], f["name"]) for f in chinese], \
        "the two editions place different figures, or in another order"
    for language, figures in (("en", english), ("zh", chinese)):
        for figure in figures:
            where = f"{language} {chapter} {figure['file']}"
            assert figure["name"].startswith(f"fig-ch{chapter[:2]}-"), where
            assert figure.get("alt") and figure.get("caption"), f"{where}: no alt text or no caption"
            assert bool(CJK.search(figure["alt"])) == (language == "zh"), f"{where}: alt text not in the page's language"
            assert "figures/" not in figure["alt"] and ".svg" not in figure["alt"], where
            assert f"{{numref}}`{figure['name']}`" in figure["page"], f"{where}: the prose never refers to it"


def test_every_schematic_figure_is_placed_once_per_edition():
    names = list(schematics().FIGURES)
    for language in BOOKS:
        files = [figure["file"] for chapter in CHAPTERS for figure in placed(language, chapter)]
        assert sorted(files) == sorted(names), f"{language}: placed {files}, drawn {names}"


def test_the_alt_tables_describe_the_same_images_in_each_language():
    tables = {language: yaml.safe_load((BOOKS[language] / "figures" / "alt.yml").read_text(encoding="utf-8"))
              for language in BOOKS}
    assert set(tables["en"]) == set(tables["zh"]) == {f"book/{chapter}" for chapter in CHAPTERS}
    for page, texts in tables["en"].items():
        chinese = tables["zh"][page]
        assert len(texts) == len(chinese), f"{page}: {len(texts)} English alt texts, {len(chinese)} Chinese"
        for english, zh in zip(texts, chinese, strict=True):
            assert english.strip() and not CJK.search(english), f"{page}: {english!r}"
            assert CJK.search(zh), f"{page}: {zh!r} is not Chinese"
            assert not re.search(r"_images/|\.svg|\.png", english + zh), f"{page}: a file name as alt text"
