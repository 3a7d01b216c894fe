"""The sandbox a student's kernel runs in: bubblewrap namespaces plus resource limits.

A kernel is forked from a warm *zygote* (``zygote.py``) that runs in this sandbox, and
then sandboxes itself once more in namespaces of its own; where no zygote can start, it
is started as ``prlimit … bwrap … python -m ipykernel_launcher``. Either way:

* **filesystem**: a fresh root that holds the operating system (read-only), the Python
  installation and virtual environment (read-only), the ``autograder`` package
  (read-only), an empty writable ``/tmp`` and working folder, and the folder of the
  kernel's connection sockets. The course directory (solutions, gradebook, other
  students' submissions) is simply not there, and neither is any other kernel's
  ``/tmp``, ``/dev`` or sockets folder.
* **network**: a new, empty network namespace; the kernel talks to the grader over Unix
  sockets (ZeroMQ's ``ipc`` transport), so it needs none.
* **processes**: new PID, IPC and UTS namespaces (the kernel sees its sandbox's init and
  itself, nothing else), all capabilities dropped, a new session (no terminal), killed
  with the grader.
* **limits**: memory (``RLIMIT_DATA``: a huge allocation fails with an error in the
  student's cell), no core dumps, at most 256 MB per written file; time and output size
  are enforced by the grader (``run.py``).
* **one kernel, one submission**: every kernel is a new process with its own namespaces,
  environment and random state; a restart starts a new one.
"""

from __future__ import annotations

import glob
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.asyncio
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.manager import AsyncKernelManager
from jupyter_client.provisioning import LocalProvisioner
from traitlets import DottedObjectName, Type

from . import zygote as zygotes


class SandboxUnavailable(Exception):
    """bubblewrap is missing or does not work on this machine; the message says what to do."""


@dataclass
class Limits:
    """What one submission may use.

    Attributes:
        cell_seconds: wall time of one cell.
        notebook_seconds: wall time of the whole notebook.
        memory_mb: data memory of the kernel process.
        output_bytes: text and images a notebook may print in all; more is cut off.
        threads: PyTorch CPU threads of the kernel.
        device: ``"cpu"`` (CUDA hidden from the kernel) or ``"cuda"``.
        sandbox: run the kernel under bubblewrap (``False`` only for machines without it).
        zygote: fork kernels from a warm zygote (``zygote.py``); ``False`` starts each
            kernel from scratch (slower, equally sandboxed).
    """

    cell_seconds: float = 120.0
    notebook_seconds: float = 600.0
    memory_mb: int = 4096
    output_bytes: int = 2_000_000
    threads: int = 1
    device: str = "cpu"
    sandbox: bool = True
    zygote: bool = True


def check_bubblewrap() -> None:
    """Raise :class:`SandboxUnavailable` unless ``bwrap`` can create a sandbox here."""
    import subprocess

    if shutil.which("bwrap") is None:
        raise SandboxUnavailable("bubblewrap is not installed: `apt-get install bubblewrap` (Debian/Ubuntu), "
                                 "or grade without a sandbox with --no-sandbox (unsafe)")
    probe = subprocess.run(["bwrap", "--ro-bind", "/", "/", "--unshare-all", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        raise SandboxUnavailable(f"bubblewrap cannot create namespaces here: {probe.stderr.strip()}")


def visible_paths() -> list[str]:
    """Read-only paths the kernel needs: the system, Python, the environment, the autograder."""
    import autograder

    system = ["/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/etc"]
    python = [sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable))]
    package = [str(Path(autograder.__file__).resolve().parent)]
    paths = []
    for path in system + python + package:
        if os.path.exists(path) and path not in paths:
            paths.append(path)
    return paths


def kernel_environment(limits: Limits) -> dict[str, str]:
    """The whole environment of a kernel (nothing of the grader's own is passed on, no key or secret)."""
    return {
        "PATH": f"{os.path.dirname(sys.executable)}:/usr/bin:/bin",
        "HOME": "/tmp",
        "LANG": "C.UTF-8",
        "IPYTHONDIR": "/tmp/.ipython",
        "MPLCONFIGDIR": "/tmp/.matplotlib",
        "AUTOGRADER_FIGURE_FORMAT": "png",
        "OMP_NUM_THREADS": str(limits.threads),
        "MKL_NUM_THREADS": str(limits.threads),
        "PYTHONDONTWRITEBYTECODE": "1",
        "CUDA_VISIBLE_DEVICES": "" if limits.device == "cpu" else os.environ.get("CUDA_VISIBLE_DEVICES", "0"),
    }


def _prlimit(limits: Limits) -> list[str]:
    return ["prlimit", f"--data={limits.memory_mb * 2**20}", "--core=0", f"--fsize={zygotes.FILE_BYTES}", "--"]


def _without_sandbox(limits: Limits, env: dict[str, str], program: list[str]) -> list[str]:
    """``program`` under the resource limits and in ``env`` alone, without bubblewrap."""
    return _prlimit(limits) + ["env", "-i", *(f"{k}={v}" for k, v in env.items())] + program


def _setenv(env: dict[str, str]) -> list[str]:
    """bubblewrap's arguments that give the sandbox ``env`` (after ``--clearenv``)."""
    return [argument for key, value in env.items() for argument in ("--setenv", key, value)]


def sealed_paths() -> dict[str, str]:
    """``{path: what is mounted over it}``: the references, covered by a package that cannot be imported."""
    import autograder

    package = Path(autograder.__file__).resolve().parent
    return {str(package / "reference"): str(Path(__file__).resolve().parent / "sealed_reference")}


def _bwrap_mounts(limits: Limits) -> list[str]:
    """What every sandbox holds: the read-only system, Python and autograder (its references sealed), the GPU if used."""
    command = ["--dev", "/dev", "--tmpfs", "/tmp", "--clearenv"]
    for path in visible_paths():
        command += ["--ro-bind", path, path]
    for path, cover in sealed_paths().items():
        command += ["--ro-bind", cover, path]
    if limits.device == "cuda":  # the GPU's device files and driver information
        for device in glob.glob("/dev/nvidia*"):
            command += ["--dev-bind", device, device]
        command += ["--ro-bind-try", "/sys", "/sys"]
    return command


def bwrap_command(kernel_command: list[str], sockets: str, scratch: str, limits: Limits) -> list[str]:
    """``kernel_command`` wrapped in resource limits and, unless disabled, bubblewrap."""
    env = kernel_environment(limits)
    if not limits.sandbox:
        return _without_sandbox(limits, env, kernel_command)
    command = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
               "--proc", "/proc", *_bwrap_mounts(limits)]
    command += ["--bind", sockets, sockets, "--bind", scratch, "/tmp/work", "--chdir", "/tmp/work", *_setenv(env)]
    return _prlimit(limits) + command + kernel_command


def zygote_command(socket_path: str, folder: str, limits: Limits) -> list[str]:
    """The zygote of ``zygote.py``: the same limits and sandbox as a kernel, minus the student.

    Differences from :func:`bwrap_command`, all needed for the zygote's forks to sandbox
    themselves (each kernel then gets a fresh ``/tmp``, ``/dev`` and ``/proc``, its own
    namespaces, and only its own sockets folder, see ``zygote.py``):

    * a user namespace of its own (``--unshare-user``, as user 1000), in which a fork may
      create the kernel's nested namespaces;
    * the grader's ``/proc`` instead of a new one: Linux mounts a new ``/proc`` in a nested
      namespace only where an uncovered one is visible, and bubblewrap's covers parts of
      it. No kernel ever sees it: each mounts its own over it;
    * the root read-only (bubblewrap leaves it writable, and it would be shared);
    * ``folder``, which holds the zygote's socket and every kernel's sockets folder.

    The zygote serves every student, and knows none of them.
    """
    env = kernel_environment(limits)
    env["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"  # what ipykernel sets (before matplotlib loads)
    program = [sys.executable, "-m", "autograder.grading.zygote", socket_path]
    if not limits.sandbox:
        return _without_sandbox(limits, env, program + ["--no-namespaces", "--parent", str(os.getpid())])
    command = ["bwrap", "--unshare-all", "--unshare-user", "--uid", str(zygotes.SANDBOX_UID),
               "--gid", str(zygotes.SANDBOX_GID), "--die-with-parent", "--new-session", "--cap-drop", "ALL",
               "--bind", "/proc", "/proc", *_bwrap_mounts(limits), "--bind", folder, folder, *_setenv(env)]
    command += ["--remount-ro", "/", "--chdir", "/"]
    return _prlimit(limits) + command + program


#: The largest message the grader reads from a kernel; a larger one drops the connection before
#: it is read (``zmq.MAXMSGSIZE``), so an output flood or a huge reply never fills the grader's memory.
MESSAGE_BYTES = 64 * 2**20


class _SizedClients:
    """Kernel clients whose sockets refuse messages over :data:`MESSAGE_BYTES` (a mixin of the managers)."""

    def client(self, **kwargs):
        context = zmq.asyncio.Context()
        context.setsockopt(zmq.MAXMSGSIZE, MESSAGE_BYTES)
        return super().client(context=context, **kwargs)


class SandboxedKernelManager(_SizedClients, AsyncKernelManager):
    """A kernel manager whose kernels start inside :func:`bwrap_command`'s sandbox."""

    limits: Limits = Limits()
    scratch: str = "/tmp"

    def format_kernel_cmd(self, extra_arguments=None) -> list[str]:
        command = super().format_kernel_cmd(extra_arguments)
        command[0] = sys.executable  # the grader's own environment, whatever the kernelspec says
        return bwrap_command(command, os.path.dirname(self.connection_file), self.scratch, self.limits)


class ZygoteProvisioner(LocalProvisioner):
    """Starts the kernel by asking this process's zygote for a fork instead of ``Popen``.

    The fork's handle (:class:`zygote.KernelHandle`) stands in for the process, so
    jupyter_client's polling, signals, kill and wait, and with them nbclient's detection
    of a dead kernel and the restarts of ``run.py``, work as for any kernel.
    """

    zygote: zygotes.Zygote | None = None
    limits: Limits = Limits()
    work: str | None = None

    async def launch_kernel(self, cmd: list[str], **kwargs):
        self.process = self.zygote.launch(self.parent.connection_file, self.limits, work=self.work)
        self.pid, self.pgid = self.process.pid, None  # signals go through the handle
        self.cwd = "/tmp/work"
        return self.connection_info


class ZygoteKernelClient(AsyncKernelClient):
    """jupyter_client's asynchronous client, ready 0.2 s sooner.

    jupyter_client's ``wait_for_ready`` ends by waiting for 0.2 s of silence on IOPub,
    to drop the kernel's first status messages; a forked kernel starts in a fraction of a
    second, so that wait would be a large part of its start. It is left out: nbclient
    ignores every IOPub message that does not answer the request it is waiting on.
    """

    async def _async_wait_for_ready(self, timeout: float | None = None) -> None:
        from queue import Empty

        deadline = time.monotonic() + (timeout if timeout is not None else float("inf"))
        while True:  # as jupyter_client: a kernel_info reply, then IOPub shown to be connected
            self.kernel_info()
            try:
                reply = await self.shell_channel.get_msg(timeout=1)
            except Empty:
                pass
            else:
                if reply["msg_type"] == "kernel_info_reply":
                    try:
                        await self.iopub_channel.get_msg(timeout=0.2)
                    except Empty:
                        pass
                    else:
                        self._handle_kernel_info_reply(reply)
                        return
            if not await self._async_is_alive():
                raise RuntimeError("Kernel died before replying to kernel_info")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kernel didn't respond in {timeout:.0f} seconds")

    wait_for_ready = _async_wait_for_ready


class ZygoteKernelManager(_SizedClients, AsyncKernelManager):
    """A kernel manager whose kernels are forked, sandboxed, from ``zygote``."""

    client_class = DottedObjectName("autograder.grading.sandbox.ZygoteKernelClient")
    client_factory = Type(ZygoteKernelClient, klass="jupyter_client.asynchronous.AsyncKernelClient")
    zygote: zygotes.Zygote | None = None
    limits: Limits = Limits()
    work: str | None = None

    async def _async_pre_start_kernel(self, **kw):
        if self.provisioner is None:
            import uuid

            self.kernel_id = self.kernel_id or kw.pop("kernel_id", str(uuid.uuid4()))
            self.provisioner = ZygoteProvisioner(kernel_id=self.kernel_id, kernel_spec=self.kernel_spec, parent=self)
        self.provisioner.zygote, self.provisioner.limits, self.provisioner.work = self.zygote, self.limits, self.work
        return await super()._async_pre_start_kernel(**kw)
