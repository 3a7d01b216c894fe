"""What the course says about itself stays true. Fast: these tests only parse files.

* The publishing workflow (``.github/workflows/book.yml``) runs the README's book command,
  uploads the folder that command writes and deploys it with GitHub's Pages actions.
* Every "chapter N" (also "chapters 1-5", "chapters 2 and 3") in the book, the solution
  notebooks' text and the README names a chapter of ``_toc.yml``.
* The landing page (``book/intro.md``) presents exactly the chapters of the table of
  contents, under their titles, and every topic it says a chapter covers is a section of
  that chapter; the glossary's terms are the chapters' terms, and what it says a chapter
  does, that chapter does.
* No dated "PyTorch 2.x" wording: the pinned version lives in requirements.txt and
  constraints.txt only.

A failure names the file and line of the statement, so it can be fixed there (or, where a
statement changed on purpose, in the tables of this file that say what backs it).
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from pathlib import Path

import pytest
import yaml

from course import ROOT
from layout import chapters, pages, toc_parts

WORKFLOW = ROOT / ".github" / "workflows" / "book.yml"


# --------------------------------------------------------------------------- helpers


def line_of(text: str, offset: int) -> int:
    """The 1-based line of character ``offset`` in ``text``."""
    return text.count("\n", 0, offset) + 1


def relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def without_code(text: str) -> str:
    """``text`` with the lines of fenced blocks (```, ````, ~~~) blanked, so that line
    numbers stay right and a ``# comment`` in a code cell is not a heading."""
    lines, fence = text.split("\n"), None
    for i, line in enumerate(lines):
        opening = re.match(r"\s*(`{3,}|~{3,})", line)
        if fence is None and opening:
            fence = opening.group(1)
            lines[i] = ""
        elif fence is not None:
            if re.match(rf"\s*{fence[0]}{{{len(fence)},}}\s*$", line):
                fence = None
            lines[i] = ""
    return "\n".join(lines)


def body_text(text: str) -> str:
    """``text`` without code and headings (line numbers kept): the prose a reader reads."""
    return re.sub(r"^#{1,6}\s.*$", "", without_code(text), flags=re.MULTILINE)


def headings(path: Path) -> list[tuple[int, int, str]]:
    """``(level, line, text)`` of every Markdown heading of ``path`` outside code."""
    text = without_code(path.read_text())
    return [
        (len(m.group(1)), line_of(text, m.start()), m.group(2).strip())
        for m in re.finditer(r"^(#{1,6})\s+(.+)$", text, flags=re.MULTILINE)
    ]


def title(path: Path) -> str:
    return next(text for level, _, text in headings(path) if level == 1)


def plain(text: str) -> str:
    """Prose as read: citation roles dropped, whitespace collapsed, dashes unified."""
    text = re.sub(r"\s*\{cite:\w+\}`[^`]*`", "", text)
    text = re.sub(r"\s+", " ", text).strip()
    text = re.sub(r"\s+([,.;:])", r"\1", text)
    return text.replace("–", "-").replace("—", "-")


def fold(text: str) -> str:
    return plain(text).casefold()


def chapter_page(chapter: str) -> Path:
    return ROOT / "book" / f"{chapter}.md"


def markdown_cells(notebook: Path) -> list[tuple[int, str]]:
    cells = json.loads(notebook.read_text())["cells"]
    return [(i, "".join(c["source"])) for i, c in enumerate(cells) if c["cell_type"] == "markdown"]


def prose(include_readme: bool) -> list[tuple[str, str]]:
    """``(where, text)`` of the course's prose: every page of book/, the markdown cells of
    the solution notebooks and, if asked, the README. ``where`` + a line number makes a
    location: ``book/03_masking.md:12`` or ``solutions/03_masking/03_masking.ipynb cell 3:2``."""
    documents = [(relative(p), p.read_text()) for p in sorted((ROOT / "book").glob("*.md"))]
    for notebook in sorted((ROOT / "solutions").glob("*/*.ipynb")):
        documents += [(f"{relative(notebook)} cell {i}", source) for i, source in markdown_cells(notebook)]
    if include_readme:
        documents.append(("README.md", (ROOT / "README.md").read_text()))
    return documents


def section(path: Path, heading: str) -> tuple[str, int]:
    """The text of the ``## heading`` section of ``path`` and the line it starts on."""
    text = path.read_text()
    match = re.search(rf"^##\s+{re.escape(heading)}\s*\n(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    assert match, f"{relative(path)} has no '## {heading}' section"
    return match.group(1), line_of(text, match.start(1))


def shell_commands(block: str) -> list[str]:
    """The commands of a shell block, comments and blank lines dropped."""
    commands = (re.sub(r"(^|\s)#.*$", "", line).strip() for line in block.splitlines())
    return [command for command in commands if command]


def setup_commands(path: Path, heading: str) -> list[str]:
    """The commands of the first ```bash block of section ``heading`` of ``path``."""
    text, _ = section(path, heading)
    block = re.search(r"^```(?:bash|sh|shell|console)\s*\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    assert block, f"{relative(path)}: section '{heading}' has no ```bash block of commands"
    return shell_commands(block.group(1))


# --------------------------------------------------------------------------- Makefile


def makefile() -> tuple[dict[str, str], dict[str, tuple[list[str], list[str]]]]:
    """The Makefile's plain variables and its rules, ``{target: (prerequisites, recipe)}``,
    with ``$(VAR)`` expanded (make functions such as ``$(wildcard ...)`` are left alone)."""
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    variables, raw_rules, current = {}, {}, None
    for line in text.splitlines():
        if line.startswith("\t") and current is not None:
            raw_rules[current][1].append(line.strip())
            continue
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        assignment = re.match(r"([A-Za-z_][A-Za-z0-9_]*)\s*(\?=|:=|::=|=)\s*(.*)$", line)
        rule = re.match(r"([^\s:=#][^:=#]*?)\s*:(?!=)\s*([^#]*)", line)
        if assignment:
            variables[assignment.group(1)] = assignment.group(3).strip()
            current = None
        elif rule:
            current = rule.group(1)
            raw_rules[current] = (rule.group(2).split(), [])
        else:
            current = None

    def expand(value: str) -> str:
        for _ in range(10):
            value = re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: variables.get(m.group(1), m.group(0)), value)
        return value

    rules = {}
    for target, (prerequisites, recipe) in raw_rules.items():
        for name in expand(target).split():
            rules[name] = ([expand(p) for p in prerequisites], [expand(r) for r in recipe])
    return variables, rules


def recipes_run_by(target: str) -> list[str]:
    """Every recipe line ``make target`` may run: the target's and its prerequisites'."""
    _, rules = makefile()
    seen, lines, todo = set(), [], [target]
    while todo:
        name = todo.pop()
        if name in seen or name not in rules:
            continue
        seen.add(name)
        prerequisites, recipe = rules[name]
        lines += recipe
        todo += prerequisites
    return lines


def make_target(command: str) -> str | None:
    words = shlex.split(command)
    return words[1] if len(words) == 2 and words[0] == "make" else None


def _driver():
    """``_ext/build_books.py``, the build of both editions, as a module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_books", ROOT / "_ext" / "build_books.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def readme_book_command() -> str:
    """The README's set-up command that builds the book: the one whose make target runs
    ``jupyter-book build``."""
    _, rules = makefile()
    commands = setup_commands(ROOT / "README.md", "Set-up: two commands")
    building = [
        c for c in commands
        if make_target(c) in rules and any(BUILDS_THE_BOOK.search(r) for r in rules[make_target(c)][1])
    ]
    assert len(building) == 1, f"README.md: expected one set-up command that builds the book, found {building} in {commands}"
    return building[0]


#: A recipe line that builds the book: jupyter-book itself, or the course's driver of both editions.
BUILDS_THE_BOOK = re.compile(r"jupyter-book build|_ext/build_books\.py")


def book_output_folder(command: str) -> str:
    """The folder the book command writes its HTML to: the driver's ``SITE`` (``_ext/build_books.py``, which
    builds both editions), or from a ``jupyter-book build`` line of its make target:
    ``<path-output or book path>/_build/<builder>`` (jupyter-book 1.x's layout; ``html`` unless ``--builder``
    says otherwise)."""
    _, rules = makefile()
    if any("_ext/build_books.py" in r for r in rules[make_target(command)][1]):
        return normalize(_driver().SITE)
    builds = [r for r in rules[make_target(command)][1] if "jupyter-book build" in r]
    assert len(builds) == 1, f"Makefile: target {make_target(command)} should run jupyter-book build once: {builds}"
    words = shlex.split(builds[0])
    arguments = words[words.index("build") + 1:]
    options, positional, i = {}, [], 0
    while i < len(arguments):
        word = arguments[i]
        if word.startswith("--") and "=" in word:
            key, value = word.split("=", 1)
            options[key] = value
        elif word in ("--path-output", "--builder", "--config", "--toc"):
            options[word] = arguments[i + 1]
            i += 1
        elif not word.startswith("-"):
            positional.append(word)
        i += 1
    assert len(positional) == 1, f"Makefile: cannot tell the book's path in {builds[0]!r}"
    builder = options.get("--builder", "html")
    assert builder in ("html", "dirhtml", "singlehtml"), f"Makefile: the book command builds {builder}, not a web site"
    return normalize(posixpath.join(options.get("--path-output", positional[0]), "_build", builder))


def normalize(path: str) -> str:
    return posixpath.normpath(path.strip().removeprefix("./")).rstrip("/")


# --------------------------------------------------------------------------- workflow


def workflow() -> dict:
    assert WORKFLOW.exists(), f"{relative(WORKFLOW)} is missing"
    data = yaml.safe_load(WORKFLOW.read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads a bare `on:` as true
    return data


def steps(job: dict) -> list[dict]:
    return job.get("steps", [])


def uses(job: dict, action: str) -> list[dict]:
    """The steps of ``job`` that use ``action`` (any version)."""
    return [s for s in steps(job) if str(s.get("uses", "")).split("@")[0] == action]


def test_the_workflow_runs_the_readme_book_command():
    command = readme_book_command()
    build = workflow()["jobs"]["build"]
    run_lines = [line.strip() for s in steps(build) for line in str(s.get("run", "")).splitlines()]
    assert command in run_lines, (
        f"{relative(WORKFLOW)}: the build job does not run the README's book command {command!r} "
        f"(README.md, section 'Set-up: two commands'); it runs {run_lines}"
    )


def test_the_workflow_uploads_the_folder_the_command_writes():
    folder = book_output_folder(readme_book_command())
    uploads = uses(workflow()["jobs"]["build"], "actions/upload-pages-artifact")
    assert len(uploads) == 1, f"{relative(WORKFLOW)}: the build job should upload one Pages artifact"
    uploaded = normalize(str(uploads[0].get("with", {}).get("path", "_site")))
    assert uploaded == folder, f"{relative(WORKFLOW)}: uploads {uploaded!r}, but the book command writes {folder!r}"
    # ... and the README and the landing page say where the book is: the same folder.
    for path in (ROOT / "README.md", ROOT / "book" / "intro.md"):
        text = path.read_text()
        for m in re.finditer(r"The book is then at `([^`]+)`", text):
            said = normalize(posixpath.dirname(m.group(1)))
            assert said == folder, f"{relative(path)}:{line_of(text, m.start())}: says the book is in {said}, the command writes {folder}"


def test_the_workflow_deploys_with_github_pages_actions():
    data = workflow()
    triggers = data["on"]
    assert "main" in triggers["push"]["branches"], f"{relative(WORKFLOW)}: does not run on a push to main"
    assert "workflow_dispatch" in triggers, f"{relative(WORKFLOW)}: cannot be run by hand (workflow_dispatch)"
    branch = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["branch"]
    assert branch in triggers["push"]["branches"], f"{relative(WORKFLOW)}: _config.yml's branch {branch} is not published"
    permissions = {**data.get("permissions", {}), **data["jobs"]["deploy"].get("permissions", {})}
    assert permissions.get("pages") == "write" and permissions.get("id-token") == "write", (
        f"{relative(WORKFLOW)}: deploying to Pages needs pages: write and id-token: write, got {permissions}"
    )
    assert data.get("permissions", {}).get("contents") == "read", f"{relative(WORKFLOW)}: contents should be read-only"
    assert data.get("concurrency", {}).get("group"), f"{relative(WORKFLOW)}: no concurrency group"
    deploy = data["jobs"]["deploy"]
    assert deploy.get("needs") in ("build", ["build"]), f"{relative(WORKFLOW)}: deploy does not wait for build"
    assert deploy.get("environment", {}).get("name") == "github-pages", f"{relative(WORKFLOW)}: deploy is not in the github-pages environment"
    assert len(uses(deploy, "actions/deploy-pages")) == 1, f"{relative(WORKFLOW)}: deploy does not use actions/deploy-pages"


def test_the_workflow_sets_up_what_the_book_command_needs():
    """The Python the README asks for, and Node.js when the command runs npm."""
    build = workflow()["jobs"]["build"]
    assert uses(build, "actions/checkout"), f"{relative(WORKFLOW)}: the build job does not check out the repository"
    readme = (ROOT / "README.md").read_text()
    wanted = re.search(r"with Python (\d+\.\d+)", readme)
    assert wanted, "README.md: the set-up paragraph names no Python version"
    pythons = [str(s.get("with", {}).get("python-version")) for s in uses(build, "actions/setup-python")]
    assert pythons == [wanted.group(1)], f"{relative(WORKFLOW)}: sets up Python {pythons}, the README says {wanted.group(1)}"
    if any(re.search(r"\bnpm\b", line) for line in recipes_run_by(make_target(readme_book_command()))):
        assert uses(build, "actions/setup-node"), f"{relative(WORKFLOW)}: the book command runs npm but Node.js is not set up"


# --------------------------------------------------------------------------- "chapter N"

CHAPTER_REFERENCE = re.compile(
    r"\b(chapters?)\s+(\d+)(?![.,]?\d)"  # chapter 3, Chapters 2 (not "chapter 3.2")
    r"((?:\s*(?:-|–|—|to)\s*\d+)?"  # chapters 1-5, chapters 1–5, chapters 2 to 4
    r"(?:(?:\s*,\s*\d+)*\s*,?\s*(?:and|or)\s+\d+(?![.,]?\d))?)",  # chapters 2, 3 and 5
    re.IGNORECASE,
)


def chapter_numbers(first: str, tail: str) -> list[int]:
    numbers = [int(first)]
    for separator, number in re.findall(r"(-|–|—|to|,|and|or)\s*(\d+)", tail):
        if separator in ("-", "–", "—", "to"):
            numbers += range(numbers[-1] + 1, int(number) + 1)
        else:
            numbers.append(int(number))
    return numbers


def test_every_chapter_reference_names_a_chapter_of_the_toc():
    count, wrong = len(chapters()), []
    for where, text in prose(include_readme=True):
        for m in CHAPTER_REFERENCE.finditer(text):
            missing = [n for n in chapter_numbers(m.group(2), m.group(3)) if not 1 <= n <= count]
            if missing:
                wrong.append(f"{where}:{line_of(text, m.start())}: {' '.join(m.group(0).split())!r} (the book has chapters 1-{count})")
        # A link whose text says "chapter N" goes to chapter N.
        for m in re.finditer(r"\{doc\}`\s*chapter\s+(\d+)\s*<([^>]+)>`", text, re.IGNORECASE):
            n, target = int(m.group(1)), posixpath.basename(m.group(2))
            if not (1 <= n <= count and chapters()[n - 1] == target):
                wrong.append(f"{where}:{line_of(text, m.start())}: a link says chapter {n} but goes to {m.group(2)}")
    assert not wrong, "references to chapters that do not exist:\n" + "\n".join(wrong)


def test_next_and_previous_chapters_exist():
    """"the next chapter" is not said by the last chapter, nor "the previous chapter(s)"
    by the first."""
    wrong, order = [], chapters()
    for position, chapter in enumerate(order, start=1):
        text = chapter_page(chapter).read_text()
        for m in re.finditer(r"\b(next|following|previous|preceding)\s+chapters?\b", text, re.IGNORECASE):
            later = m.group(1).lower() in ("next", "following")
            if (later and position == len(order)) or (not later and position == 1):
                wrong.append(f"book/{chapter}.md:{line_of(text, m.start())}: {m.group(0)!r} in chapter {position}")
    assert not wrong, "\n".join(wrong)


# --------------------------------------------------------------------------- dated versions

DATED_VERSION = re.compile(r"\b(?:PyTorch|torch)\s+(?:version\s+|v)?\d+\.\d+", re.IGNORECASE)


def test_no_dated_pytorch_version_in_the_prose():
    """Say "in recent PyTorch" or name the feature: the pinned version is in
    requirements.txt and constraints.txt, and prose that names it dates."""
    found = [
        f"{where}:{line_of(text, m.start())}: {' '.join(m.group(0).split())!r}"
        for where, text in prose(include_readme=False)
        for m in DATED_VERSION.finditer(text)
    ]
    assert not found, "dated PyTorch versions in the prose:\n" + "\n".join(found)


# --------------------------------------------------------------------------- the landing page

INTRO = ROOT / "book" / "intro.md"


def landing_items() -> list[dict]:
    """The numbered items of the landing page's 'What you will learn': for each, its line,
    the linked page (as a toc docname), the link's text and the rest of the item."""
    text, start = section(INTRO, "What you will learn")
    items = []
    for m in re.finditer(r"^(\d+)\.\s+(.*?)(?=^\d+\.\s|\Z)", text, re.MULTILINE | re.DOTALL):
        line = start + line_of(text, m.start()) - 1
        link = re.match(r"\{doc\}`([^<`]*?)\s*<([^>`]+)>`(.*)", m.group(2), re.DOTALL)
        assert link, f"book/intro.md:{line}: item {m.group(1)} does not start with a {{doc}} link to its chapter"
        items.append({
            "line": line,
            "page": posixpath.normpath(posixpath.join("book", link.group(2))),
            "text": link.group(1),
            "claims": link.group(3),
        })
    return items


def heading(pattern: str) -> tuple[str, str]:
    """Evidence: a heading of the chapter matches ``pattern`` (case-insensitive)."""
    return ("heading", pattern)


def prose_says(pattern: str) -> tuple[str, str]:
    """Evidence: the chapter's text matches ``pattern`` (case-insensitive)."""
    return ("text", pattern)


# What the landing page says each chapter covers, phrase by phrase (as the page words it,
# citations left out), and the sections of that chapter that back each phrase. A phrase the
# page no longer says, or a claim of the page that no phrase here covers, fails the test:
# update this table with the page.
LANDING_TOPICS = {
    "01_nadaraya_watson": [
        ("kernel regression", [heading(r"Nadaraya.Watson kernel regression")]),
        ("queries, keys and values are plain numbers", [heading(r"^Queries, keys and values$")]),
        ("every weight can be plotted", [prose_says(r"heatmap")]),
    ],
    "02_attention_scoring": [
        ("scaled dot-product", [heading(r"√d")]),
        ("dot-product", [heading(r"^Dot-product scores")]),
        ("bilinear", [heading(r"^Bilinear scores")]),
        ("additive", [heading(r"^Additive scores")]),
        ("why the scaling matters", [heading(r"^Why divide by √d")]),
    ],
    "03_masking": [
        ("valid lengths", [heading(r"^Valid lengths")]),
        ("padding", [heading(r"^Padding")]),
        ("causal and windowed masks", [heading(r"causal mask"), heading(r"window mask")]),
        ("what goes wrong numerically when a mask is done badly", [heading(r"^Masking numerically")]),
    ],
    "04_multihead": [
        ("queries, keys and values projected from one sequence", [heading(r"^Queries, keys and values from one sequence")]),
        ("cross-attention", [heading(r"^Cross-attention")]),
        ("self-attention against recurrence and convolution", [heading(r"^Self-attention, convolution and recurrence")]),
        ("several heads attending side by side", [heading(r"^Multi-head attention")]),
    ],
    "05_positional_encoding": [
        ("why attention needs to be told where each token is", [heading(r"^Attention without positions")]),
        ("sinusoidal and learned tables", [heading(r"sinusoidal table"), heading(r"^Learned position embeddings")]),
        ("rotary embeddings", [heading(r"^Rotary position embedding")]),
        ("relative position biases", [heading(r"^Relative position as a bias")]),
    ],
    "06_transformer": [
        ("the encoder block", [heading(r"^The encoder block")]),
        ("post-norm against pre-norm", [heading(r"^Post-norm or pre-norm")]),
        ("the decoder's two attentions", [heading(r"^The decoder: masked self-attention and cross-attention")]),
        ("a transformer that learns to sort on a cpu", [heading(r"^A Transformer that learns"), prose_says(r"\bsort")]),
        ("exact attention computed in chunks with an online softmax", [heading(r"^The online softmax"), prose_says(r"\bchunk")]),
        ("the idea of flashattention", [prose_says(r"FlashAttention")]),
    ],
    "07_decoding": [
        ("a decoder-only transformer trained by teacher forcing", [heading(r"^A decoder-only Transformer"),
                                                                  heading(r"^Teacher forcing")]),
        ("greedy decoding", [heading(r"^Greedy decoding")]),
        ("sampling with a temperature", [heading(r"^Sampling with a temperature")]),
        ("top-$k$", [heading(r"top-\$k\$")]),
        ("top-$p$", [heading(r"top-\$p\$")]),
        ("min-$p$ on a task with many right answers", [prose_says(r"min-\$p\$"), prose_says(r"many right answers")]),
        ("beam search", [heading(r"^Beam search")]),
    ],
    "08_fast_inference": [
        ("the key-value cache", [heading(r"^The key.value cache")]),
        ("prefill against decoding", [heading(r"^Prefill and decoding")]),
        ("multi-query", [heading(r"^Multi-query and grouped-query attention")]),
        ("grouped-query", [heading(r"^Multi-query and grouped-query attention")]),
        ("sliding windows with a rolling cache", [heading(r"^Sliding windows and a rolling cache")]),
    ],
}

# Words that join the claims of an item without making one.
FILLER = {"a", "an", "and", "the", "of", "with", "to", "in", "on", "its", "attention", "is"}


def evidence_missing(chapter: str, evidence: list[tuple[str, str]]) -> list[str]:
    """The items of ``evidence`` that ``chapter`` does not show."""
    page = chapter_page(chapter)
    titles = [text for level, _, text in headings(page) if level > 1]
    body = page.read_text()
    missing = []
    for kind, pattern in evidence:
        if kind == "heading":
            found = any(re.search(pattern, t, re.IGNORECASE) for t in titles)
        else:
            found = re.search(pattern, body, re.IGNORECASE) is not None
        if not found:
            missing.append(f"no {'section' if kind == 'heading' else 'text'} matching {pattern!r}")
    return missing


def test_the_landing_page_presents_every_chapter_of_the_toc_in_order():
    items = landing_items()
    listed = [item["page"] for item in items]
    toc = toc_parts()["Chapters"]
    for item in items:
        assert item["page"] in toc, f"book/intro.md:{item['line']}: lists {item['page']}, which is not a chapter of _toc.yml"
    for page in toc:
        assert page in listed, f"book/intro.md: 'What you will learn' does not present the chapter {page} of _toc.yml"
    assert listed == toc, f"book/intro.md: 'What you will learn' lists the chapters in the order {listed}, _toc.yml in {toc}"
    text, start = section(INTRO, "What you will learn")
    for item, m in zip(items, re.finditer(r"^(\d+)\.", text, re.MULTILINE)):
        number = int(m.group(1))
        assert toc.index(item["page"]) + 1 == number, f"book/intro.md:{item['line']}: numbered {number}, but it is chapter {toc.index(item['page']) + 1}"


def test_the_landing_page_names_each_chapter_by_its_title():
    for item in landing_items():
        page = ROOT / f"{item['page']}.md"
        assert fold(item["text"]) in fold(title(page)), (
            f"book/intro.md:{item['line']}: calls the chapter {item['text']!r}, its title is {title(page)!r}"
        )


def test_the_landing_page_links_only_pages_of_the_book():
    text = INTRO.read_text()
    book = set(pages())
    for m in re.finditer(r"\{doc\}`(?:[^<`]*<)?([^>`]+)>?`", text):
        target = posixpath.normpath(posixpath.join("book", m.group(1).strip()))
        assert target in book, f"book/intro.md:{line_of(text, m.start())}: links {m.group(1)!r}, which is not a page of _toc.yml"
    for m in re.finditer(r"\]\(([^)#:]+\.(?:md|ipynb))(?:#[^)]*)?\)", text):
        target = posixpath.normpath(posixpath.join("book", m.group(1))).rsplit(".", 1)[0]
        assert target in book, f"book/intro.md:{line_of(text, m.start())}: links {m.group(1)!r}, which is not a page of _toc.yml"


def test_every_topic_the_landing_page_names_is_a_section_of_its_chapter():
    problems = []
    items = {posixpath.basename(item["page"]): item for item in landing_items()}
    for chapter in chapters():
        item = items.get(chapter)
        if item is None:
            continue  # reported by test_the_landing_page_presents_every_chapter_of_the_toc_in_order
        where = f"book/intro.md:{item['line']}"
        claims = fold(item["claims"])
        rest = claims
        for phrase, evidence in sorted(LANDING_TOPICS.get(chapter, []), key=lambda entry: -len(entry[0])):
            if phrase not in claims:
                problems.append(f"{where}: no longer says {phrase!r} for chapter {chapter}: update LANDING_TOPICS")
                continue
            rest = rest.replace(phrase, " ")
            problems += [f"{where}: says chapter {chapter} covers {phrase!r}, but it has {m}" for m in evidence_missing(chapter, evidence)]
        unchecked = [word for word in re.findall(r"[\w'’-]+", rest) if word not in FILLER]
        if unchecked:
            problems.append(
                f"{where}: a claim about chapter {chapter} that nothing checks: {' '.join(unchecked)!r} "
                f"(in {plain(item['claims'])!r}): add it to LANDING_TOPICS with the section that covers it"
            )
    assert not problems, "\n".join(problems)


def test_every_chapter_ends_with_its_graded_exercise():
    """The landing page: "Each chapter ends with a graded notebook, listed in the
    *Exercises* part of this book"."""
    text = INTRO.read_text()
    claim = re.search(r"Each chapter ends with a graded notebook,\s+listed in the \*Exercises\* part", text)
    if claim is None:
        pytest.skip("the landing page no longer says that each chapter ends with a graded notebook")
    exercises = toc_parts().get("Exercises", [])
    for chapter in chapters():
        page = chapter_page(chapter)
        notebook = f"exercises/{chapter}/{chapter}"
        assert notebook in exercises, f"book/intro.md:{line_of(text, claim.start())}: the Exercises part does not list {notebook}"
        assert (ROOT / f"{notebook}.ipynb").exists(), f"{notebook}.ipynb is missing"
        sections = [(line, t) for level, line, t in headings(page) if level == 2]
        exercise = [i for i, (_, t) in enumerate(sections) if t == "Exercise"]
        assert exercise, f"book/{chapter}.md has no '## Exercise' section"
        after = [f"book/{chapter}.md:{line}: {t!r}" for line, t in sections[exercise[0] + 1:] if not t.startswith("Exercises")]
        assert not after, f"book/{chapter}.md does not end with its exercise, sections follow it: {after}"
        body = page.read_text()
        assert re.search(rf"\{{doc\}}`[^`]*<\.\./{re.escape(notebook)}>`", body), f"book/{chapter}.md does not link {notebook}"


def test_the_landing_page_and_the_readme_give_the_same_setup():
    readme = setup_commands(ROOT / "README.md", "Set-up: two commands")
    intro = setup_commands(INTRO, "Setting up")
    assert intro == readme, f"book/intro.md ('Setting up') gives the commands {intro}, README.md {readme}"
    python = re.search(r"Python (\d+\.\d+)", section(INTRO, "Setting up")[0])
    if python:
        assert f"Python {python.group(1)}" in (ROOT / "README.md").read_text(), f"book/intro.md asks for Python {python.group(1)}, the README does not"


def test_the_readme_table_names_the_chapters_of_the_toc():
    text, start = section(ROOT / "README.md", "Layout")
    rows = re.findall(r"^\|\s*(\d+)\.\s*([^|]+?)\s*\|\s*`([^`]+)`", text, re.MULTILINE)
    assert [page for _, _, page in rows] == [f"{c}.md" for c in toc_parts()["Chapters"]], (
        f"README.md:{start}: the Layout table lists {[page for _, _, page in rows]}, _toc.yml {toc_parts()['Chapters']}"
    )
    for position, (number, name, page) in enumerate(rows, start=1):
        row = start + line_of(text, text.index(f"| {number}. ")) - 1
        assert int(number) == position, f"README.md:{row}: {page} is numbered {number}, it is chapter {position}"
        assert fold(title(ROOT / page)).startswith(fold(name)), f"README.md:{row}: calls {page} {name!r}, its title is {title(ROOT / page)!r}"


# --------------------------------------------------------------------------- the glossary

GLOSSARY = ROOT / "book" / "glossary.md"


def glossary_entries() -> list[dict]:
    """``{"term", "line", "definition"}`` of every entry of the glossary directive."""
    text = GLOSSARY.read_text()
    block = re.search(r"^```\{glossary\}\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    assert block, "book/glossary.md has no {glossary} directive"
    first = line_of(text, block.start(1))
    entries = []
    for offset, line in enumerate(block.group(1).splitlines()):
        if not line.strip() or line.startswith(":"):
            continue
        if not line[0].isspace():
            entries.append({"term": line.strip(), "line": first + offset, "definition": ""})
        elif entries:
            entries[-1]["definition"] += line + "\n"
    return entries


def term_pattern(term: str) -> re.Pattern:
    words = re.split(r"[\s\-–]+", term)
    return re.compile(r"\b" + r"[\s\-–]+".join(map(re.escape, words)) + r"(?:s|es)?\b", re.IGNORECASE)


def test_the_glossary_terms_are_terms_of_the_chapters():
    """"The terms below are the ones the chapters use"."""
    texts = {c: without_code(chapter_page(c).read_text()) for c in chapters()}
    unused = [
        f"book/glossary.md:{e['line']}: {e['term']!r}"
        for e in glossary_entries()
        if not any(term_pattern(e["term"]).search(t) for t in texts.values())
    ]
    assert not unused, "glossary terms that no chapter uses:\n" + "\n".join(unused)


def test_the_chapters_link_every_glossary_term():
    """"Where a chapter first introduces a term, it links here": every term has a
    {term} link from a chapter (the message says where the term is first used)."""
    texts = {c: chapter_page(c).read_text() for c in chapters()}
    prose_of = {c: body_text(t) for c, t in texts.items()}
    named_in = {c: without_code(t) for c, t in texts.items()}
    unlinked = []
    for e in glossary_entries():
        link = re.compile(r"\{term\}`(?:[^`<]*<)?\s*" + re.escape(e["term"]) + r"\s*>?`", re.IGNORECASE)
        if any(link.search(t) for t in texts.values()):
            continue
        def first(texts_of: dict[str, str]) -> str:
            uses = ((c, term_pattern(e["term"]).search(t), t) for c, t in texts_of.items())
            return next((f"book/{c}.md:{line_of(t, m.start())}" for c, m, t in uses if m), "nowhere")

        unlinked.append(
            f"book/glossary.md:{e['line']}: {e['term']!r} is linked from no chapter (first named at "
            f"{first(named_in)}, first used in the prose at {first(prose_of)})"
        )
    assert not unlinked, "\n".join(unlinked)


# What the glossary says a chapter (or the course) does, and what backs it: (term, phrase of
# its definition as written, citations left out; the chapter, or None for "some chapter";
# evidence). A phrase no longer in the definition, or a "chapter N" / "the course covers" /
# "the book uses" statement that no phrase here covers, fails the test.
GLOSSARY_CLAIMS = [
    ("temperature", "In generation (chapter 7) it divides the logits before the next token is drawn", 7,
     [heading(r"^Sampling with a temperature"), prose_says(r"logits?\s*/\s*\\?tau|divid\w* the logits|logits divided")]),
    ("kernel", "The book uses the Gaussian, boxcar and Epanechnikov kernels", 1,
     [prose_says(r"Gaussian"), prose_says(r"boxcar"), prose_says(r"Epanechnikov")]),
    ("leave-one-out", "Chapter 1 uses it to learn a bandwidth", 1,
     [heading(r"leave one out"), prose_says(r"leave-one-out[^.]*bandwidth|bandwidth[^.]*leave-one-out")]),
    ("positional encoding",
     "The course covers sinusoidal tables, learned position embeddings, rotary embeddings and relative position biases", 5,
     [heading(r"sinusoidal table"), heading(r"^Learned position embeddings"), heading(r"^Rotary position embedding"),
      heading(r"^Relative position as a bias")]),
    ("head", "Chapter 4 also compares wide heads, each as wide as the model", 4,
     [heading(r"^Narrow heads and wide heads")]),
    ("scoring function", "a negative scaled squared distance in chapter 1", 1,
     [heading(r"Gaussian weights are a softmax"), prose_says(r"scoring function")]),
    ("scoring function", "the scaled dot-product, bilinear and additive scores in chapter 2", 2,
     [heading(r"√d"), heading(r"^Bilinear scores"), heading(r"^Additive scores")]),
]

GLOSSARY_CLAIM = re.compile(
    r"\bchapters?\s+\d|\bthe (?:course|book) (?:covers|uses|shows|treats|teaches|builds|explains)\b", re.IGNORECASE
)


def test_what_the_glossary_says_a_chapter_does_it_does():
    problems = []
    entries = {e["term"]: e for e in glossary_entries()}
    covered: dict[str, list[tuple[int, int]]] = {}
    for term, phrase, chapter_number, evidence in GLOSSARY_CLAIMS:
        entry = entries.get(term)
        definition = plain(entry["definition"]) if entry else ""
        where = f"book/glossary.md:{entry['line']}" if entry else "book/glossary.md"
        start = definition.find(plain(phrase))
        if start < 0:
            problems.append(f"{where}: the entry {term!r} no longer says {phrase!r}: update GLOSSARY_CLAIMS")
            continue
        covered.setdefault(term, []).append((start, start + len(plain(phrase))))
        candidates = chapters() if chapter_number is None else chapters()[chapter_number - 1:chapter_number]
        if not any(not evidence_missing(c, evidence) for c in candidates):
            missing = evidence_missing(candidates[0], evidence) if len(candidates) == 1 else ["none of the chapters shows it"]
            problems.append(f"{where}: {term!r} says {phrase!r}, but book/{candidates[0]}.md has {'; '.join(missing)}")
    for term, entry in entries.items():
        definition = plain(entry["definition"])
        for m in GLOSSARY_CLAIM.finditer(definition):
            if not any(a <= m.start() < b for a, b in covered.get(term, [])):
                sentence = re.search(r"[^.]*" + re.escape(m.group(0)) + r"[^.]*", definition[max(0, m.start() - 200):]).group(0).strip()
                problems.append(f"book/glossary.md:{entry['line']}: {term!r}: {sentence!r} is checked by nothing: add it to GLOSSARY_CLAIMS")
    assert not problems, "\n".join(problems)


def test_the_functions_the_glossary_names_exist():
    """`causal_mask(q, k)`, `padding_mask(valid_lens, k)`: the course defines them."""
    defined = set()
    for module in (ROOT / "autograder").rglob("*.py"):
        defined |= set(re.findall(r"^\s*(?:def|class)\s+(\w+)", module.read_text(), re.MULTILINE))
    text = GLOSSARY.read_text()
    for m in re.finditer(r"`([A-Za-z_]\w*)\(", text):
        assert m.group(1) in defined, f"book/glossary.md:{line_of(text, m.start())}: names `{m.group(1)}(...)`, which the course does not define"
