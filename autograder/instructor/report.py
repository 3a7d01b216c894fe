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
import html
import importlib
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ..grading.verdict import PartStatus
from ..judge import KNOWN_MISTAKE
from .grade import read_state
from .gradebook import Course, has_gradebook, manual_scores, read_csv, student_ids

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

    @property
    def graded(self) -> list[str]:
        return sorted({row.student for row in self.rows})

    @property
    def not_graded(self) -> list[str]:
        """Handed in, yet without grades: the grader failed on them (``grade`` says why; run it again)."""
        return sorted(set(self.submitted) - set(self.graded))

    @property
    def parts(self) -> list[str]:
        return list(dict.fromkeys(row.part for row in self.rows))

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
        for result in state.get("results", []):  # each part's time in the kernel, where measured
            row = by_part.get((student, result.get("part")))
            if row is not None and isinstance(result.get("seconds"), (int, float)):
                row.seconds = float(result["seconds"])
    assignment.time_limits = _time_limits(name)
    return assignment



def _time_limits(name: str) -> dict[str, float]:
    """The parts of ``name`` with a time limit (the checks' ``TIME_LIMITS``), by part name."""
    try:
        checks = importlib.import_module(f"autograder.ch{name}")
    except ModuleNotFoundError:
        return {}
    return dict(getattr(checks, "TIME_LIMITS", {}))


def resolve(course: Course, given: str) -> str:
    """An assignment id from an id or its number (``03`` -> ``03_masking``), as ``grades/`` names them."""
    if (course.root / "grades" / f"{given}.csv").is_file():
        return given
    found = sorted(p.stem for p in (course.root / "grades").glob(f"{given}_*.csv"))
    return found[0] if len(found) == 1 else given


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
    """One summary per part, in the assignment's order."""
    totals = assignment.totals()
    summaries = []
    for part in assignment.parts:
        rows = [row for row in assignment.rows if row.part == part]
        scores = [row.score for row in rows]
        rest = [totals[row.student] - row.score for row in rows]
        summaries.append(PartSummary(rows[0].name, rows[0].max_score,
                                     sum(row.score >= row.max_score for row in rows) / len(rows),
                                     statistics.fmean(scores), _correlation(scores, rest)))
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
    """The wrong answers (failed, or raised), grouped per part by :func:`mistake_of`, largest first.

    A blank answer is a group of its own ("not answered"); a missing notebook is not a mistake
    (the counts above say who handed nothing in), nor is grading trouble (:func:`trouble_groups`).
    """
    rows = [row for row in assignment.rows if row.status in WRONG and not is_grading_trouble(row)
            and not row.message.startswith("no notebook")]
    return _grouped(rows, mistake_of, len(assignment.graded))


def trouble_groups(assignment: Assignment) -> list[Group]:
    """The parts that grading itself got wrong (:func:`is_grading_trouble`), grouped as mistakes are."""
    rows = [row for row in assignment.rows if is_grading_trouble(row)]
    return _grouped(rows, lambda row: f"{row.status}: {mistake_of(row)}", len(assignment.graded))


def _grouped(rows: list[Row], text_of, graded: int) -> list[Group]:
    by_text: dict[tuple[str, str], list[Row]] = defaultdict(list)
    for row in rows:
        by_text[(row.part, text_of(row))].append(row)
    groups = [Group(part, text, sorted({row.student for row in members}), members[0].message,
                    len({row.student for row in members}) / max(1, graded))
              for (part, text), members in by_text.items()]
    order = {part: index for index, part in enumerate(dict.fromkeys(row.part for row in rows))}
    return sorted(groups, key=lambda group: (order[group.part], -len(group.students), group.text))


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
    path.parent.mkdir(parents=True, exist_ok=True)
    page = _page(loaded, roster)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(page, encoding="utf-8")
    partial.replace(path)
    return path


def _page(assignments: list[Assignment], roster: list[str]) -> str:
    from . import report_figures as figures

    title = "Class report: " + ", ".join(a.name for a in assignments)
    body = [f"<h1>{_e(title)}</h1>",
            f"<p class='meta'>Made {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC from the grades tables in "
            "<code>grades/</code>. Every figure and table is in this file: it reads the same offline.</p>"]
    if len(assignments) > 1:
        body += _across(assignments, roster, figures)
    for assignment in assignments:
        body += _assignment_section(assignment, roster, figures)
    return _HTML.format(title=_e(title), style=_STYLE, body="\n".join(body))


def _across(assignments: list[Assignment], roster: list[str], figures) -> list[str]:
    """The students × assignments table of totals, each assignment's mean, and who missed a hand-in."""
    rows = ["<h2 id='across'>Across assignments</h2>", _figure(figures.totals_heatmap(assignments, roster),
            "Each student's total on each assignment, as a share of its points (blank: no grade)."),
            "<table><tr><th>assignment</th><th>graded</th><th>class mean</th><th>missed it</th></tr>"]
    for assignment in assignments:
        totals = list(assignment.totals().values())
        mean = f"{statistics.fmean(totals):.2f} / {assignment.max_total:g}" if totals else "—"
        missed = [s for s in roster if s not in assignment.submitted]
        rows.append(f"<tr><td>{_e(assignment.name)}</td><td>{len(totals)}</td><td>{mean}</td>"
                    f"<td>{len(missed)}: {_names(missed)}</td></tr>")
    return rows + ["</table>"]


def _assignment_section(assignment: Assignment, roster: list[str], figures) -> list[str]:
    totals = assignment.totals()
    missing = [s for s in roster if s not in assignment.submitted and s not in totals]
    counts = (f"{len(assignment.submitted)} submitted, {len(totals)} graded, "
              f"{len(assignment.not_graded)} not graded, {len(missing)} missing")
    out = [f"<h2 id='{_e(assignment.name)}'>{_e(assignment.name)}</h2>", f"<p class='counts'>{counts}</p>"]
    if missing:
        out.append(f"<p>Missing (no submission): {_names(missing)}</p>")
    if not totals:
        return out + ["<p>No graded submission yet.</p>"]
    values, summaries = list(totals.values()), part_summaries(assignment)
    out += ["<div class='pair'>",
            _figure(figures.score_histogram(values, assignment.max_total),
                    f"Totals of the {len(values)} graded submissions out of {assignment.max_total:g} points "
                    f"(mean {statistics.fmean(values):.2f}, median {statistics.median(values):g})."),
            _figure(figures.part_bars(summaries), "The share of the class with full marks on each part, "
                                                  "the hardest at the top."),
            "</div>", "<h3>Parts, hardest first</h3>", _parts_table(summaries)]
    out += ["<h3>Mistakes the class made</h3>",
            "<p>The judge's messages per part, grouped by what they say (numbers, shapes and indices set aside). "
            "The example is one student's own message, as their feedback shows it.</p>",
            _groups_table(mistake_groups(assignment), "No wrong answers.")]
    out += ["<h3>What went wrong with grading</h3>", _trouble(assignment)]
    out += ["<h3>Time</h3>", *_time(assignment, figures)]
    out += ["<h3>Scores set by hand</h3>", _overrides_table(overrides(assignment))]
    return out


def _parts_table(summaries: list[PartSummary]) -> str:
    lines = ["<table><tr><th>part</th><th>points</th><th>full marks</th><th>mean</th>"
             "<th title='correlation of the part with the rest of the total'>discrimination</th></tr>"]
    for part in sorted(summaries, key=lambda s: (s.full_marks, s.mean / max(s.max_score, 1e-9))):
        index = "—" if part.discrimination is None else f"{part.discrimination:+.2f}"
        lines.append(f"<tr><td><code>{_e(part.name)}</code></td><td>{part.max_score:g}</td>"
                     f"<td>{part.full_marks:.0%}</td><td>{part.mean:.2f}</td><td>{index}</td></tr>")
    lines.append("</table><p class='note'>Discrimination: the correlation of the part's score with the rest of "
                 "the total. Near 0, the part does not separate strong submissions from weak ones; below 0, "
                 "strong submissions fail it more often: read its statement again.</p>")
    return "\n".join(lines)


def _groups_table(groups: list[Group], empty: str) -> str:
    if not groups:
        return f"<p>{empty}</p>"
    lines = ["<table class='groups'><tr><th>part</th><th>what the judge said</th><th>students</th>"
             "<th>example</th><th>who</th></tr>"]
    for group in groups:
        lines.append(f"<tr><td><code>{_e(group.part.removeprefix('test_'))}</code></td><td>{_e(group.text)}</td>"
                     f"<td>{len(group.students)} ({group.share:.0%})</td>"
                     f"<td><pre>{_e(_shortened(group.example))}</pre></td><td>{_names(group.students)}</td></tr>")
    return "\n".join(lines + ["</table>"])


def _shortened(message: str, lines: int = 6, characters: int = 500) -> str:
    """The start of a message, for an example: its first ``lines`` lines, at most ``characters``."""
    text = "\n".join(message.splitlines()[:lines])
    return text if len(text) <= characters else text[:characters - 2] + " […]"


def _trouble(assignment: Assignment) -> str:
    text = []
    if assignment.not_graded:
        text.append(f"<p class='trouble'>Not graded: the grader failed on {len(assignment.not_graded)} "
                    f"submissions (<code>grade</code> printed why; run it again): {_names(assignment.not_graded)}</p>")
    text.append(_groups_table(trouble_groups(assignment), "No timeouts, no kernels killed, nothing left for a look."
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


def _overrides_table(rows: list[Row]) -> str:
    if not rows:
        return "<p>None: every score is the grader's.</p>"
    lines = ["<table><tr><th>student</th><th>part</th><th>grader</th><th>set by hand</th></tr>"]
    lines += [f"<tr><td>{_e(r.student)}</td><td><code>{_e(r.name)}</code></td><td>{r.auto_score:g}</td>"
              f"<td class='override'>{r.score:g}</td></tr>" for r in rows]
    return "\n".join(lines + ["</table>"])


def _names(students: list[str]) -> str:
    shown = ", ".join(_e(s) for s in students[:NAMES_SHOWN])
    more = len(students) - NAMES_SHOWN
    return shown + (f" and {more} more" if more > 0 else "") if students else "none"


def _figure(png: bytes, caption: str) -> str:
    """A figure embedded in the page (``caption`` is HTML, its parts already escaped)."""
    data = base64.b64encode(png).decode()
    return f"<figure><img alt='' src='data:image/png;base64,{data}'><figcaption>{caption}</figcaption></figure>"


def _e(text: str) -> str:
    return html.escape(str(text), quote=True)


_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 70rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
h1 { font-size: 1.6rem; } h2 { border-bottom: 2px solid #0072B2; padding-bottom: .2rem; margin-top: 2.5rem; }
table { border-collapse: collapse; margin: .8rem 0; font-size: .92rem; }
th, td { border: 1px solid #ccc; padding: .3rem .5rem; vertical-align: top; text-align: left; }
th { background: #f0f4f8; } pre { white-space: pre-wrap; margin: 0; font-size: .82rem; max-width: 32rem; }
figure { margin: 1rem 0; } figure img { max-width: 100%; }
.pair { display: flex; flex-wrap: wrap; gap: 1.5rem; } .pair figure { flex: 1 1 28rem; margin: .5rem 0; } figcaption, .note, .meta { color: #555; font-size: .9rem; }
.counts { font-size: 1.1rem; font-weight: 600; } .trouble { color: #a33; } .override { font-weight: 700; }
"""

_HTML = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; img-src data:; style-src 'unsafe-inline'">
<style>{style}</style></head>
<body>
{body}
</body></html>
"""
