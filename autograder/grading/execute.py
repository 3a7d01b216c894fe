"""Run a submission's own cells in a sandboxed kernel, within deadlines kept from outside.

A :class:`KernelSession` executes the assembled notebook's code cells one by one:
instructor set-up, the student's answers and the cells the student added. Test cells are
not executed: where each stands, the session *pins* the answers it checks (``kernel/serve.py``: ``pin``),
so that each part is judged later on its answer as it was defined at that point. The
judging (``verdict.py``) then asks the same kernel for the answers' results through
:meth:`KernelSession.exchange`, once every cell has run: nothing of the submission runs
after its answers have seen the hidden inputs.

Every wait on the kernel has a deadline: a cell's time limit, the notebook's, and for a
replay the same. The notebook's limit applies twice: to the submission's cells, then to
the judging of its parts (each within the per-cell limit), so a submission takes at most
twice the notebook's limit. A cell that runs out of time, or a kernel that dies, costs only that cell:
the kernel is killed from outside, a new one replays the cells that had worked (with their
pins, under the same deadlines) and the session goes on. Kernels are forked from this
process's zygote (``zygote.py``); where none can run, each starts in its own sandbox.
"""

from __future__ import annotations

import enum
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from typing import Callable

import zmq
import zmq.asyncio
from jupyter_core.utils import run_sync
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError
from nbformat import NotebookNode

from ..text import excerpt
from . import kernels
from .errors import Deadline, GradingEnvironmentError, KernelLost
from .kernel_respondent import KernelRespondent
from .notebooks import Assembled
from .sandbox import Limits

MAX_RESTARTS = 3
#: Output a kernel sends while judged that the run's summary mentions (a print or two is not worth a line).
NOTED_OUTPUT_BYTES = 2**20


class Status(str, enum.Enum):
    """A status kept as its text: equal to it, hashed and written as it (CSV, JSON, notebooks); subclassed per kind."""

    def __str__(self) -> str:
        return self.value


class CellStatus(Status):
    """How one cell ended."""

    OK = "ok"
    ERROR = "error"  # it raised
    TIMEOUT = "timeout"  # its time, or the notebook's, ran out
    DIED = "died"  # its kernel died
    NOT_RUN = "not run"  # a test cell, or a cell never reached

    @property
    def cut_short(self) -> bool:
        """Whether the grader stopped it from outside: out of time, or its kernel died."""
        return self in (CellStatus.TIMEOUT, CellStatus.DIED)


@dataclass
class CellResult:
    """How one cell ended (``status``: a :class:`CellStatus` or its text), and what it said."""

    status: CellStatus
    message: str = ""

    def __post_init__(self):
        self.status = CellStatus(self.status)


class _Client(NotebookClient):
    """nbclient with an output budget: past it, output is dropped and a note added once."""

    def __init__(self, nb: NotebookNode, km, output_bytes: int):
        super().__init__(nb, km=km, allow_errors=False, interrupt_on_timeout=False,
                         record_timing=False, shutdown_kernel="immediate", iopub_timeout=10)
        self.output_left = output_bytes

    def output(self, outs, msg, display_id, cell_index):
        size = len(str(msg.get("content", "")))
        if self.output_left <= 0:
            return None
        self.output_left -= size
        if self.output_left <= 0:
            note = {"output_type": "stream", "name": "stdout", "text": "\n[output cut off: the notebook printed too much]\n"}
            outs.append(NotebookNode(note))
            return None
        return super().output(outs, msg, display_id, cell_index)


class KernelSession:
    """One submission's kernel: its cells run, answers pinned, then questions asked, all within deadlines.

    Attributes:
        results: per cell, how it ended (``not run`` for test cells and cells never reached).
        restarts: how many new kernels were started after the first.
    """

    def __init__(self, assembled: Assembled, limits: Limits, scratch: str):
        self.assembled, self.limits, self.scratch = assembled, limits, scratch
        self.cells = assembled.notebook.cells
        self.results = [CellResult(CellStatus.NOT_RUN) for _ in self.cells]
        self.deadline = time.monotonic() + limits.notebook_seconds
        self.restarts = 0
        self.client: _Client | None = None
        self.sockets: str | None = None
        self.error = ""  # the error of the last exchange that failed, as the kernel named it
        self.output_dropped = 0  # bytes the kernel sent on IOPub while it was asked something, read and dropped
        self.oracle_refused: Counter[str] = Counter()  # per name, the oracle calls refused as too large
        self.reached = 0  # the cells before this index have run in the current kernel (or were replayed)

    # ---- the cells

    def run_cells(self) -> None:
        """Run every code cell up to the last test cell; pin the answers at each test cell.

        Then the session is ready to be asked: the notebook's time limit starts again for
        the judging (each part within the per-cell limit), and a kernel lost at the end of
        the cells is brought back, its cells replayed, with a new allowance of restarts.
        """
        self._start_kernel()
        self.deadline = time.monotonic() + self.limits.notebook_seconds  # the grader's start is not the student's time
        last_test = max((i for i, role in enumerate(self.assembled.roles) if role == "test"), default=-1)
        for index in range(last_test + 1):
            if not self.run_cell(index):
                self._not_reached(index + 1, last_test + 1)
                break
        self.deadline, self.restarts = time.monotonic() + self.limits.notebook_seconds, 0
        if not self.alive:
            self.recover()

    def run_cell(self, index: int) -> bool:
        """Run (or, for a test cell, pin) cell ``index``; ``False`` when the kernel could not be recovered."""
        cell = self.cells[index]
        self.reached = index + 1
        if self.assembled.roles[index] == "test":
            return self._pin(index)
        if cell.cell_type != "code":
            return True
        if self.left() <= 0:
            self.results[index] = CellResult(CellStatus.TIMEOUT, f"the notebook's time limit of "
                                                                 f"{self.limits.notebook_seconds:.0f} s was reached")
            return True
        self.results[index] = self._execute(index)
        if self.results[index].status.cut_short:
            return self.recover(upto=index)
        return True

    def _not_reached(self, start: int, stop: int) -> None:
        """The code cells from ``start`` on were not run: the notebook ran out of time, or its kernel was lost."""
        out_of_time = self.left() <= 0
        reason = (f"not run: the notebook's time limit of {self.limits.notebook_seconds:.0f} s was reached before it"
                  if out_of_time else "not run: the kernel was lost too often before it")
        for index in range(start, stop):
            if self.cells[index].cell_type == "code" and self.assembled.roles[index] != "test":
                self.results[index] = CellResult(CellStatus.TIMEOUT if out_of_time else CellStatus.DIED, reason)

    def _execute(self, index: int) -> CellResult:
        cell = self.cells[index]
        self.client.timeout = max(1, int(min(self.limits.cell_seconds, self.left())))
        try:
            self.client.execute_cell(cell, index)
            return CellResult(CellStatus.OK)
        except CellExecutionError as error:  # the kernel's words: shown cut short (text.excerpt)
            return CellResult(CellStatus.ERROR, f"{excerpt(error.ename, limit=60)}: {excerpt(error.evalue)}")
        except CellTimeoutError:
            return CellResult(CellStatus.TIMEOUT, f"the cell ran longer than {self.client.timeout} s")
        except DeadKernelError:
            return CellResult(CellStatus.DIED, self.death())

    def _pin(self, index: int, recover: bool = True) -> bool:
        """Keep the answers that test cell ``index`` checks, as they are now, in the kernel.

        Returns whether the kernel did; a kernel that did not is replaced (``recover``).
        """
        names = sorted({call.answer for call in self.assembled.checks.get(index, [])})
        code = f"__import__('autograder.kernel.serve', fromlist=['pin']).pin({self.assembled.test_id(index)!r}, {names!r})"
        try:
            self.exchange(code, time.monotonic() + min(30.0, max(1.0, self.left())), lambda prompt: "")
            return True
        except (Deadline, KernelLost):
            return self.recover(upto=index) if recover else False

    def left(self) -> float:
        """Seconds left of the notebook's time limit."""
        return self.deadline - time.monotonic()

    # ---- a lost kernel

    def recover(self, upto: int | None = None) -> bool:
        """A new kernel, with the cells before ``upto`` that had worked replayed and the pins redone.

        ``upto`` is the cell that was lost (``None``: every cell reached so far, as when the
        kernel is lost while its answers are judged). Replays run under the same per-cell
        limit and the notebook's deadline. Returns ``False`` when no kernel could be brought
        back (too many restarts, or no time left).
        """
        while self.restarts < MAX_RESTARTS and self.left() > 0:
            self.restarts += 1
            self._stop_kernel()
            self._start_kernel()
            if self._replay(self.reached if upto is None else upto):
                return True
        self._stop_kernel()
        return False

    def _replay(self, upto: int) -> bool:
        for index in range(upto):
            role = self.assembled.roles[index]
            if role == "test":
                if not self._pin(index, recover=False):
                    return False
            elif self.cells[index].cell_type == "code" and self.results[index].status is CellStatus.OK:
                saved_outputs = list(self.cells[index].outputs)
                result = self._execute(index) if self.left() > 0 else CellResult(CellStatus.TIMEOUT)
                self.cells[index].outputs = saved_outputs
                if result.status is not CellStatus.OK:
                    return False
        return True

    def death(self) -> str:
        """Why the kernel died, as far as the grader can tell."""
        cgroup = self._cgroup()
        if cgroup is not None and cgroup.out_of_memory():
            return (f"the kernel ran out of its {self.limits.memory_mb} MiB of memory (all its processes, files in "
                    "/tmp and shared memory included) and was killed")
        return "the kernel died while running this cell (it exited, crashed or ran out of memory)"

    @property
    def alive(self) -> bool:
        return self.client is not None

    def respondent(self, declaration, check: str, test: str, answer: str, deadline: float):
        """The judge's respondent for answer ``answer`` as pinned at test cell ``test`` (``kernel_respondent.py``)."""
        return KernelRespondent(self, declaration, check, test, answer, deadline)

    # ---- questions

    def exchange(self, code: str, deadline: float, answer: Callable[[str], str]) -> str:
        """Run ``code`` silently; answer each ``input()`` prompt it makes with ``answer(prompt)``.

        Returns the status of the execution (``ok`` or ``error``).

        Raises:
            Deadline: no reply before ``deadline`` (the kernel is then killed: it may be spinning).
            KernelLost: the kernel died, or there is none.
        """
        if self.client is None:
            raise KernelLost("no kernel")
        try:
            return run_sync(self._exchange)(code, deadline, answer)
        except Deadline:
            self._stop_kernel()
            raise

    async def _exchange(self, code: str, deadline: float, answer: Callable[[str], str]) -> str:
        kc = self.client.kc
        msg_id = kc.execute(code, silent=True, store_history=False, allow_stdin=True, stop_on_error=False)
        poller = zmq.asyncio.Poller()
        for channel in (kc.shell_channel, kc.stdin_channel, kc.iopub_channel):
            poller.register(channel.socket, zmq.POLLIN)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Deadline("no answer within the time limit")
            ready = dict(await poller.poll(min(left, 1.0) * 1000))
            if not ready:
                if not await self.client.km.is_alive():
                    raise KernelLost("the kernel died")
                continue
            if kc.iopub_channel.socket in ready:
                await self._drop_output(kc.iopub_channel.socket)
            if kc.stdin_channel.socket in ready:
                message = await kc.stdin_channel.get_msg(timeout=0)
                if message["header"]["msg_type"] == "input_request" and message["parent_header"].get("msg_id") == msg_id:
                    kc.input(answer(str(message["content"].get("prompt", ""))))
            if kc.shell_channel.socket in ready:
                message = await kc.shell_channel.get_msg(timeout=0)
                if message["parent_header"].get("msg_id") == msg_id:
                    content = message["content"]
                    self.error = f"{content.get('ename', '')}: {content.get('evalue', '')}"[:500]
                    return str(content.get("status"))

    async def _drop_output(self, socket: zmq.asyncio.Socket) -> None:
        """Read what the kernel has sent on IOPub and keep none of it: what it prints while judged is shown nowhere.

        Read, not left queued: a kernel that prints gigabytes while its answers are judged
        would otherwise fill the grader's memory up to the socket's high-water mark
        (``kernels.SandboxedKernelManager.client``); its size is only counted.
        """
        while await socket.poll(0):
            self.output_dropped += sum(len(frame) for frame in await socket.recv_multipart(copy=False))

    def notes(self) -> list[str]:
        """What the submission did to the grader while it was judged, for the run's summary (``[]``: nothing)."""
        notes = []
        if self.output_dropped >= NOTED_OUTPUT_BYTES:
            notes.append(f"printed {self.output_dropped / 2**20:,.0f} MiB while its answers were judged (read and "
                         "dropped)")
        notes += [f"asked the grader {count} time{'s' if count > 1 else ''} to compute `{name}` on more than its part "
                  "allows (refused)" for name, count in sorted(self.oracle_refused.items())]
        if self.restarts:
            notes.append(f"its kernel was lost and replaced {self.restarts} time{'s' if self.restarts > 1 else ''} "
                         "while judged")
        return notes

    def cpu_seconds(self) -> float | None:
        """The CPU time the kernel's processes have used so far, read from its cgroup; ``None`` where none says."""
        cgroup = self._cgroup()
        return cgroup.cpu_seconds() if cgroup is not None else None

    def memory_mark(self):
        """Start measuring the kernel's memory peak from outside (``limits.KernelCgroup.memory_mark``); ``None``
        where no cgroup can."""
        cgroup = self._cgroup()
        return cgroup.memory_mark() if cgroup is not None else None

    def memory_peak(self, mark) -> int | None:
        """The kernel's memory peak since ``mark`` above its usage then, in bytes; ``None`` where not measured."""
        cgroup = self._cgroup()
        if cgroup is None:
            if mark is not None:
                mark.close()
            return None
        return cgroup.memory_peak(mark)

    def _cgroup(self):
        """The current kernel's cgroup (``kernels.KernelCgroup``), or ``None`` (no kernel, or none made here)."""
        return self.client.km.cgroup() if self.client is not None else None

    # ---- the kernel itself

    def _start_kernel(self) -> None:
        """A new kernel, forked from the zygote when there is one, in its sandbox; its sockets folder sealed."""
        zygote = kernels.for_limits(self.limits)
        work = tempfile.mkdtemp(dir=self.scratch, prefix="work-")
        # sockets where the zygote's sandbox has them (each kernel sees its own only)
        self.sockets = tempfile.mkdtemp(dir=zygote.folder if zygote is not None else self.scratch, prefix="sockets-")
        km = kernels.SandboxedKernelManager(transport="ipc", ip=os.path.join(self.sockets, "kernel"),
                                            connection_file=os.path.join(self.sockets, "kernel.json"),
                                            limits=self.limits, zygote=zygote, work=work)
        self.client = _Client(self.assembled.notebook, km, self.limits.output_bytes)
        self.client.start_new_kernel(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.client.start_new_kernel_client()  # waits until the kernel answers: its sockets are bound
        handle = km.handle()
        if handle is not None and self.limits.sandbox and not handle.seal():  # no sandbox: nothing to seal
            raise RuntimeError("the grading kernel's sockets folder could not be sealed")
        self._prepare()

    def _prepare(self) -> None:
        """The kernel's first code, before any of the submission's: its thread count, the respondent loaded."""
        code = (f"import torch as _t; _t.set_num_threads({self.limits.threads}); del _t; "
                "import autograder.kernel.serve as _r; del _r")
        status = self.exchange(code, time.monotonic() + 120, lambda prompt: "")
        if status != "ok":
            import autograder

            raise GradingEnvironmentError(
                f"the grading kernel cannot import PyTorch or the course's package ({self.error}). The kernel sees "
                f"this Python environment ({sys.prefix}) and the package the grader itself runs, "
                f"{os.path.dirname(autograder.__file__)}, and nothing else: install that course folder into this "
                "environment (`pip install -e .` in it, or `make install`) rather than another copy, and run the "
                "grading command with this environment's python")

    def _stop_kernel(self) -> None:
        """Kill the kernel (its sandbox and everything in it goes with it)."""
        if self.client is not None and self.client.km is not None:
            try:
                self.client._cleanup_kernel()
            except Exception:  # noqa: BLE001 - already gone, however it went
                pass
        self.client = None
        if self.sockets is not None:
            shutil.rmtree(self.sockets, ignore_errors=True)
            self.sockets = None

    def close(self) -> None:
        self._stop_kernel()


def open_session(assembled: Assembled, limits: Limits):
    """A :class:`KernelSession` in a scratch folder of its own, closed (kernel and folder) on exit."""
    import contextlib

    @contextlib.contextmanager
    def session():
        with tempfile.TemporaryDirectory(prefix="autograder-") as scratch:
            kernel = KernelSession(assembled, limits, scratch)
            try:
                yield kernel
            finally:
                kernel.close()

    return session()

