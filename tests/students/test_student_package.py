"""What students install holds no reference answer and no hidden test, and every visible
check works from it.

Two things reach students: the wheel pip builds from the course repository (what an
exercise notebook's set-up cell installs on Colab, for the open course) and the student
repository that ``python -m autograder publish`` writes (for a course run for credit).
Both are built here, searched for the code of every reference implementation and every
hidden test, and the visible checks are run from the students' copy alone.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import nbformat
import pytest
import yaml

from autograder.grading.notebooks import is_test, release
from autograder.instructor.publish import PublishError, publish
from autograder.reference import generate
from course import ASSIGNMENTS, ROOT, load, notebook

pytestmark = pytest.mark.slow


def build_wheel(source: str, folder: Path) -> Path:
    folder.mkdir()
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                            "--wheel-dir", str(folder), source], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = folder.glob("*.whl")
    return wheel


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    """``course``: the course repository as committed, cloned by pip as on Colab;
    ``students``: the student repository published from this working tree."""
    folder = tmp_path_factory.mktemp("wheels")
    student_repository = folder / "student-repository"
    publish(ROOT, student_repository)
    return {"course": build_wheel(f"git+file://{ROOT}", folder / "course"),
            "students": build_wheel(str(student_repository), folder / "students")}


def wheel_texts(wheel: Path) -> dict[str, str]:
    with zipfile.ZipFile(wheel) as archive:
        return {name: archive.read(name).decode("utf-8", errors="replace") for name in archive.namelist()}


def code_block(source: str) -> str:
    """A function's or class's code without its first line, docstrings and comments, one stripped line each."""
    source = textwrap.dedent(source)
    docstrings = set()
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(
                getattr(body[0], "value", None), ast.Constant) and isinstance(body[0].value.value, str):
            docstrings |= set(range(body[0].lineno, body[0].end_lineno + 1))
    lines = source.splitlines()
    kept = [line.strip() for number, line in enumerate(lines[1:], start=2) if number not in docstrings]
    return "\n".join(line for line in kept if line and not line.startswith("#"))


def reference_code() -> dict[str, str]:
    """``{qualified name: code block}`` of every function and class of the reference modules."""
    blocks = {}
    for chapter in generate.chapters():
        module = importlib.import_module(f"autograder.reference.{chapter}")
        for name, value in vars(module).items():
            if (inspect.isfunction(value) or inspect.isclass(value)) and value.__module__ == module.__name__:
                block = code_block(inspect.getsource(value))
                if block.count("\n") >= 1 or len(block) > 40:  # long enough to be more than a coincidence
                    blocks[f"{chapter}.{name}"] = block
    return blocks


def hidden_tests() -> list[str]:
    """The code lines of every hidden-test block of the solutions."""
    lines = []
    for assignment in ASSIGNMENTS:
        for cell in load(notebook(ROOT / "solutions", assignment))["cells"]:
            source = "".join(cell["source"])
            for block in re.findall(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", source, flags=re.DOTALL):
                lines += [line.strip() for line in block.splitlines() if line.strip()]
    return lines


@pytest.mark.parametrize("which", ["course", "students"])
def test_the_wheel_holds_the_checks_and_their_cases_and_requires_nothing(wheels, which):
    texts = wheel_texts(wheels[which])
    withheld = ("reference",) if which == "course" else ("reference", "grading", "instructor")
    modules = {str(p.relative_to(ROOT)) for p in (ROOT / "autograder").rglob("*.py")
               if p.relative_to(ROOT / "autograder").parts[0] not in withheld}
    assert modules <= set(texts), f"the wheel misses {sorted(modules - set(texts))}"
    cases = {str(p.relative_to(ROOT)) for p in (ROOT / "autograder" / "cases").glob("*.json")}
    assert cases and cases <= set(texts), "the wheel misses the visible cases"
    metadata = next(text for name, text in texts.items() if name.endswith(".dist-info/METADATA"))
    required = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    unconditional = [line for line in required if 'extra == "grading"' not in line]
    assert not unconditional, f"installing the checks on Colab would pull other packages: {unconditional}"


@pytest.mark.parametrize("which", ["course", "students"])
def test_no_reference_answer_and_no_hidden_test_reaches_students(wheels, which):
    texts = wheel_texts(wheels[which])
    assert not [name for name in texts if name.startswith("autograder/reference/")]
    normalized = {name: "\n".join(line.strip() for line in text.splitlines()) for name, text in texts.items()}
    blocks = reference_code()
    assert len(blocks) >= 15, "the search would prove nothing: too few reference functions found"
    for qualified, block in blocks.items():
        leaks = [name for name, text in normalized.items() if block in text]
        assert not leaks, f"the code of {qualified} is in {leaks}"
    hidden = hidden_tests()
    assert hidden, "no hidden tests found in the solutions"
    for line in hidden:
        leaks = [name for name, text in texts.items() if line in text]
        assert not leaks, f"the hidden test `{line}` is in {leaks}"


def test_the_published_repository_holds_no_solution_and_no_hidden_test(tmp_path):
    # the exercises are checked against a fresh generation by the `wheels` fixture's publish and below
    written = publish(ROOT, tmp_path / "students", check_generated=False).written
    assert {p.parts[0] for p in written} == {"exercises", "autograder", "binder", "pyproject.toml", "README.md",
                                              ".gitignore"}
    texts = "\n".join((tmp_path / "students" / p).read_text(errors="replace") for p in written)
    for line in hidden_tests():
        assert line not in texts, f"the hidden test `{line}` was published"
    for block in reference_code().values():
        assert "\n".join(line.strip() for line in texts.splitlines()).find(block) < 0
    log = subprocess.run(["git", "log", "--oneline"], cwd=tmp_path / "students", capture_output=True, text=True)
    assert log.stdout.count("\n") == 1, "the release is not committed"
    again = publish(ROOT, tmp_path / "students", check_generated=False)
    assert again.written == written and not again.committed, "publishing again changed what is published"


def test_publishing_refuses_a_folder_it_did_not_make(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    from autograder.instructor.publish import PublishError

    with pytest.raises(PublishError, match="not empty"):
        publish(ROOT, tmp_path, check_generated=False)
    with pytest.raises(PublishError, match="inside the course"):
        publish(ROOT, ROOT / "students", check_generated=False)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def notebook_script(assignment: str) -> str:
    """The solution notebook as a script, its test cells as released (hidden tests taken out)."""
    solution = nbformat.read(notebook(ROOT / "solutions", assignment), as_version=4)
    return "\n\n".join((shown if is_test(cell) else cell).source
                       for cell, shown in zip(solution.cells, release(solution).cells, strict=True) if cell.cell_type == "code")


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_visible_check_passes_from_the_students_package_alone(wheels, tmp_path, assignment):
    target = tmp_path / "site"
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target",
                                str(target), str(wheels["students"])], capture_output=True, text=True)
    assert installed.returncode == 0, installed.stderr[-2000:]
    # As on a student's machine: only the installed copy (not this environment's editable install).
    prologue = textwrap.dedent(f"""
        import sys
        sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]
        import importlib.util, autograder
        assert autograder.__file__.startswith({str(target)!r}), autograder.__file__
        assert importlib.util.find_spec("autograder.reference") is None
        """)
    epilogue = textwrap.dedent("""
        from autograder.judge import LocalRespondent, judge
        part = next(iter(checks.PARTS.values()))
        try:
            judge(part, LocalRespondent(part, globals()[part.name]), hidden=True)
        except RuntimeError as error:
            assert "grading side" in str(error), error
            print("hidden checks: grading side only")
        """)
    script = tmp_path / "notebook.py"
    script.write_text(prologue + notebook_script(assignment) + "\n" + epilogue)
    env = {**os.environ, "PYTHONPATH": str(target), "MPLBACKEND": "Agg"}
    ran = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-3000:]
    passes = ran.stdout.count("✔")
    test_cells = [c for c in load(notebook(ROOT / "solutions", assignment))["cells"]
                  if c["metadata"].get("nbgrader", {}).get("grade") and c["cell_type"] == "code"]
    assert passes == len(test_cells), ran.stdout
    assert "hidden checks: grading side only" in ran.stdout
    json.loads((target / "autograder" / "cases" / f"ch{assignment}.json").read_text())


# --------------------------------------------------------------------------------------
# Releasing assignments one at a time, safely
# --------------------------------------------------------------------------------------


def _course_copy(folder: Path) -> Path:
    """What ``publish`` reads of the course repository, copied (to be changed by a test)."""
    for name in ("exercises", "solutions", "autograder", "binder"):
        shutil.copytree(ROOT / name, folder / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "_config.yml", "nbgrader_config.py"):
        shutil.copy(ROOT / name, folder / name)
    return folder


@pytest.mark.slow
def test_assignments_are_released_one_at_a_time_and_earlier_releases_stay(tmp_path):
    destination = tmp_path / "students"
    first = publish(ROOT, destination, assignments=["01"])
    assert first.assignments == ["01_nadaraya_watson"] and first.committed
    assert sorted(p.name for p in (destination / "exercises").iterdir()) == ["01_nadaraya_watson"]
    released = (destination / "exercises" / "01_nadaraya_watson" / "01_nadaraya_watson.ipynb").read_bytes()
    second = publish(ROOT, destination, assignments=["02_attention_scoring", "03"])
    assert second.assignments == ["02_attention_scoring", "03_masking"] and second.committed
    assert sorted(p.name for p in (destination / "exercises").iterdir()) == ["01_nadaraya_watson",
                                                                             "02_attention_scoring", "03_masking"]
    assert (destination / "exercises" / "01_nadaraya_watson" / "01_nadaraya_watson.ipynb").read_bytes() == released
    assert not publish(ROOT, destination, assignments=["03"]).committed, "nothing changed, nothing to commit"
    log = subprocess.run(["git", "log", "--format=%s"], cwd=destination, capture_output=True, text=True).stdout
    assert log.splitlines() == ["Release 02_attention_scoring, 03_masking and the visible checks",
                                "Release 01_nadaraya_watson and the visible checks"]
    with pytest.raises(PublishError, match="no assignment '09'"):
        publish(ROOT, destination, assignments=["09"])


@pytest.mark.slow
def test_a_solved_exercise_is_not_published(tmp_path):
    course = _course_copy(tmp_path / "course")
    exercise = course / "exercises" / "03_masking" / "03_masking.ipynb"
    notebook = json.loads(exercise.read_text())
    solved = next(c for c in notebook["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == "causal_mask")
    solved["source"] = "def causal_mask(num_queries, num_keys, device=None):\n    return torch.ones(1)"  # test-solved
    exercise.write_text(json.dumps(notebook, indent=1))
    with pytest.raises(PublishError, match="exercises/03_masking is not what nbgrader generates"):
        publish(course, tmp_path / "students", assignments=["03"])
    assert not (tmp_path / "students").exists(), "nothing was written"


def test_the_students_pyproject_offers_the_checks_alone(tmp_path):
    publish(ROOT, tmp_path / "students", assignments=["01"], check_generated=False)
    text = (tmp_path / "students" / "pyproject.toml").read_text()
    assert "grading" not in text and "make install" not in text and "entry-points" not in text
    assert '"cases/*.json"' in text and "dependencies = []" in text
    init = (tmp_path / "students" / "autograder" / "__init__.py").read_text()
    assert "hold the reference" not in init and "belong to the instructors' copy of the course only" in init


def test_publishing_warns_when_the_notebooks_would_install_from_the_course_itself(tmp_path):
    course = _course_copy(tmp_path / "course")
    url = yaml.safe_load((course / "_config.yml").read_text())["repository"]["url"]
    subprocess.run(["git", "init", "--quiet"], cwd=course, check=True)
    subprocess.run(["git", "remote", "add", "origin", url + ".git"], cwd=course, check=True)
    release = publish(course, tmp_path / "students", assignments=["01"], check_generated=False)
    assert release.warnings and "this course repository" in release.warnings[0]
    subprocess.run(["git", "remote", "set-url", "origin", "git@github.com:someone/private-course.git"], cwd=course,
                   check=True)
    assert publish(course, tmp_path / "students2", assignments=["01"], check_generated=False).warnings == []
