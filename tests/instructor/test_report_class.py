"""A class of about 35 submissions of assignment 03, made of the catalogue's right and wrong answers, graded
by ``python -m autograder grade`` and reported by ``python -m autograder report``: each catalogued mistake is
a group of its own, holding exactly the students who made it; the page opens in Chromium with the network
refused, every figure drawn and every table there. Its screenshots are the figures of the instructors' guide
(``book/instructors/class-report*.png``, copied from ``_build/screenshots/``)."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

import pytest

import catalogue_ch03 as catalogue
from course import ROOT, load, make_course, notebook, submit
from one_bug import answer_name

A = "03_masking"
#: mistakes handed in by two students each (different hidden inputs: one group)
TWICE = {"masking with 0 instead of -inf", "masked attention without 1/√d", "strict causal mask",
         "padding mask without the query axis", "off-by-one valid lengths", "window on one side only",
         "bottom-right mask aligned top-left", "float mask where bool is required",
         "NaN on a query with no allowed key"}
#: how many mistakes the students who made any made, weakest first: a class where weaker students make more
MISTAKES_PER_STUDENT = [3, 3, 3, 3, 2, 2, 2, 2, 2, 2] + [1] * 8
SCREENSHOTS = ROOT / "_build" / "screenshots"

pytestmark = [pytest.mark.sandbox, pytest.mark.nbgrader, pytest.mark.browser]


def answer_code(answer) -> str:
    """An answer cell defining ``answer`` and the catalogue's functions it calls, directly or through another."""
    functions = {name: value for name, value in vars(catalogue).items()
                 if inspect.isfunction(value) and value.__module__ == catalogue.__name__}
    needed, todo = [], [answer]
    while todo:
        function = todo.pop()
        if function not in needed:
            needed.append(function)
            todo += [functions[name] for name in function.__code__.co_names if name in functions]
    return "\n\n".join(inspect.getsource(function) for function in reversed(needed))


def with_answer(nb: dict, check, answer) -> dict:
    """``nb`` with the answer that ``check`` is called on replaced by ``answer``."""
    import copy

    name = answer_name(A, check.__name__)
    nb = copy.deepcopy(nb)
    cells = [c for c in nb["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == name]
    assert len(cells) == 1, f"no answer cell {name}"
    cells[0]["source"] = answer_code(answer) + f"\n\n{name} = {answer.__name__}\n"
    return nb


#: two mistakes the judge knows no name for, in one part, whose messages read alike ("output: wrong values"): each
#: handed in by two students, written apart from the project
UNNAMED = {
    "scaled by 1/d": ("u01", "u02", """def masked_attention(queries, keys, values, mask=None):
    if queries.shape[-1] != keys.shape[-1] or keys.shape[-2] != values.shape[-2]:
        raise ValueError("queries and keys must have the same width, keys and values the same length")
    if mask is not None and mask.dtype != torch.bool:
        raise ValueError("the mask must be bool")
    scores = queries @ keys.transpose(-2, -1) / queries.shape[-1]
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1))
    return weights @ values, weights
"""),
    "values shifted by the keys": ("u03", "u04", """def masked_attention(queries, keys, values, mask=None):
    if queries.shape[-1] != keys.shape[-1] or keys.shape[-2] != values.shape[-2]:
        raise ValueError("queries and keys must have the same width, keys and values the same length")
    if mask is not None and mask.dtype != torch.bool:
        raise ValueError("the mask must be bool")
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1))
    return weights @ (values + keys[..., :1]), weights
"""),
}


def with_code(nb: dict, grade_id: str, code: str) -> dict:
    """``nb`` with the answer cell ``grade_id`` holding ``code``."""
    import copy

    nb = copy.deepcopy(nb)
    cell, = [c for c in nb["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id]
    cell["source"] = code
    return nb


def the_class(course: Path) -> dict[str, set[tuple[str, str]]]:
    """Submit the class: the solution, each catalogued right answer, a blank notebook, and students who make
    one to three of the catalogued mistakes (each in another answer cell); ``{student: {(grade id, mistake)}}``."""
    solution = load(notebook(course / "solutions", A))
    submit(course, "s00-solution", A, solution)
    submit(course, "s99-blank", A, load(notebook(course / "exercises", A)))
    for number, (check, right, _) in enumerate(catalogue.CORRECT, start=1):
        submit(course, f"r{number:02d}", A, with_answer(solution, check, right))
    handed_in = [entry for entry in catalogue.WRONG_AND_WHY for _ in range(2 if entry[0] in TWICE else 1)]
    assert len(handed_in) == sum(MISTAKES_PER_STUDENT)
    made: dict[str, set[tuple[str, str]]] = {}
    for number, count in enumerate(MISTAKES_PER_STUDENT, start=1):
        student, nb, cells = f"w{number:02d}", solution, set()
        while len(made.get(student, ())) < count:
            entry = next(e for e in handed_in if answer_name(A, e[1].__name__) not in cells)  # another cell each
            handed_in.remove(entry)
            mistake, check, wrong = entry[:3]
            cells.add(answer_name(A, check.__name__))
            nb = with_answer(nb, check, wrong)
            made.setdefault(student, set()).add((f"test_{check.__name__.removeprefix('check_')}", mistake))
        submit(course, student, A, nb)
    for mistake, (*students, code) in UNNAMED.items():
        for student in students:
            submit(course, student, A, with_code(solution, "masked_attention", code))
            made[student] = {("test_masked_attention", mistake)}
    return made


def test_each_catalogued_mistake_is_a_group_of_its_own(tmp_path):
    from autograder.instructor.gradebook import Course
    from autograder.instructor.report import load as load_grades
    from autograder.instructor.report import mistake_groups

    course = make_course(tmp_path / "course")
    made = the_class(course)
    students = len(list((course / "submitted").iterdir()))
    assert 25 <= students <= 40, students
    graded = subprocess.run([sys.executable, "-m", "autograder", "grade", A, "--course-dir", str(course),
                             "--secret-file", str(tmp_path / "secret")], cwd=ROOT, capture_output=True, text=True,
                            timeout=1800)
    assert graded.returncode == 0, graded.stdout + graded.stderr
    reported = subprocess.run([sys.executable, "-m", "autograder", "report", A, "--course-dir", str(course)],
                              cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert reported.returncode == 0, reported.stderr
    page = course / "grades" / f"report-{A}.html"
    assert reported.stdout.strip() == f"class report: {page}"

    groups = mistake_groups(load_grades(Course.open(course), A))
    found = {(group.part, frozenset(group.students)) for group in groups}
    expected: dict[tuple[str, str], set[str]] = {}
    for student, mistakes in made.items():
        for part, mistake in mistakes:
            if mistake not in catalogue.ADVICE_AT_GRADING:  # told as advice, its points kept: no mistake of the class
                expected.setdefault((part, mistake), set()).add(student)
    wanted = {(part, frozenset(students)) for (part, _), students in expected.items()}
    assert found == wanted, _difference(found, wanted, expected)
    unnamed = [group for group in groups if set(group.students) & {"u01", "u03"}]
    assert [group.students for group in unnamed] == [["u01", "u02"], ["u03", "u04"]], \
        "two unnamed mistakes that read alike are two groups"
    assert load_grades(Course.open(course), A).blank == ["s99-blank"]
    assert not any("s99-blank" in group.students for group in groups), "a blank notebook is counted once, apart"
    assert not any(s.startswith(("r", "s00")) for group in groups for s in group.students), \
        "a right answer is in a group of mistakes"
    rows = {(row["student"], row["part"]): row for row in _rows(course)}
    advised = [(student, part) for student, mistakes in made.items() for part, mistake in mistakes
               if mistake in catalogue.ADVICE_AT_GRADING]
    assert advised and all(rows[key]["status"] == "passed" for key in advised), \
        "a mistake only the student's process observes cost points"
    student = advised[0][0]
    autograded = (course / "autograded" / student / A / f"{A}.ipynb").read_text(encoding="utf-8")
    assert "⚠ advice (no points depend on it)" in autograded, "the advice is not in the student's feedback"
    text = page.read_text(encoding="utf-8")
    for group in groups:
        assert f"{len(group.students)} ({group.share:.0%})" in text
    files = [link.split("#")[0] for link in re.findall(r"href='([^'#][^']*)'", text)]
    assert f"similarity-{A}.html" in files, "the report does not link the similarity page"
    missing = [link for link in files if not (page.parent / unquote(link)).is_file()]
    assert not missing, f"links to files that are not there: {missing[:3]}"
    _open_offline(page)


def _rows(course: Path) -> list[dict]:
    from autograder.instructor.gradebook import read_csv

    return read_csv(course / "grades" / f"{A}.csv")


def _difference(found, wanted, expected) -> str:
    name = {(part, frozenset(students)): mistake for (part, mistake), students in expected.items()}
    lines = ["the groups differ from the catalogue's mistakes:"]
    lines += [f"  a group of the report, not one mistake: {part} {sorted(students)}" for part, students in found - wanted]
    lines += [f"  a mistake not grouped on its own: {part} {name[part, students]} {sorted(students)}"
              for part, students in wanted - found]
    return "\n".join(lines)


def _open_offline(page: Path) -> None:
    """Open the report in Chromium with every request but the file refused: each figure drawn, the tables there;
    a screenshot of its first screen for the guide."""
    from browser import offline_page

    refused = []
    with offline_page(page, refused) as tab:
        images = tab.eval_on_selector_all("img", "all => all.map(i => [i.complete, i.naturalWidth])")
        assert images and all(done and width > 100 for done, width in images), f"a figure is not drawn: {images}"
        assert tab.locator("table").count() >= 2 and tab.locator("table.groups tr").count() > 10
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)  # the guide's two figures are these (book/instructors/)
        tab.screenshot(path=str(SCREENSHOTS / "class-report.png"))
        mistakes = tab.locator("table.groups").bounding_box()
        tab.screenshot(path=str(SCREENSHOTS / "class-report-mistakes.png"), full_page=True,
                       clip={"x": mistakes["x"] - 8, "y": mistakes["y"] - 8, "width": mistakes["width"] + 16,
                             "height": min(mistakes["height"], 720) + 8})
    assert not refused, f"the report asked the network for {refused}"
