"""A grading worker's task: grade one submission from its bytes, and return its results as data.

Runs in a grading worker: a process forked per submission by the instructor's command
(``forks.py``) or a Dask worker anywhere. It holds the student's key of hidden cases and the
references, starts the submission's kernel in its sandbox and judges every part from
outside it (``verdict.py``); it writes nothing to the course: the instructor's process
(``autograder/instructor/grade.py``) records what it returns.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import nbformat

from .. import __version__
from .reading import read_source
from .sandbox import Limits, check_bubblewrap
from .sandbox import policy as sandbox_policy
from .verdict import PartStatus, all_parts, grade_submission

log = logging.getLogger("autograder.grading")


def grade_task(source_json: str, notebook_name: str, submission: bytes | Oversized | None, limits: Limits,
               key: str, clearing: dict[str, dict] | None = None) -> dict:
    """In a worker (a local process or a Dask worker): grade one submission from its bytes.

    Args:
        source_json: the instructor's source notebook.
        notebook_name: the file name the submission must have.
        submission: the submitted notebook's bytes, ``None`` if it is missing, :class:`Oversized`
            if it was too large to read (every part an error).
        limits: the sandbox's limits; ``device="auto"`` is decided here, on the worker.
        key: the student's key of hidden cases (derived from the course secret); it stays in
            the worker's judge and never enters the student's kernel.
        clearing: how the course's nbgrader clears the source for students, as data
            (``notebooks.clearing_options``; nbgrader's defaults if ``None``).

    Returns:
        ``results`` (part results as dicts), ``autograded`` (the executed notebook, JSON,
        or ``None``), ``unanswered``, ``notes`` (what the submission did to the grader, for the
        run's summary), and, for the log and the checks of the caller,
        ``worker``, ``seconds`` and ``code`` (the fingerprint of the grading code).
    """
    started = time.monotonic()
    limits = _on_this_machine(limits)  # cached: checked once per worker process
    _log_policy(limits)
    source = nbformat.reads(source_json, as_version=4)
    if isinstance(submission, Oversized):
        graded = all_parts(source, PartStatus.ERROR, submission.message(),
                           notes=[f"a notebook of {submission.size / 2**20:,.0f} MiB, refused unread"])
    else:
        with tempfile.TemporaryDirectory(prefix="autograder-submission-") as folder:
            path = Path(folder) / notebook_name
            if submission is not None:
                path.write_bytes(submission)
            graded = grade_submission(source, path, limits, key, clearing)
    return {"results": [r.as_dict() for r in graded.results], "unanswered": graded.unanswered,
            "autograded": None if graded.autograded is None else nbformat.writes(graded.autograded),
            "notes": graded.notes, "worker": _worker_name(), "seconds": time.monotonic() - started,
            "code": code_fingerprint()}


def warm_up() -> None:
    """Do once, in the process that forks the workers, the first-use work each fork would otherwise repeat.

    The reading of the code handed in imports IPython's input transformer on its first cell (a tenth of a
    second), and jupyter_client reads every installed package's entry points for its
    kernel provisioners on its first kernel. Both hold nothing of a submission.
    """
    from jupyter_client.provisioning import KernelProvisionerFactory

    read_source("pass")
    KernelProvisionerFactory.instance()


@dataclass(frozen=True)
class Oversized:
    """A submitted notebook larger than ``--max-notebook-mb``, in bytes: refused unread."""

    size: int
    limit: int

    def message(self) -> str:
        return (f"the notebook is {self.size / 2**20:.1f} MiB, more than the {self.limit / 2**20:g} MiB a submission "
                "may be: it was not read (clear the outputs of large cells, or remove data pasted into cells, and "
                "submit again)")


@cache
def code_fingerprint() -> str:
    """A hash of the grading code and the checks' data: workers must run the same as the caller."""
    package = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256(__version__.encode())
    for path in sorted(package.rglob("*")):
        if path.suffix in (".py", ".json") and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _on_this_machine(limits: Limits) -> Limits:
    """``limits`` with the device decided here; the sandbox checked here (a worker may lack it)."""
    if limits.sandbox:
        check_bubblewrap(limits)  # once per process: the policy is cached
    import torch

    if limits.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device cuda: no CUDA device is available here")
    if limits.device != "auto":
        return limits
    return dataclasses.replace(limits, device="cuda" if torch.cuda.is_available() else "cpu")


@cache
def _log_policy(limits: Limits) -> None:
    """Once per worker process: which limits apply on this machine."""
    for line in sandbox_policy(limits).describe():
        log.info("%s: %s", _worker_name(), line)


def _worker_name() -> str:
    """The Dask worker's name, or this process's id (Dask is not imported for it: a third of a second a fork)."""
    distributed = sys.modules.get("distributed")  # every Dask worker has imported it
    try:
        return str(distributed.get_worker().name) if distributed is not None else f"pid {os.getpid()}"
    except ValueError:  # imported, but this is no Dask worker
        return f"pid {os.getpid()}"
