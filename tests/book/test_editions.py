"""The Chinese edition (``zh/``) keeps in step with the English: a page of one without its pair in the other
fails, and so does a pair that differs in what must be shared.

A pair of pages must have the same front matter, the same code cells in the same order (option lines
and code, comments included: both editions run them, and the Chinese build takes their outputs from the
English build's execution), the same glue names, figures, section labels, cross-references and
displayed math, and the same optional parts and exercise sections, in the same places. A pair of
assignment notebooks must have the same cells, ids, metadata (grade ids, points) and code: only the
statements' text differs, so the same code gets the same grade. When an English page changes without its
Chinese page, the message says which cells differ.
"""

from __future__ import annotations

import difflib
import json
import re
from collections import Counter
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ZH = ROOT / "zh"
PAGES = sorted(path.name for path in (ROOT / "book").glob("*.md"))
#: Pages of one edition only: the table of the checks' English message phrases, for Chinese readers.
ONLY_CHINESE_PAGES = {"messages.md"}
ASSIGNMENTS = sorted(path.name for path in (ROOT / "solutions").iterdir() if path.is_dir())

#: What only one edition has, and why: the Chinese book has no instructors' pages, so the reading-time rule
#: its chapters cite is a section of its landing page, and the landing page links the English guide directly.
ONLY_CHINESE_LABELS = {"intro.md": {"reading-time-rule"}}
ONLY_ENGLISH_TARGETS = {"intro.md": {"instructors/index", "reading-time-rule"}}
ONLY_CHINESE_TARGETS = {"intro.md": {"reading-time-rule"}}

CODE_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```\s*$", re.M | re.S)
FRONT_MATTER = re.compile(r"\A---\n.*?\n---\n", re.S)
LABEL = re.compile(r"^\(([^)\s]+)\)=\s*$", re.M)
ROLE = re.compile(r"\{(ref|numref|doc|eq|term|cite|cite:t|cite:p|download|glue|glue:text|glue:figure|glue:math)\}"
                  r"`([^`]*)`")
DIRECTIVE = re.compile(r"^(`{3,}|:{3,})\{([\w:-]+)\}[ \t]*(.*)$", re.M)
OPTION = re.compile(r"^:(name|label|figclass|tags):\s*(.*)$", re.M)
MATH = re.compile(r"^\$\$\n?(.*?)\$\$", re.M | re.S)
HEADING = re.compile(r"^(#{1,6}) (.*)$", re.M)
#: Words in a display (``\text{number of pairs}``), which the Chinese edition translates.
TEXT = re.compile(r"\\text\{[^{}]*\}")
#: A folded cell's own button label, in its options; the Chinese edition shows it translated (zh/_config.yml).
PROMPT = re.compile(r"^\s*code_prompt_show:\s*\"([^\"]*)\"\s*$", re.M)

#: How each edition marks a heading that the reading-time rule treats apart (``_ext/reading_time.py``).
MARKS = {"optional section": ("(optional)", "（选读）"), "exercise": ("Exercise", "作业"),
         "exercises to think about": ("Exercises to think about", "思考题")}
OPTIONAL_BOX = ("Optional", "选读")


def code_cells(text: str) -> list[str]:
    """The code cells of a MyST page, each with its option lines, in order."""
    return [match.group(0) for match in CODE_CELL.finditer(text)]


def shared(text: str) -> dict[str, object]:
    """What the two editions of a page must share, besides its code cells."""
    roles = [(kind, _target(kind, target)) for kind, target in ROLE.findall(text)]
    return {
        "front matter": (FRONT_MATTER.match(text) or [""])[0],
        "labels": Counter(LABEL.findall(text)),
        "cross-references": Counter((kind, target) for kind, target in roles if not kind.startswith("glue")),
        "glue names": Counter(target for kind, target in roles if kind.startswith("glue")),
        "directives": [(name, argument if name in ("figure", "image", "glossary", "bibliography") else "")
                       for _, name, argument in DIRECTIVE.findall(text) if name != "code-cell"],
        "figure and label options": Counter(OPTION.findall(text)),
        "displayed math": [_text_set_apart(math.strip()) for math in MATH.findall(_without_code(text))],
        "headings": [(len(level), _mark(title)) for level, title in HEADING.findall(_without_code(text))],
    }


def _text_set_apart(math: str) -> str:
    """A display with the words of its ``\\text{…}`` left out: each edition writes them in its language."""
    return TEXT.sub(r"\\text{…}", math)


def _target(kind: str, target: str) -> str:
    """A role's target: what is inside ``<...>`` if there is a title; a glue's name without its format."""
    explicit = re.search(r"<([^>]*)>\s*$", target)
    target = explicit.group(1) if explicit else target
    return target.split(":")[0] if kind.startswith("glue") else target


def _without_code(text: str) -> str:
    return CODE_CELL.sub("", re.sub(r"^```(?!\{code-cell\})[^\n]*\n.*?^```\s*$", "", text, flags=re.M | re.S))


def _mark(title: str) -> str:
    """What the reading-time rule sees in a heading: its kind (optional, an exercise section), else nothing."""
    title = title.strip()
    for kind, (english, chinese) in MARKS.items():
        if title.endswith(english) if kind == "optional section" else title in (english, chinese):
            return kind
        if kind == "optional section" and title.endswith(chinese):
            return kind
    return ""


def optional_boxes(text: str) -> int:
    return sum(1 for _, name, argument in DIRECTIVE.findall(text)
               if name == "admonition" and argument.strip().startswith(OPTIONAL_BOX))


def differences(english: str, chinese: str, page: str = "") -> list[str]:
    """What a pair of pages does not share, each as a line for the failure message (none: in step)."""
    problems = []
    ours, theirs = code_cells(english), code_cells(chinese)
    if len(ours) != len(theirs):
        problems.append(f"{len(ours)} code cells in English, {len(theirs)} in Chinese")
    for number, (cell, other) in enumerate(zip(ours, theirs, strict=False), start=1):
        if cell != other:
            diff = "\n".join(difflib.unified_diff(cell.splitlines(), other.splitlines(), "English", "Chinese",
                                                  lineterm="", n=0))
            problems.append(f"code cell {number} differs:\n{diff}")
    english_shared, chinese_shared = shared(english), shared(chinese)
    for what in english_shared:
        mine, yours = english_shared[what], chinese_shared[what]
        if what == "labels":
            yours = yours - Counter(ONLY_CHINESE_LABELS.get(page, ()))
        if what == "cross-references":
            mine = Counter({k: v for k, v in mine.items() if k[1] not in ONLY_ENGLISH_TARGETS.get(page, ())})
            yours = Counter({k: v for k, v in yours.items() if k[1] not in ONLY_CHINESE_TARGETS.get(page, ())})
        if what == "headings" and page in ONLY_CHINESE_LABELS:
            yours = yours[:len(mine)]  # the Chinese landing page's own last section (the reading-time rule)
        if mine != yours:
            problems.append(f"{what} differ: English {_short(mine)}, Chinese {_short(yours)}")
    if optional_boxes(english) != optional_boxes(chinese):
        problems.append(f"optional boxes: {optional_boxes(english)} in English, {optional_boxes(chinese)} in Chinese "
                        f"(a box's title begins with 'Optional' / '选读')")
    return problems


def _short(value: object) -> str:
    if isinstance(value, Counter):
        return str(dict(value))[:600]
    return str(value)[:600]


def test_every_page_has_its_pair():
    assert sorted(path.name for path in (ZH / "book").glob("*.md") if path.name not in ONLY_CHINESE_PAGES) == PAGES


@pytest.mark.parametrize("page", PAGES)
def test_the_two_editions_of_a_page_are_in_step(page):
    problems = differences((ROOT / "book" / page).read_text(encoding="utf-8"),
                           (ZH / "book" / page).read_text(encoding="utf-8"), page)
    assert not problems, f"book/{page} and zh/book/{page} are not in step:\n" + "\n".join(problems)


def test_a_changed_code_cell_is_named():
    """An English chapter changed without its Chinese page fails, and says which cell."""
    english = (ROOT / "book" / "03_masking.md").read_text(encoding="utf-8")
    chinese = (ZH / "book" / "03_masking.md").read_text(encoding="utf-8")
    second = code_cells(english)[1]
    changed = english.replace(second, second.replace("\n```", "\nprint('changed')\n```", 1), 1)
    problems = differences(changed, chinese, "03_masking.md")
    assert len(problems) == 1 and problems[0].startswith("code cell 2 differs:") and "-print('changed')" in problems[0]


def test_a_dropped_label_or_glue_is_named():
    english = (ROOT / "book" / "03_masking.md").read_text(encoding="utf-8")
    chinese = (ZH / "book" / "03_masking.md").read_text(encoding="utf-8")
    label = LABEL.findall(chinese)[0]
    glue = re.search(r"\{glue:text\}`([^`:]+)", chinese).group(1)
    problems = differences(english, chinese.replace(f"({label})=\n", "", 1).replace(f"`{glue}", "`renamed", 1),
                           "03_masking.md")
    assert [p.split(" differ")[0] for p in problems] == ["labels", "glue names"], problems
    assert label in problems[0] and glue in problems[1]


def test_a_displays_words_may_differ_and_nothing_else_in_it():
    """The Chinese edition writes the words of a display's ``\\text{…}`` in Chinese; any other change is named."""
    english = "Text.\n\n$$\n\\text{pairs} = \\binom{n}{2}\n$$\n"
    assert differences(english, english.replace("\\text{pairs}", "\\text{对的数目}")) == []
    problems = differences(english, english.replace("binom{n}{2}", "binom{n}{3}"))
    assert len(problems) == 1 and problems[0].startswith("displayed math differ"), problems


def _chinese_prompts() -> dict[str, str]:
    config = yaml.safe_load((ZH / "_config.yml").read_text(encoding="utf-8"))
    return config["sphinx"]["config"]["course_code_prompts"]


def test_every_folded_cells_own_label_has_its_chinese_label():
    """The pages share a folded cell's options, its label included (the execution cache matches them); the
    Chinese edition shows each label translated (``course_code_prompts``, ``_ext/course_pages.py``)."""
    english = {label for page in PAGES for label in PROMPT.findall((ROOT / "book" / page).read_text(encoding="utf-8"))}
    chinese = _chinese_prompts()
    assert english, "no folded cell with a label of its own: is PROMPT still the options' syntax?"
    assert english == set(chinese), (f"labels without a Chinese label: {sorted(english - set(chinese))}; "
                                     f"Chinese labels of no cell: {sorted(set(chinese) - english)}")
    assert all(re.search(r"[\u4e00-\u9fff]", label) for label in chinese.values()), chinese


#: Full-width punctuation: a closing ``**`` right after it and right before a letter is not right-flanking.
FULL_WIDTH_PUNCTUATION = "：，。；、）」”！？》"


def unclosed_bold(line: str) -> list[str]:
    """The closing ``**`` of ``line`` (the 2nd, 4th, ... of its pairs) that CommonMark does not close: right after
    full-width punctuation and right before a Chinese character or a letter (``**阅读时间：**主线``)."""
    line = re.sub(r"`[^`]*`|\$[^$]*\$", "", line)  # code and math hold asterisks of their own
    closers = [match.start() for number, match in enumerate(re.finditer(r"\*\*", line)) if number % 2 == 1]
    return [line[max(0, at - 12):at + 6] for at in closers
            if at > 0 and line[at - 1] in FULL_WIDTH_PUNCTUATION and line[at + 2:at + 3].isalnum()]


@pytest.mark.parametrize("page", PAGES)
def test_the_chinese_pages_bold_text_closes(page):
    """Bold text ending in full-width punctuation right before a character is left open by CommonMark, and the page
    shows its asterisks: the punctuation goes after the closing ``**`` (``**阅读时间**：主线``)."""
    text = _without_code((ZH / "book" / page).read_text(encoding="utf-8"))
    unclosed = [found for line in text.splitlines() for found in unclosed_bold(line)]
    assert not unclosed, f"zh/book/{page}: bold text left open: {unclosed[:3]}"


def test_an_unclosed_bold_is_found():
    assert unclosed_bold("**阅读时间：**主线约") == ["**阅读时间：**主线约"]
    assert unclosed_bold("**阅读时间**：主线约") == [] and unclosed_bold("提示：**非自主性**提示") == []


def _metadata(cell: dict) -> dict:
    """A cell's metadata; for a markdown cell without the checksum nbgrader keeps of its text (which differs)."""
    if cell["cell_type"] != "markdown" or "nbgrader" not in cell["metadata"]:
        return cell["metadata"]
    return {**cell["metadata"], "nbgrader": {k: v for k, v in cell["metadata"]["nbgrader"].items() if k != "checksum"}}


def _notebook(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("folder", ["solutions", "exercises"])
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_two_editions_of_an_assignment_differ_in_their_statements_only(assignment, folder):
    english = _notebook(ROOT / folder / assignment / f"{assignment}.ipynb")
    chinese = _notebook(ZH / folder / assignment / f"{assignment}.ipynb")
    assert chinese["metadata"] == english["metadata"]
    assert [c["cell_type"] for c in chinese["cells"]] == [c["cell_type"] for c in english["cells"]]
    for number, (mine, yours) in enumerate(zip(english["cells"], chinese["cells"], strict=True), start=1):
        assert yours.get("id") == mine.get("id") and _metadata(yours) == _metadata(mine), \
            f"{folder}/{assignment}: cell {number}'s id or metadata (grade id, points) differ"
        if mine["cell_type"] == "code":
            assert yours == mine, f"{folder}/{assignment}: code cell {number} differs"
        else:
            assert re.search("[\u4e00-\u9fff]", "".join(yours["source"])), \
                f"{folder}/{assignment}: markdown cell {number} is not in Chinese"
    first = "".join(next(c for c in chinese["cells"] if c["cell_type"] == "markdown")["source"])
    assert "英文" in first, "the statement says once that the checks' messages are in English"
