"""Every setting of the grading command, declared once.

A setting is a trait of :class:`GradeSettings`, with its default and its help. The same
declaration serves three ways of giving it, the later overriding the earlier:

1. its default here;
2. the course's ``nbgrader_config.py``, as nbgrader's own options are given there::

       c.GradeSettings.workers = 16
       c.GradeSettings.timeout = 60
       c.GradeSettings.scheduler = "tcp://grading.example.edu:8786"

3. a keyword argument of :func:`autograder.instructor.grade.grade`, which is what each
   option of ``python -m autograder grade`` becomes (``--memory-mb 2048`` is
   ``memory_mb=2048``).

Nothing else lists the settings: ``grade()`` takes them through :func:`takes_settings`, and
the command line makes one option of each (``cli.py``), so a trait added here is a keyword
and an option at once.
"""

from __future__ import annotations

import functools
import inspect
import math
import os
import textwrap
from pathlib import Path

from traitlets import Bool, Enum, Float, Integer, TraitError, Unicode, validate
from traitlets.config import Configurable
from traitlets.config.loader import Config, PyFileConfigLoader

from .secret import default_path

#: The environment variable Dask's own tools read a scheduler's address from.
DASK_SCHEDULER_VARIABLE = "DASK_SCHEDULER_ADDRESS"


class GradeSettings(Configurable):
    """The settings of ``python -m autograder grade`` (``c.GradeSettings`` in ``nbgrader_config.py``)."""

    workers = Integer(os.cpu_count() or 1, min=1,
                      help="submissions graded at once on this machine (default: its cores)").tag(config=True)
    scheduler = Unicode(None, allow_none=True,
                        help="address of a Dask scheduler whose workers grade, e.g. tcp://host:8786 "
                             f"(default: ${DASK_SCHEDULER_VARIABLE} if set, else this machine's "
                             "processes)").tag(config=True)
    scheduler_timeout = Float(60.0, min=0.001,
                              help="seconds to wait for the Dask scheduler to answer, and then for its first worker "
                                   "(default: 60)").tag(config=True)
    device = Enum(["auto", "cpu", "cuda"], "auto",
                  help="where the checks run: auto is cuda when there is a GPU (default: auto)").tag(config=True)
    timeout = Float(120.0, min=0.001, help="seconds one cell may run, and the checks of one part (default: 120)"
                    ).tag(config=True)
    notebook_timeout = Float(None, allow_none=True, min=0.001,
                             help="seconds one notebook's cells may run, and again the checks of all its parts "
                                  "(default: 5 x timeout)").tag(config=True)
    memory_mb = Integer(4096, min=256, help="memory of one submission's kernel, in MiB, its files in memory included "
                                            "(default: 4096)").tag(config=True)
    gpu_memory_mb = Integer(None, allow_none=True, min=256,
                            help="memory of one submission's kernel on each GPU, in MiB, for device cuda: PyTorch's "
                                 "per-process cap, set as the kernel starts CUDA (default: memory_mb)").tag(config=True)
    processes = Integer(256, min=32, help="processes and threads one submission's kernel may run at once, where a "
                                          "cgroup can be made (default: 256)").tag(config=True)
    grader_memory_mb = Integer(3072, min=1024,
                               help="data memory of one grading worker on this machine, in MiB: the judge of one "
                                    "submission and the references it computes; a worker that needs more fails "
                                    "that submission's allocation, not the machine (default: 3072)").tag(config=True)
    max_notebook_mb = Integer(20, min=1, help="the largest submitted notebook read, in MiB; a larger one is refused "
                                              "unread, every part an error (default: 20)").tag(config=True)
    max_added_cells = Integer(200, min=0,
                              help="the most cells of a student's own read from a notebook (cells added, of any kind, "
                                   "and copies of the notebook's); those past it are left out: not run, not shown, "
                                   "said in the summary and the feedback (default: 200)").tag(config=True)
    max_code_kb = Integer(256, min=1,
                          help="the most of a student's own code taken from a notebook, in KiB, answers and added "
                               "cells in notebook order; from the cell that passes it on, the student's cells are "
                               "left out, an answer left out an error of its part (default: 256)").tag(config=True)
    secret_file = Unicode(None, allow_none=True,
                          help="the course secret behind the hidden cases; made on first use, keep it out of "
                               f"every repository (default: $AUTOGRADER_SECRET_FILE or {default_path()})").tag(config=True)
    sandbox = Bool(True, help="run student code in bubblewrap; turning it off is unsafe (default: on)").tag(config=True)

    @validate("timeout", "notebook_timeout", "scheduler_timeout")
    def _finite(self, proposal):
        """A time limit is a number of seconds: ``nan`` and ``inf`` are refused (``min`` lets ``nan`` by)."""
        value = proposal["value"]
        if value is not None and not math.isfinite(value):
            raise TraitError(f"expected a finite number of seconds, not {value}")
        return value

    @property
    def scheduler_address(self) -> str | None:
        """The Dask scheduler to use: the setting, else ``$DASK_SCHEDULER_ADDRESS``, else none."""
        return self.scheduler or os.environ.get(DASK_SCHEDULER_VARIABLE) or None

    @property
    def secret_path(self) -> Path:
        return Path(self.secret_file).expanduser() if self.secret_file else default_path()


def setting_names() -> list[str]:
    """The names of the settings, in alphabetical order (as traitlets lists them)."""
    return list(GradeSettings.class_own_traits(config=True))


def setting_type(name: str) -> type:
    """The Python type a setting takes: ``int``, ``float``, ``bool`` or ``str`` (for a choice among names too)."""
    trait = GradeSettings.class_traits()[name]
    for kind, python_type in ((Bool, bool), (Integer, int), (Float, float)):
        if isinstance(trait, kind):
            return python_type
    return str


def takes_settings(function):
    """Decorator: ``function(..., **given)`` takes exactly the settings as keywords, each ``None`` unless given.

    Its signature (``help()``, ``inspect.signature``) lists every setting as a keyword-only
    parameter, default ``None``, in place of ``**given``; its docstring ends with each
    setting's help. Any other keyword raises ``TypeError``, naming it and the settings.
    """
    signature = inspect.signature(function)
    *fixed, given = signature.parameters.values()
    if given.kind is not inspect.Parameter.VAR_KEYWORD:
        raise TypeError(f"{function.__name__} must end with **given to take the settings")
    settings = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None,
                                  annotation=setting_type(name) | None) for name in setting_names()]
    accepted = {parameter.name for parameter in fixed} | set(setting_names())

    @functools.wraps(function)
    def checked(*args, **kwargs):
        unknown = [name for name in kwargs if name not in accepted]
        if unknown:
            raise TypeError(f"{function.__name__}() got an unexpected keyword argument {unknown[0]!r}; "
                            f"the settings: {', '.join(setting_names())}")
        return function(*args, **kwargs)

    checked.__signature__ = signature.replace(parameters=[*fixed, *settings])
    checked.__doc__ = (function.__doc__ or "") + "\n    Settings:\n" + "".join(
        textwrap.fill(f"{name}: {GradeSettings.class_traits()[name].help}", width=100, initial_indent=" " * 8,
                      subsequent_indent=" " * 12) + "\n" for name in setting_names())
    return checked


def course_config(course_dir: Path) -> Config:
    """The configuration in ``course_dir/nbgrader_config.py`` (empty if there is none).

    A relative ``secret_file`` there is relative to the course directory, the folder of the
    file it is written in, wherever the command is run from (on the command line it is
    relative to the working directory, as any path argument).
    """
    if not (course_dir / "nbgrader_config.py").exists():
        return Config()
    config = PyFileConfigLoader("nbgrader_config.py", path=str(course_dir)).load_config()
    secret = config.get("GradeSettings", {}).get("secret_file")
    if isinstance(secret, str) and not Path(secret).expanduser().is_absolute():
        config.GradeSettings.secret_file = str(Path(course_dir).resolve() / secret)
    return config


def resolve(config: Config, **given) -> tuple[GradeSettings, dict[str, str]]:
    """The settings from ``config``, overridden by every ``given`` value that is not ``None``.

    Returns:
        ``(settings, origins)``: the settings, and for each one where its value came from
        (``"default"``, ``"nbgrader_config.py"`` or ``"argument"``), for the log.

    Raises:
        ValueError: an unknown name, or a value a setting does not accept.
    """
    from_config = dict(config.get("GradeSettings", {}))
    settings, origins = GradeSettings(), dict.fromkeys(setting_names(), "default")
    for origin, values in (("nbgrader_config.py", from_config), ("argument", given)):
        for name, value in values.items():
            if value is None and origin == "argument":
                continue
            _set(settings, name, value, origin)
            origins[name] = origin
    return settings, origins


def _set(settings: GradeSettings, name: str, value, origin: str) -> None:
    """Set one setting, or raise a ``ValueError`` that names it as both places spell it."""
    where = f"--{name.replace('_', '-')} / c.GradeSettings.{name}"
    if name not in setting_names():
        raise ValueError(f"unknown grading setting {name!r} ({origin}); the settings: {', '.join(setting_names())}")
    if isinstance(value, os.PathLike):  # secret_file=Path(...) from Python
        value = os.fspath(value)
    try:
        setattr(settings, name, value)
    except TraitError as error:
        reason = str(error).split(" of a GradeSettings instance ")[-1]
        raise ValueError(f"bad grading setting {name} ({where}, from the {origin}): {reason}") from None
