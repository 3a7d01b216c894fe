"""``python -m autograder export ASSIGNMENT --to canvas|moodle``: one assignment's totals, as an LMS imports them.

The totals are those of ``grades/<assignment>.csv`` (its ``score`` column: scores set by
hand in the formgrader included), summed per student. Each student is written with the
LMS's own identifier, read from the roster the LMS exports (``--roster``) or, for Canvas,
from the names in the zip of hand-ins that ``nbgrader zip_collect`` read:

* Canvas (Grades > Import): the columns ``Student, ID, SIS User ID, SIS Login ID, Section``
  and one column of scores, named as the roster names the assignment (``03_masking (917236)``,
  or the column titled ``--title``). Canvas matches a column to an assignment by its exact
  title, and makes a new assignment of a column it does not know: without a roster column
  for the assignment, the column is named ``--title``, which is then required (the zip of
  hand-ins does not carry the assignment's title), so that a new assignment is made only
  when the instructor names it. A ``Points Possible`` row below the header sets a new
  assignment's points (Canvas's importer reads a row whose first cell says ``Points
  Possible`` so). Canvas matches a row by its ``ID``, then by the SIS ids, then by name.
* Moodle (Grades > Import > CSV file): one identifier column (``Email address``, ``ID
  number`` or ``Username``, as the roster has them), which the import maps to that user
  field, and one column of scores. Moodle's download of hand-ins carries no such identifier
  (the folders are named ``Ada Lovelace_4821_assignsubmission_file_``: the name and the
  participant number), so Moodle needs its grade export as the roster.

A student is matched to a roster row by any identifier they share. No one student stops the
export: a student whose submission was not graded, or who matches no roster row, or two, or
shares one with another student (or, without a roster, has no Canvas user id in the zips, or
two) is left out, their row not written (an import leaves a row it does not find as it
was), and named (:attr:`ExportResult.left_out`; the command says so on stderr and exits
with 1); every other student is written. Every roster student without a submission gets an
empty cell (``0`` with ``missing_as_zero``, unless a student left out matches no roster row:
their row might be among those). What stops the export, writing nothing, is what concerns
the whole class: a roster that is not the LMS's, no way to identify Moodle's users, the
assignment named by several columns. Every text cell is made inert for spreadsheets
(``spreadsheet.py``).
"""

from __future__ import annotations

import csv
import os
import re
import zipfile
from collections import defaultdict
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from ..grading.verdict import PartStatus
from .collect import download_names
from .gradebook import Course, read_csv
from .spreadsheet import inert

#: The LMSs the export writes for.
TARGETS = ("canvas", "moodle")
#: Canvas's identity columns, in the order its gradebook import reads them.
CANVAS_COLUMNS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
#: The columns of Moodle's grade export that its import can map to a user field, in the order preferred.
MOODLE_IDENTIFIERS = ["Email address", "ID number", "Username"]
#: A file at the top of Canvas's "Download submissions" zip: ``lovelaceada_LATE_48213_917236_03_masking-1.ipynb``.
CANVAS_FILE = re.compile(r"(?P<student>[^/_]+)_(?:LATE_)?(?P<user>\d+)_\d+_[^/]*")
#: A folder at the top of Moodle's "Download all submissions" zip: ``Ada Lovelace_4821_assignsubmission_file_/``.
MOODLE_FOLDER = re.compile(r"(?P<name>[^/]+)_(?P<participant>\d+)_assignsubmission_[a-z]+_/")
#: Digits kept of a score.
DECIMALS = 2


class ExportError(ValueError):
    """The export cannot be written as asked (the command prints ``error: ...`` and exits with 2); nothing was written."""


class LeftOut(Enum):
    """Why a student is left out of the export, their row not written; the value says it to the instructor."""

    NOT_GRADED = "submissions not graded (run python -m autograder grade {assignment})"
    NO_ROSTER_ROW = "students matching no roster row"
    SEVERAL_ROSTER_ROWS = "students matching two roster rows or more"
    SHARED_ROSTER_ROW = "students matching one roster row with another student"
    NO_USER_ID = "students without a Canvas user id in the zips of downloaded/ (pass --roster)"
    SEVERAL_USER_IDS = "students with two Canvas user ids in the zips (pass --roster)"


#: How a student is matched to a roster row, said with the students a roster leaves out.
MATCHED_BY = {"canvas": "the Canvas user id in the zip's file names, or their id as SIS Login ID or SIS User ID",
              "moodle": "the name of their folder in Moodle's zip, or their id as email address, ID number or "
                        "username"}


@dataclass(frozen=True)
class Omission:
    """A student left out of the export: why, and what of the roster or the zips it concerns."""

    reason: LeftOut
    detail: str = ""


@dataclass
class Placement:
    """Where the students go: ``rows``, ``{roster row number: student}``; ``held``, the rows of students that
    could not be placed (never given a cell for a missing submission); ``left_out``, ``{student: why}``."""

    rows: dict[int, str]
    held: set[int] = field(default_factory=set)
    left_out: dict[str, Omission] = field(default_factory=dict)


@dataclass
class ExportResult:
    """What :func:`export` wrote.

    Attributes:
        path: the CSV file.
        column: the name of its column of scores.
        written: students written (a row each).
        graded: of those, students with a total.
        empty: of those, students without a submission, left empty.
        zeros: of those, students without a submission, given 0 (``missing_as_zero``).
        points_possible: the assignment's points.
        warnings: what the instructor should know (parts whose points are withheld until a look).
        assignment: the assignment.
        left_out: ``{student: why}``, the students not written (the command exits with 1).
    """

    path: Path
    column: str
    written: int
    graded: int
    empty: int
    zeros: int
    points_possible: float
    warnings: list[str] = field(default_factory=list)
    assignment: str = ""
    left_out: dict[str, Omission] = field(default_factory=dict)

    def summary(self) -> str:
        """One line: how many students, how many with a total, empty, zero, left out."""
        return (f"{self.written} students written: {self.graded} graded, {self.empty} empty cells (no submission), "
                f"{self.zeros} zeros for missing submissions; column {self.column!r}, "
                f"{decimal(self.points_possible)} points possible"
                + (f"; {len(self.left_out)} students left out" if self.left_out else ""))

    def omissions(self) -> list[str]:
        """One line per reason: the students left out for it, with what it concerns."""
        lines = []
        for reason in LeftOut:
            named = [f"{student}{f' ({o.detail})' if o.detail else ''}"
                     for student, o in sorted(self.left_out.items()) if o.reason is reason]
            if named:
                lines.append(f"not written: {len(named)} {reason.value.format(assignment=self.assignment)}: "
                             f"{'; '.join(named)}")
        return lines


def export(assignment: str, *, to: str, course_dir: str | Path = ".", roster: str | Path | None = None,
           missing_as_zero: bool = False, output: str | Path | None = None, title: str | None = None) -> ExportResult:
    """Write ``assignment``'s totals as ``to`` (``canvas`` or ``moodle``) imports them; the file's path and counts.

    ``roster``: the LMS's own export of its gradebook (Canvas: Grades > Export; Moodle:
    Grades > Export > Plain text file); without it, Canvas's ids come from the zips in
    ``downloaded/<assignment>/archive/`` (or what ``zip_collect`` extracted from them).
    ``output``: default ``grades/<to>-<assignment>.csv`` in the course. ``title``: the assignment's exact title in
    the LMS, for its column (Canvas needs it where the roster has no column for the assignment).

    Students who cannot be written are left out and named (:attr:`ExportResult.left_out`).

    Raises:
        ExportError: a roster that is not the LMS's, no way to identify Moodle's users, several
            roster columns for the assignment, a zip that cannot be read;
            FileNotFoundError: no grades table, or no roster file.
    """
    if to not in TARGETS:
        raise ExportError(f"cannot export for {to!r}: --to canvas or --to moodle")
    course = Course.open(Path(course_dir))
    totals, possible, warnings = _totals(course, assignment)
    students = sorted(set(course.students(assignment)) | set(totals))
    identities = _zip_identities(course, assignment, to)
    if roster is not None:
        header, rows = _read_roster(Path(roster), to)
        placement = _match(students, rows, identities, to)
    elif to == "moodle":
        raise ExportError("Moodle's import needs each student's email address, username or ID number, which its "
                          "download of hand-ins does not carry: pass --roster with Moodle's grade export (Grades > "
                          "Export > Plain text file)")
    else:
        header, rows, placement = _canvas_roster_from_zips(students, identities)
    left_out = {**placement.left_out, **{s: Omission(LeftOut.NOT_GRADED) for s in students if s not in totals}}
    zeros = missing_as_zero and not any(o.reason is LeftOut.NO_ROSTER_ROW for o in left_out.values())
    if missing_as_zero and not zeros:
        warnings.append("no zeros for missing submissions: a student left out matches no roster row, and theirs "
                        "might be one of those rows (empty cells instead)")
    column, existing = _score_column(header, assignment, to, title)
    written, cells, counts = [], [], {"graded": 0, "empty": 0, "zeros": 0}
    for number, row in enumerate(rows):
        student = placement.rows.get(number)
        if student in totals and student not in left_out:
            cells.append(decimal(totals[student]))
            counts["graded"] += 1
        elif student in left_out or number in placement.held:
            continue  # the row of a student left out: not written, as the import then leaves it
        elif zeros:
            cells.append("0")
            counts["zeros"] += 1
        else:
            cells.append("")
            counts["empty"] += 1
        written.append(row)
    if to == "canvas":
        table = [CANVAS_COLUMNS + [column]]
        if not existing:  # the points of the assignment Canvas makes; an existing one's are left as they are
            table.append(["Points Possible", "", "", "", "", decimal(possible)])
        table += [[inert(row.get(name, "")) for name in CANVAS_COLUMNS] + [cell]
                  for row, cell in zip(written, cells, strict=True)]
    else:
        identifier = _moodle_identifier(header, written, warnings)
        table = [[identifier, column]] + [[inert(row[identifier]), cell]
                                          for row, cell in zip(written, cells, strict=True)]
    table[0] = [inert(name) for name in table[0]]
    path = Path(output) if output is not None else course.root / "grades" / f"{to}-{assignment}.csv"
    _write(path, table)
    return ExportResult(path, column, len(written), counts["graded"], counts["empty"], counts["zeros"], possible,
                        warnings, assignment, left_out)


def decimal(value: float) -> str:
    """``value`` rounded to :data:`DECIMALS` places, as a plain decimal: ``7.5``, ``10``, ``0``."""
    rounded = round(float(value), DECIMALS) + 0.0  # + 0.0: no -0
    text = f"{rounded:.{DECIMALS}f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


def _totals(course: Course, assignment: str) -> tuple[dict[str, float], float, list[str]]:
    """``({student: total}, points possible, warnings)`` from ``grades/<assignment>.csv``."""
    path = course.root / "grades" / f"{assignment}.csv"
    if not path.is_file():
        raise FileNotFoundError(f"no grades table {path}: run python -m autograder grade {assignment} first")
    totals: dict[str, float] = defaultdict(float)
    possible: dict[str, float] = defaultdict(float)
    withheld: dict[str, int] = defaultdict(int)
    for row in read_csv(path):
        if (row.get("assignment") or assignment) != assignment:
            continue
        student = row["student"]
        totals[student] += row["score"]
        possible[student] += row["max_score"]
        if row.get("status") == PartStatus.NEEDS_A_LOOK.value and row["auto_score"] == row["score"]:
            withheld[student] += 1
    warnings = []
    if withheld:
        warnings.append(f"{sum(withheld.values())} parts of {len(withheld)} students need a look, their points "
                        f"withheld until a score is set in the formgrader: {', '.join(sorted(withheld))}")
    return dict(totals), max(possible.values(), default=0.0), warnings


def _zip_identities(course: Course, assignment: str, to: str) -> dict[str, set[str]]:
    """``{student id: {what the LMS's download says of them}}``: Canvas's user ids, Moodle's full names.

    Read from the names the LMS gave the files of its downloads in ``downloaded/<assignment>/archive/``,
    at their top only, as ``zip_collect`` reads them (``collect.py``): never from a zip a student handed
    in, nor from ``extracted/``, which an older collection may have filled with such a zip's files.
    """
    downloaded = course.root / course.config.ZipCollectApp.get("downloaded_directory", "downloaded") / assignment
    expression = course.config.FileNameCollectorPlugin.get("named_regexp", "")
    try:
        names = download_names(downloaded / "archive", expression)
    except (OSError, zipfile.BadZipFile) as error:
        raise ExportError(f"cannot read the downloads in {downloaded / 'archive'}: {error}") from None
    found: dict[str, set[str]] = defaultdict(set)
    for name in names:
        if to == "canvas" and (match := CANVAS_FILE.fullmatch(name)):
            found[match["student"]].add(match["user"])
        elif to == "moodle" and (match := MOODLE_FOLDER.match(name)):
            found[match["participant"]].add(_name(match["name"]))
    return dict(found)


def _name(text: str) -> str:
    """A person's name, compared as the same however spaced or capitalized."""
    return " ".join(text.split()).casefold()


def _read_roster(path: Path, to: str) -> tuple[list[str], list[dict[str, str]]]:
    """``(header, student rows)`` of the LMS's gradebook export."""
    if not path.is_file():
        raise FileNotFoundError(f"no roster {path}")
    text = path.read_text(encoding="utf-8-sig")
    first = text.splitlines()[0] if text.strip() else ""
    delimiter = max(",;\t", key=first.count)  # Moodle's plain text export may be separated by tabs or semicolons
    table = list(csv.reader(text.splitlines(), delimiter=delimiter))
    if not table:
        raise ExportError(f"the roster {path} is empty")
    header = [name.strip() for name in table[0]]
    wanted = ["Student", "ID"] if to == "canvas" else ["First name", "Last name"]
    if not set(wanted) <= set(header) or (to == "moodle" and not set(MOODLE_IDENTIFIERS) & set(header)):
        export_from = "Canvas: Grades > Export" if to == "canvas" else "Moodle: Grades > Export > Plain text file"
        raise ExportError(f"{path} is not {to.capitalize()}'s gradebook export (no column {' or '.join(wanted)}"
                          f"{'' if to == 'canvas' else ', and one of ' + ', '.join(MOODLE_IDENTIFIERS)}); "
                          f"export it from the LMS ({export_from})")
    rows = []
    for cells in table[1:]:
        row = {name: cell.strip() for name, cell in zip(header, cells, strict=False)}  # a short row: the rest empty
        if not any(row.values()):
            continue
        # Canvas's Points Possible row, and its rows of settings ("Manual Posting"): not a student's
        if to == "canvas" and ("Points Possible" in row.get("Student", "") or not row.get("ID")):
            continue
        rows.append(row)
    return header, rows


def _keys(row: dict[str, str], to: str) -> tuple[set[str], set[str]]:
    """``(ids, names)`` a roster row can be matched by: ids compared with a student's id (and Canvas's user id)."""
    if to == "canvas":
        ids = {row.get("SIS User ID", "").casefold(), row.get("SIS Login ID", "").casefold()}
        return ids - {""}, set()
    ids = {row.get(name, "").casefold() for name in MOODLE_IDENTIFIERS}
    return ids - {""}, {_name(f"{row.get('First name', '')} {row.get('Last name', '')}")}


def _describe(row: dict[str, str], to: str) -> str:
    if to == "canvas":
        return f"{row.get('Student', '')} (ID {row.get('ID', '')})"
    first = next((row[name] for name in MOODLE_IDENTIFIERS if row.get(name)), "")
    return f"{row.get('First name', '')} {row.get('Last name', '')} ({first})"


def _match(students: list[str], rows: list[dict[str, str]], identities: dict[str, set[str]], to: str) -> Placement:
    """Each student placed in the one roster row they share an identifier with; none, two, or a row shared with
    another student, and they are left out."""
    claimed: dict[int, list[str]] = defaultdict(list)
    placement = Placement({})
    for student in students:
        seen = identities.get(student, set())
        hits = []
        for number, row in enumerate(rows):
            ids, names = _keys(row, to)
            by_zip = row.get("ID", "") in seen if to == "canvas" else bool(names & seen)
            if by_zip or student.casefold() in ids:
                hits.append(number)
        if not hits:
            placement.left_out[student] = Omission(LeftOut.NO_ROSTER_ROW, f"matched by {MATCHED_BY[to]}")
        elif len(hits) > 1:
            placement.left_out[student] = Omission(LeftOut.SEVERAL_ROSTER_ROWS,
                                                   " and ".join(_describe(rows[n], to) for n in hits))
            placement.held.update(hits)
        else:
            claimed[hits[0]].append(student)
    for number, found in claimed.items():
        if len(found) == 1:
            placement.rows[number] = found[0]
            continue
        placement.held.add(number)
        for student in found:
            placement.left_out[student] = Omission(LeftOut.SHARED_ROSTER_ROW,
                                                   f"{_describe(rows[number], to)}, with {' and '.join(found)}")
    return placement


def _canvas_roster_from_zips(students: list[str], identities: dict[str, set[str]]
                             ) -> tuple[list[str], list[dict[str, str]], Placement]:
    """Without a roster: one Canvas row per student of the zips with one user id, that id as ``ID``."""
    left_out = {student: Omission(LeftOut.NO_USER_ID) for student in students if not identities.get(student)}
    left_out |= {student: Omission(LeftOut.SEVERAL_USER_IDS, ", ".join(sorted(ids)))
                 for student, ids in identities.items() if len(ids) > 1}
    rows = [{"Student": student, "ID": next(iter(ids))} for student, ids in sorted(identities.items()) if len(ids) == 1]
    return list(CANVAS_COLUMNS), rows, Placement({number: row["Student"] for number, row in enumerate(rows)},
                                                 left_out=left_out)


def _score_column(header: list[str], assignment: str, to: str, title: str | None = None) -> tuple[str, bool]:
    """``(name, whether the roster has it)``: the roster's column titled ``title`` (with or without the LMS's id
    after it), else the one that names ``assignment``; else a new column ``title`` (Moodle: ``assignment`` too,
    which its import maps by hand; Canvas needs ``title``, matching columns to assignments by it)."""
    identity = set(CANVAS_COLUMNS) if to == "canvas" else {"First name", "Last name", *MOODLE_IDENTIFIERS}
    if title is not None:
        titled = re.compile(rf"^{re.escape(title.strip())}(?:\s*\([^)]*\))?$", re.IGNORECASE)
        found = [name for name in header if name not in identity and titled.match(name.strip())]
        return (found[0], True) if len(found) == 1 else (title.strip(), False)
    found = [name for name in header if name not in identity and assignment.casefold() in name.casefold()]
    if len(found) > 1:  # "03_masking (917236)" among "03_masking extra (917240)": the one titled so
        title = re.compile(rf"^(?:[^:]*:\s*)?{re.escape(assignment)}(?:\s*\([^)]*\))?$", re.IGNORECASE)
        found = [name for name in found if title.match(name)] or found
    if len(found) > 1:  # Moodle's export of one grade item in points, percent, letter: the points
        found = [name for name in found if name.endswith("(Real)")] or found
    if len(found) > 1:
        raise ExportError(f"several roster columns name {assignment}: {', '.join(found)}; keep one in the roster")
    if found:
        return found[0], True
    if to == "canvas":
        raise ExportError(f"Canvas matches a column to an assignment by its exact title, and no roster column names "
                          f"{assignment}: pass --title with the assignment's title in Canvas (e.g. --title "
                          f"\"Assignment 3: Masking\"), or --roster with Canvas's gradebook export; a title Canvas "
                          "does not know makes a new assignment")
    return assignment, False


def _moodle_identifier(header: list[str], rows: list[dict[str, str]], warnings: list[str]) -> str:
    """The first of :data:`MOODLE_IDENTIFIERS` the roster has for every row, each different.

    One whose values need no quote against formulas first: Moodle's import looks a user up by
    the cell as written, and stops the whole import at one it cannot find.
    """
    usable = [name for name in MOODLE_IDENTIFIERS if name in header
              and all(values := [row.get(name, "") for row in rows]) and len(set(values)) == len(values)]
    for name in usable:
        if all(inert(row[name]) == row[name] for row in rows):
            return name
    if usable:
        guarded = [row[usable[0]] for row in rows if inert(row[usable[0]]) != row[usable[0]]]
        warnings.append(f"{len(guarded)} values of {usable[0]!r} start as a spreadsheet formula and are written "
                        f"with a ' before them, which Moodle's import will not find: {', '.join(guarded)}")
        return usable[0]
    raise ExportError(f"no column of the roster ({', '.join(MOODLE_IDENTIFIERS)}) identifies every student once: "
                      "add one to Moodle's grade export (its user fields)")


def _write(path: Path, table: list[list[str]]) -> None:
    """Write ``table`` as CSV, atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with partial.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows(table)
    os.replace(partial, path)
