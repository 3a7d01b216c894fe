"""Execute an assembled notebook in a sandboxed kernel, cell by cell, within its limits.

The verdict on a test cell comes from the kernel's reply (``ok`` or ``error``), a
timeout, or the kernel's death, never from what the cell printed. After each test cell
the grader asks the kernel for an integrity audit (``guard.audit``). When a kernel dies
or a cell runs out of time, a new kernel replays the cells that had worked so far and
grading goes on with the next cell, so one runaway part does not cost the others.

Kernels are forked from this process's zygote (``zygote.py``), one new kernel for each
start and restart; where no zygote can run, each starts in its own sandbox as before.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass

from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError
from nbformat import NotebookNode

from .notebooks import Assembled
from . import zygote as zygotes
from .sandbox import Limits, SandboxedKernelManager, ZygoteKernelManager

MAX_RESTARTS = 3


@dataclass
class CellResult:
    """How one cell ended: ``ok``, ``error``, ``timeout``, ``died`` or ``not run``."""

    status: str
    message: str = ""
    audit: str = "clean"


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


def execute(assembled: Assembled, limits: Limits) -> list[CellResult]:
    """Run every code cell of ``assembled.notebook`` in place; one result per cell."""
    with tempfile.TemporaryDirectory(prefix="autograder-") as scratch:
        return _Session(assembled, limits, scratch).run()


class _Session:
    """One notebook's execution: a kernel (restarted when lost) and the results so far."""

    def __init__(self, assembled: Assembled, limits: Limits, scratch: str):
        self.assembled, self.limits, self.scratch = assembled, limits, scratch
        self.cells = assembled.notebook.cells
        self.results = [CellResult("not run") for _ in self.cells]
        self.deadline = time.monotonic() + limits.notebook_seconds
        self.restarts = 0
        self.client: _Client | None = None
        self.sockets: str | None = None

    def run(self) -> list[CellResult]:
        try:
            self._start_kernel()
            # cells after the last test cell grade nothing (and may call the answers again)
            last_test = max((i for i, role in enumerate(self.assembled.roles) if role == "test"), default=-1)
            for index, cell in enumerate(self.cells[:last_test + 1]):
                if cell.cell_type != "code":
                    continue
                if time.monotonic() >= self.deadline:
                    self.results[index] = CellResult("timeout", f"the notebook's time limit of {self.limits.notebook_seconds:.0f} s was reached")
                    continue
                self.results[index] = self._run_cell(index)
                if self.results[index].status in ("timeout", "died") and not self._recover(index):
                    break
        finally:
            self._stop_kernel()
        return self.results

    def _run_cell(self, index: int) -> CellResult:
        """Execute one cell; audit it if it is a test cell."""
        cell = self.cells[index]
        self.client.timeout = max(1, int(min(self.limits.cell_seconds, self.deadline - time.monotonic())))
        try:
            self.client.execute_cell(cell, index)
            result = CellResult("ok")
        except CellExecutionError as error:
            result = CellResult("error", f"{error.ename}: {error.evalue}")
        except CellTimeoutError:
            return CellResult("timeout", f"the cell ran longer than {self.client.timeout} s")
        except DeadKernelError:
            return CellResult("died", "the kernel died while running this cell (it exited, crashed or ran out of memory)")
        if self.assembled.roles[index] == "test":
            result.audit = self._audit()
        return result

    def _audit(self) -> str:
        """The kernel's integrity audit after a test cell (a missing answer counts as changed)."""
        kc = self.client.kc
        msg_id = kc.execute("", silent=True, store_history=False,
                            user_expressions={"audit": "__import__('autograder.grading.guard').grading.guard.audit()"})
        try:
            reply = self.client.wait_for_reply(msg_id)
            value = reply["content"]["user_expressions"]["audit"]
            text = value["data"]["text/plain"].strip("'\"") if value.get("status") == "ok" else f"audit failed: {value.get('evalue')}"
        except Exception as error:  # no reply at all: the kernel is gone or hung
            text = f"audit failed: {type(error).__name__}"
        return text

    def _recover(self, failed: int) -> bool:
        """Start a new kernel and replay the cells before ``failed`` that had worked."""
        while self.restarts < MAX_RESTARTS:
            self.restarts += 1
            self._stop_kernel()
            self._start_kernel()
            replayed = True
            for index in range(failed):
                if self.results[index].status == "ok" and self.assembled.roles[index] != "test":
                    saved_outputs = list(self.cells[index].outputs)
                    try:
                        self.client.execute_cell(self.cells[index], index)
                    except (CellExecutionError, CellTimeoutError, DeadKernelError):
                        replayed = False
                    self.cells[index].outputs = saved_outputs
                    if not replayed:
                        break
            if replayed:
                return True
        for index in range(failed + 1, len(self.cells)):
            if self.cells[index].cell_type == "code":
                self.results[index] = CellResult("not run", "not run: the kernel was lost too often")
        return False

    def _start_kernel(self) -> None:
        zygote = zygotes.for_limits(self.limits)
        work = tempfile.mkdtemp(dir=self.scratch, prefix="work-")
        if zygote is not None:  # sockets where the zygote's sandbox has them (each kernel sees its own only)
            self.sockets = tempfile.mkdtemp(dir=zygote.folder, prefix="sockets-")
            km_class = ZygoteKernelManager
        else:
            self.sockets = tempfile.mkdtemp(dir=self.scratch, prefix="sockets-")
            km_class = SandboxedKernelManager
        km = km_class(transport="ipc", ip=os.path.join(self.sockets, "kernel"),
                      connection_file=os.path.join(self.sockets, "kernel.json"), kernel_name="python3")
        km.limits = self.limits
        if zygote is not None:
            km.zygote, km.work = zygote, work
        else:
            km.scratch = work
        self.client = _Client(self.assembled.notebook, km, self.limits.output_bytes)
        self.client.start_new_kernel(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.client.start_new_kernel_client()  # waits until the kernel answers
        self._install_guard()

    def _install_guard(self) -> None:
        """The guard's set-up, before any student code (a hidden cell, not in the notebook)."""
        code = f"import autograder.grading.guard as _g; _g.install(threads={self.limits.threads}); del _g"
        msg_id = self.client.kc.execute(code, silent=True, store_history=False)
        reply = self.client.wait_for_reply(msg_id)
        if reply is None or reply["content"]["status"] != "ok":
            content = reply["content"] if reply else {}
            raise RuntimeError(f"the grading kernel could not be prepared: {content.get('ename')}: {content.get('evalue')}")

    def _stop_kernel(self) -> None:
        """Kill the kernel (its sandbox and everything in it goes with it)."""
        if self.client is not None and self.client.km is not None:
            try:
                self.client._cleanup_kernel()
            except Exception:  # already gone
                pass
        self.client = None
        if self.sockets is not None:
            shutil.rmtree(self.sockets, ignore_errors=True)
            self.sockets = None
