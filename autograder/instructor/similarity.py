"""``similarity()``: which submissions of an assignment share code beyond what the exercise gives everyone.

Runs in the instructor's command (``python -m autograder similarity ASSIGNMENT``), after grading. It
reads the students' notebooks under ``submitted/`` and the released one under ``release/`` as JSON
text: nothing handed in is run. It changes no grade and writes one page for the instructor,
``grades/similarity-<assignment>.html``, beside the grades: students are named there (and in
``--json``'s output), never in feedback.

**What is compared.** Each graded answer cell (one unit per ``grade_id``), and the whole notebook's
code (every code cell but the test cells, so that code moved between cells or added in cells of
one's own is seen too).

**How.** Each unit's code is tokenised by copydetect's ``filter_code``: names become ``V``,
functions ``F``, classes ``O``, strings ``S``; comments and whitespace go. Renamed locals,
rewritten comments, blank lines and another layout then leave the text the same. The filtered
text is cut into k-grams, hashed and winnowed (Schleimer, Wilkerson and Aiken, *Winnowing: local
algorithms for document fingerprinting*, SIGMOD 2003) with copydetect's ``hashed_kgrams`` and
``winnow``, with copydetect's default thresholds: noise 25 (k = 25 filtered characters, about
ten tokens) and guarantee 25, so its window is 25 − 25 + 1 = 1 and every k-gram is a fingerprint.
Answers are short (a part is a few hundred filtered characters): keeping every k-gram costs
little here, and each shared stretch of code counts by its whole length rather than by the
sample a wider window would keep. Python's ``hash()`` differs between processes, so every
fingerprint of a run is made in this one.

Then, as MOSS and Gradescope do, what everyone may share stops counting: each fingerprint of
the released notebook (stubs, signatures, docstrings, given code), and each fingerprint that more
than half the class (:attr:`Settings.common_share`) has in that unit. What remains is weighed by
its rarity in the class, ``log(1 + N / df)`` over the N students (the smoothed form of IDF: it
stays above 0 in a class of two), so that code many honest students converge on counts little
and a part with little room for variation (a one-line ``causal_mask``) adds little to a
notebook's score: each part weighs what its fingerprints weigh, which follows its length and how
the class's answers spread (:attr:`Analysis.part_weights`).

A pair's score, per part and over the notebook, is the weight of the fingerprints the two share
over the weight of the smaller side. The smaller side (containment rather than a symmetric
overlap) because a copier who adds code of their own, or answers only some parts, has most of
their own code in the other's notebook, while the other's holds more; a symmetric measure would
let that padding dilute the score. So that a nearly empty side cannot score 1 with a few shared
lines, the denominator is at least half the class's median weight for that unit
(:attr:`Settings.floor_share`). Pairs whose notebook score reaches the threshold are flagged,
strongest first, with the share of code in common (unweighted) and the parts that match; flagged
pairs joined by a student form groups (a copy of a copy).

**Why copydetect** (0.5.0): MIT-licensed and maintained; it tokenises with Pygments and
fingerprints by winnowing, the method MOSS uses, but runs here, offline: MOSS would upload the
class's code to a server. And it exposes its functions (``filter_code``, ``hashed_kgrams``,
``winnow``, ``get_copied_slices``) rather than only whole-file comparisons, so that the class-wide
weighting above, which its own detector lacks, can be built on them.

What it cannot see: code two students wrote from the same chapter of the book; a copy rewritten
by hand; help given in words; parts too short to leave room for variation. A flag is a reason
to look, not a verdict.
"""

from __future__ import annotations

import bisect
import html
import json
import math
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from copydetect.defaults import GUARANTEE_THRESHOLD, NOISE_THRESHOLD
from copydetect.utils import filter_code, get_copied_slices, hashed_kgrams, winnow
from scipy import sparse

from .gradebook import Course

#: The unit of the whole notebook's code, beside the parts (grade ids).
NOTEBOOK = "(notebook)"
#: The notebook score at or above which a pair is flagged: chosen with ``benchmarks/similarity.py``
#: (the module docstring there says by which rule).
THRESHOLD = 0.35
#: A notebook larger than this is not read (the grader refuses such a submission too); the
#: students with one are listed on the page.
MAX_NOTEBOOK_BYTES = 20 * 1024 * 1024
#: The code of one unit past this many characters is cut (a flood of cells must not stall the run).
MAX_UNIT_CHARACTERS = 200_000
#: The most flagged pairs shown side by side on the page; the table lists them all.
PAIRS_SHOWN = 60
# Where a string literal starts: its prefix (r, b, f, u, in either case and order), then a quote.
_STRING_START = re.compile(r"[rRbBfFuU]{0,2}['\"]")


@dataclass(frozen=True)
class Settings:
    """How code is fingerprinted and pairs are scored.

    Attributes:
        threshold: the notebook score at which a pair is flagged.
        k: k-gram length in filtered characters (copydetect's noise threshold).
        window: winnowing window (copydetect's guarantee − noise + 1).
        common_share: a fingerprint held by more than this share of the class (in a unit) stops counting.
        floor_share: a pair's denominator is at least this share of the class's median weight in the unit.
    """

    threshold: float = THRESHOLD
    k: int = NOISE_THRESHOLD
    window: int = GUARANTEE_THRESHOLD - NOISE_THRESHOLD + 1
    common_share: float = 0.5
    floor_share: float = 0.5


# --------------------------------------------------------------------------------------
# Notebooks, read as text
# --------------------------------------------------------------------------------------


@dataclass
class Submission:
    """One student's notebook as the analysis reads it.

    Attributes:
        parts: ``{grade id: code}`` of the answer cells.
        cells: the code of every code cell but the test cells, in order (the notebook unit).
        problem: why the notebook could not be read (then it is empty), or ``""``.
        part_cells: ``{grade id: indices in cells}`` (a part is one cell, unless a notebook repeats its id).
    """

    student: str
    parts: dict[str, str] = field(default_factory=dict)
    cells: list[str] = field(default_factory=list)
    problem: str = ""
    part_cells: dict[str, list[int]] = field(default_factory=dict)


def read_notebook(student: str, text: str) -> Submission:
    """The answer cells and code cells of notebook JSON ``text``; an unreadable one is an empty submission."""
    try:
        cells = json.loads(text).get("cells", [])
    except (ValueError, AttributeError):
        return Submission(student, problem="not a notebook (its JSON cannot be read)")
    if not isinstance(cells, list):
        return Submission(student, problem="not a notebook (no list of cells)")
    submission = Submission(student)
    for cell in cells:
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            _add_cell(submission, cell)
    return submission


def _add_cell(submission: Submission, cell: dict) -> None:
    """One code cell into ``submission``: a test cell is left out, an answer cell is its part's code too."""
    meta = cell.get("metadata", {})
    nbgrader = meta.get("nbgrader", {}) if isinstance(meta, dict) else {}
    nbgrader = nbgrader if isinstance(nbgrader, dict) else {}
    if nbgrader.get("grade") and not nbgrader.get("solution"):
        return
    code = _source(cell.get("source", ""))
    submission.cells.append(code)
    part = nbgrader.get("grade_id")
    if nbgrader.get("solution") and isinstance(part, str):
        submission.part_cells.setdefault(part, []).append(len(submission.cells) - 1)
        submission.parts[part] = "\n\n".join(submission.cells[i] for i in submission.part_cells[part])


def _source(source: object) -> str:
    """A cell's source, a string or a list of strings in the notebook format, at most :data:`MAX_UNIT_CHARACTERS`."""
    text = "".join(s for s in source if isinstance(s, str)) if isinstance(source, list) else source
    return text[:MAX_UNIT_CHARACTERS] if isinstance(text, str) else ""


# --------------------------------------------------------------------------------------
# Fingerprints
# --------------------------------------------------------------------------------------


@dataclass
class Code:
    """One unit's code and its fingerprints.

    Attributes:
        text: the code as handed in.
        filtered: copydetect's tokens (``V``, ``F``, ``O``, ``S``, keywords, operators), no comments or spaces.
        offsets: copydetect's map from ``filtered`` back to ``text``.
        hashes: the hash of every k-gram of ``filtered``, by position.
        fingerprints: the winnowed hashes (a set).
    """

    text: str
    filtered: str
    offsets: np.ndarray
    hashes: np.ndarray
    fingerprints: set[int]


def tokens(code: str) -> tuple[str, np.ndarray]:
    """copydetect's filtered text of Python ``code`` and its offsets back into ``code``."""
    filtered, offsets = filter_code(code, "answer.py", language="python")
    return filtered, np.asarray(offsets, dtype=np.int64).reshape(-1, 2)


def kgram_hashes(filtered: str, k: int) -> np.ndarray:
    """The hash of each k-gram of ``filtered`` (none when it is shorter than ``k``)."""
    if len(filtered) < k:
        return np.zeros(0, dtype=np.int64)
    return np.asarray(hashed_kgrams(filtered, k), dtype=np.int64)


def fingerprints(hashes: np.ndarray, window: int) -> set[int]:
    """The winnowed fingerprints of a unit's k-gram hashes."""
    if len(hashes) == 0:
        return set()
    selected, _ = winnow(hashes, window, remove_duplicates=True)
    return set(selected.tolist())


def fingerprinted(text: str, settings: Settings, filtered: tuple[str, np.ndarray] | None = None) -> Code:
    """A unit's :class:`Code` (``filtered``: its tokens, where already made)."""
    filtered_text, offsets = filtered if filtered is not None else tokens(text)
    hashes = kgram_hashes(filtered_text, settings.k)
    return Code(text, filtered_text, offsets, hashes, fingerprints(hashes, settings.window))


def submission_codes(submission: Submission, settings: Settings) -> dict[str, Code]:
    """``{unit: Code}`` of a submission: each part, and :data:`NOTEBOOK`. Each cell is tokenised once; the
    notebook's tokens are its cells' in order."""
    by_cell = [tokens(code) for code in submission.cells]
    codes = {}
    for part, code in submission.parts.items():
        cells = submission.part_cells.get(part, [])
        codes[part] = fingerprinted(code, settings, by_cell[cells[0]] if len(cells) == 1 else None)
    notebook = "".join(filtered for filtered, _ in by_cell)
    hashes = kgram_hashes(notebook, settings.k)
    codes[NOTEBOOK] = Code("\n\n".join(submission.cells), notebook, np.zeros((0, 2), dtype=np.int64), hashes,
                           fingerprints(hashes, settings.window))
    return codes


def released_hashes(released: Submission, settings: Settings) -> set[int]:
    """Every k-gram of the released notebook: each cell's, and across its cells' boundaries."""
    cells = [tokens(code)[0] for code in released.cells]
    found = set(kgram_hashes("".join(cells), settings.k).tolist())
    for filtered in cells:
        found |= set(kgram_hashes(filtered, settings.k).tolist())
    return found


# --------------------------------------------------------------------------------------
# The class
# --------------------------------------------------------------------------------------


@dataclass
class Pair:
    """Two students whose notebooks share code beyond the release.

    Attributes:
        score: the weight of the fingerprints they share over the smaller side's (see the module docstring).
        shared: the share of the smaller side's fingerprints (released ones left out) the other also has,
            unweighted: how much of the code is the same.
        parts: ``{part: score}`` of the parts that match (score at the threshold or above), strongest first.
    """

    students: tuple[str, str]
    score: float
    shared: float
    parts: dict[str, float]

    def as_json(self) -> dict:
        """The pair as ``--json`` writes it."""
        return {"students": list(self.students), "score": round(self.score, 4), "shared": round(self.shared, 4),
                "parts": {part: round(score, 4) for part, score in self.parts.items()}}


@dataclass
class Unit:
    """The class's weights in one unit.

    Attributes:
        weights: ``{fingerprint: weight}`` of the fingerprints that count (neither released nor common).
        totals: each student's weight (their counted fingerprints').
        floor: the least denominator of a pair's score.
        scores: students × students scores (the row and column order of :attr:`Analysis.students`).
    """

    weights: dict[int, float]
    totals: np.ndarray
    floor: float
    scores: np.ndarray


@dataclass
class Analysis:
    """One assignment's similarity: the flagged pairs, and what the page needs to show them.

    Attributes:
        part_weights: each part's share of what the class's notebooks weigh (median weight per part).
        unread: ``{student: why}`` of the notebooks that could not be read.
        released: every k-gram hash of the released notebook; released_parts: ``{part: its released cell}``.
    """

    assignment: str
    students: list[str]
    parts: list[str]
    settings: Settings
    pairs: list[Pair]
    part_weights: dict[str, float]
    codes: dict[str, dict[str, Code]]
    units: dict[str, Unit]
    released: set[int]
    unread: dict[str, str] = field(default_factory=dict)
    released_parts: dict[str, str] = field(default_factory=dict)

    def groups(self) -> list[list[str]]:
        """Students joined by flagged pairs (connected components of two or more), largest first."""
        return groups([pair.students for pair in self.pairs])


def analyse(submissions: list[Submission], released: Submission, *, assignment: str = "",
            settings: Settings | None = None) -> Analysis:
    """Score every pair of ``submissions`` against the class, with ``released``'s code set aside.

    All fingerprints are made here, in this process (``hash()`` differs between processes).
    """
    settings = settings or Settings()
    students = [s.student for s in submissions]
    codes = {s.student: submission_codes(s, settings) for s in submissions}
    given = released_hashes(released, settings)
    parts = list(dict.fromkeys([*released.parts, *(p for s in submissions for p in s.parts)]))
    units = {unit: _unit([codes[s].get(unit) for s in students], given, settings)
             for unit in [*parts, NOTEBOOK]}
    medians = {part: _median(units[part].totals) for part in parts}
    total = sum(medians.values()) or 1.0
    analysis = Analysis(assignment, students, parts, settings, [], {p: m / total for p, m in medians.items()},
                        codes, units, given, {s.student: s.problem for s in submissions if s.problem},
                        dict(released.parts))
    analysis.pairs = _flagged(analysis)
    return analysis


def _unit(codes: list[Code | None], given: set[int], settings: Settings) -> Unit:
    """The weights and pair scores of one unit over the class (``None``: a student without that unit)."""
    held = [set() if code is None else code.fingerprints - given for code in codes]
    count = len(held)
    frequency: dict[int, int] = defaultdict(int)
    for fingerprints_ in held:
        for fingerprint in fingerprints_:
            frequency[fingerprint] += 1
    common = max(settings.common_share * count, 2)
    weights = {f: math.log(1 + count / df) for f, df in frequency.items() if df <= common}
    columns = {f: column for column, f in enumerate(weights)}
    matrix = _incidence([[columns[f] for f in s if f in columns] for s in held], len(columns))
    weighted = matrix @ sparse.diags(np.fromiter(weights.values(), dtype=float, count=len(weights)))
    shared = (weighted @ matrix.T).toarray()
    totals = np.diag(shared).copy()
    floor = settings.floor_share * _median(totals)
    smaller = np.maximum(np.minimum.outer(totals, totals), max(floor, 1e-12))
    scores = np.where(shared > 0, shared / smaller, 0.0)
    return Unit(weights, totals, floor, np.minimum(scores, 1.0))


def _incidence(rows: list[list[int]], columns: int) -> sparse.csr_matrix:
    """A students × fingerprints matrix of ones."""
    indices = np.fromiter((c for row in rows for c in row), dtype=np.int64)
    pointers = np.cumsum([0, *(len(row) for row in rows)])
    return sparse.csr_matrix((np.ones(len(indices)), indices, pointers), shape=(len(rows), columns))


def _median(values: np.ndarray) -> float:
    """The median of the positive values (students who wrote something), 0 if none."""
    positive = [float(v) for v in values if v > 0]
    return statistics.median(positive) if positive else 0.0


def _flagged(analysis: Analysis) -> list[Pair]:
    """The pairs whose notebook score reaches the threshold, strongest first."""
    scores, threshold = analysis.units[NOTEBOOK].scores, analysis.settings.threshold
    rows, columns = np.nonzero(np.triu(scores >= max(threshold, 1e-9), k=1))
    pairs = [_pair(analysis, i, j) for i, j in zip(rows.tolist(), columns.tolist(), strict=True)]
    return sorted(pairs, key=lambda pair: (-pair.score, -pair.shared, pair.students))


def _pair(analysis: Analysis, i: int, j: int) -> Pair:
    a, b = analysis.students[i], analysis.students[j]
    parts = {part: float(analysis.units[part].scores[i, j]) for part in analysis.parts}
    matching = {p: s for p, s in sorted(parts.items(), key=lambda item: -item[1]) if s >= analysis.settings.threshold}
    return Pair((a, b), float(analysis.units[NOTEBOOK].scores[i, j]), _shared_share(analysis, a, b), matching)


def _shared_share(analysis: Analysis, a: str, b: str) -> float:
    """The share of the smaller notebook's own fingerprints (released ones out) that the other has too."""
    mine = analysis.codes[a][NOTEBOOK].fingerprints - analysis.released
    theirs = analysis.codes[b][NOTEBOOK].fingerprints - analysis.released
    smaller = min(len(mine), len(theirs))
    return len(mine & theirs) / smaller if smaller else 0.0


def groups(pairs: list[tuple[str, str]]) -> list[list[str]]:
    """Connected components of the students in ``pairs``, largest first, each sorted."""
    parent: dict[str, str] = {}

    def root(student: str) -> str:
        while parent.setdefault(student, student) != student:
            parent[student] = parent[parent[student]]
            student = parent[student]
        return student

    for a, b in pairs:
        parent[root(a)] = root(b)
    members: dict[str, list[str]] = defaultdict(list)
    for student in parent:
        members[root(student)].append(student)
    return sorted((sorted(group) for group in members.values()), key=lambda group: (-len(group), group))


# --------------------------------------------------------------------------------------
# The course
# --------------------------------------------------------------------------------------


def resolve(course: Course, given: str) -> str:
    """An assignment id from an id or its number (``03`` -> ``03_masking``), from ``release/``, ``source/``
    and ``submitted/``; ValueError if none is known by that name."""
    known = _assignments(course)
    if given in known:
        return given
    found = sorted(name for name in known if name.startswith(f"{given}_"))
    if len(found) == 1:
        return found[0]
    names = ", ".join(sorted(known)) or "none"
    raise ValueError(f"unknown assignment {given!r}: no release/, source/ or submitted/ folder names it "
                     f"(assignments here: {names})")


def _assignments(course: Course) -> set[str]:
    """The assignments with a folder in ``release/``, ``source/`` or a student's ``submitted/`` folder."""
    names = set()
    for step in ("release", "source"):
        folder = course.root / getattr(course.coursedir, f"{step}_directory")
        names |= {p.name for p in folder.iterdir() if p.is_dir()} if folder.is_dir() else set()
    submitted = course.root / course.coursedir.submitted_directory
    return names | ({p.name for p in submitted.glob("*/*") if p.is_dir()} if submitted.is_dir() else set())


def read_class(course: Course, assignment: str) -> tuple[list[Submission], Submission]:
    """The submissions of ``assignment`` and its released notebook.

    Raises:
        FileNotFoundError: no released notebook (``nbgrader generate_assignment`` writes it).
        ValueError: no submission.
    """
    release = course.folder("release", assignment) / f"{assignment}.ipynb"
    if not release.is_file():
        raise FileNotFoundError(f"no released notebook of {assignment} at {release}: the comparison sets aside what "
                                f"students were given (run `nbgrader generate_assignment {assignment}` first)")
    students = course.students(assignment)
    if not students:
        raise ValueError(f"no submissions of {assignment} in {course.root / course.coursedir.submitted_directory}")
    released = read_notebook("(release)", release.read_text(encoding="utf-8", errors="replace"))
    return [_read_submission(course, assignment, student) for student in students], released


def _read_submission(course: Course, assignment: str, student: str) -> Submission:
    folder = course.folder("submitted", assignment, student)
    path = folder / f"{assignment}.ipynb"
    found = [path] if path.is_file() else sorted(folder.glob("*.ipynb"))
    if not found:
        return Submission(student, problem="no notebook")
    if found[0].stat().st_size > MAX_NOTEBOOK_BYTES:
        return Submission(student, problem=f"notebook over {MAX_NOTEBOOK_BYTES // 2**20} MB: not read")
    return read_notebook(student, found[0].read_text(encoding="utf-8", errors="replace"))


def similarity(assignment: str, *, course_dir: str | Path = ".", threshold: float | None = None) -> Analysis:
    """The analysis of ``assignment`` (an id or its number) in the course at ``course_dir``."""
    course = Course.open(Path(course_dir))
    name = resolve(course, assignment)
    submissions, released = read_class(course, name)
    settings = Settings() if threshold is None else Settings(threshold=threshold)
    return analyse(submissions, released, assignment=name, settings=settings)


def flagged_pairs(course_dir: str | Path, assignment: str, *, threshold: float | None = None) -> list[Pair]:
    """The flagged pairs of ``assignment``, strongest first (nothing is written)."""
    return similarity(assignment, course_dir=course_dir, threshold=threshold).pairs


def page_path(course_dir: str | Path, assignment: str) -> Path:
    """Where the page of ``assignment`` (a full id) is written: ``grades/similarity-<assignment>.html``. It may not
    exist yet (the class report links it only where it does)."""
    return Path(course_dir).resolve() / "grades" / f"similarity-{assignment}.html"


def similarity_page(course_dir: str | Path, assignment: str, *, threshold: float | None = None,
                    output: str | Path | None = None) -> Path:
    """Analyse ``assignment`` and write its page (``output``, else :func:`page_path`); its path."""
    analysis = similarity(assignment, course_dir=course_dir, threshold=threshold)
    return write_page(analysis, output or page_path(course_dir, analysis.assignment))


def to_json(pairs: list[Pair]) -> str:
    """The flagged pairs as ``--json`` prints them: a list of ``{students, score, shared, parts}``."""
    return json.dumps([pair.as_json() for pair in pairs], indent=1, ensure_ascii=False)


# --------------------------------------------------------------------------------------
# Where two answers share code
# --------------------------------------------------------------------------------------


def shared_lines(code: Code, common: set[int], k: int) -> set[int]:
    """The lines (from 0) of ``code.text`` that hold a k-gram whose hash is in ``common``.

    The k-grams' positions in the filtered text become slices (copydetect's ``get_copied_slices``), and
    each filtered character of a slice is mapped back to where its token starts in the text (copydetect's
    offsets: at each point, how many characters filtering had dropped before it). A string (``S``) marks no
    line: its text never decided a match, and a docstring next to copied code would be marked whole.
    """
    positions = np.nonzero(np.isin(code.hashes, np.fromiter(common, dtype=np.int64, count=len(common))))[0]
    if len(positions) == 0 or len(code.offsets) == 0:
        return set()
    starts, ends = get_copied_slices(positions, k)
    filtered = np.concatenate([np.arange(s, e) for s, e in zip(starts.tolist(), ends.tolist(), strict=True)])
    shift = code.offsets[:, 1][np.clip(np.searchsorted(code.offsets[:, 0], filtered), 0, len(code.offsets) - 1)]
    line_starts = [0] + [i + 1 for i, ch in enumerate(code.text) if ch == "\n"]
    return {bisect.bisect_right(line_starts, at) - 1 for p, at in zip(filtered.tolist(), (filtered + shift).tolist(),
                                                                        strict=True)
            if not _is_string(code, p, at)}


def _is_string(code: Code, filtered: int, at: int) -> bool:
    """Whether filtered character ``filtered`` is a string literal's ``S`` (the text at ``at`` opens a string)."""
    return code.filtered[filtered] == "S" and bool(_STRING_START.match(code.text, at))


def marks(analysis: Analysis, a: str, b: str, part: str) -> tuple[set[int], set[int]]:
    """The lines of ``a``'s and ``b``'s ``part`` that share counted code (released and common code left out)."""
    code_a, code_b = analysis.codes[a].get(part), analysis.codes[b].get(part)
    if code_a is None or code_b is None:
        return set(), set()
    counted = analysis.units[part].weights
    common = {f for f in code_a.fingerprints & code_b.fingerprints if f in counted}
    k = analysis.settings.k
    return shared_lines(code_a, common, k), shared_lines(code_b, common, k)


def given_lines(analysis: Analysis, student: str, part: str) -> set[int]:
    """The lines of a student's ``part`` that read as the released cell of that part has them (the stub's
    signature and docstring, shown dimmed; never marked as shared)."""
    code = analysis.codes[student].get(part)
    released = {line.strip() for line in analysis.released_parts.get(part, "").split("\n")} - {""}
    if code is None:
        return set()
    return {number for number, line in enumerate(code.text.split("\n")) if line.strip() in released}


# --------------------------------------------------------------------------------------
# The page
# --------------------------------------------------------------------------------------


def write_page(analysis: Analysis, path: str | Path) -> Path:
    """Write the page of ``analysis`` at ``path`` (whole, or not at all); its path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(page(analysis), encoding="utf-8")
    partial.replace(path)
    return path


def page(analysis: Analysis) -> str:
    """The HTML page: the notice, the settings, the parts' weights, the flagged pairs and groups, then each
    pair's answers side by side."""
    title = f"Similar submissions: {analysis.assignment}"
    body = [f"<h1>{_e(title)}</h1>", _NOTICE, _summary(analysis), _parts_table(analysis),
            "<h2 id='pairs'>Flagged pairs, strongest first</h2>", _pairs_table(analysis),
            "<h2 id='groups'>Groups</h2>", _groups(analysis), _unread(analysis),
            "<h2 id='side-by-side'>Side by side</h2>", _LEGEND, *_side_by_side(analysis)]
    return _HTML.format(title=_e(title), style=_STYLE, body="\n".join(part for part in body if part))


_NOTICE = ("<div class='notice'><p><strong>A flag is a reason to look, not a verdict.</strong> Two students may "
           "write the same code from the same chapter of the book, or converge on the short answer a part leaves "
           "room for; a copy rewritten by hand, or help given in words, is not seen at all. Read the two answers "
           "side by side, and talk with the students, before deciding anything.</p>"
           "<p>Nothing here changes a grade. This page names students: it lives with the grades in "
           "<code>grades/</code>, for instructors only, and never goes into feedback.</p></div>")


_LEGEND = ("<p class='note'>Per pair, the parts that match, then the others folded. <span class='line shared "
           "key'>Marked</span>: lines holding code the two share that counts (rare in the class, not released). "
           "<span class='line given key'>Grey</span>: lines as the released notebook gives them.</p>")


def _summary(analysis: Analysis) -> str:
    settings = analysis.settings
    return (f"<p class='meta'>Made {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC from the {len(analysis.students)} "
            f"notebooks in <code>submitted/</code>, with the released notebook's code set aside. "
            f"{len(analysis.pairs)} pairs flagged at a notebook score of {settings.threshold:.2f} or more. "
            f"k-grams of {settings.k} filtered characters, window {settings.window}; code held by more than "
            f"{settings.common_share:.0%} of the class does not count, and rarer code counts more. "
            "Score: the weight of the code two students share over the weight of the smaller side's code "
            "(1: all of it). This file reads the same offline.</p>")


def _parts_table(analysis: Analysis) -> str:
    lines = ["<h2 id='parts'>What each part weighs</h2><table><tr><th>part</th><th>share of a notebook's weight</th>"
             "</tr>"]
    for part in analysis.parts:
        lines.append(f"<tr><td><code>{_e(part)}</code></td><td>{analysis.part_weights.get(part, 0.0):.0%}</td></tr>")
    lines.append("</table><p class='note'>A part weighs what the code the class wrote for it weighs: short parts, and "
                 "parts whose answers converge, count little in a notebook's score.</p>")
    return "\n".join(lines)


def _pairs_table(analysis: Analysis) -> str:
    if not analysis.pairs:
        return "<p>No pair reaches the threshold.</p>"
    lines = ["<table class='pairs'><tr><th>#</th><th>students</th><th>score</th><th>code in common</th>"
             "<th>parts that match</th></tr>"]
    for number, pair in enumerate(analysis.pairs, start=1):
        a, b = pair.students
        parts = ", ".join(f"<code>{_e(p)}</code> {s:.2f}" for p, s in pair.parts.items()) or "none alone"
        link = f"<a href='#pair-{number}'>{_e(a)} · {_e(b)}</a>" if number <= PAIRS_SHOWN else f"{_e(a)} · {_e(b)}"
        lines.append(f"<tr><td>{number}</td><td>{link}</td><td>{pair.score:.2f}</td><td>{pair.shared:.0%}</td>"
                     f"<td>{parts}</td></tr>")
    return "\n".join(lines + ["</table>"])


def _groups(analysis: Analysis) -> str:
    found = analysis.groups()
    if not found:
        return "<p>None.</p>"
    items = "".join(f"<li>{len(group)} students: {', '.join(_e(s) for s in group)}</li>" for group in found)
    return (f"<ul>{items}</ul><p class='note'>Students joined by flagged pairs: a group of three or more may be a "
            "copy of a copy, or several students who copied from one.</p>")


def _unread(analysis: Analysis) -> str:
    if not analysis.unread:
        return ""
    items = "".join(f"<li>{_e(s)}: {_e(why)}</li>" for s, why in sorted(analysis.unread.items()))
    return f"<h2>Not compared</h2><ul>{items}</ul>"


def _side_by_side(analysis: Analysis) -> list[str]:
    out = []
    for number, pair in enumerate(analysis.pairs[:PAIRS_SHOWN], start=1):
        a, b = pair.students
        out.append(f"<section class='pair' id='pair-{number}'><h3>{number}. {_e(a)} · {_e(b)}: score "
                   f"{pair.score:.2f}, {pair.shared:.0%} of the code in common</h3>")
        rest = [part for part in analysis.parts if part not in pair.parts]
        out += [_part(analysis, a, b, part, True) for part in pair.parts]
        if rest:
            out.append("<details><summary>The other parts</summary>")
            out += [_part(analysis, a, b, part, False) for part in rest]
            out.append("</details>")
        out.append("</section>")
    if len(analysis.pairs) > PAIRS_SHOWN:
        out.append(f"<p>The {len(analysis.pairs) - PAIRS_SHOWN} weaker pairs are in the table only.</p>")
    return out or ["<p>No pair to show.</p>"]


def _part(analysis: Analysis, a: str, b: str, part: str, matches: bool) -> str:
    """One part of a pair: the two answers in two columns, the lines that share counted code marked."""
    index = {s: i for i, s in enumerate(analysis.students)}
    score = analysis.units[part].scores[index[a], index[b]]
    left, right = marks(analysis, a, b, part)
    columns = [_column(analysis, student, part, lines) for student, lines in ((a, left), (b, right))]
    heading = f"<h4><code>{_e(part)}</code>: {score:.2f}{' (matches)' if matches else ''}</h4>"
    return f"<div class='part'>{heading}<div class='columns'>{''.join(columns)}</div></div>"


def _column(analysis: Analysis, student: str, part: str, shared: set[int]) -> str:
    code = analysis.codes[student].get(part)
    if code is None:
        return f"<div class='column'><p class='who'>{_e(student)}</p><p>(no such cell)</p></div>"
    given = given_lines(analysis, student, part)
    rows = []
    for number, line in enumerate(code.text.split("\n")):
        kind = "given" if number in given else "shared" if number in shared else ""
        rows.append(f"<span class='line {kind}'><span class='no'>{number + 1}</span>{_e(line) or ' '}</span>")
    return (f"<div class='column'><p class='who'>{_e(student)}</p>"
            f"<pre class='code'>{''.join(rows)}</pre></div>")


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 80rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
h1 { font-size: 1.6rem; } h2 { border-bottom: 2px solid #0072B2; padding-bottom: .2rem; margin-top: 2.5rem; }
h3 { margin-top: 2rem; } h4 { margin: 1rem 0 .3rem; font-weight: 600; }
table { border-collapse: collapse; margin: .8rem 0; font-size: .92rem; }
th, td { border: 1px solid #ccc; padding: .3rem .5rem; vertical-align: top; text-align: left; }
th { background: #f0f4f8; } .note, .meta { color: #555; font-size: .9rem; }
.notice { border-left: 4px solid #E69F00; background: #fff8e6; padding: .2rem 1rem; }
.columns { display: flex; gap: 1rem; } .column { flex: 1 1 0; min-width: 0; }
.who { font-weight: 600; margin: .2rem 0; }
pre.code { margin: 0; font-size: .8rem; line-height: 1.35; background: #fafafa; border: 1px solid #ddd;
           padding: .4rem 0; overflow-x: auto; }
.line { display: block; padding: 0 .5rem; white-space: pre; }
.line.shared { background: #ffe08a; } .line.given { color: #999; }
.line.key { display: inline; padding: 0 .3rem; }
.no { display: inline-block; width: 2.2rem; color: #aaa; user-select: none; }
section.pair { border-top: 1px solid #ccc; margin-top: 1.5rem; }
summary { cursor: pointer; color: #0072B2; margin: .8rem 0; }
"""

_HTML = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; img-src data:; style-src 'unsafe-inline'">
<style>{style}</style></head>
<body>
{body}
</body></html>
"""
