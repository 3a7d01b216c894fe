"""The grading command's settings: declared once, read from nbgrader_config.py, overridden by arguments."""

from __future__ import annotations

import inspect
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from traitlets.config.loader import PyFileConfigLoader

from autograder.instructor import cli
from autograder.instructor.grade import grade
from autograder.instructor.gradebook import GradebookError
from autograder.instructor.settings import GradeSettings, course_config, resolve, setting_names, setting_type

ROOT = Path(__file__).resolve().parents[2]


def course_with_config(folder: Path, lines: str) -> Path:
    """A course of one assignment (03_masking) whose nbgrader_config.py ends with ``lines``."""
    shutil.copytree(ROOT / "solutions" / "03_masking", folder / "solutions" / "03_masking")
    config = (ROOT / "nbgrader_config.py").read_text()
    (folder / "nbgrader_config.py").write_text(config + "\n" + lines + "\n")
    return folder


def test_grade_takes_every_setting_as_a_keyword_and_nothing_else():
    parameters = inspect.signature(grade).parameters
    keywords = {name for name, p in parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert keywords == set(setting_names()) | {"course_dir", "force", "progress"}
    assert all(parameters[name].default is None for name in setting_names()), "None = from the config or the default"
    assert list(parameters)[0] == "assignment"


def test_grade_refuses_a_keyword_that_is_not_a_setting_and_names_the_settings(tmp_path):
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'worker'; the settings: .*\bworkers\b") as error:
        grade("03_masking", course_dir=tmp_path, worker=3)
    assert all(name in str(error.value) for name in setting_names())


@pytest.mark.parametrize("name", setting_names())
def test_grade_takes_each_setting_on_to_the_settings(tmp_path, name):
    """A value of the wrong type is refused by the setting itself: the keyword reached it."""
    wrong = 3 if setting_type(name) is str else "three"
    with pytest.raises(ValueError, match=f"bad grading setting {name} "):
        grade("03_masking", course_dir=tmp_path, **{name: wrong})


def test_a_course_without_one_source_notebook_is_an_exception_and_the_command_says_so(tmp_path, capsys):
    with pytest.raises(GradebookError, match="expected one source notebook in .*03_masking, found 0"):
        grade("03_masking", course_dir=tmp_path, workers=1)
    assert cli.main(["grade", "03_masking", "--course-dir", str(tmp_path)]) == 1
    error = capsys.readouterr().err
    assert error.startswith("expected one source notebook in ") and error.endswith(", found 0\n")


def test_the_course_config_is_read_once_per_run(tmp_path, monkeypatch):
    (tmp_path / "nbgrader_config.py").write_text("c = get_config()\nc.GradeSettings.timeout = 60\n")
    reads, load = [], PyFileConfigLoader.load_config

    def counted(loader):
        config = load(loader)
        reads.append(loader.full_filename)  # known once loaded
        return config

    monkeypatch.setattr(PyFileConfigLoader, "load_config", counted)  # whoever loads it, however imported
    with pytest.raises(GradebookError):  # no source notebook: the run stops right after reading the settings
        grade("03_masking", course_dir=tmp_path)
    assert reads == [str(tmp_path / "nbgrader_config.py")]


def command_help() -> str:
    """What ``python -m autograder grade --help`` prints, on a terminal wide enough that no line is wrapped."""
    done = subprocess.run([sys.executable, "-m", "autograder", "grade", "--help"], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "COLUMNS": "2000"}, timeout=120, check=True)
    return done.stdout


def shown_default(name: str) -> str:
    """How a setting's help must begin to say its default: the value, where it has one that is the same everywhere."""
    default = GradeSettings.class_traits()[name].default_value
    if default is None or name == "workers":  # in words: from another setting, a variable, this machine's cores
        return "(default: "
    if isinstance(default, bool):
        return f"(default: {'on' if default else 'off'})"
    return f"(default: {default:g})" if isinstance(default, (int, float)) else f"(default: {default})"


def test_the_command_help_shows_every_setting_with_its_declared_help_and_default():
    text = command_help()
    for name in setting_names():
        declared = GradeSettings.class_traits()[name].help
        flag = "--" + name.replace("_", "-")
        assert f"\n  {flag} " in text or f"\n  {flag}," in text, f"{flag} is not an option"
        option = " ".join(text.split(f"\n  {flag}", 1)[1].split("\n  -", 1)[0].split())  # its line(s), one line
        assert " ".join(declared.split()) in option, f"{flag} does not show the help of {name}"
        assert shown_default(name) in option, f"{flag}'s help does not say its default: {shown_default(name)}"


def test_every_setting_is_an_option_of_the_command():
    assert cli.parse_args(["grade", "05", "--grader-memory-mb", "2048", "--max-notebook-mb", "5"]).max_notebook_mb == 5
    argv = ["grade", "03_masking", "--memory-mb", "1024", "--notebook-timeout", "30", "--workers", "3",
            "--scheduler", "tcp://h:8786", "--scheduler-timeout", "9", "--device", "cpu", "--timeout", "7.5",
            "--secret-file", "s", "--processes", "64", "--no-sandbox"]
    args = cli.parse_args(argv)
    assert (args.memory_mb, args.notebook_timeout, args.workers, args.scheduler, args.scheduler_timeout, args.device,
            args.timeout, args.secret_file, args.processes, args.sandbox) == (1024, 30.0, 3, "tcp://h:8786", 9.0, "cpu",
                                                                               7.5, "s", 64, False)
    untouched = cli.parse_args(["grade", "03_masking"])
    assert all(getattr(untouched, name) is None for name in setting_names()), "unset options leave the config alone"


def test_the_course_config_sets_what_the_arguments_do_not(tmp_path):
    course = course_with_config(tmp_path, "c.GradeSettings.timeout = 60\nc.GradeSettings.workers = 5")
    settings, origins = resolve(course_config(course), workers=2)
    assert (settings.timeout, settings.workers, settings.memory_mb) == (60.0, 2, 4096)
    assert (origins["timeout"], origins["workers"], origins["memory_mb"]) == ("nbgrader_config.py", "argument", "default")


def test_a_bad_setting_is_refused_wherever_it_comes_from(tmp_path, capsys):
    with pytest.raises(ValueError, match="workers"):
        resolve(course_config(tmp_path), workers=0)
    with pytest.raises(ValueError, match="--workers / c.GradeSettings.workers"):
        resolve(course_config(tmp_path), workers=-2)
    with pytest.raises(ValueError, match="unknown grading setting"):
        resolve(course_config(tmp_path), worker=3)
    course = course_with_config(tmp_path, "c.GradeSettings.memory_mb = 12")
    assert cli.main(["grade", "03_masking", "--course-dir", str(course)]) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: bad grading setting") and "memory_mb" in error


@pytest.mark.parametrize("name", ["timeout", "notebook_timeout"])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_time_limit_must_be_a_finite_number_of_seconds(tmp_path, name, value):
    with pytest.raises(ValueError, match=f"{name}.*finite number of seconds"):
        resolve(course_config(tmp_path), **{name: value})


def test_a_relative_secret_file_in_the_course_config_is_in_the_course_directory(tmp_path, monkeypatch):
    course = course_with_config(tmp_path, 'c.GradeSettings.secret_file = "private/course.secret"')
    monkeypatch.chdir(tmp_path)  # anywhere but the course directory
    assert resolve(course_config(course))[0].secret_path == course.resolve() / "private" / "course.secret"
    given = resolve(course_config(course), secret_file="mine.secret")[0].secret_path
    assert given == Path("mine.secret"), "a path on the command line stays relative to the working directory"
    assert resolve(course_config(course), secret_file=Path("mine.secret"))[0].secret_path == given, "a Path, from Python"


def test_the_dask_scheduler_address_comes_from_the_setting_or_daskss_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", "tcp://from-env:8786")
    assert resolve(course_config(tmp_path))[0].scheduler_address == "tcp://from-env:8786"
    assert resolve(course_config(tmp_path), scheduler="tcp://given:1")[0].scheduler_address == "tcp://given:1"
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS")
    assert resolve(course_config(tmp_path))[0].scheduler_address is None


def test_verbose_logs_each_setting_and_where_it_came_from(tmp_path, capsys):
    course = course_with_config(tmp_path, "c.GradeSettings.timeout = 60")
    secret = tmp_path / "secret"
    code = cli.main(["grade", "03_masking", "--course-dir", str(course), "--secret-file", str(secret),
                     "--workers", "1", "--no-sandbox", "-v"])
    out, err = capsys.readouterr()
    assert code == 2 and "no submissions of 03_masking" in err  # nothing submitted yet
    assert "setting timeout = 60.0 (nbgrader_config.py)" in out
    assert "setting workers = 1 (argument)" in out
    assert "setting memory_mb = 4096 (default)" in out


def test_the_grading_dependencies_are_an_extra_so_students_install_nothing_more():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["dependencies"] == []
    extra = {name.split(">")[0].split("=")[0].split("[")[0].split("<")[0].lower() for name in project["optional-dependencies"]["grading"]}
    assert {"nbgrader", "nbclient", "jupyter_client", "sqlalchemy", "distributed"} <= extra
