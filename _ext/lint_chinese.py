"""The lint gate of the Chinese edition: spacing and punctuation of its pages and notebooks.

    .venv/bin/python _ext/lint_chinese.py            (run by `make lint`, before the tests)
    .venv/bin/python _ext/lint_chinese.py --fix      (applies every rule in place, then checks)

The prose of ``zh/`` (its pages, ``TERMS.md`` and the markdown cells of its solution notebooks, from which
the released ones are generated) follows the convention of Chinese technical writing that autocorrect
(``autocorrect-py``) enforces: a space between Chinese and Latin letters, digits or code, none beside
full-width punctuation. Three more rules that autocorrect does not know:

* no line break between two Chinese characters inside a paragraph (a browser shows it as a space);
* emphasis on Chinese characters is bold, never italic (italic Chinese typesets poorly);
* a percent sign is attached to its number (``95%``, not ``95 %``).

Code cells, fenced blocks, inline code and math are left alone. Each problem is printed as
``path:line: rule: text``; the exit status is 1 if there is one.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import autocorrect_py

ROOT = Path(__file__).resolve().parents[1]
CHINESE = ROOT / "zh"
HAN = r"\u3400-\u9fff"
#: An italic span (one asterisk or underscore each side, not bold) holding a Chinese character.
ITALIC_HAN = re.compile(rf"(?<![*A-Za-z0-9])\*(?![*\s])([^*\n]*[{HAN}][^*\n]*?)(?<![*\s])\*(?![*A-Za-z0-9])"
                        rf"|(?<![_A-Za-z0-9])_(?![_\s])([^_\n]*[{HAN}][^_\n]*?)(?<![_\s])_(?![_A-Za-z0-9])")
PERCENT = re.compile(r"\d \%")
#: Inline code and inline math, whose contents are not prose.
INLINE = re.compile(r"`[^`\n]*`|\$[^$\n]*\$")


@dataclass(frozen=True)
class Problem:
    path: Path
    line: int
    rule: str
    text: str

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}: {self.rule}: {self.text.strip()[:100]}"


def prose_lines(text: str) -> list[tuple[int, str]]:
    """``[(line number, line)]`` of the prose of a markdown text: fenced blocks (code cells included) and
    display math (``$$ … $$``) left out, inline code and inline math blanked."""
    lines, fenced, display = [], None, False
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        fence = re.match(r"^(`{3,}|~{3,}|:{3,})", stripped)
        if fenced is None and fence:
            fenced = fence.group(1)
            continue
        if fenced is not None:
            if stripped.startswith(fenced[0] * len(fenced)) and stripped.strip(fenced[0]) == "":
                fenced = None
            continue
        if stripped.startswith("$$"):
            display = not (display or stripped.endswith("$$") and len(stripped) > 2)
            continue
        if display:
            continue
        lines.append((number, INLINE.sub(" ", line)))
    return lines


def check_prose(path: Path, text: str, offset: int = 0) -> list[Problem]:
    """The problems of one markdown text; ``offset`` is added to its line numbers (a notebook cell's)."""
    found = [Problem(path, offset + result.line, "spacing (autocorrect)", result.old)
             for result in autocorrect_py.lint_for(text, "page.md").lines]
    lines = prose_lines(text)
    for (number, line), (following, next_line) in zip(lines, lines[1:], strict=False):
        if following == number + 1 and re.search(rf"[{HAN}]$", line.rstrip("\n")) and re.match(rf"^[{HAN}]",
                                                                                             next_line):
            found.append(Problem(path, offset + number, "a line break between two Chinese characters", line))
    for number, line in lines:
        if ITALIC_HAN.search(line):
            found.append(Problem(path, offset + number, "italic Chinese (use bold)", line))
        if PERCENT.search(line):
            found.append(Problem(path, offset + number, "a space before a percent sign", line))
    return found


def notebook_cells(path: Path) -> list[tuple[int, str]]:
    """``[(cell index, source)]`` of a notebook's markdown cells."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [(index, "".join(cell["source"])) for index, cell in enumerate(cells) if cell["cell_type"] == "markdown"]


def pages() -> list[Path]:
    return sorted((CHINESE / "book").rglob("*.md")) + [CHINESE / "TERMS.md"]


def notebooks() -> list[Path]:
    return sorted((CHINESE / "solutions").glob("*/*.ipynb"))


def lint() -> list[Problem]:
    problems = [p for page in pages() for p in check_prose(page, page.read_text(encoding="utf-8"))]
    for notebook in notebooks():
        for index, source in notebook_cells(notebook):
            problems += [Problem(notebook, index, f"markdown cell {index}: {p.rule}", p.text)
                         for p in check_prose(notebook, source)]
    return problems


def fixed(text: str) -> str:
    """``text`` with every rule applied: autocorrect's spacing, paragraphs of Chinese joined across their line
    breaks, italic Chinese made bold, percent signs attached (code and math untouched)."""
    text = autocorrect_py.format_for(text, "page.md")
    prose = dict(prose_lines(text))
    lines = text.split("\n")
    for index in range(len(lines)):
        if index + 1 not in prose:
            continue
        lines[index] = _outside_code(lines[index], lambda part: PERCENT_FIX.sub(r"\1%", ITALIC_HAN.sub(_bold, part)))
    joined: list[str] = []
    for number, line in enumerate(lines, start=1):
        # prose that goes on, Chinese to Chinese, from the prose line before: one line, as a browser shows it
        if joined and number - 1 in prose and number in prose and re.search(rf"[{HAN}]$", joined[-1]) \
                and re.match(rf"^[{HAN}]", line):
            joined[-1] += line
        else:
            joined.append(line)
    return "\n".join(joined)


PERCENT_FIX = re.compile(r"(\d) %")


def _bold(match: re.Match) -> str:
    return f"**{match.group(1) or match.group(2)}**"


def _outside_code(line: str, change) -> str:
    """``line`` with ``change`` applied to its parts outside inline code and inline math."""
    parts, last = [], 0
    for match in INLINE.finditer(line):
        parts += [change(line[last:match.start()]), match.group(0)]
        last = match.end()
    return "".join(parts + [change(line[last:])])


def fix() -> None:
    """Apply every rule to the pages and the notebooks' markdown cells."""
    for page in pages():
        page.write_text(fixed(page.read_text(encoding="utf-8")), encoding="utf-8")
    for notebook in notebooks():
        data = json.loads(notebook.read_text(encoding="utf-8"))
        for cell in data["cells"]:
            if cell["cell_type"] == "markdown":
                cell["source"] = fixed("".join(cell["source"])).splitlines(keepends=True)
        notebook.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fix", action="store_true", help="apply every rule in place first")
    if parser.parse_args().fix:
        fix()
    problems = lint()
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} problems in the Chinese edition's prose (`python _ext/{Path(__file__).name} --fix` "
              "fixes them)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
