"""The grading command's settings: declared once, read from nbgrader_config.py, overridden by arguments."""

from __future__ import annotations

import inspect
import shutil
import sys
import tomllib
from pathlib import Path

import pytest

from autograder.instructor import cli
from autograder.instructor.grade import grade
from autograder.instructor.settings import GradeSettings, course_config, resolve, setting_names

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


def test_every_setting_is_an_option_of_the_command_with_its_declared_help():
    options = {"--memory-mb": "memory_mb", "--notebook-timeout": "notebook_timeout", "--workers": "workers",
               "--scheduler": "scheduler", "--scheduler-timeout": "scheduler_timeout", "--device": "device",
               "--timeout": "timeout", "--secret-file": "secret_file", "--processes": "processes",
               "--grader-memory-mb": "grader_memory_mb", "--max-notebook-mb": "max_notebook_mb"}
    assert set(options.values()) | {"sandbox"} == set(setting_names())
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
    parser_help = cli.parse_args.__code__  # the help text comes from the trait: check one
    assert parser_help and "memory of one submission" in GradeSettings.class_traits()["memory_mb"].help


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
