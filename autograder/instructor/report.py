"""``report()``: what a class got right and wrong, on one HTML page an instructor reads after grading.

Runs in the instructor's command (``python -m autograder report``), after ``grade``. It reads
only what grading wrote: ``grades/<assignment>.csv`` (each student's score, status and message
per part, overrides included), the state files (how long each submission took to grade), the
``submitted/`` folders (who handed in) and the gradebook's students. Every message in that
table came from the judge, but a part of it may quote what a submission raised: all text is
escaped, and the page loads nothing from elsewhere (its figures are embedded PNGs), so it
reads the same offline.

The state files also hold the time each part's checks took in the kernel (the grades table
does not: it is the same, byte for byte, when a notebook is regraded). The page, per assignment: the scores (histogram, counts), each part's difficulty (share with
full marks, mean, discrimination), the mistakes the class made (the judge's messages grouped
by what they say, numbers and shapes normalised away: :func:`mistake_of`), what went wrong
with grading itself (timeouts, kernels killed, submissions the grader failed on), the time
grading and training took against their limits, and the scores set by hand. Given several
assignments, a students × assignments table of totals comes first.
"""

from __future__ import annotations

import base64
import importlib
import json
import os
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable
from urllib.parse import quote

from ..grading.verdict import PartStatus
from ..judge import KNOWN_MISTAKE
from ..parts import ArgumentCheck
from .grade import read_state
from .gradebook import Course, GradebookError, has_gradebook, manual_scores, read_csv, student_ids
from .pages import document, write
from .pages import escape as _e

#: Statuses of a wrong answer: the judge rejected what the submission's code did.
WRONG = (PartStatus.FAILED, PartStatus.ERROR)
#: Words of an ``error`` message that mean the grading run failed the part, not the answer.
GRADING_TROUBLE = ("kernel died", "ran out of its", "kernel was lost", "time limit was reached")
#: The most students named in one group of the report; the rest are counted.
NAMES_SHOWN = 40
#: A part's time above this share of its limit is "close to the limit".
CLOSE_TO_LIMIT = 0.8

# A number as messages write it (not the digits inside a name such as ``float32`` or ``ch03``).
_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+)(?![\w])|\b(?:nan|inf)\b")
# Two or more numbers in a row (a shape, an index, a list of values), once each is ``#``.
_NUMBERS = re.compile(r"#(?:\s*[,;x×]?\s*#)+")


# --------------------------------------------------------------------------------------
# What grading wrote
# --------------------------------------------------------------------------------------


@dataclass
class Row:
    """One student's result on one part, as ``grades/<assignment>.csv`` holds it."""

    student: str
    part: str
    score: float
    max_score: float
    status: str
    message: str
    auto_score: float
    seconds: float | None
    #: a digest of what the answer returned on the visible case it failed (``PartResult.returned``, state files)
    returned: str | None = None

    @property
    def name(self) -> str:
        """The part as the assignment names it: the grade id without ``test_``."""
        return self.part.removeprefix("test_")


@dataclass
class Assignment:
    """One assignment's grades and who handed it in.

    Attributes:
        submitted: students with a folder under ``submitted/<student>/<assignment>/``.
        grading_seconds: per graded student, how long grading their submission took (state files).
        time_limits: ``{part name: seconds}`` of the parts with a time limit of their own.
    """

    name: str
    rows: list[Row]
    submitted: list[str]
    grading_seconds: dict[str, float] = field(default_factory=dict)
    time_limits: dict[str, float] = field(default_factory=dict)
    #: graded students whose every answer was left as released (the state files' ``unanswered``)
    blank: list[str] = field(default_factory=list)
    #: ``{part: the part it checks the arguments of}`` for the parts that check bad arguments (``ArgumentCheck``)
    argument_parts: dict[str, str] = field(default_factory=dict)
    #: ``{student with no folder: the student whose folder holds the same files}``: a folder renamed after grading
    renamed: dict[str, str] = field(default_factory=dict)

    @property
    def did_not_run(self) -> list[str]:
        """Graded students none of whose parts was judged on its results: every part an error, a timeout or missing
        (a notebook that could not be read or run, a kernel lost on every part)."""
        unjudged = (PartStatus.ERROR, PartStatus.TIMEOUT, PartStatus.MISSING)
        judged = {row.student for row in self.rows if PartStatus(row.status) not in unjudged}
        return sorted(set(self.graded) - judged)

    @property
    def answered(self) -> list[str]:
        """The graded students who handed in answers that ran: neither :attr:`blank` nor :attr:`did_not_run`."""
        left_out = set(self.blank) | set(self.did_not_run)
        return [student for student in self.graded if student not in left_out]

    @property
    def graded(self) -> list[str]:
        return sorted({row.student for row in self.rows})

    @property
    def not_graded(self) -> list[str]:
        """Handed in, yet without grades: the grader failed on them (``grade`` says why; run it again)."""
        return sorted(set(self.submitted) - set(self.graded))

    #: ``{test grade id: its statement and answer cells}``, in the source notebook's order, where it is known
    texts: dict[str, PartText] = field(default_factory=dict)

    @property
    def parts(self) -> list[str]:
        """The graded parts, in the assignment's order; those it does not know, as the grades table has them."""
        found = list(dict.fromkeys(row.part for row in self.rows))
        return [part for part in self.texts if part in found] + [part for part in found if part not in self.texts]

    @property
    def max_total(self) -> float:
        return sum({row.part: row.max_score for row in self.rows}.values())

    def totals(self) -> dict[str, float]:
        """``{student: total score}`` of the graded students (overrides included)."""
        totals: dict[str, float] = defaultdict(float)
        for row in self.rows:
            totals[row.student] += row.score
        return dict(totals)


def read_rows(path: Path) -> list[Row]:
    """The rows of a grades table (``gradebook.read_csv``), without times (the state files hold them: :func:`load`)."""
    return [Row(student=row["student"], part=row["part"], score=row["score"], max_score=row["max_score"],
                status=row["status"], message=row.get("message") or "", auto_score=row["auto_score"], seconds=None)
            for row in read_csv(path)]


def load(course: Course, name: str) -> Assignment:
    """``name``'s grades in ``course``; FileNotFoundError if it was never graded."""
    table = course.root / "grades" / f"{name}.csv"
    if not table.is_file():
        raise FileNotFoundError(f"no grades of {name} in {table.parent}: run `python -m autograder grade {name}` first")
    rows = read_rows(table)
    if has_gradebook(course):  # the gradebook is the record: a score set by hand since the last grade run counts
        by_hand = manual_scores(course, name)
        for row in rows:
            row.score = by_hand.get((row.student, row.part), row.auto_score)
    assignment = Assignment(name, rows, course.students(name))
    by_part = {(row.student, row.part): row for row in rows}
    for student in assignment.graded:
        state = read_state(course, name, student)
        if isinstance(state.get("seconds"), (int, float)):
            assignment.grading_seconds[student] = float(state["seconds"])
        unanswered = state.get("unanswered")
        if isinstance(unanswered, dict) and unanswered and all(value is True for value in unanswered.values()):
            assignment.blank.append(student)
        for result in state.get("results", []):  # each part's time in the kernel, where measured; what it returned
            row = by_part.get((student, result.get("part")))
            if row is not None and isinstance(result.get("seconds"), (int, float)):
                row.seconds = float(result["seconds"])
            if row is not None and isinstance(result.get("returned"), str):
                row.returned = result["returned"]
    assignment.time_limits = _time_limits(name)
    assignment.texts = Links(course, course.root).part_texts(name)
    assignment.argument_parts = _argument_parts(name, assignment.parts)
    assignment.renamed = _renamed(course, name, assignment.submitted)
    return assignment


def _argument_parts(name: str, parts: list[str]) -> dict[str, str]:
    """``{grade id: grade id of its part}`` of the test cells whose check is an ``ArgumentCheck`` (a part's bad
    arguments, graded apart), read from the checks' declarations."""
    try:
        checks = importlib.import_module(f"autograder.ch{name}")
    except ModuleNotFoundError:
        return {}
    found = {}
    for part in parts:
        declaration = getattr(getattr(checks, "check_" + part.removeprefix("test_"), None), "declaration", None)
        if isinstance(declaration, ArgumentCheck) and f"test_{declaration.part}" in parts:
            found[part] = f"test_{declaration.part}"
    return found


def _renamed(course: Course, name: str, submitted: list[str]) -> dict[str, str]:
    """``{student: other}`` for each student graded once whose folder is gone while ``other``'s folder holds the
    same files (the state files' fingerprints, which hash the files and not the folder's name, are equal)."""
    states = course.root / "grades" / ".state" / name
    fingerprints = {path.stem: read_state(course, name, path.stem).get("fingerprint") for path in states.glob("*.json")}
    current = {fingerprints.get(student): student for student in submitted if fingerprints.get(student)}
    return {student: current[fingerprint] for student, fingerprint in sorted(fingerprints.items())
            if student not in submitted and fingerprint in current}



def _time_limits(name: str) -> dict[str, float]:
    """The parts of ``name`` with a time limit (the checks' ``TIME_LIMITS``), by part name."""
    try:
        checks = importlib.import_module(f"autograder.ch{name}")
    except ModuleNotFoundError:
        return {}
    return dict(getattr(checks, "TIME_LIMITS", {}))


def resolve(course: Course, given: str) -> str:
    """An assignment id from an id or its number (``03`` -> ``03_masking``), as ``grades/`` names them, else as the
    course's ``source/`` does (an assignment not graded yet)."""
    if (course.root / "grades" / f"{given}.csv").is_file():
        return given
    found = sorted(p.stem for p in (course.root / "grades").glob(f"{given}_*.csv"))
    if len(found) == 1:
        return found[0]
    sources = sorted(p.name for p in course.folder("source", "").glob(f"{given}_*") if p.is_dir())
    return sources[0] if len(sources) == 1 else given


# --------------------------------------------------------------------------------------
# The numbers
# --------------------------------------------------------------------------------------


@dataclass
class PartSummary:
    """How the class did on one part.

    Attributes:
        full_marks: the share of graded students with all its points.
        mean: the mean score; max_score: its points.
        discrimination: the correlation, over the graded students, of the part's score with the
            rest of their total (``None`` where either does not vary): near 0, the part does not
            separate strong submissions from weak ones; negative, strong ones fail it.
    """

    name: str
    max_score: float
    full_marks: float
    mean: float
    discrimination: float | None


def part_summaries(assignment: Assignment) -> list[PartSummary]:
    """One summary per part, in the assignment's order, named as the page names it (:func:`part_label`). Full marks and the mean count every graded student;
    the discrimination only those who handed in answers that ran (:attr:`Assignment.answered`): a blank notebook
    fails every part at once, and would make every part look as if it told strong students from weak ones."""
    totals, answered = assignment.totals(), set(assignment.answered)
    summaries = []
    for part in assignment.parts:
        rows = [row for row in assignment.rows if row.part == part]
        scores = [row.score for row in rows]
        ran = [row for row in rows if row.student in answered]
        summaries.append(PartSummary(part_label(assignment, part), rows[0].max_score,
                                     sum(row.score >= row.max_score for row in rows) / len(rows),
                                     statistics.fmean(scores),
                                     _correlation([row.score for row in ran],
                                                  [totals[row.student] - row.score for row in ran])))
    return summaries


def _correlation(xs: list[float], ys: list[float]) -> float | None:
    """Pearson's correlation of ``xs`` and ``ys``; ``None`` where one of them is constant (or fewer than 3)."""
    if len(xs) < 3 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return None
    return statistics.correlation(xs, ys)


def mistake_of(row: Row) -> str:
    """What a failure message says, without what differs from student to student.

    The first line of the judge's message is the problem (the next lines name the case and its
    inputs, which differ per student); the part's name in front is dropped, every number becomes
    ``#`` and a run of numbers (a shape, an index, values) one ``#…``. A mistake the judge
    recognised (``judge.KNOWN_MISTAKE``) comes first, as its declaration words it. Two students who made the
    same mistake on different hidden inputs get the same text; different mistakes, as far as the
    judge tells them apart, different ones.
    """
    first = row.message.strip().split("\n", 1)[0].strip()
    said, known, mistake = first.partition(KNOWN_MISTAKE)  # a mistake the judge recognised is named as declared
    named = re.match(r"(\w+): ", said)
    if named and row.name.startswith(named.group(1)):  # the part's name (or its answer's) in front
        said = said[named.end():]
    text = " ".join(_NUMBERS.sub("#…", _NUMBER.sub("#", said)).split())
    return f"{mistake.strip()} ({text})" if known else text or "(no message)"


def is_grading_trouble(row: Row) -> bool:
    """Whether a part went wrong because of the run rather than the answer: a timeout, a kernel killed or lost,
    a part waiting for an instructor's look."""
    if row.status in (PartStatus.TIMEOUT, PartStatus.NEEDS_A_LOOK):
        return True
    return row.status == PartStatus.ERROR and any(words in row.message for words in GRADING_TROUBLE)


@dataclass
class Group:
    """Students whose results on one part say the same thing."""

    part: str
    text: str
    students: list[str]
    example: str
    share: float  # of the graded students


def mistake_groups(assignment: Assignment) -> list[Group]:
    """The wrong answers (failed, or raised), grouped per part by :func:`mistake_of` and, where the judge kept it,
    by what the answer returned on the same visible case (two mistakes whose messages read alike once their
    numbers are set aside stay apart); in the assignment's order, the largest group first within a part.

    A blank answer is a group of its own ("not answered"); the notebooks left blank, or that did not run, are
    counted once in the counts line, not part by part; a missing notebook is not a mistake (the counts say who
    handed nothing in), nor is grading trouble (:func:`trouble_groups`).
    """
    answered = set(assignment.answered)
    rows = [row for row in assignment.rows if row.status in WRONG and not is_grading_trouble(row)
            and row.student in answered]
    return _grouped(rows, mistake_of, assignment, by_returned=True)


def trouble_groups(assignment: Assignment) -> list[Group]:
    """The parts that grading itself got wrong (:func:`is_grading_trouble`), grouped as mistakes are."""
    rows = [row for row in assignment.rows if is_grading_trouble(row)]
    return _grouped(rows, lambda row: f"{row.status}: {mistake_of(row)}", assignment)


def _grouped(rows: list[Row], text_of, assignment: Assignment, by_returned: bool = False) -> list[Group]:
    """``rows`` grouped by part and ``text_of``, and by :attr:`Row.returned` where ``by_returned``: where one text
    holds several returned values, each group's text says which of them it is."""
    by_key: dict[tuple[str, str, str | None], list[Row]] = defaultdict(list)
    for row in rows:
        by_key[(row.part, text_of(row), row.returned if by_returned else None)].append(row)
    kinds: dict[tuple[str, str], list[tuple[str, str, str | None]]] = defaultdict(list)
    for key in sorted(by_key, key=lambda key: -len(by_key[key])):
        kinds[key[:2]].append(key)
    graded = max(1, len(assignment.graded))
    groups = []
    for key, members in by_key.items():
        students = sorted({row.student for row in members})
        groups.append(Group(key[0], key[1] + _which(key, kinds[key[:2]]), students, members[0].message,
                            len(students) / graded))
    order = {part: index for index, part in enumerate(assignment.parts)}
    return sorted(groups, key=lambda group: (order.get(group.part, len(order)), -len(group.students), group.text))


def _which(key: tuple[str, str, str | None], same_text: list[tuple[str, str, str | None]]) -> str:
    """Where several groups share a text: which one ``key`` is (its returned values, or hidden cases only)."""
    if len(same_text) < 2:
        return ""
    returned = [other for other in same_text if other[2] is not None]
    if key[2] is None:
        return " [not compared on a visible case]"
    return f" [returned values {returned.index(key) + 1} of {len(returned)} on the same visible case]"


def overrides(assignment: Assignment) -> list[Row]:
    """The rows whose score was set by hand in the formgrader (the gradebook's, which the CSV's ``score`` is)."""
    return [row for row in assignment.rows if row.score != row.auto_score]


# --------------------------------------------------------------------------------------
# The page
# --------------------------------------------------------------------------------------


def report(assignments: list[str], *, course_dir: str | Path = ".", output: str | Path | None = None) -> Path:
    """Write the class report of ``assignments`` (ids, or their numbers) of the course at ``course_dir``.

    Returns the page's path: ``output``, else ``grades/report-<assignment>.html`` (several:
    their ids joined by ``+``).

    Raises:
        FileNotFoundError: an assignment that has no grades table (it was never graded).
        ValueError: no assignment given.
    """
    if not assignments:
        raise ValueError("name at least one assignment, e.g. 03_masking")
    course = Course.open(Path(course_dir))
    loaded = [load(course, resolve(course, name)) for name in assignments]
    roster = sorted(set(student_ids(course)) | {s for a in loaded for s in a.submitted} |
                    {s for a in loaded for s in a.graded})
    path = Path(output) if output is not None else course.root / "grades" / (
        "report-" + "+".join(a.name for a in loaded) + ".html")
    return write(path, _page(loaded, roster, Links(course, path.parent.resolve())))


# --------------------------------------------------------------------------------------
# What the page links to
# --------------------------------------------------------------------------------------

#: The largest submitted notebook whose answers the page quotes (the grader's own bound is smaller).
QUOTED_NOTEBOOK_BYTES = 8 * 2**20
#: The most characters of one answer cell the page quotes.
QUOTED_ANSWER_CHARACTERS = 4000


@dataclass
class PartText:
    """What the assignment says of one graded part: its statement (the markdown cells before its answers, as the
    source notebook has it) and the grade ids of its answer cells."""

    statement: str
    answers: list[str]


@dataclass
class Links:
    """Where the page's links lead, relative to the page in ``directory``: the files of the course."""

    course: Course
    directory: Path

    def href(self, target: Path) -> str:
        """``target`` as a link from the page: relative, each name percent-encoded (any student id is safe)."""
        return "/".join(quote(name) for name in Path(os.path.relpath(target.resolve(), self.directory)).parts)

    def student_files(self, assignment: str, student: str) -> list[tuple[str, str]]:
        """``[(label, link)]`` of a student's feedback page and graded notebook, those that exist."""
        found = []
        for label, step, suffix in (("feedback", "feedback", ".html"), ("graded notebook", "autograded", ".ipynb")):
            folder = self.course.folder(step, assignment, student)
            files = sorted(folder.glob(f"*{suffix}")) if folder.is_dir() else []
            if files:
                found.append((label, self.href(files[0])))
        return found

    def part_texts(self, assignment: str) -> dict[str, PartText]:
        """``{test grade id: PartText}`` from the source notebook (the instructor's); ``{}`` where there is none.
        A test cell right after another (a part's bad arguments) shares the statement and answers of the one
        before it."""
        try:
            cells = json.loads(self.course.source_notebook(assignment).read_text(encoding="utf-8"))["cells"]
        except (GradebookError, OSError, ValueError, KeyError):
            return {}
        texts, statement, answers = {}, [], []
        for cell in cells:
            grading = (cell.get("metadata") or {}).get("nbgrader") or {}
            source = "".join(cell.get("source") or "")
            if grading.get("grade") and cell.get("cell_type") == "code":
                last = texts[list(texts)[-1]] if texts and not statement and not answers else None
                texts[grading.get("grade_id", "")] = last or PartText("\n\n".join(statement), answers)
                statement, answers = [], []
            elif cell.get("cell_type") == "markdown":
                statement.append(source)
            elif grading.get("solution"):
                answers.append(grading.get("grade_id", ""))
        return texts

    def answers(self, assignment: str, student: str, grade_ids: list[str]) -> str:
        """The code a student handed in for the answer cells ``grade_ids`` (the submitted notebook, read as text,
        never run), each cut at :data:`QUOTED_ANSWER_CHARACTERS`; or why it cannot be shown."""
        folder = self.course.folder("submitted", assignment, student)
        notebooks = sorted(folder.glob("*.ipynb")) if folder.is_dir() else []
        if not notebooks:
            return "(no notebook in the submission)"
        if notebooks[0].stat().st_size > QUOTED_NOTEBOOK_BYTES:
            return f"(not quoted: the notebook is {notebooks[0].stat().st_size / 2**20:.0f} MB)"
        try:
            cells = json.loads(notebooks[0].read_text(encoding="utf-8", errors="replace"))["cells"]
        except (ValueError, KeyError, TypeError):
            return "(the notebook cannot be read as JSON)"
        code = []
        for cell in cells if isinstance(cells, list) else []:
            grading = (cell.get("metadata") or {}).get("nbgrader") if isinstance(cell, dict) else None
            if isinstance(grading, dict) and grading.get("grade_id") in grade_ids:
                source = cell.get("source") or ""
                text = "".join(source) if isinstance(source, list) else str(source)
                code.append(_shortened(text, lines=10**6, characters=QUOTED_ANSWER_CHARACTERS))
        return "\n\n".join(code) if code else "(no answer cell of this part in the notebook)"


# --------------------------------------------------------------------------------------
# The page
# --------------------------------------------------------------------------------------


def _page(assignments: list[Assignment], roster: list[str], links: Links) -> str:
    from . import report_figures as figures

    title = "Class report: " + ", ".join(a.name for a in assignments)
    body = [f"<h1>{_e(title)}</h1>",
            f"<p class='meta'>Made {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC from the grades tables in "
            "<code>grades/</code>. Every figure and table is in this file: it reads the same offline. It names "
            "students and quotes their answers: it is for instructors, never for feedback.</p>"]
    if len(assignments) > 1:
        body += _across(assignments, roster, figures)
    for assignment in assignments:
        body += _assignment_section(assignment, roster, figures, links)
    return document(title, _STYLE, "\n".join(body))


def _across(assignments: list[Assignment], roster: list[str], figures) -> list[str]:
    """The students × assignments table of totals, each assignment's mean, and who missed a hand-in."""
    rows = ["<h2 id='across'>Across assignments</h2>", _figure(figures.totals_heatmap(assignments, roster),
            "Each student's total on each assignment, as a share of its points (blank: no grade)."),
            "<table><tr><th>assignment</th><th>graded</th><th>class mean</th><th>missed it</th></tr>"]
    for assignment in assignments:
        totals = list(assignment.totals().values())
        mean = f"{statistics.fmean(totals):.2f} / {assignment.max_total:g}" if totals else "—"
        missed = [s for s in roster if s not in assignment.submitted]
        rows.append(f"<tr><td><a href='#{_e(_anchor(assignment.name))}'>{_e(assignment.name)}</a></td>"
                    f"<td>{len(totals)}</td><td>{mean}</td><td>{len(missed)}: {_names(missed)}</td></tr>")
    return rows + ["</table>"]


@dataclass
class _Section:
    """One assignment's section as it is written: its data, its parts' texts, and where its names link."""

    assignment: Assignment
    texts: dict[str, PartText]
    links: Links

    def student(self, student: str) -> str:
        """The id of a student's row in the section's table of students."""
        return _anchor(f"{self.assignment.name}-student-{student}")

    def part(self, part: str) -> str:
        """A part's name, linked to its statement where the source notebook has one."""
        label = _e(part_label(self.assignment, part))
        if part not in self.texts:
            return f"<code>{label}</code>"
        return f"<a href='#{_e(_anchor(f'{self.assignment.name}-statement-{part}'))}'><code>{label}</code></a>"

    def names(self, students: list[str]) -> str:
        return _names(students, lambda student: self.student(student))


def part_label(assignment: Assignment, part: str) -> str:
    """A part as the page names it: ``masked_attention``, its bad arguments ``masked_attention · bad arguments``."""
    parent = assignment.argument_parts.get(part)
    return f"{parent.removeprefix('test_')} · bad arguments" if parent else part.removeprefix("test_")


def _counts(assignment: Assignment, missing: list[str]) -> str:
    """``23 submitted: 1 blank, 2 did not run; 23 graded, 0 not graded, 0 missing``."""
    return (f"{len(assignment.submitted)} submitted: {len(assignment.blank)} blank, "
            f"{len(assignment.did_not_run)} did not run; {len(assignment.graded)} graded, "
            f"{len(assignment.not_graded)} not graded, {len(missing)} missing")


def _assignment_section(assignment: Assignment, roster: list[str], figures, links: Links) -> list[str]:
    totals = assignment.totals()
    missing = [s for s in roster if s not in assignment.submitted and s not in totals]
    section = _Section(assignment, assignment.texts, links)
    out = [f"<h2 id='{_e(_anchor(assignment.name))}'>{_e(assignment.name)}</h2>",
           f"<p class='counts'>{_counts(assignment, missing)}</p>"]
    if assignment.blank or assignment.did_not_run:
        out.append(f"<p>Blank (every answer left as released): {section.names(assignment.blank)}. Did not run (no "
                   f"part judged on its results): {section.names(assignment.did_not_run)}. Both are counted here "
                   "once, and left out of the mistakes and the discrimination below.</p>")
    if missing:
        out.append(f"<p>Missing (no submission): {_names(missing)}</p>")
    for old, new in assignment.renamed.items():
        out.append(f"<p class='trouble'>{_e(old)} has no folder now, and {_e(new)}'s folder holds the same files "
                   f"that {_e(old)}'s did: a folder renamed after grading? If so, remove the old id from the "
                   f"gradebook (<code>nbgrader db student remove {_e(old)}</code>) and its state file "
                   f"(<code>grades/.state/{_e(assignment.name)}/{_e(old)}.json</code>).</p>")
    if not totals:
        return out + ["<p>No graded submission yet.</p>"]
    values, summaries = list(totals.values()), part_summaries(assignment)
    groups = mistake_groups(assignment)
    out += ["<div class='pair'>",
            _figure(figures.score_histogram(values, assignment.max_total),
                    f"Totals of the {len(values)} graded submissions out of {assignment.max_total:g} points "
                    f"(mean {statistics.fmean(values):.2f}, median {statistics.median(values):g})."),
            _figure(figures.part_bars(summaries), "The share of the class with full marks on each part, "
                                                  "the hardest at the top."),
            "</div>", "<h3>Parts, hardest first</h3>", _parts_table(section, summaries)]
    out += ["<h3>Mistakes the class made</h3>",
            "<p>The judge's messages per part, grouped by what they say (numbers, shapes and indices set aside) "
            "and, where the answers failed the same visible case, by what they returned on it: two mistakes whose "
            "messages read alike stay apart. In the assignment's order, the largest group first. The example is "
            "one student's own message, as their feedback shows it; <em>answers</em> shows each student's code "
            "for the part.</p>",
            _groups_table(section, groups, "No wrong answers.", answers=True)]
    out += ["<h3>What went wrong with grading</h3>", _trouble(section)]
    out += ["<h3>Time</h3>", *_time(assignment, figures)]
    out += ["<h3>Scores set by hand</h3>", _overrides_table(section, overrides(assignment))]
    out += _similar(section)
    out += _students_table(section, totals)
    out += _answers_of_groups(section, groups)
    out += _statements(section)
    return out


#: Below this many students who handed in answers that ran, the discrimination is a hint only.
SMALL_CLASS = 30


def _parts_table(section: _Section, summaries: list[PartSummary]) -> str:
    assignment = section.assignment
    by_part = dict(zip(assignment.parts, summaries, strict=True))
    main = [part for part in assignment.parts if part not in assignment.argument_parts]
    main.sort(key=lambda part: (by_part[part].full_marks, by_part[part].mean / max(by_part[part].max_score, 1e-9)))
    lines = ["<table><tr><th>part</th><th>points</th><th>full marks</th><th>mean</th>"
             "<th title='correlation of the part with the rest of the total'>discrimination</th></tr>"]
    for part in main:
        for shown in [part] + [sub for sub, parent in assignment.argument_parts.items() if parent == part]:
            summary = by_part[shown]
            index = "—" if summary.discrimination is None else f"{summary.discrimination:+.2f}"
            css = " class='sub'" if shown != part else ""
            lines.append(f"<tr{css}><td>{section.part(shown)}</td><td>{summary.max_score:g}</td>"
                         f"<td>{summary.full_marks:.0%}</td><td>{summary.mean:.2f}</td><td>{index}</td></tr>")
    answered = len(assignment.answered)
    lines.append(f"</table><p class='note'>Discrimination: the correlation of the part's score with the rest of "
                 f"the total, over the {answered} students who handed in answers that ran (blank notebooks and "
                 "notebooks that did not run are left out: they fail every part at once). Near 0, the part does not "
                 "separate strong submissions from weak ones; below 0, strong submissions fail it more often: read "
                 "its statement again. A part's bad arguments are graded apart and listed under it.</p>")
    if answered < SMALL_CLASS:
        lines.append(f"<p class='trouble'>Only {answered} students: with fewer than about {SMALL_CLASS}, one student "
                     "moves a discrimination by a lot. Take these values as hints only.</p>")
    return "\n".join(lines)


def _groups_table(section: _Section, groups: list[Group], empty: str, answers: bool = False) -> str:
    if not groups:
        return f"<p>{empty}</p>"
    lines = ["<table class='groups'><tr><th>part</th><th>what the judge said</th><th>students</th>"
             "<th>example</th><th>who</th></tr>"]
    for number, group in enumerate(groups):
        code = (f"<br><a href='#{_e(_group_anchor(section, number))}'>answers</a>" if answers else "")
        lines.append(f"<tr><td>{section.part(group.part)}</td><td>{_e(group.text)}{code}</td>"
                     f"<td>{len(group.students)} ({group.share:.0%})</td>"
                     f"<td><pre>{_e(_shortened(group.example))}</pre></td><td>{section.names(group.students)}</td></tr>")
    return "\n".join(lines + ["</table>"])


def _group_anchor(section: _Section, number: int) -> str:
    return _anchor(f"{section.assignment.name}-mistake-{number + 1}")


def _answers_of_groups(section: _Section, groups: list[Group]) -> list[str]:
    """Each mistake group's answers, student by student: the code each handed in for the part."""
    if not groups:
        return []
    out = ["<h3>Answers behind each mistake</h3>",
           "<p class='note'>The code of the part's answer cells in each student's submitted notebook, as handed in "
           "(read, never run).</p>"]
    for number, group in enumerate(groups):
        part = section.assignment.argument_parts.get(group.part, group.part)
        grade_ids = section.texts[part].answers if part in section.texts else [part.removeprefix("test_")]
        out.append(f"<div class='answers' id='{_e(_group_anchor(section, number))}'><h4>{section.part(group.part)}: "
                   f"{_e(group.text)}</h4>")
        for student in group.students[:NAMES_SHOWN]:
            code = section.links.answers(section.assignment.name, student, grade_ids)
            out.append(f"<p><a href='#{_e(section.student(student))}'>{_e(student)}</a></p><pre class='code'>"
                       f"{_e(code)}</pre>")
        if len(group.students) > NAMES_SHOWN:
            out.append(f"<p>and {len(group.students) - NAMES_SHOWN} more</p>")
        out.append("</div>")
    return out


#: The most flagged pairs of the similarity page the report lists (the page lists them all).
SIMILAR_SHOWN = 10


def _similar(section: _Section) -> list[str]:
    """Which submissions share code beyond the release: ``similarity.py``'s analysis, its page written beside the
    report, its strongest pairs listed with links into it. Nothing here changes a grade."""
    from . import similarity

    out = ["<h3>Answers that look copied</h3>"]
    name, root = section.assignment.name, section.links.course.root
    try:
        analysis = similarity.similarity(name, course_dir=root)
    except (FileNotFoundError, ValueError) as error:
        return out + [f"<p>Not compared: {_e(error)}</p>"]
    page = section.links.href(similarity.write_page(analysis, similarity.page_path(root, name)))
    out.append(f"<p>{len(analysis.pairs)} pairs of the {len(analysis.students)} notebooks flagged, by "
               f"<code>python -m autograder similarity {_e(name)}</code>: <a href='{_e(page)}'>the pairs side by "
               "side</a>. A flag is a reason to look, not a verdict; it changes no grade.</p>")
    if analysis.pairs:
        out.append("<table><tr><th>students</th><th>evidence</th><th>parts alike</th></tr>")
        for number, pair in enumerate(analysis.pairs[:SIMILAR_SHOWN], start=1):
            parts = ", ".join(f"<code>{_e(part)}</code>" for part in pair.parts)
            out.append(f"<tr><td><a href='{_e(page)}#pair-{number}'>{_e(pair.students[0])} · "
                       f"{_e(pair.students[1])}</a></td><td>{pair.score:.1f}</td><td>{parts}</td></tr>")
        out.append("</table>")
    return out


def _students_table(section: _Section, totals: dict[str, float]) -> list[str]:
    """Every student who handed in: total, what kind of notebook, and links to their feedback and graded notebook."""
    assignment = section.assignment
    out = ["<h3>Students</h3>", "<table class='students'><tr><th>student</th><th>total</th><th>notebook</th>"
           "<th>files</th></tr>"]
    blank, broken = set(assignment.blank), set(assignment.did_not_run)
    for student in sorted(set(assignment.submitted) | set(totals)):
        total = f"{totals[student]:g} / {assignment.max_total:g}" if student in totals else "not graded"
        kind = "blank" if student in blank else "did not run" if student in broken else ""
        files = ", ".join(f"<a href='{_e(href)}'>{_e(label)}</a>"
                          for label, href in section.links.student_files(assignment.name, student))
        out.append(f"<tr id='{_e(section.student(student))}'><td>{_e(student)}</td><td>{total}</td><td>{kind}</td>"
                   f"<td>{files or 'none yet (nbgrader generate_feedback writes the feedback)'}</td></tr>")
    return out + ["</table>"]


def _statements(section: _Section) -> list[str]:
    """Each part's statement, as the assignment's notebook gives it (the instructor's source, markdown)."""
    if not section.texts:
        return []
    from markdown_it import MarkdownIt

    markdown = MarkdownIt("commonmark", {"html": False})
    out = ["<h3>The parts' statements</h3>"]
    for part in section.assignment.parts:
        if part in section.texts and part not in section.assignment.argument_parts:
            out.append(f"<div class='statement' id='{_e(_anchor(f'{section.assignment.name}-statement-{part}'))}'>"
                       f"{markdown.render(section.texts[part].statement)}</div>")
        elif part in section.texts:  # a part's bad arguments: its anchor leads to the part's statement
            parent = section.assignment.argument_parts[part]
            out.append(f"<p class='note' id='{_e(_anchor(f'{section.assignment.name}-statement-{part}'))}'>"
                       f"{_e(part_label(section.assignment, part))}: see {section.part(parent)}.</p>")
    return out


def _anchor(text: str) -> str:
    """An element id for ``text`` (any student id, any part): its characters kept where plain, else their code."""
    return "".join(c if c.isascii() and (c.isalnum() or c in "-_") else f".{ord(c):x}" for c in text)


def _shortened(message: str, lines: int = 6, characters: int = 500) -> str:
    """The start of a message, for an example: its first ``lines`` lines, at most ``characters``."""
    text = "\n".join(message.splitlines()[:lines])
    return text if len(text) <= characters else text[:characters - 2] + " […]"


def _trouble(section: _Section) -> str:
    assignment, text = section.assignment, []
    if assignment.not_graded:
        text.append(f"<p class='trouble'>Not graded: the grader failed on {len(assignment.not_graded)} "
                    f"submissions (<code>grade</code> printed why; run it again): {section.names(assignment.not_graded)}</p>")
    text.append(_groups_table(section, trouble_groups(assignment), "No timeouts, no kernels killed, nothing left for a look."
                              if not assignment.not_graded else "No part timed out or lost its kernel."))
    return "\n".join(text)


def _time(assignment: Assignment, figures) -> list[str]:
    out = []
    seconds = assignment.grading_seconds
    if seconds:
        slowest = max(seconds, key=seconds.get)
        out.append(f"<p>Grading one submission took {statistics.median(seconds.values()):.1f} s (median); the "
                   f"slowest, {_e(slowest)}'s, {seconds[slowest]:.1f} s.</p>")
    for part, limit in assignment.time_limits.items():
        spent = {row.student: row.seconds for row in assignment.rows if row.name == part and row.seconds is not None}
        if not spent:
            continue
        close = sorted(s for s, t in spent.items() if t > CLOSE_TO_LIMIT * limit)
        out.append(_figure(figures.time_against_limit(list(spent.values()), limit, part),
                           f"<code>{_e(part)}</code>: the kernel's CPU time per submission against its limit of "
                           f"{limit:g} s (median {statistics.median(spent.values()):.1f} s, slowest "
                           f"{max(spent.values()):.1f} s). Over {CLOSE_TO_LIMIT:.0%} of the limit: "
                           f"{len(close)} ({_names(close)})."))
    return out or ["<p>No times recorded (graded before this version of the grader).</p>"]


def _overrides_table(section: _Section, rows: list[Row]) -> str:
    if not rows:
        return "<p>None: every score is the grader's.</p>"
    lines = ["<table><tr><th>student</th><th>part</th><th>grader</th><th>set by hand</th></tr>"]
    lines += [f"<tr><td>{section.names([r.student])}</td><td>{section.part(r.part)}</td><td>{r.auto_score:g}</td>"
              f"<td class='override'>{r.score:g}</td></tr>" for r in rows]
    return "\n".join(lines + ["</table>"])


def _names(students: list[str], anchor: Callable[[str], str] | None = None) -> str:
    """The first :data:`NAMES_SHOWN` of ``students``, each linked to ``anchor(student)`` where given, then a count."""
    shown = ", ".join(f"<a href='#{_e(anchor(s))}'>{_e(s)}</a>" if anchor else _e(s) for s in students[:NAMES_SHOWN])
    more = len(students) - NAMES_SHOWN
    return shown + (f" and {more} more" if more > 0 else "") if students else "none"


def _figure(png: bytes, caption: str) -> str:
    """A figure embedded in the page (``caption`` is HTML, its parts already escaped)."""
    data = base64.b64encode(png).decode()
    return f"<figure><img alt='' src='data:image/png;base64,{data}'><figcaption>{caption}</figcaption></figure>"




_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 70rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
h1 { font-size: 1.6rem; } h2 { border-bottom: 2px solid #0072B2; padding-bottom: .2rem; margin-top: 2.5rem; }
table { border-collapse: collapse; margin: .8rem 0; font-size: .92rem; }
th, td { border: 1px solid #ccc; padding: .3rem .5rem; vertical-align: top; text-align: left; }
th { background: #f0f4f8; } pre { white-space: pre-wrap; margin: 0; font-size: .82rem; max-width: 32rem; }
figure { margin: 1rem 0; } figure img { max-width: 100%; }
.pair { display: flex; flex-wrap: wrap; gap: 1.5rem; } .pair figure { flex: 1 1 28rem; margin: .5rem 0; } figcaption, .note, .meta { color: #555; font-size: .9rem; }
.counts { font-size: 1.1rem; font-weight: 600; } .trouble { color: #a33; } .override { font-weight: 700; }
tr.sub td:first-child { padding-left: 1.6rem; } a { color: #0060a0; }
pre.code { background: #f6f8fa; padding: .4rem .6rem; max-width: 60rem; border: 1px solid #e3e6ea; }
.answers, .statement { border-left: 3px solid #0072B2; padding-left: .8rem; margin: 1rem 0; }
:target { outline: 2px solid #E69F00; }
"""
