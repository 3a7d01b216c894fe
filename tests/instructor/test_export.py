"""``python -m autograder export``: an assignment's totals as Canvas's and Moodle's gradebook imports read them,
and every CSV cell of the course inert in a spreadsheet.

Each test builds a small course folder by hand (a grades table, ``submitted/`` folders, the
LMS's zip of hand-ins, a roster as the LMS exports it) and reads the export back with the
rules the import applies: Canvas's importer reads a header whose first columns are
``Student, ID, SIS User ID, SIS Login ID, Section``, a row whose first cell says ``Points
Possible``, and a student by ``ID``; Moodle's maps one identifier column to a user field.
No grading run, no kernel.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from autograder.instructor.export import ExportError, LeftOut, decimal, export
from autograder.instructor.gradebook import CSV_COLUMNS, write_csv
from autograder.instructor.spreadsheet import inert, plain

ROOT = Path(__file__).resolve().parents[2]
A = "03_masking"
TITLE = "Assignment 3: Masking"  # the assignment's title in Canvas
#: Canvas's "Download submissions" names (one late, handed in again), as in test_instructor_path.py.
CANVAS_FILES = {"lovelaceada_48213_917236_03_masking.ipynb": "lovelaceada",
                "hopperg_LATE_51002_917240_03_masking-1.ipynb": "hopperg",
                "turinga_50871_917251_03_masking.ipynb": "turinga"}
#: Each student's parts: (score, max_score, status); 10 points possible.
PARTS = {"lovelaceada": [(2.5, 5, "passed"), (5.0, 5, "passed")],
         "hopperg": [(0.0, 5, "error"), (0.0, 5, "timeout")],
         "turinga": [(5 / 3, 5, "failed"), (5 / 3, 5, "failed")]}
CANVAS_HEADER = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]


def grades(course: Path, parts: dict[str, list[tuple]] = PARTS, message: str = "") -> None:
    """``grades/03_masking.csv`` as the grading command writes it, and each student's ``submitted/`` folder."""
    rows = []
    for student, results in parts.items():
        (course / "submitted" / student / A).mkdir(parents=True, exist_ok=True)
        for number, (score, best, status) in enumerate(results):
            rows.append({"student": student, "assignment": A, "part": f"test_part{number}", "score": score,
                         "max_score": best, "status": status, "message": message, "auto_score": score})
    write_csv(course / "grades" / f"{A}.csv", rows)


def canvas_zip(course: Path, files: dict[str, str] = CANVAS_FILES, contents: dict[str, bytes] | None = None) -> None:
    """Canvas's download of hand-ins; ``contents``: a file's bytes, if not ``{}``."""
    contents = contents or {}
    archive = course / "downloaded" / A / "archive"
    archive.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(archive / "submissions.zip", "w") as download:
        for name in files:
            download.writestr(name, contents.get(name, b"{}"))


def read(path: Path) -> list[list[str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.reader(handle))


def write(path: Path, table: list[list[str]], delimiter: str = ",") -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle, delimiter=delimiter).writerows(table)
    return path


def by_id(table: list[list[str]], column: int = 1) -> dict[str, str]:
    """``{identifier: score cell}`` of the student rows (Canvas's Points Possible row left out, as its import does)."""
    return {row[column]: row[-1] for row in table[1:] if "Points Possible" not in row[0]}


# --- Canvas


def test_canvas_without_a_roster_takes_the_user_ids_from_the_zip(tmp_path):
    grades(tmp_path)
    canvas_zip(tmp_path, {**CANVAS_FILES, "babbagec_49999_917260_notes.txt": "babbagec"})  # no notebook collected
    result = export(A, to="canvas", title=TITLE, course_dir=tmp_path)
    assert result.path == tmp_path / "grades" / f"canvas-{A}.csv"
    table = read(result.path)
    assert table[0] == CANVAS_HEADER + [TITLE]  # a new column: Canvas makes the assignment, titled as asked
    assert table[1] == ["Points Possible", "", "", "", "", "10"]  # its points
    assert by_id(table) == {"48213": "7.5", "51002": "0", "50871": "3.33", "49999": ""}
    assert {row[1]: row[0] for row in table[2:]}["48213"] == "lovelaceada"
    assert sorted(float(cell) for cell in by_id(table).values() if cell) == [0.0, 3.33, 7.5]
    assert (result.written, result.graded, result.empty, result.zeros) == (4, 3, 1, 0)
    zero = export(A, to="canvas", title=TITLE, course_dir=tmp_path, missing_as_zero=True, output=tmp_path / "zero.csv")
    assert by_id(read(tmp_path / "zero.csv"))["49999"] == "0" and (zero.empty, zero.zeros) == (0, 1)


def canvas_roster(course: Path, extra: list[list[str]] = ()) -> Path:
    """Canvas's gradebook export: a Points Possible row, a posting row, the Test Student, read-only totals."""
    return write(course / "roster.csv", [
        CANVAS_HEADER + ["01_attention (917000)", f"{A} (917236)", "Current Score", "Final Score"],
        ["    Points Possible", "", "", "", "", "10.00", "12.00", "(read only)", "(read only)"],
        ["", "", "", "", "", "", "Manual Posting", "", ""],
        ["Lovelace, Ada", "48213", "S1001", "ada@uni.example", "Section A", "9.00", "", "90", "90"],
        ["Hopper, Grace", "51002", "S1002", "grace@uni.example", "Section A", "8.00", "", "80", "80"],
        ["Turing, Alan", "50871", "S1003", "turinga", "Section B", "", "", "", ""],
        ["Babbage, Charles", "49999", "S1004", "charles@uni.example", "Section B", "", "", "", ""],
        ["Student, Test", "99999", "", "", "Section A", "", "", "", ""],
        *extra])


def test_canvas_with_its_gradebook_export_as_roster(tmp_path):
    grades(tmp_path)
    canvas_zip(tmp_path, dict(list(CANVAS_FILES.items())[:2]))  # turinga's notebook copied in by hand: no zip entry
    result = export(A, to="canvas", course_dir=tmp_path, roster=canvas_roster(tmp_path))
    table = read(result.path)
    assert table[0] == CANVAS_HEADER + [f"{A} (917236)"]  # the roster's column: Canvas's assignment
    # no Points Possible row: the existing assignment's points stay as they are in Canvas
    assert table[1] == ["Lovelace, Ada", "48213", "S1001", "ada@uni.example", "Section A", "7.5"]
    # turinga matched by SIS Login ID; Babbage and the Test Student handed in nothing: empty, not 0
    assert by_id(table) == {"48213": "7.5", "51002": "0", "50871": "3.33", "49999": "", "99999": ""}
    assert (result.written, result.graded, result.empty) == (5, 3, 2)


def reasons(result) -> dict[str, LeftOut]:
    return {student: omission.reason for student, omission in result.left_out.items()}


def test_canvas_leaves_out_a_student_without_a_roster_row_or_with_two_and_writes_the_others(tmp_path):
    grades(tmp_path)
    canvas_zip(tmp_path)
    output = tmp_path / "out.csv"
    roster = write(tmp_path / "roster.csv", [CANVAS_HEADER, ["Lovelace, Ada", "48213", "", "", "A"],
                                             ["Hopper, Grace", "51002", "", "", "A"],
                                             ["Babbage, Charles", "49999", "", "", "B"]])
    result = export(A, to="canvas", title=TITLE, course_dir=tmp_path, roster=roster, output=output)
    assert reasons(result) == {"turinga": LeftOut.NO_ROSTER_ROW}
    assert by_id(read(output)) == {"48213": "7.5", "51002": "0", "49999": ""}
    assert result.omissions() == ["not written: 1 students matching no roster row: turinga (matched by the Canvas "
                                  "user id in the zip's file names, or their id as SIS Login ID or SIS User ID)"]
    # turinga's row may be Babbage's, for all the export knows: no zero is given to a missing submission then
    zeros = export(A, to="canvas", title=TITLE, course_dir=tmp_path, roster=roster, output=output, missing_as_zero=True)
    assert by_id(read(output))["49999"] == "" and zeros.zeros == 0 and "no zeros" in zeros.warnings[-1]

    canvas_roster(tmp_path, extra=[["Turing, A.", "60000", "S2000", "turinga", "Section C"]])
    result = export(A, to="canvas", course_dir=tmp_path, roster=tmp_path / "roster.csv", output=output,
                    missing_as_zero=True)
    assert reasons(result) == {"turinga": LeftOut.SEVERAL_ROSTER_ROWS}
    assert result.left_out["turinga"].detail.startswith("Turing, Alan (ID 50871) and Turing, A. (ID 60000)")
    # neither of turinga's rows is written (not even as a missing submission's 0); every other student is
    assert by_id(read(output)) == {"48213": "7.5", "51002": "0", "49999": "0", "99999": "0"}


def test_canvas_leaves_out_two_students_who_match_one_roster_row(tmp_path):
    grades(tmp_path, {**PARTS, "ada": PARTS["lovelaceada"]})
    canvas_zip(tmp_path)
    roster = write(tmp_path / "roster.csv", [CANVAS_HEADER, ["Lovelace, Ada", "48213", "", "ada", "A"],
                                             ["Hopper, Grace", "51002", "", "", "A"],
                                             ["Turing, Alan", "50871", "", "", "B"]])
    result = export(A, to="canvas", title=TITLE, course_dir=tmp_path, roster=roster, missing_as_zero=True)
    assert reasons(result) == {"ada": LeftOut.SHARED_ROSTER_ROW, "lovelaceada": LeftOut.SHARED_ROSTER_ROW}
    assert by_id(read(result.path)) == {"51002": "0", "50871": "3.33"}  # Ada's row: not written, not 0


def test_canvas_without_a_roster_leaves_out_a_student_the_zip_does_not_name(tmp_path):
    grades(tmp_path)
    canvas_zip(tmp_path, dict(list(CANVAS_FILES.items())[:2]))
    result = export(A, to="canvas", title=TITLE, course_dir=tmp_path)
    assert reasons(result) == {"turinga": LeftOut.NO_USER_ID}
    assert by_id(read(result.path)) == {"48213": "7.5", "51002": "0"}
    assert "pass --roster" in result.omissions()[0]


def test_the_canvas_ids_come_from_the_top_of_canvass_download_only(tmp_path):
    """A zip a student handed in, and what an older zip_collect unpacked of it into extracted/, name no one: its
    ``lovelaceada_50000_...`` gives lovelaceada no second user id, which would leave her out."""
    import io

    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w") as handed_in:
        handed_in.writestr("lovelaceada_50000_1_03_masking.ipynb", "{}")
    grades(tmp_path)
    canvas_zip(tmp_path, {**CANVAS_FILES, "mallory_50000_917300_handin.zip": ""},
               {"mallory_50000_917300_handin.zip": inner.getvalue()})
    old = tmp_path / "downloaded" / A / "extracted" / "submissions" / "mallory_50000_917300_handin"
    old.mkdir(parents=True)
    (old / "lovelaceada_50000_1_03_masking.ipynb").write_text("{}")
    result = export(A, to="canvas", title=TITLE, course_dir=tmp_path)
    assert not result.left_out
    assert by_id(read(result.path)) == {"48213": "7.5", "51002": "0", "50871": "3.33", "50000": ""}


# --- Moodle

MOODLE_HEADER = ["First name", "Last name", "ID number", "Institution", "Department", "Email address",
                 f"Assignment: {A} (Real)", "Last downloaded from this course"]


def moodle_course(course: Path) -> None:
    """Participants 4821 (Ada Lovelace) and 5002 (Grace Hopper), as the guide's Moodle expression collects them."""
    grades(course, {"4821": PARTS["lovelaceada"], "5002": PARTS["hopperg"]})
    archive = course / "downloaded" / A / "archive"
    archive.mkdir(parents=True)
    with zipfile.ZipFile(archive / "download.zip", "w") as download:
        download.writestr(f"Ada Lovelace_4821_assignsubmission_file_/{A}.ipynb", "{}")
        download.writestr(f"Grace  Hopper_5002_assignsubmission_file_/{A} (2).ipynb", "{}")


def test_moodle_with_its_grade_export_as_roster(tmp_path):
    moodle_course(tmp_path)
    roster = write(tmp_path / "moodle.txt", [MOODLE_HEADER,
                                             ["Ada", "Lovelace", "u1", "", "", "ada@uni.example", "-", ""],
                                             ["Grace", "Hopper", "u2", "", "", "grace@uni.example", "-", ""],
                                             ["Alan", "Turing", "u3", "", "", "alan@uni.example", "-", ""]],
                   delimiter="\t")
    result = export(A, to="moodle", course_dir=tmp_path, roster=roster)
    table = read(result.path)
    assert result.path == tmp_path / "grades" / f"moodle-{A}.csv"
    assert table[0] == ["Email address", f"Assignment: {A} (Real)"]
    assert by_id(table, 0) == {"ada@uni.example": "7.5", "grace@uni.example": "0", "alan@uni.example": ""}
    export(A, to="moodle", course_dir=tmp_path, roster=roster, missing_as_zero=True)
    assert float(by_id(read(result.path), 0)["alan@uni.example"]) == 0.0


def test_the_scores_go_into_the_rosters_column_for_the_assignment():
    from autograder.instructor.export import _score_column

    moodle = ["First name", "Email address", f"Assignment: {A} (Percentage)", f"Assignment: {A} (Real)"]
    assert _score_column(moodle, A, "moodle") == (f"Assignment: {A} (Real)", True)
    canvas = CANVAS_HEADER + [f"{A} extra (917240)", f"{A} (917236)", "Current Score"]
    assert _score_column(canvas, A, "canvas") == (f"{A} (917236)", True)
    assert _score_column(CANVAS_HEADER + ["01_attention (1)"], A, "canvas", TITLE) == (TITLE, False)
    assert _score_column(CANVAS_HEADER + ["01_attention (1)"], A, "moodle") == (A, False)  # mapped by hand
    with pytest.raises(ExportError, match="several roster columns"):
        _score_column(CANVAS_HEADER + [f"{A} (1)", f"{A} (2)"], A, "canvas")


def test_moodle_prefers_an_identifier_written_as_is(tmp_path):
    """Moodle looks a user up by the cell as written: an email quoted against formulas would not be found."""
    moodle_course(tmp_path)
    roster = write(tmp_path / "moodle.csv", [MOODLE_HEADER,
                                             ["Ada", "Lovelace", "u1", "", "", "+ada@uni.example", "", ""],
                                             ["Grace", "Hopper", "u2", "", "", "grace@uni.example", "", ""]])
    result = export(A, to="moodle", course_dir=tmp_path, roster=roster)
    assert read(result.path) == [["ID number", f"Assignment: {A} (Real)"], ["u1", "7.5"], ["u2", "0"]]
    assert not result.warnings


def test_moodle_needs_a_roster_and_leaves_out_a_student_it_matches_twice(tmp_path):
    moodle_course(tmp_path)
    with pytest.raises(ExportError, match=r"pass --roster .*Grades > Export > Plain text file"):
        export(A, to="moodle", course_dir=tmp_path)
    roster = write(tmp_path / "moodle.csv", [MOODLE_HEADER,
                                             ["Ada", "Lovelace", "u1", "", "", "ada@uni.example", "", ""],
                                             ["Grace", "Hopper", "u2", "", "", "grace@uni.example", "", ""],
                                             ["Someone", "Else", "5002", "", "", "else@uni.example", "", ""]])
    result = export(A, to="moodle", course_dir=tmp_path, roster=roster)
    assert reasons(result) == {"5002": LeftOut.SEVERAL_ROSTER_ROWS}
    assert "Grace Hopper (grace@uni.example) and Someone Else" in result.left_out["5002"].detail
    assert read(result.path) == [["Email address", f"Assignment: {A} (Real)"], ["ada@uni.example", "7.5"]]


# --- what one student does not stop


def test_a_submission_not_graded_is_left_out_and_every_graded_student_written(tmp_path, capsys, monkeypatch):
    """One submission not graded (collected after the grading run): the command writes every graded student,
    names the one not graded on stderr, and exits with 1; the student's row is not written, not even as 0."""
    from autograder.instructor.cli import main

    monkeypatch.setenv("PATH", os.environ["PATH"])  # main() puts this environment's bin/ first: undone after
    grades(tmp_path)
    canvas_zip(tmp_path, {**CANVAS_FILES, "zuse_50500_917270_03_masking.ipynb": "zuse"})
    (tmp_path / "submitted" / "zuse" / A).mkdir(parents=True)
    assert main(["export", A, "--to", "canvas", "--title", TITLE, "--course-dir", str(tmp_path), "--missing-as-zero"]) == 1
    said = capsys.readouterr()
    assert "warning: not written: 1 submissions not graded (run python -m autograder grade 03_masking): zuse" \
        in said.err
    assert "3 students written: 3 graded, 0 empty cells (no submission), 0 zeros" in said.out
    assert "1 students left out" in said.out
    assert by_id(read(tmp_path / "grades" / f"canvas-{A}.csv")) == {"48213": "7.5", "51002": "0", "50871": "3.33"}
    result = export(A, to="canvas", course_dir=tmp_path, roster=canvas_roster(tmp_path))
    assert reasons(result) == {"zuse": LeftOut.NOT_GRADED}
    with pytest.raises(FileNotFoundError, match="run python -m autograder grade"):
        export("04_multihead", to="canvas", course_dir=tmp_path)


def test_parts_that_need_a_look_are_said(tmp_path):
    grades(tmp_path, {**PARTS, "hopperg": [(0.0, 5, "needs a look"), (5.0, 5, "passed")]})
    canvas_zip(tmp_path)
    result = export(A, to="canvas", title=TITLE, course_dir=tmp_path)
    assert result.warnings and "1 parts of 1 students need a look" in result.warnings[0]
    assert "hopperg" in result.warnings[0]


def test_canvas_needs_the_assignments_title_where_no_roster_column_names_it(tmp_path):
    """Canvas matches a column to an assignment by its exact title: a column named after the assignment's id would
    make a second assignment, so the title is asked for, and a roster column with it is found by it."""
    grades(tmp_path)
    canvas_zip(tmp_path)
    with pytest.raises(ExportError, match="pass --title with the assignment's title in Canvas"):
        export(A, to="canvas", course_dir=tmp_path)
    table = read(export(A, to="canvas", course_dir=tmp_path, title=TITLE).path)
    assert table[0][-1] == TITLE and table[1][0] == "Points Possible", "a new assignment, titled as asked"
    roster = write(tmp_path / "roster.csv", [CANVAS_HEADER + [f"{TITLE} (917236)"],
                                             ["Lovelace, Ada", "48213", "", "", "A", ""]])
    table = read(export(A, to="canvas", course_dir=tmp_path, roster=roster, title=TITLE.upper()).path)
    assert table[0][-1] == f"{TITLE} (917236)" and table[1][0] != "Points Possible", "the existing assignment"
    assert "--title" in subprocess.run([sys.executable, "-m", "autograder", "export", "--help"], cwd=ROOT,
                                       capture_output=True, text=True, timeout=120).stdout


# --- formula injection


def test_inert_quotes_what_a_spreadsheet_would_run_and_leaves_numbers_alone():
    for text in ['=HYPERLINK("http://x")', "+1", "-1+2", "@SUM(1)", "\t=1", "\r=1"]:
        assert inert(text) == "'" + text and plain(inert(text)) == text
    for value in [-1, -2.5, 0, 7.5, None, "ada", "", "1-2", "'quoted'"]:
        assert inert(value) == value
    assert plain("'quoted'") == "'quoted'"
    assert [decimal(x) for x in (7.50000001, 10.0, 3.335, -0.001, 0, 1 / 3)] == ["7.5", "10", "3.33", "0", "0",
                                                                                 "0.33"]


def test_the_grades_table_and_the_export_keep_formulas_inert(tmp_path):
    grades(tmp_path, {"@SUM(1)": [(-1.0, 5, "failed"), (5.0, 5, "passed")], "ada": [(5.0, 5, "passed")] * 2},
           message='=HYPERLINK("http://x")')
    with (tmp_path / "grades" / f"{A}.csv").open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == CSV_COLUMNS
    weird = [row for row in rows if row["student"] == "'@SUM(1)"]
    assert len(weird) == 2 and all(row["message"] == '\'=HYPERLINK("http://x")' for row in rows)
    assert float(weird[0]["score"]) == -1.0  # a negative number stays a number
    canvas_zip(tmp_path, {f"@SUM(1)_48213_917236_{A}.ipynb": "", f"ada_51002_917240_{A}.ipynb": ""})
    roster = write(tmp_path / "roster.csv", [CANVAS_HEADER, ["=cmd|' /C calc'!A0", "48213", "", "", "-A"],
                                             ["Ada", "51002", "", "", "A"]])
    table = read(export(A, to="canvas", title=TITLE, course_dir=tmp_path, roster=roster).path)
    assert table[2] == ["'=cmd|' /C calc'!A0", "48213", "", "", "'-A", "4"]  # the student of '@SUM(1)': 4 points
    table = read(export(A, to="canvas", title=TITLE, course_dir=tmp_path).path)
    assert {row[1]: row[0] for row in table[2:]} == {"48213": "'@SUM(1)", "51002": "ada"}


# --- the command


def test_the_command_line(tmp_path):
    helped = subprocess.run([sys.executable, "-m", "autograder", "export", "--help"], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert helped.returncode == 0
    for option in ("--to {canvas,moodle}", "--roster", "--missing-as-zero", "--course-dir", "--output"):
        assert option in helped.stdout
    grades(tmp_path)
    canvas_zip(tmp_path)
    command = [sys.executable, "-m", "autograder", "export", A, "--to", "canvas", "--title", TITLE, "--course-dir", str(tmp_path)]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert str(tmp_path / "grades" / f"canvas-{A}.csv") in run.stdout
    assert "3 students written: 3 graded, 0 empty cells (no submission), 0 zeros" in run.stdout


def test_the_command_says_why_it_stops(tmp_path, capsys, monkeypatch):
    """``error: ...`` and status 2, as the other commands (in this process: the grading code imported once)."""
    from autograder.instructor.cli import main

    monkeypatch.setenv("PATH", os.environ["PATH"])  # main() puts this environment's bin/ first: undone after
    grades(tmp_path)
    assert main(["export", A, "--to", "moodle", "--course-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("error: Moodle's import needs")
