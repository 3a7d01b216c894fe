"""The sandbox a student's kernel runs in: bubblewrap namespaces plus resource limits.

The kernel is started as ``prlimit … bwrap … python -m ipykernel_launcher``:

* **filesystem**: a fresh root that holds the operating system (read-only), the Python
  installation and virtual environment (read-only), the ``autograder`` package
  (read-only), an empty writable ``/tmp`` and working folder, and the folder of the
  kernel's connection sockets. The course directory (solutions, gradebook, other
  students' submissions) is simply not there.
* **network**: a new, empty network namespace; the kernel talks to the grader over Unix
  sockets (ZeroMQ's ``ipc`` transport), so it needs none.
* **processes**: new PID, IPC and UTS namespaces, all capabilities dropped, a new session
  (no terminal), killed with the grader.
* **limits**: memory (``RLIMIT_DATA``: a huge allocation fails with an error in the
  student's cell), no core dumps, at most 256 MB per written file; time and output size
  are enforced by the grader (``run.py``).
"""

from __future__ import annotations

import glob
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager

from ..runner import SEED_KEY_VARIABLE


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
        seed_key: the key of this student's hidden cases (``AUTOGRADER_SEED_KEY`` in the
            kernel; see ``secret.py``), ``""`` for none.
    """

    cell_seconds: float = 120.0
    notebook_seconds: float = 600.0
    memory_mb: int = 4096
    output_bytes: int = 2_000_000
    threads: int = 1
    device: str = "cpu"
    sandbox: bool = True
    seed_key: str = ""


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


def bwrap_command(kernel_command: list[str], sockets: str, scratch: str, limits: Limits) -> list[str]:
    """``kernel_command`` wrapped in resource limits and, unless disabled, bubblewrap."""
    env = {
        "PATH": f"{os.path.dirname(sys.executable)}:/usr/bin:/bin",
        "HOME": "/tmp",
        "LANG": "C.UTF-8",
        "IPYTHONDIR": "/tmp/.ipython",
        "MPLCONFIGDIR": "/tmp/.matplotlib",
        "OMP_NUM_THREADS": str(limits.threads),
        "MKL_NUM_THREADS": str(limits.threads),
        "PYTHONDONTWRITEBYTECODE": "1",
        "CUDA_VISIBLE_DEVICES": "" if limits.device == "cpu" else os.environ.get("CUDA_VISIBLE_DEVICES", "0"),
    }
    if limits.seed_key:
        env[SEED_KEY_VARIABLE] = limits.seed_key
    prlimit = ["prlimit", f"--data={limits.memory_mb * 2**20}", "--core=0", f"--fsize={256 * 2**20}", "--"]
    if not limits.sandbox:
        return prlimit + ["env", "-i", *(f"{k}={v}" for k, v in env.items())] + kernel_command
    command = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
               "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--clearenv"]
    for path in visible_paths():
        command += ["--ro-bind", path, path]
    command += ["--bind", sockets, sockets, "--bind", scratch, "/tmp/work", "--chdir", "/tmp/work"]
    if limits.device == "cuda":  # the GPU's device files and driver information
        for device in glob.glob("/dev/nvidia*"):
            command += ["--dev-bind", device, device]
        command += ["--ro-bind-try", "/sys", "/sys"]
    for key, value in env.items():
        command += ["--setenv", key, value]
    return prlimit + command + kernel_command


class SandboxedKernelManager(AsyncKernelManager):
    """A kernel manager whose kernels start inside :func:`bwrap_command`'s sandbox."""

    limits: Limits = Limits()
    scratch: str = "/tmp"

    def format_kernel_cmd(self, extra_arguments=None) -> list[str]:
        command = super().format_kernel_cmd(extra_arguments)
        command[0] = sys.executable  # the grader's own environment, whatever the kernelspec says
        return bwrap_command(command, os.path.dirname(self.connection_file), self.scratch, self.limits)
