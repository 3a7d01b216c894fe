"""The instructors' guide, followed as a lecturer of an LMS-based course would, on a temporary course.

One walk through ``book/instructors/index.md``'s path for assignment 03: publish one
assignment, collect a zip of hand-ins with the guide's regular expression, grade, write the
feedback pages, export the one assignment for the LMS, override a score as the formgrader
does and see it in the course's CSV. Every command is the guide's own; the test reads the
regular expression and the ``export`` line from the guide, so the two cannot drift apart.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from course import BIN, ROOT, load, make_course, nbgrader, notebook

pytestmark = [pytest.mark.sandbox, pytest.mark.nbgrader, pytest.mark.browser]

GUIDE = ROOT / "book" / "instructors" / "index.md"
A = "03_masking"
#: The names Canvas gives the files of its "Download submissions" zip (one late, one handed in again).
CANVAS_FILES = {"lovelaceada_48213_917236_03_masking.ipynb": "lovelaceada",
                "hopperg_LATE_51002_917240_03_masking-1.ipynb": "hopperg",
                "turinga_50871_917251_03_masking.ipynb": "turinga"}


def guide_lines(prefix: str) -> list[str]:
    """The lines of the guide's code blocks that start with ``prefix``."""
    blocks = re.findall(r"```[^\n]*\n(.*?)```", GUIDE.read_text(), flags=re.S)  # any fence: bash, {figure}
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip().startswith(prefix)]


def autograder(course: Path, *args: str, secret: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "AUTOGRADER_SECRET_FILE": str(secret)}
    result = subprocess.run([sys.executable, "-m", "autograder", *args], cwd=course, env=env, capture_output=True,
                            text=True, timeout=900)
    assert result.returncode == 0, f"autograder {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result


def test_the_guide_takes_a_lecturer_from_a_release_to_grades_in_the_lms(tmp_path):
    # 1. release 03 alone, to the students' repository
    students_repository = tmp_path / "students"
    released = subprocess.run([sys.executable, "-m", "autograder", "publish", str(students_repository),
                               "--assignments", "03"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert released.returncode == 0, released.stderr
    assert "released 03_masking" in released.stdout
    assert sorted(p.name for p in (students_repository / "exercises").iterdir()) == [A]
    again = subprocess.run([sys.executable, "-m", "autograder", "publish", str(students_repository), "--assignments",
                            "03"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert "nothing changed" in again.stdout and "nothing committed" in again.stdout

    # 2. the LMS's zip of hand-ins, collected by zip_collect with the guide's regular expression
    course = make_course(tmp_path / "course")
    expression = guide_lines("c.FileNameCollectorPlugin.named_regexp")
    assert expression and expression[0] in (ROOT / "nbgrader_config.py").read_text(), \
        "the guide's expression for Canvas is not the course's"
    solution, blank = load(notebook(course / "solutions", A)), load(notebook(course / "exercises", A))
    handed_in = {"lovelaceada": solution, "hopperg": blank, "turinga": solution}
    archive = course / "downloaded" / A / "archive"
    archive.mkdir(parents=True)
    with zipfile.ZipFile(archive / "submissions.zip", "w") as download:
        for name, student in CANVAS_FILES.items():
            download.writestr(name, json.dumps(handed_in[student]))
    nbgrader(course, "zip_collect", A)
    for student in handed_in:
        assert notebook(course / "submitted" / student, A).is_file(), f"{student}'s hand-in was not collected"

    # 3. grade, with a secret an earlier course left in the default place: said, and warned about
    secret = tmp_path / "earlier-course-secret"
    secret.write_text("ab" * 32 + "\n")
    graded = autograder(course, "grade", A, secret=secret)
    assert f"grading secret: {secret} (AUTOGRADER_SECRET_FILE" in graded.stdout
    assert "warning: this is the course's first grading run" in graded.stdout
    rows = read_csv(course / "grades" / f"{A}.csv")
    totals = {student: sum(float(r["score"]) for r in rows if r["student"] == student) for student in handed_in}
    assert totals == {"lovelaceada": 9.0, "hopperg": 0.0, "turinga": 9.0}

    # 4. feedback pages, their scores listed by part name
    nbgrader(course, "generate_feedback", A)
    page = (course / "feedback" / "hopperg" / A / f"{A}.html").read_text()
    assert "<code>masked_softmax</code>" in page and "<code>masked_attention: its arguments</code>" in page
    assert "Test cell</a>" not in page
    assert "cdnjs" not in page and "window.MathJax" in page, "the page's math is not the course's own MathJax"
    assert typeset_offline(course / "feedback" / "hopperg" / A / f"{A}.html") > 0, "no math typeset offline"

    # 5. an override in the gradebook, as the formgrader makes it: the gradebook is the record
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        gradebook.find_grade("test_causal_mask", A, A, "hopperg").manual_score = 1.0
        gradebook.db.commit()
    # the class report, with the guide's command: the override marked at once, before any new grade run
    reported = autograder(course, *guide_lines("python -m autograder report")[0].split()[3:], secret=secret)
    page = (course / "grades" / f"report-{A}.html").read_text(encoding="utf-8")
    assert reported.stdout.strip().endswith(f"report-{A}.html")
    seen = re.sub(r"<[^>]+>", " ", page)  # the page's text, as a reader sees it
    assert re.search(r"3 submitted: \d blank, 0 did not run; 3 graded, 0 not graded, 0 missing", seen)
    assert re.search(r"hopperg\s+causal_mask\s+0\s+1", seen[seen.index("Scores set by hand"):])
    assert "<td class='override'>1</td>" in page
    regraded = autograder(course, "grade", A, secret=secret)
    assert "0 to grade" in regraded.stdout and "first grading run" not in regraded.stdout
    assert "1 scores set by hand in the gradebook" in regraded.stdout
    row = next(r for r in read_csv(course / "grades" / f"{A}.csv")
               if (r["student"], r["part"]) == ("hopperg", "test_causal_mask"))
    assert (float(row["score"]), float(row["auto_score"])) == (1.0, 0.0)

    # 6. the export for the LMS: this assignment only, the override counted
    export = guide_lines("nbgrader export")
    assert export, "the guide gives no export command"
    command = export[0].split()
    subprocess.run(command, cwd=course, check=True, capture_output=True,
                   env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"})
    exported = read_csv(course / command[command.index("--to") + 1])
    assert {r["assignment"] for r in exported} == {A}
    assert {r["student_id"]: float(r["score"]) for r in exported} == {"lovelaceada": 9.0, "hopperg": 1.0,
                                                                      "turinga": 9.0}
    # and as Canvas imports it, the guide's round trip: Canvas's user ids from the zip's names
    canvas = next(line for line in guide_lines("python -m autograder export") if "--roster" not in line)
    autograder(course, *shlex.split(canvas)[3:], secret=secret)
    with (course / "grades" / f"canvas-{A}.csv").open(newline="", encoding="utf-8") as handle:
        table = list(csv.reader(handle))
    assert table[0][:5] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
    scores = {line[1]: float(line[5]) for line in table[1:] if line[0] != "Points Possible"}
    assert scores == {"48213": 9.0, "51002": 1.0, "50871": 9.0}


def test_the_moodle_expression_of_the_guide_reads_moodle_names():
    moodle = [line for line in guide_lines("c.FileNameCollectorPlugin.named_regexp") if "assignsubmission" in line]
    assert moodle, "the guide gives no expression for Moodle"
    expression = re.search(r'r"(.*)"', moodle[0]).group(1)
    # the name below the download, matched whole, as the course's collector does (autograder/instructor/collect.py)
    found = re.fullmatch(expression, "Ada Lovelace_4821_assignsubmission_file_/03_masking (1).ipynb")
    assert found and found.group("student_id") == "4821" and found.group("file_id") == "03_masking"
    assert not re.fullmatch(expression, "Eve_4999_assignsubmission_file_/Ada Lovelace_4821_assignsubmission_file_/"
                                        "03_masking.ipynb"), "a folder a student made is read as Moodle's"


def test_a_kernel_that_cannot_import_the_course_says_so_and_what_to_do(tmp_path):
    """The grader run from a copy of the package that the environment does not install: the kernel, which sees
    the environment and the grader's package only, cannot import it; the run stops at once and says why."""
    course = make_course(tmp_path / "course")
    student = course / "submitted" / "ada" / A
    student.mkdir(parents=True)
    shutil.copy(notebook(course / "solutions", A), student / f"{A}.ipynb")
    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "autograder", copy / "autograder", ignore=shutil.ignore_patterns("__pycache__"))
    result = subprocess.run([sys.executable, "-m", "autograder", "grade", A, "--course-dir", str(course),
                             "--secret-file", str(tmp_path / "secret")], cwd=copy, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "cannot import PyTorch or the course's package" in result.stderr
    assert "No module named 'autograder'" in result.stderr and "pip install -e ." in result.stderr
    assert "run the command again" not in result.stdout + result.stderr


def typeset_offline(page: Path) -> int:
    """How many formulas MathJax typesets in ``page``, opened from disk in Chromium with every other request
    refused (a student's feedback page, offline)."""
    from playwright.sync_api import sync_playwright

    from browser import CHROMIUM, CHROMIUM_ARGS

    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context()
            context.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:")
                          else route.abort("internetdisconnected"))
            tab = context.new_page()
            tab.goto(page.as_uri())
            tab.wait_for_function("window.MathJax && MathJax.startup && MathJax.startup.promise", timeout=30_000)
            tab.evaluate("MathJax.startup.promise")
            return tab.locator("mjx-container").count()
        finally:
            browser.close()


def read_csv(path: Path) -> list[dict]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_the_course_feedback_template_leaves_the_formgraders_pages_alone():
    """nbgrader_config.py configures the feedback exporter only: the formgrader renders submissions with an
    HTMLExporter of its own (template ``formgrade``), which must not get the feedback page's template."""
    from nbconvert.exporters import HTMLExporter
    from traitlets.config.loader import PyFileConfigLoader

    from autograder.instructor.feedback import FeedbackExporter, InlineMathJax

    config = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()
    from nbgrader.server_extensions.formgrader import handlers

    config.HTMLExporter.template_name = "formgrade"  # what the formgrader sets for its own pages
    config.HTMLExporter.extra_template_basedirs = [handlers.template_path]
    formgrader = HTMLExporter(config=config)
    assert formgrader.template_file != "course_feedback.html.j2" and formgrader.preprocessors == []
    feedback = FeedbackExporter(config=config)
    assert (feedback.template_name, feedback.template_file) == ("course_feedback", "course_feedback.html.j2")
    assert feedback.preprocessors == [InlineMathJax]
