"""The Instructors' guide and the answers it points to. Fast: no book build.

* The book's last part, "Instructors", comes after "Reference" and lists the guide's pages.
* The answers to the think-exercises (``instructors/think_exercise_answers.md``) are in the
  course repository only: not a page of the book, not under ``book/``, and never copied
  into the students' repository by ``python -m autograder publish``.
* Every think-exercise of every chapter, and every written question of the notebooks, has
  an answer there; a chapter that gains an exercise fails here until it has one.
* The syllabus names every graded part of every solution notebook with its points, and its
  table of time per assignment counts the graded parts and solution lines correctly.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import yaml

from autograder.instructor import publish as publishing
from course import ASSIGNMENTS, ROOT, notebook
from layout import chapters, toc_parts

sys.path.insert(0, str(ROOT / "_ext"))
from reading_time import read_solutions  # the book's extension, not a package

GUIDE = ROOT / "book" / "instructors"
GUIDE_PAGES = ["book/instructors/index", "book/instructors/syllabus", "book/instructors/publishing"]
ANSWERS = ROOT / "instructors" / "think_exercise_answers.md"
SYLLABUS = GUIDE / "syllabus.md"


# --------------------------------------------------------------------------- helpers


def solution(assignment: str) -> dict:
    return json.loads(notebook(ROOT / "solutions", assignment).read_text())


def graded_parts(assignment: str) -> dict[str, float]:
    """``{grade_id: points}`` of the graded (test) cells of an assignment's solution notebook."""
    parts = {}
    for cell in solution(assignment)["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("grade"):
            parts[meta["grade_id"]] = float(meta["points"])
    return parts


def solution_lines(assignment: str) -> tuple[int, int]:
    """``(own, other)``: non-blank lines between ``### BEGIN SOLUTION`` and ``### END
    SOLUTION``, in answer cells that a test cell grades (``X`` graded by ``test_X``) and in
    the others (such as code pasted from an earlier assignment)."""
    tests = set(graded_parts(assignment))
    own = other = 0
    for cell in solution(assignment)["cells"]:
        source = "".join(cell["source"])
        blocks = re.findall(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", source, flags=re.DOTALL)
        count = sum(1 for block in blocks for line in block.splitlines() if line.strip())
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if f"test_{grade_id}" in tests:
            own += count
        else:
            other += count
    return own, other


def think_exercises(chapter: str) -> list[int]:
    """The numbers of the items of a chapter's '## Exercises to think about' section."""
    text = (ROOT / "book" / f"{chapter}.md").read_text()
    match = re.search(r"^## Exercises to think about\s*\n(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    assert match, f"book/{chapter}.md has no '## Exercises to think about' section"
    numbers = [int(n) for n in re.findall(r"^(\d+)\.\s", match.group(1), re.MULTILINE)]
    assert numbers, f"book/{chapter}.md: no numbered exercise under 'Exercises to think about'"
    assert numbers == list(range(1, len(numbers) + 1)), f"book/{chapter}.md: exercises numbered {numbers}"
    return numbers


def written_questions(assignment: str) -> list[str]:
    """grade ids of the notebook's ungraded markdown cells that ask a question in their text
    (a '?' outside headings and code): the written questions students answer in prose."""
    found = []
    for cell in solution(assignment)["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell["cell_type"] != "markdown" or meta.get("grade") or meta.get("solution"):
            continue
        text = re.sub(r"```.*?```", "", "".join(cell["source"]), flags=re.DOTALL)
        text = re.sub(r"^#{1,6}\s.*$", "", text, flags=re.MULTILINE)
        if "?" in text:
            found.append(meta.get("grade_id", "?"))
    return found


def answer_headings() -> list[str]:
    return re.findall(r"^### (.+)$", ANSWERS.read_text(), re.MULTILINE)


# --------------------------------------------------------------------------- the book


def test_the_instructors_part_comes_after_reference_and_lists_the_guide():
    parts = list(toc_parts())
    assert "Instructors" in parts, "_toc.yml has no 'Instructors' part"
    assert "Reference" in parts, "_toc.yml has no 'Reference' part"
    assert parts.index("Instructors") > parts.index("Reference"), f"_toc.yml: the parts are in the order {parts}"
    assert toc_parts()["Instructors"] == GUIDE_PAGES
    on_disk = sorted(f"book/instructors/{p.stem}" for p in GUIDE.glob("*.md"))
    assert on_disk == sorted(GUIDE_PAGES), f"book/instructors/ holds {on_disk}; the Instructors part lists {GUIDE_PAGES}"


def test_the_answers_are_in_the_course_repository_but_not_in_the_book():
    assert ANSWERS.is_file(), f"{ANSWERS.relative_to(ROOT)} is missing"
    pages = [page for part in toc_parts().values() for page in part]
    assert not [p for p in pages if p.startswith("instructors/") or "answer" in p], f"_toc.yml lists answers: {pages}"
    assert not list((ROOT / "book").rglob("*answer*")), "a file of answers lies under book/"
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    excluded = any(pattern.strip("/*") == "instructors" for pattern in config.get("exclude_patterns", []))
    assert config.get("only_build_toc_files") is True or excluded, (
        "_config.yml: without only_build_toc_files (or instructors in exclude_patterns) the build "
        "would render instructors/*.md as pages of the public book"
    )
    guide = (GUIDE / "index.md").read_text()
    assert "instructors/think_exercise_answers.md" in guide, "the guide does not say where the answers are"


def test_publishing_withholds_the_answers(tmp_path):
    destination = tmp_path / "students"
    written = publishing.publish(ROOT, destination, check_generated=False).written
    assert not [p for p in written if p.parts[0] == "instructors"], "instructors/ was published"
    texts = "\n".join((destination / p).read_text(errors="replace") for p in written)
    distinctive = [line.strip() for line in ANSWERS.read_text().splitlines()
                   if len(line.strip()) >= 40 and not line.lstrip().startswith(("|", "```"))]
    assert len(distinctive) > 100, "the search would prove nothing: too few lines of answers"
    leaked = [line for line in distinctive if line in texts]
    assert not leaked, f"answer text was published: {leaked[:3]}"


@pytest.mark.nbgrader
def test_publishing_the_chinese_edition_releases_its_generated_notebooks(tmp_path):
    """``--language zh``: the notebooks of zh/exercises/ (checked against a fresh generation of zh/solutions/),
    their code the English notebooks', and a README in Chinese."""
    destination = tmp_path / "students"
    release = publishing.publish(ROOT, destination, assignments=["03"], language="zh")
    assert release.assignments == ["03_masking"] and release.committed
    published = json.loads((destination / "exercises" / "03_masking" / "03_masking.ipynb").read_text())
    assert published == json.loads((ROOT / "zh" / "exercises" / "03_masking" / "03_masking.ipynb").read_text())
    english = json.loads((ROOT / "exercises" / "03_masking" / "03_masking.ipynb").read_text())
    assert [c for c in published["cells"] if c["cell_type"] == "code"] == \
        [c for c in english["cells"] if c["cell_type"] == "code"]
    assert "检查的提示为英文" in (destination / "README.md").read_text(encoding="utf-8")
    with pytest.raises(publishing.PublishError, match="no edition in 'fr'"):
        publishing.publish(ROOT, tmp_path / "other", language="fr")


def test_publishing_refuses_instructor_folders_even_if_listed(tmp_path, monkeypatch):
    monkeypatch.setattr(publishing, "PUBLISHED", [*publishing.PUBLISHED, "instructors"])
    with pytest.raises(publishing.PublishError, match="instructors only"):
        publishing.publish(ROOT, tmp_path / "students", check_generated=False)


# --------------------------------------------------------------------------- the answers


def test_every_think_exercise_has_an_answer():
    headings = answer_headings()
    answered = {(int(c), int(e)) for c, e in
                (re.match(r"Exercise (\d+)\.(\d+)\b", h).groups() for h in headings if h.startswith("Exercise "))}
    expected = {(position, number) for position, chapter in enumerate(chapters(), start=1)
                for number in think_exercises(chapter)}
    missing = sorted(expected - answered)
    assert not missing, f"{ANSWERS.relative_to(ROOT)} has no '### Exercise N.K' answer for {missing}"
    stale = sorted(answered - expected)
    assert not stale, f"{ANSWERS.relative_to(ROOT)} answers exercises the chapters do not have: {stale}"


def test_every_written_question_of_the_notebooks_has_an_answer():
    headings = answer_headings()
    for assignment in ASSIGNMENTS:
        number = assignment.split("_")[0]
        for grade_id in written_questions(assignment):
            assert any(h.startswith(f"Assignment {number}, `{grade_id}`") for h in headings), (
                f"{ANSWERS.relative_to(ROOT)}: no '### Assignment {number}, `{grade_id}`' answer to the written "
                f"question of {notebook(Path('solutions'), assignment)}"
            )


# --------------------------------------------------------------------------- the syllabus


def test_the_syllabus_names_every_graded_part_with_its_points():
    text = SYLLABUS.read_text()
    for assignment in ASSIGNMENTS:
        for grade_id, points in graded_parts(assignment).items():
            assert re.search(rf"`{re.escape(grade_id)}` \({points:g}\)", text), (
                f"book/instructors/syllabus.md does not name {grade_id} of {assignment} as `{grade_id}` ({points:g})"
            )


def test_the_syllabus_counts_parts_points_and_solution_lines():
    text = SYLLABUS.read_text()
    section = re.search(r"^## Time per assignment\s*\n(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    assert section, "book/instructors/syllabus.md has no '## Time per assignment' section"
    totals = re.search(r"assignments carry ([\d., and]+) points", text)
    assert totals, "book/instructors/syllabus.md no longer says how many points each assignment carries"
    said_totals = [float(n) for n in re.findall(r"\d+(?:\.\d+)?", totals.group(1))]
    assert said_totals == [sum(graded_parts(a).values()) for a in ASSIGNMENTS], f"points per assignment: {said_totals}"
    # The table is computed at build time by _ext/reading_time.py: its counts agree with these.
    assert "```{assignment-times}" in section.group(1), "the table 'Time per assignment' is no longer computed"
    counted = read_solutions(ROOT / "solutions")
    for assignment in ASSIGNMENTS:
        number = assignment.split("_")[0]
        graded = graded_parts(assignment)
        parts = (counted[number].graded_parts, counted[number].points)
        assert parts == (len(graded), sum(graded.values())), f"{assignment}: graded parts and points {parts}"
        lines = (counted[number].lines, counted[number].pasted_lines)
        assert lines == solution_lines(assignment), f"{assignment}: (own, pasted) solution lines {lines}"
