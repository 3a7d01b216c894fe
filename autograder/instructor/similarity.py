"""``similarity()``: which submissions of an assignment share code beyond what the exercise gives everyone.

Runs in the instructor's command (``python -m autograder similarity ASSIGNMENT``), after grading. It
reads the students' notebooks under ``submitted/`` and the released one under ``release/`` as JSON
text: nothing handed in is run. It changes no grade and writes one page for the instructor,
``grades/similarity-<assignment>.html``, beside the grades: students are named there (and in
``--json``'s output), never in feedback.

**What is compared.** Each graded answer cell (one unit per ``grade_id``), and the code outside the
answer cells (cells a student added, given cells: :data:`OTHER`); the whole notebook's code gives the share
of code two students have in common, for the reader.

**How.** Each statement is written out again by ``ast.unparse`` (a compound statement's header alone:
``if mask is not None:``), so that layout, parentheses, quotes and line breaks do not change it, and then
tokenised by copydetect's ``filter_code``: names become ``V``, functions ``F``, classes ``O``, strings
``S``; comments and whitespace go. Renamed locals, rewritten comments, another layout and statements put in
another order then leave each statement the same. Its text is cut into k-grams of copydetect's default
noise threshold (k = 25 filtered characters), every one kept (copydetect's window of 1), none across two
statements, and hashed with copydetect's ``hashed_kgrams``. Python's ``hash()`` differs between processes,
so every fingerprint of a run is made in this one.

Then, as MOSS and Gradescope do, what everyone may share stops counting: each fingerprint of the released
notebook (stubs, signatures, docstrings, given code), and each fingerprint that more than half the class
(:attr:`Settings.common_share`) has in that unit. What remains is weighed by its rarity in the class,
``log(1 + N / df)`` over the N students. Two students' answers to a part are *alike* when one holds 90 %
(:attr:`Settings.same`) of the other's counted weight or more.

**Which pairs are flagged.** Short answers are expected to look alike, and some parts leave little room:
so an alike part counts by how rarely the class's pairs hand that part in as alike, ``-ln`` of their share
(:attr:`Unit.evidence`): a one-line mask that every pair writes alike counts 0; a long answer that only two
students share counts ``ln`` of the number of pairs. A pair's evidence is the sum over its alike parts
(:attr:`Pair.score`; ``one_pair_in`` is ``e`` to that power). A pair is flagged when its evidence reaches
``ln(pairs / 2)``: were the parts alike by chance alone, a class of its size would hold about two pairs so
alike (10.0 for 300 students; ``--threshold`` sets it). In a small class one part copied may stay below it:
the page lists the strongest pairs down to half the threshold apart. ``benchmarks/similarity.py`` measures
what the default finds on a class of 300 with known copies.

**Why copydetect** (0.5.0): MIT-licensed and maintained; it tokenises with Pygments and
fingerprints k-grams of tokens, as MOSS does, but runs here, offline: MOSS would upload the class's
code to a server. And it exposes its functions (``filter_code``, ``hashed_kgrams``) rather than only
whole-file comparisons, so that statement-wise fingerprints and the class-wide weighing above, which its
own detector lacks, can be built on them.

What it cannot see: code two students wrote from the same chapter of the book; a copy rewritten
by hand; help given in words; parts too short to leave room for variation. A flag is a reason
to look, not a verdict.
"""

from __future__ import annotations

import ast
import copy
import json
import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from copydetect.defaults import NOISE_THRESHOLD
from copydetect.utils import filter_code, hashed_kgrams
from scipy import sparse

from .gradebook import Course
from .pages import document, write
from .pages import escape as _e

#: The unit of the whole notebook's code, beside the parts (grade ids).
NOTEBOOK = "(notebook)"
#: By default a pair is flagged when, were its parts alike by chance alone, a class of this size would hold fewer
#: than this many pairs as alike: its evidence is at least ``ln(pairs / EXPECTED_BY_CHANCE)`` (10.0 for 300
#: students; ``benchmarks/similarity.py`` measures what that finds).
EXPECTED_BY_CHANCE = 2.0
#: A part is (nearly) the same in two notebooks when one holds this share of the other's counted code, or more.
SAME = 0.9
#: The code of a notebook outside its answer and test cells (cells a student added, given cells), one more unit.
OTHER = "(other cells)"
#: A notebook larger than this is not read (the grader refuses such a submission too); the
#: students with one are listed on the page.
MAX_NOTEBOOK_BYTES = 20 * 1024 * 1024
#: The code of one unit past this many characters is cut (a flood of cells must not stall the run).
MAX_UNIT_CHARACTERS = 200_000
#: The most pairs below the threshold listed (:attr:`Analysis.near`).
NEAR_SHOWN = 20
#: The most flagged pairs shown side by side on the page; the table lists them all.
PAIRS_SHOWN = 60


@dataclass(frozen=True)
class Settings:
    """How code is fingerprinted and pairs are scored.

    Attributes:
        threshold: the evidence (in nats) at which a pair is flagged (its alike parts met together, by the class's
            own answers, by one pair in e**threshold); ``None``: ``ln(pairs / EXPECTED_BY_CHANCE)`` of the class.
        k: k-gram length in filtered characters (copydetect's noise threshold).
        common_share: a fingerprint held by more than this share of the class (in a unit) stops counting.
        same: the share of the smaller side's counted code the other must hold for a part to be (nearly) the same.
    """

    threshold: float | None = None
    k: int = NOISE_THRESHOLD
    common_share: float = 0.5
    same: float = SAME


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
        fingerprints: the hashes of its statements' k-grams (:func:`statements`, :func:`fingerprinted`).
        lines: ``{fingerprint: the lines of text (from 0) of the statement it comes from}``, to mark them.
    """

    text: str
    fingerprints: set[int]
    lines: dict[int, set[int]] = field(default_factory=dict)


#: A string as copydetect's filter leaves it: ``S`` per piece (a docstring's lines are pieces), quotes around.
_STRINGS = re.compile(r'"?S+"?')
#: The bodies a compound statement holds: its header alone is the statement.
_BODIES = ("body", "orelse", "finalbody", "handlers")


def statements(code: str) -> list[tuple[str, int, int]]:
    """``[(text, first line, last line)]`` of each statement of ``code`` (lines from 1), written out again by
    ``ast.unparse``: a simple statement whole, a compound one's header alone (``if mask is not None:``, ``def
    f(x):``), its body's statements apart. So layout, parentheses, quotes and line breaks do not change a
    statement's text, and statements moved around keep theirs. Code that does not parse: its lines, as written."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return [(line, number, number) for number, line in enumerate(code.split("\n"), start=1) if line.strip()]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt):
            found.append(_statement(node))
    return found


def _statement(node: ast.stmt) -> tuple[str, int, int]:
    """One statement's text and lines (a compound statement's header: its bodies left out)."""
    inner = [s for name in _BODIES for s in (getattr(node, name, None) or []) if isinstance(s, ast.stmt)]
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    if not inner:
        return ast.unparse(node), first, node.end_lineno or node.lineno
    header = copy.copy(node)  # the same node with each body one `pass`
    for name in _BODIES:
        if getattr(node, name, None):
            setattr(header, name, [] if name == "handlers" else [ast.Pass()])
    return ast.unparse(header), first, max(node.lineno, min(s.lineno for s in inner) - 1)


def fingerprinted(text: str, settings: Settings) -> Code:
    """A unit's :class:`Code`: each statement's text (:func:`statements`) tokenised by copydetect's
    ``filter_code`` (names ``V``, functions ``F``, classes ``O``, strings ``S``; no comments, no spaces), and every
    k-gram of it hashed (a statement shorter than k: whole); no k-gram crosses from one statement to the next."""
    text = text[:MAX_UNIT_CHARACTERS]
    code = Code(text, set())
    for statement, first, last in statements(text):
        filtered = _STRINGS.sub("S", filter_code(statement, "answer.py", language="python")[0])
        if not filtered:
            continue
        hashes = [hash(filtered)] if len(filtered) <= settings.k else hashed_kgrams(filtered, settings.k).tolist()
        for fingerprint in hashes:
            code.fingerprints.add(fingerprint)
            code.lines.setdefault(fingerprint, set()).update(range(first - 1, last))
    return code


def submission_codes(submission: Submission, settings: Settings) -> dict[str, Code]:
    """``{unit: Code}`` of a submission: each part, and :data:`NOTEBOOK` (every code cell's statements). Each cell
    is fingerprinted once; a part of one cell is that cell's."""
    cells = [fingerprinted(text, settings) for text in submission.cells]
    codes = {part: cells[submission.part_cells[part][0]] if len(submission.part_cells.get(part, [])) == 1
             else fingerprinted(code, settings) for part, code in submission.parts.items()}
    answers = {index for indices in submission.part_cells.values() for index in indices}
    others = [index for index in range(len(cells)) if index not in answers]
    codes[OTHER] = fingerprinted("\n\n".join(submission.cells[i] for i in others), settings)
    codes[NOTEBOOK] = Code("\n\n".join(submission.cells), set().union(*(cell.fingerprints for cell in cells)))
    return codes


def released_hashes(released: Submission, settings: Settings) -> set[int]:
    """Every fingerprint of the released notebook's code cells (stubs, signatures, docstrings, given code)."""
    return set().union(*(fingerprinted(text, settings).fingerprints for text in released.cells))


# --------------------------------------------------------------------------------------
# The class
# --------------------------------------------------------------------------------------


@dataclass
class Pair:
    """Two students whose notebooks share code beyond the release.

    Attributes:
        score: the evidence, in nats: the sum, over the parts the two hand in (nearly) the same, of ``-ln`` of the
            share of the class's pairs that hand that part in as alike (:attr:`Unit.evidence`).
        shared: the share of the smaller side's fingerprints (released ones left out) the other also has,
            unweighted: how much of the code is the same.
        parts: ``{part: containment}`` of the parts (nearly) the same, the most telling first.
    """

    students: tuple[str, str]
    score: float
    shared: float
    parts: dict[str, float]

    @property
    def one_pair_in(self) -> float:
        """How rare the pair's alike parts are together, by the class's own answers: ``e**score`` pairs for one."""
        return math.exp(min(self.score, 700.0))

    def as_json(self) -> dict:
        """The pair as ``--json`` writes it."""
        return {"students": list(self.students), "score": round(self.score, 4), "shared": round(self.shared, 4),
                "one_pair_in": round(self.one_pair_in), "parts": {p: round(c, 4) for p, c in self.parts.items()}}


@dataclass
class Unit:
    """The class's weights in one unit.

    Attributes:
        weights: ``{fingerprint: weight}`` of the fingerprints that count (neither released nor common).
        totals: each student's weight (their counted fingerprints').
        scores: students × students containment: the weight two students share over the smaller side's (0 where
            a side has no counted code).
        evidence: students × students, for the pairs whose part is (nearly) the same (containment at least
            :attr:`Settings.same`): ``-ln`` of the share of the class's pairs whose containment is as high; 0
            elsewhere. A part the class often hands in alike (a one-line mask, a converging answer)
            gives little; a long answer that only these two share, a lot.
    """

    weights: dict[int, float]
    totals: np.ndarray
    scores: np.ndarray
    evidence: np.ndarray


@dataclass
class Analysis:
    """One assignment's similarity: the flagged pairs, and what the page needs to show them.

    Attributes:
        alike: per compared unit, the share of the class's pairs (both answered) that hand it in (nearly) the same:
            how little room it leaves.
        unread: ``{student: why}`` of the notebooks that could not be read.
        released: every k-gram hash of the released notebook; released_parts: ``{part: its released cell}``.
    """

    assignment: str
    students: list[str]
    parts: list[str]
    settings: Settings
    pairs: list[Pair]
    alike: dict[str, float]
    codes: dict[str, dict[str, Code]]
    units: dict[str, Unit]
    released: set[int]
    unread: dict[str, str] = field(default_factory=dict)
    released_parts: dict[str, str] = field(default_factory=dict)
    #: the strongest pairs below the threshold, with half its evidence or more (at most :data:`NEAR_SHOWN`): in a
    #: small class one copied part may stay below it
    near: list[Pair] = field(default_factory=list)

    @property
    def threshold(self) -> float:
        """The evidence at which a pair is flagged (:attr:`Settings.threshold`, else from the class's size)."""
        if self.settings.threshold is not None:
            return self.settings.threshold
        pairs = len(self.students) * (len(self.students) - 1) / 2
        return math.log(max(pairs, 1.0) / EXPECTED_BY_CHANCE)

    @property
    def compared(self) -> list[str]:
        """The units whose evidence adds up: each part, and the code outside the answer cells (:data:`OTHER`)."""
        return [*self.parts, OTHER]

    def evidence(self) -> np.ndarray:
        """Students × students: the evidence of each pair (:attr:`Pair.score`), summed over its alike parts."""
        return sum((self.units[unit].evidence for unit in self.compared), np.zeros((len(self.students),) * 2))

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
             for unit in [*parts, OTHER, NOTEBOOK]}
    alike = {unit: _alike_share(units[unit], settings) for unit in [*parts, OTHER]}
    analysis = Analysis(assignment, students, parts, settings, [], alike, codes, units, given,
                        {s.student: s.problem for s in submissions if s.problem}, dict(released.parts))
    analysis.pairs, analysis.near = _flagged(analysis)
    return analysis


def _unit(codes: list[Code | None], given: set[int], settings: Settings) -> Unit:
    """The weights, containments and evidence of one unit over the class (``None``: a student without it)."""
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
    smaller = np.minimum.outer(totals, totals)
    scores = np.where(smaller > 0, shared / np.maximum(smaller, 1e-12), 0.0)
    return Unit(weights, totals, np.minimum(scores, 1.0), _evidence(np.minimum(scores, 1.0), totals > 0, settings.same))


def _evidence(scores: np.ndarray, answered: np.ndarray, same: float) -> np.ndarray:
    """Per pair, ``-ln`` of the share of the class's pairs whose containment is at least theirs (a pair where a side
    has no code of its own there is not alike), where theirs is ``same`` or more; 0 elsewhere (:attr:`Unit.evidence`).
    """
    upper = np.triu_indices(len(scores), k=1)
    ranked = np.sort(np.where(answered[upper[0]] & answered[upper[1]], scores[upper], 0.0))
    if len(ranked) == 0:
        return np.zeros_like(scores)
    at_least = len(ranked) - np.searchsorted(ranked, scores, side="left")  # pairs as alike, each pair's own included
    evidence = -np.log(np.maximum(at_least, 1) / len(ranked))
    alike = (scores >= same) & np.outer(answered, answered)
    np.fill_diagonal(alike, False)
    return np.where(alike, evidence, 0.0)


def _alike_share(unit: Unit, settings: Settings) -> float:
    """The share of the class's pairs (both answered) whose answers to ``unit`` are (nearly) the same."""
    answered = unit.totals > 0
    upper = np.triu_indices(len(answered), k=1)
    both = answered[upper[0]] & answered[upper[1]]
    return float((unit.scores[upper][both] >= settings.same).mean()) if both.any() else 0.0


def _incidence(rows: list[list[int]], columns: int) -> sparse.csr_matrix:
    """A students × fingerprints matrix of ones."""
    indices = np.fromiter((c for row in rows for c in row), dtype=np.int64)
    pointers = np.cumsum([0, *(len(row) for row in rows)])
    return sparse.csr_matrix((np.ones(len(indices)), indices, pointers), shape=(len(rows), columns))


def _flagged(analysis: Analysis) -> tuple[list[Pair], list[Pair]]:
    """The pairs whose evidence reaches the threshold, strongest first; and the strongest below it, down to half
    the threshold (:attr:`Analysis.near`)."""
    total = analysis.evidence()
    threshold = max(analysis.threshold, 1e-9)
    rows, columns = np.nonzero(np.triu(total >= threshold / 2, k=1))
    pairs = sorted((_pair(analysis, total, i, j) for i, j in zip(rows.tolist(), columns.tolist(), strict=True)),
                   key=lambda pair: (-pair.score, -pair.shared, pair.students))
    return [p for p in pairs if p.score >= threshold], [p for p in pairs if p.score < threshold][:NEAR_SHOWN]


def _pair(analysis: Analysis, total: np.ndarray, i: int, j: int) -> Pair:
    a, b = analysis.students[i], analysis.students[j]
    alike = {unit: float(analysis.units[unit].scores[i, j]) for unit in analysis.compared
             if analysis.units[unit].evidence[i, j] > 0}
    parts = dict(sorted(alike.items(), key=lambda item: -analysis.units[item[0]].evidence[i, j]))
    return Pair((a, b), float(total[i, j]), _shared_share(analysis, a, b), parts)


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


def shared_lines(code: Code, common: set[int]) -> set[int]:
    """The lines (from 0) of ``code.text`` whose statements hold a fingerprint in ``common``."""
    return set().union(*(code.lines.get(fingerprint, set()) for fingerprint in common))


def marks(analysis: Analysis, a: str, b: str, part: str) -> tuple[set[int], set[int]]:
    """The lines of ``a``'s and ``b``'s ``part`` that share counted code (released and common code left out)."""
    code_a, code_b = analysis.codes[a].get(part), analysis.codes[b].get(part)
    if code_a is None or code_b is None:
        return set(), set()
    counted = analysis.units[part].weights
    common = {f for f in code_a.fingerprints & code_b.fingerprints if f in counted}
    return shared_lines(code_a, common), shared_lines(code_b, common)


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
    return write(Path(path), page(analysis))


def page(analysis: Analysis) -> str:
    """The HTML page: the notice, the settings, the parts' weights, the flagged pairs and groups, then each
    pair's answers side by side."""
    title = f"Similar submissions: {analysis.assignment}"
    body = [f"<h1>{_e(title)}</h1>", _NOTICE, _summary(analysis), _parts_table(analysis),
            "<h2 id='pairs'>Flagged pairs, strongest first</h2>", _pairs_table(analysis, analysis.pairs),
            "<h2 id='near'>Below the threshold</h2>", _near(analysis),
            "<h2 id='groups'>Groups</h2>", _groups(analysis), _unread(analysis),
            "<h2 id='side-by-side'>Side by side</h2>", _LEGEND, *_side_by_side(analysis)]
    return document(title, _STYLE, "\n".join(part for part in body if part))


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
            f"{len(analysis.pairs)} pairs flagged. Each statement is compared as written out again (names, comments, "
            f"layout and the order of statements do not count), by its k-grams of {settings.k} tokens' characters; "
            f"code held by more than {settings.common_share:.0%} of the class does not count. A part is "
            f"<em>alike</em> in two notebooks when one holds {settings.same:.0%} of the other's counted code or more. "
            "A pair's evidence adds up, over its alike parts, how rarely the class's pairs hand that part in so alike "
            f"(<code>-ln</code> of their share); a pair is flagged at {analysis.threshold:.1f} or more: its alike parts "
            f"together are met by fewer than one pair in {math.exp(analysis.threshold):,.0f} by the class's own "
            f"answers, so that by chance alone a class of {len(analysis.students)} would hold about "
            f"{EXPECTED_BY_CHANCE:g} pairs so alike. This file reads the same offline.</p>")


def _parts_table(analysis: Analysis) -> str:
    lines = ["<h2 id='parts'>How much room each part leaves</h2><table><tr><th>part</th>"
             "<th>pairs of the class that hand it in alike</th></tr>"]
    for unit in analysis.compared:
        lines.append(f"<tr><td><code>{_e(unit)}</code></td><td>{analysis.alike.get(unit, 0.0):.1%}</td></tr>")
    lines.append("</table><p class='note'>A part that many pairs hand in alike (a one-line mask, answers that "
                 "converge) tells little when two students' answers are alike; a long answer that few pairs share "
                 "tells a lot. <code>(other cells)</code>: the code outside the answer cells.</p>")
    return "\n".join(lines)


def _near(analysis: Analysis) -> str:
    if not analysis.near:
        return "<p>No other pair has half the threshold's evidence.</p>"
    return ("<p class='note'>Not flagged: the strongest pairs with half the threshold's evidence or more. In a small "
            "class one copied part can stay below the threshold; the parts named here are alike.</p>"
            + _pairs_table(analysis, analysis.near, first=len(analysis.pairs) + 1))


def _pairs_table(analysis: Analysis, pairs: list[Pair], first: int = 1) -> str:
    if not pairs:
        return "<p>No pair reaches the threshold.</p>"
    lines = ["<table class='pairs'><tr><th>#</th><th>students</th><th>evidence</th><th>one pair in</th>"
             "<th>code in common</th><th>parts alike</th></tr>"]
    for number, pair in enumerate(pairs, start=first):
        a, b = pair.students
        parts = ", ".join(f"<code>{_e(p)}</code> {c:.0%}" for p, c in pair.parts.items()) or "none"
        link = f"<a href='#pair-{number}'>{_e(a)} · {_e(b)}</a>" if number <= PAIRS_SHOWN else f"{_e(a)} · {_e(b)}"
        lines.append(f"<tr><td>{number}</td><td>{link}</td><td>{pair.score:.1f}</td><td>{pair.one_pair_in:,.0f}</td>"
                     f"<td>{pair.shared:.0%}</td><td>{parts}</td></tr>")
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
    for number, pair in enumerate([*analysis.pairs, *analysis.near][:PAIRS_SHOWN], start=1):
        a, b = pair.students
        below = " (below the threshold, not flagged)" if number > len(analysis.pairs) else ""
        out.append(f"<section class='pair' id='pair-{number}'><h3>{number}. {_e(a)} · {_e(b)}{below}: evidence "
                   f"{pair.score:.1f} (one pair in {pair.one_pair_in:,.0f}), {pair.shared:.0%} of the code in "
                   "common</h3>")
        rest = [part for part in analysis.compared if part not in pair.parts]
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
    alike = f" (alike; {analysis.alike.get(part, 0.0):.1%} of the class's pairs are)" if matches else ""
    heading = f"<h4><code>{_e(part)}</code>: {score:.0%} of the smaller side's counted code in common{alike}</h4>"
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
