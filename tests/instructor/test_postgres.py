"""The gradebook in PostgreSQL: the grading command, nbgrader's own commands, two runs at once,
and a database that goes away in the middle of a run.

Every test starts nothing outside itself: ``pg.py`` runs a throw-away server on a Unix
socket in a temporary folder (``make postgres`` installs Debian's server binaries).
"""

from __future__ import annotations

import csv
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import pytest

import submissions as S
from course import BIN, ROOT, load, nbgrader, notebook
from pg import throwaway_server, wait_for

pytestmark = pytest.mark.postgres

A = "03_masking"           # graded in every test
B = "01_nadaraya_watson"   # graded beside A in the test of two runs at once
STUDENTS = ["blank", "correct", "partial", "solution"]  # of A; sorted, as the command grades them


@pytest.fixture(scope="session")
def postgres():
    """The tests' own PostgreSQL server (``pg.py``)."""
    with throwaway_server() as server:
        yield server


@pytest.fixture(autouse=True)
def alembic_on_path(monkeypatch):
    """nbgrader makes a new gradebook with the ``alembic`` command of this environment."""
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ['PATH']}")


def use_database(course: Path, url: str) -> None:
    """Point ``course`` at the database ``url``, as an instructor would: in nbgrader_config.py."""
    with (course / "nbgrader_config.py").open("a") as config:
        config.write(f"\nc.CourseDirectory.db_url = {url!r}\n")
    (course / "gradebook.db").unlink(missing_ok=True)


def small_course(folder: Path, url: str, *assignments: str) -> Path:
    """A course of ``assignments``' source notebooks only (no grading), at database ``url``."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "nbgrader_config.py", folder)
    for assignment in assignments:
        shutil.copytree(ROOT / "solutions" / assignment, folder / "solutions" / assignment)
    use_database(folder, url)
    return folder


def full_marks(assignment: str):
    """Every graded part of ``assignment`` passed, and its answers all given."""
    from autograder.grading.notebooks import parts_of
    from autograder.grading.verdict import PartResult

    source = nbformat.read(notebook(ROOT / "solutions", assignment), as_version=4)
    results = [PartResult(p.grade_id, p.points, p.points, "passed") for p in parts_of(source)]
    answers = {c.metadata.nbgrader["grade_id"]: False for c in source.cells
               if c.metadata.get("nbgrader", {}).get("solution")}
    return results, answers


def contents(url: str, assignment: str) -> dict:
    """Everything the gradebook holds of ``assignment``'s submissions, by student."""
    from nbgrader.api import Gradebook

    found = {}
    with Gradebook(url) as gradebook:
        for submission in gradebook.find_assignment(assignment).submissions:
            grades = {(nb.name, g.name): (g.auto_score, g.manual_score, g.max_score, g.needs_manual_grade)
                      for nb in submission.notebooks for g in nb.grades}
            comments = {(nb.name, c.name): c.auto_comment for nb in submission.notebooks for c in nb.comments}
            found[submission.student.id] = {"timestamp": submission.timestamp, "grades": grades,
                                            "comments": comments, "score": submission.score}
    return found


def totals(url: str, assignment: str) -> dict[str, float]:
    return {student: entry["score"] for student, entry in contents(url, assignment).items()}


# --------------------------------------------------------------------------------------
# record(): one transaction, retried when another run wrote the same student meanwhile
# --------------------------------------------------------------------------------------


def test_record_retries_when_another_run_adds_the_same_student_at_the_same_moment(postgres, tmp_path):
    """The race of two runs: both find no student ``ada``, both insert her; the later insert
    waits for the other transaction and then fails on the unique key. Here the other run is
    a connection that inserts ``ada`` and commits only once ``record`` waits on it."""
    from autograder.instructor.gradebook import Course, ensure_assignment, record

    url = postgres.create_database("race")
    course = Course.open(small_course(tmp_path, url, A))
    ensure_assignment(course, A, notebook(course.root / "solutions", A))
    results, answers = full_marks(A)
    other_run = postgres.connect("race", autocommit=False)
    other_run.execute("INSERT INTO student (id) VALUES ('ada')")
    outcome = []

    def grade_ada():
        try:
            record(course, A, A, "ada", results, answers, None)
            outcome.append("recorded")
        except Exception as error:  # noqa: BLE001 - the thread's outcome, whatever it is, is the test's
            outcome.append(f"{type(error).__name__}: {error}")

    thread = threading.Thread(target=grade_ada)
    thread.start()
    wait_for(lambda: waiting_on_a_lock(postgres, "race") >= 1, 30, "record() to wait for the other run's insert")
    other_run.commit()
    other_run.close()
    thread.join(60)
    assert outcome == ["recorded"]
    assert totals(url, A) == {"ada": sum(r.max_score for r in results)}


def waiting_on_a_lock(server, database: str) -> int:
    """How many connections to ``database`` wait for a lock another holds."""
    with server.connect() as connection:
        return connection.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND wait_event_type = "
                                  "'Lock'", (database,)).fetchone()[0]


def test_a_record_that_fails_halfway_leaves_nothing_behind(postgres, tmp_path):
    """Student, submission and scores are one transaction: nothing of it without the rest."""
    from nbgrader.api import Gradebook, MissingEntry

    from autograder.grading.verdict import PartResult
    from autograder.instructor.gradebook import Course, ensure_assignment, record

    url = postgres.create_database("atomic")
    course = Course.open(small_course(tmp_path, url, A))
    ensure_assignment(course, A, notebook(course.root / "solutions", A))
    results, answers = full_marks(A)
    broken = results[:3] + [PartResult("no_such_part", 1, 1, "passed")]  # fails after the first scores
    with pytest.raises(MissingEntry):
        record(course, A, A, "ada", broken, answers, None)
    with Gradebook(url) as gradebook:
        assert gradebook.students == [] and gradebook.find_assignment(A).submissions == []
    record(course, A, A, "ada", results, answers, None)
    assert totals(url, A) == {"ada": sum(r.max_score for r in results)}


def test_an_assignment_saved_halfway_is_completed_by_the_next_run(postgres, tmp_path):
    """nbgrader saves an assignment's cells one commit at a time: a run whose database went
    away in between left the notebook without (some of) its cells."""
    from nbgrader.api import Gradebook

    from autograder.instructor.gradebook import Course, ensure_assignment, record

    url = postgres.create_database("halfway")
    course = Course.open(small_course(tmp_path, url, A))
    with Gradebook(url) as gradebook:
        gradebook.update_or_create_assignment(A)
        gradebook.add_notebook(A, A)
    ensure_assignment(course, A, notebook(course.root / "solutions", A))
    results, answers = full_marks(A)
    record(course, A, A, "ada", results, answers, None)
    assert totals(url, A) == {"ada": sum(r.max_score for r in results)}


def test_first_runs_at_once_on_an_empty_database_create_its_tables_once(postgres, tmp_path):
    """Runs of different assignments that start together all find an empty database."""
    from autograder.instructor.gradebook import Course, ensure_assignment, record

    url = postgres.create_database("empty")
    assignments = [A, B, "02_attention_scoring", "04_multihead"]
    course = Course.open(small_course(tmp_path, url, *assignments))
    start, failures = threading.Barrier(len(assignments)), []

    def first_run(assignment):
        try:
            start.wait()
            ensure_assignment(course, assignment, notebook(course.root / "solutions", assignment))
            record(course, assignment, assignment, "ada", *full_marks(assignment), None)
        except Exception as error:  # noqa: BLE001 - collected, and asserted empty by the test
            failures.append(f"{assignment}: {type(error).__name__}: {error}")

    threads = [threading.Thread(target=first_run, args=(a,)) for a in assignments]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not failures, "\n".join(failures)
    for assignment in assignments:
        assert totals(url, assignment) == {"ada": sum(r.max_score for r in full_marks(assignment)[0])}
    with postgres.connect("empty") as connection:
        assert connection.execute("SELECT count(*) FROM alembic_version").fetchone()[0] == 1


def test_a_database_that_cannot_be_reached_is_a_clear_one_line_error(postgres, tmp_path):
    from autograder.instructor.gradebook import Course, GradebookUnavailable, ensure_assignment, record

    url = postgres.url("no_such_database")
    course = Course.open(small_course(tmp_path, url, A))
    with pytest.raises(GradebookUnavailable) as raised:
        ensure_assignment(course, A, notebook(course.root / "solutions", A))
    message = str(raised.value)
    assert "\n" not in message and url in message and "no_such_database" in message
    assert "run the same command" in message and "resume" in message
    with pytest.raises(GradebookUnavailable):
        record(course, A, A, "ada", *full_marks(A), None)
    assert isinstance(raised.value, ConnectionError)  # the command's own "error: ..." exit 2


def test_a_server_that_never_answers_is_a_clear_error_within_the_connect_timeout(tmp_path, monkeypatch):
    from autograder.instructor import gradebook
    from autograder.instructor.gradebook import Course, GradebookUnavailable, ensure_assignment

    silent = socket.create_server(("127.0.0.1", 0))  # accepts connections, never says a word
    url = f"postgresql+psycopg://grader@127.0.0.1:{silent.getsockname()[1]}/grades"
    monkeypatch.setitem(gradebook.POSTGRES_LIMITS, "connect_timeout", "2")
    course = Course.open(small_course(tmp_path, url, A))
    started = time.monotonic()
    try:
        with pytest.raises(GradebookUnavailable, match="127.0.0.1"):
            ensure_assignment(course, A, notebook(course.root / "solutions", A))
    finally:
        silent.close()
    assert time.monotonic() - started < 30, "connect_timeout did not apply"


def test_limits_given_in_the_url_are_kept_and_other_databases_are_left_alone():
    from autograder.instructor.gradebook import with_limits

    url = with_limits("postgresql+psycopg://grader:pw@db.example.org/grades?connect_timeout=3")
    assert "connect_timeout=3" in url and "keepalives=1" in url and "grader:pw@" in url
    assert with_limits("sqlite:///gradebook.db") == "sqlite:///gradebook.db"


def test_a_missing_driver_is_a_clear_error(tmp_path):
    from autograder.instructor.gradebook import Course, GradebookUnavailable, ensure_assignment

    course = Course.open(small_course(tmp_path, "postgresql+nosuchdriver://postgres@/grades", A))
    with pytest.raises(GradebookUnavailable, match="no driver .* install it"):
        ensure_assignment(course, A, notebook(course.root / "solutions", A))


def test_a_password_is_not_shown_in_the_error():
    from autograder.instructor.gradebook import describe

    assert describe("postgresql+psycopg://grader:s3cret@db.example.org/grades") == \
        "postgresql+psycopg://grader:***@db.example.org/grades"


# --------------------------------------------------------------------------------------
# The grading command into PostgreSQL, against the same course graded into SQLite
# --------------------------------------------------------------------------------------


def grade_command(course: Path, secret: Path, assignment: str = A, workers: int = 2) -> list[str]:
    return [sys.executable, "-m", "autograder", "grade", assignment, "--course-dir", str(course),
            "--secret-file", str(secret), "--workers", str(workers)]


def grade(course: Path, secret: Path, assignment: str = A, workers: int = 2) -> subprocess.CompletedProcess:
    result = subprocess.run(grade_command(course, secret, assignment, workers), capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, f"grading failed:\n{result.stdout}\n{result.stderr}"
    return result


def export(course: Path, assignment: str = A) -> list[dict]:
    """``nbgrader export``'s rows of ``assignment``."""
    nbgrader(course, "export")
    with (course / "grades.csv").open(newline="") as handle:
        return [row for row in csv.DictReader(handle) if row["assignment"] == assignment]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A course of A and B (generated, not graded), with submissions of both by the same students,
    and the grading secret every copy of it is graded with."""
    folder = tmp_path_factory.mktemp("pg-base")
    course, secret = folder / "course", folder / "course.secret"
    course.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", course)
    for assignment in (A, B):
        shutil.copytree(ROOT / "solutions" / assignment, course / "solutions" / assignment)
        nbgrader(course, "generate_assignment", assignment, "--force")
    solution, blank = load(notebook(course / "solutions", A)), load(notebook(course / "exercises", A))
    partial = S.answer(solution, "window_mask", S.WRONG_WINDOW)
    for student, nb in {"blank": blank, "correct": solution, "partial": partial, "solution": solution}.items():
        S.write(course, student, nb, assignment=A)
    for student in ("blank", "correct"):
        nb = load(notebook(course / ("exercises" if student == "blank" else "solutions"), B))
        S.write(course, student, nb, assignment=B)
    return course, secret


def copy_of(base, folder: Path, url: str | None = None) -> Path:
    course = folder / "course"
    shutil.copytree(base[0], course)
    if url:
        use_database(course, url)
    return course


@pytest.fixture(scope="module")
def graded_both_ways(base, postgres, tmp_path_factory):
    """A graded into SQLite (the default) and, from a copy of the course, into PostgreSQL."""
    lite = copy_of(base, tmp_path_factory.mktemp("sqlite"))
    url = postgres.create_database("grades")
    pg = copy_of(base, tmp_path_factory.mktemp("postgres"), url)
    started = time.monotonic()
    grade(lite, base[1])
    middle = time.monotonic()
    result = grade(pg, base[1])
    print(f"graded {len(STUDENTS)} submissions: SQLite {middle - started:.0f} s, PostgreSQL "
          f"{time.monotonic() - middle:.0f} s")
    return lite, pg, url, result


@pytest.mark.sandbox
@pytest.mark.nbgrader
def test_grades_in_postgres_equal_those_in_sqlite(graded_both_ways):
    lite, pg, url, result = graded_both_ways
    assert f"gradebook: {url}" in result.stdout
    in_postgres = contents(url, A)
    assert sorted(in_postgres) == STUDENTS
    assert in_postgres == contents(f"sqlite:///{lite / 'gradebook.db'}", A)
    assert in_postgres["partial"]["score"] < in_postgres["correct"]["score"] == in_postgres["solution"]["score"]
    assert in_postgres["blank"]["score"] == 0
    assert (pg / "grades" / f"{A}.csv").read_text() == (lite / "grades" / f"{A}.csv").read_text()
    assert not list(Path(pg).glob("*.db")), "the PostgreSQL course wrote an SQLite gradebook"


@pytest.mark.sandbox
@pytest.mark.nbgrader
def test_nbgrader_export_and_feedback_read_the_grades_in_postgres(graded_both_ways):
    lite, pg, url, _ = graded_both_ways
    exported = export(pg)
    assert {row["student_id"]: float(row["raw_score"]) for row in exported} == totals(url, A)
    by_student = lambda rows: sorted(rows, key=lambda row: (row["assignment"], row["student_id"]))  # noqa: E731
    assert by_student(exported) == by_student(export(lite))  # the databases list them in the order they were graded
    for course in (lite, pg):
        nbgrader(course, "generate_feedback", A, "--student", "partial")
    html = (pg / "feedback" / "partial" / A / f"{A}.html").read_text()
    assert "window_mask" in html and "BEGIN HIDDEN TESTS" not in html
    assert html == (lite / "feedback" / "partial" / A / f"{A}.html").read_text()


# --------------------------------------------------------------------------------------
# Two runs at once into one database
# --------------------------------------------------------------------------------------


@pytest.mark.sandbox
@pytest.mark.nbgrader
def test_two_runs_of_different_assignments_at_once_lose_no_grade(base, graded_both_ways, postgres, tmp_path):
    """A and B, graded by the same students, started together on an empty database.

    Once the runs have made the tables, the test holds back every insert of a student
    until both runs wait to insert the first one (each grades one submission at a time,
    in the students' order), then lets them go: both add the same student at the same
    moment, and the later one's transaction fails on the unique key and is retried.
    """
    lite, _, _, _ = graded_both_ways
    url = postgres.create_database("together")
    course = copy_of(base, tmp_path, url)
    log_before = postgres.log.read_text().count('unique constraint "student_pkey"')
    runs = {assignment: subprocess.Popen(grade_command(course, base[1], assignment, workers=1), text=True,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE) for assignment in (A, B)}
    gate = postgres.connect("together", autocommit=False)
    try:
        def tables_made():
            ended = [a for a, run in runs.items() if run.poll() is not None]
            assert not ended, f"{ended} ended early:\n" + "\n".join(runs[a].communicate()[1] for a in ended)
            with postgres.connect("together") as connection:
                return connection.execute("SELECT to_regclass('student')").fetchone()[0]

        wait_for(tables_made, 300, "the runs to make the gradebook's tables")
        gate.execute("LOCK TABLE student IN SHARE MODE")  # reads go on; inserts wait
        wait_for(lambda: waiting_on_a_lock(postgres, "together") >= 2
                 or any(run.poll() is not None for run in runs.values()), 600, "both runs to add their first student")
    finally:
        gate.rollback()
        gate.close()
    outputs = {a: run.communicate(timeout=900) for a, run in runs.items()}
    for assignment, run in runs.items():
        assert run.returncode == 0, f"{assignment} failed:\n{outputs[assignment][0]}\n{outputs[assignment][1]}"
    assert "Traceback" not in "".join(out + err for out, err in outputs.values())
    assert postgres.log.read_text().count('unique constraint "student_pkey"') > log_before, \
        "the runs did not add the same student at the same moment"
    assert contents(url, A) == contents(f"sqlite:///{lite / 'gradebook.db'}", A)
    in_b = contents(url, B)
    assert sorted(in_b) == ["blank", "correct"]
    assert in_b["blank"]["score"] == 0 and in_b["correct"]["score"] == sum(
        r.max_score for r in full_marks(B)[0])
    assert all(score is not None for entry in in_b.values() for score, *_ in entry["grades"].values())


# --------------------------------------------------------------------------------------
# A database that goes away in the middle of a run
# --------------------------------------------------------------------------------------


@pytest.mark.sandbox
@pytest.mark.nbgrader
def test_a_database_gone_mid_run_is_a_clear_error_and_the_next_run_resumes(base, graded_both_ways, postgres,
                                                                             tmp_path):
    lite, _, _, _ = graded_both_ways
    url = postgres.create_database("resume")
    course = copy_of(base, tmp_path, url)
    states = course / "grades" / ".state" / A
    run = subprocess.Popen(grade_command(course, base[1], workers=1), text=True, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
    try:
        wait_for(lambda: list(states.glob("*.json")) or run.poll() is not None, 600, "the first graded submission")
        postgres.stop()  # as a crash would: every connection dropped at once
        stdout, stderr = run.communicate(timeout=900)
    finally:
        if run.poll() is None:
            run.kill()
        if not postgres.running():
            postgres.start()
    done = sorted(path.stem for path in states.glob("*.json"))
    assert 1 <= len(done) < len(STUDENTS), f"the database should have gone away halfway:\n{stdout}\n{stderr}"
    assert run.returncode == 2, f"expected the exit code 2:\n{stdout}\n{stderr}"
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert "Traceback" not in stderr, stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and url in lines[0] and "resume" in lines[0], stderr
    # no half-written grade: a submission in the gradebook has every score; a state file, a submission
    recorded = contents(url, A)
    assert all(score is not None for entry in recorded.values() for score, *_ in entry["grades"].values()), recorded
    assert set(done) <= set(recorded)
    result = grade(course, base[1], workers=1)
    assert f"{len(STUDENTS) - len(done)} to grade" in result.stdout
    assert contents(url, A) == contents(f"sqlite:///{lite / 'gradebook.db'}", A)
    assert (course / "grades" / f"{A}.csv").read_text() == (lite / "grades" / f"{A}.csv").read_text()
