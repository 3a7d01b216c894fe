"""The Chinese edition's table of the checks' English message phrases (``zh/messages.yml``, rendered by
``_ext/messages_page.py`` on ``zh/book/messages.md``): taken from what the checks print, and linked from every
Chinese notebook."""

from __future__ import annotations

import json
import sys

from course import ROOT

sys.path.insert(0, str(ROOT / "_ext"))
import messages_page

PAGE = "book/messages.md"


def test_the_table_holds_twenty_to_thirty_phrases_each_with_its_chinese():
    table = messages_page.phrases()
    assert 20 <= len(table) <= 30, len(table)
    assert all(chinese.strip() and chinese != english for english, chinese in table.items())


def test_every_phrase_is_one_the_checks_print():
    assert messages_page.drifted(messages_page.phrases(), messages_page.package_source()) == []


def test_a_phrase_the_checks_no_longer_print_is_named():
    table = {"wrong values": "数值不对", "a phrase no check prints": "没有哪个检查会打印的说法"}
    assert messages_page.drifted(table, messages_page.package_source()) == ["a phrase no check prints"]


def test_the_page_shows_the_table_and_every_chinese_notebook_links_it():
    assert "```{check-messages}" in (ROOT / "zh" / PAGE).read_text(encoding="utf-8")
    for notebook in sorted((ROOT / "zh" / "solutions").glob("*/*.ipynb")):
        first = "".join(json.loads(notebook.read_text(encoding="utf-8"))["cells"][0]["source"])
        assert "../../book/messages.md" in first, f"{notebook.relative_to(ROOT)} does not link {PAGE}"
