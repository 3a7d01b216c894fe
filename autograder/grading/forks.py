"""This machine's grading workers: one process forked per submission, at most ``workers`` at once.

The process that grades (``autograder/instructor/grade.py``'s ``grade``) has imported PyTorch, the checks and their
references and started the kernels' zygote before it forks, so a fork costs a few
milliseconds and shares all of that. Each fork grades one submission, under a data limit
of its own (``RLIMIT_DATA``, the soft limit only, so that the kernels it starts may set
theirs), in a temporary folder of its own, and sends its result back over a pipe.

A fork that dies (the kernel's OOM killer, a crash of the grader's own code) harms no
other: the parent sees its pipe close without a result, removes what it left (its
temporary folder, the cgroups of its kernels, ``limits.remove_left_by``), and grades its
submission once more in a new fork; a second death is reported with its cause, the
submission left ungraded for the next run. (``concurrent.futures.ProcessPoolExecutor``
instead marks every pending submission failed when one of its workers dies.)
"""

from __future__ import annotations

import collections
import gc
import logging
import os
import resource
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing import Pipe
from multiprocessing.connection import Connection, wait

from . import kernels, limits

log = logging.getLogger("autograder.grading")

#: How many times a submission is given to a new fork when the last one died.
TRIES = 2


@dataclass(frozen=True)
class Died:
    """A fork ended without sending a result: ``cause`` says how."""

    cause: str


def failure(error: BaseException) -> str:
    """How a failure of the grader itself is reported: ``"<exception type>: <message>"``."""
    return f"{type(error).__name__}: {error}"


class ForkPool:
    """Runs ``task(*arguments)`` for each submission in a fork of this process.

    Args:
        task: what a fork runs; it returns a picklable result, or raises (reported as
            :func:`failure`).
        workers: forks running at once.
        data_bytes: each fork's data memory (``RLIMIT_DATA``, soft limit).
    """

    def __init__(self, task: Callable, workers: int, data_bytes: int):
        self.task, self.workers, self.data_bytes = task, workers, data_bytes

    def results(self, tasks: dict[str, tuple]) -> Iterator[tuple[str, object]]:
        """``(student, result)`` as each finishes: the task's result, or a string saying why there is none.

        Stopping the iteration (the caller failed, or Ctrl-C) kills the forks still running.

        While it runs, the objects this process had before (PyTorch, the checks: hundreds of
        thousands) are out of the garbage collector's sight (``gc.freeze``), as Python's
        documentation advises before forking: a fork's collections then never walk them,
        which took a third of a second per fork and copied the pages they touched.
        """
        waiting = collections.deque((student, arguments, 1) for student, arguments in tasks.items())
        running: dict[Connection, _Fork] = {}
        gc.freeze()
        try:
            while waiting or running:
                self._start(waiting, running)
                ended = [running.pop(reader) for reader in wait(list(running))]
                finished = [(fork.student, self._result(fork, waiting)) for fork in ended]
                self._start(waiting, running)  # before the caller records the results, which takes a while
                yield from ((student, result) for student, result in finished if result is not None)
        finally:
            for fork in running.values():
                fork.kill()
            gc.unfreeze()

    def _start(self, waiting: collections.deque, running: dict[Connection, "_Fork"]) -> None:
        """Fork for the submissions waiting, up to ``workers`` running."""
        while waiting and len(running) < self.workers:
            fork = _Fork.start(*waiting.popleft(), self)
            running[fork.reader] = fork

    @staticmethod
    def _result(fork: "_Fork", waiting: collections.deque) -> object:
        """An ended fork's result; ``None`` if it died and its submission is queued again."""
        result = fork.finish()
        if isinstance(result, Died) and fork.attempt < TRIES:
            log.warning("%s: %s; grading it again", fork.student, result.cause)
            waiting.append((fork.student, fork.arguments, fork.attempt + 1))
            return None
        return f"{result.cause} (tried {fork.attempt} times)" if isinstance(result, Died) else result


@dataclass
class _Fork:
    """One running fork: the submission it grades, which try this is, its pid, its pipe and its folder."""

    student: str
    arguments: tuple
    attempt: int
    pid: int
    reader: Connection
    folder: str

    @classmethod
    def start(cls, student: str, arguments: tuple, attempt: int, pool: ForkPool) -> "_Fork":
        folder = tempfile.mkdtemp(prefix="autograder-worker-")
        reader, writer = Pipe(duplex=False)
        sys.stdout.flush(), sys.stderr.flush()  # else the fork would print what this process had not yet
        pid = os.fork()
        if pid == 0:
            reader.close()
            _run(pool.task, arguments, writer, folder, pool.data_bytes)  # never returns
        writer.close()
        return cls(student, arguments, attempt, pid, reader, folder)

    def finish(self) -> object:
        """The fork's result (or :class:`Died`), once it has ended and what it left is removed."""
        try:
            result = self.reader.recv()
        except (EOFError, OSError):
            result = None
        status = self._end()
        return _death(status) if result is None else result

    def kill(self) -> None:
        """Stop the fork now, and remove what it left."""
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._end()

    def _end(self) -> int:
        """Wait for the fork to end, remove what it left, then reap it (its pid is not reused before)."""
        self.reader.close()
        os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT)
        shutil.rmtree(self.folder, ignore_errors=True)
        limits.remove_left_by(self.pid)
        return os.waitpid(self.pid, 0)[1]


def _run(task: Callable, arguments: tuple, writer: Connection, folder: str, data_bytes: int) -> None:
    """In the fork: run the task under the data limit, in ``folder``, send its result, and exit."""
    code = 1
    try:
        _, hard = resource.getrlimit(resource.RLIMIT_DATA)
        resource.setrlimit(resource.RLIMIT_DATA, (data_bytes if hard == resource.RLIM_INFINITY else
                                                  min(data_bytes, hard), hard))
        tempfile.tempdir = folder  # every temporary file and folder of this fork, removed by the parent
        try:
            result = task(*arguments)
        except Exception as error:  # noqa: BLE001 - the grader's own failure: said, and graded in the next run
            result = failure(error)
        writer.send(result)
        code = 0
    finally:
        kernels.stop_all()  # a zygote this fork started itself (when the shared one had died)
        os._exit(code)


def _death(status: int) -> Died:
    """How a fork that sent no result ended, from its wait status."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        name = signal.Signals(number).name if number in signal.valid_signals() else "unknown"
        likely = ", probably out of memory" if number == signal.SIGKILL else ""
        return Died(f"the grading worker was killed by signal {number} ({name}){likely}")
    return Died(f"the grading worker exited with code {os.waitstatus_to_exitcode(status)} before sending a result")
