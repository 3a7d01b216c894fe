"""The sandbox a student's kernel runs in, described once, as data (:class:`Policy`).

Every place that enforces it reads the same :class:`Policy`: the bubblewrap command of a
kernel or of the zygote (:func:`bwrap_command`), the request by which a forked kernel sets
itself up inside the zygote (:meth:`Policy.zygote_request`, read by ``autograder/kernel/zygote.py``,
which lays out what the request says and computes none of it), and the checks the grader
makes on the zygote's first kernel before trusting it (:meth:`Policy.expectations`,
compared by ``kernels.py``). What it holds:

* **filesystem**: the operating system, Python and its environment, and the course's
  ``autograder`` package, read-only; the references sealed (a package that cannot be
  imported is mounted over them, ``autograder/kernel/sealed_reference/``); a fresh ``/tmp`` (with the working
  folder ``/tmp/work``) and ``/dev/shm``, in memory, of a fixed size, so that nothing a
  kernel writes reaches the grader's disk; and the folder of the kernel's sockets, sealed
  read-only once the kernel has bound them. The course directory (solutions, gradebook,
  other students' submissions) is not there, nor any other kernel's folders.
* **network**: a new, empty network namespace; the kernel talks to the grader over Unix
  sockets (ZeroMQ's ``ipc`` transport).
* **processes**: new user, PID, IPC and UTS namespaces, every capability dropped, a new
  session; when the grader runs as root, the sandbox runs as the unprivileged user
  ``nobody`` (``setpriv``), so root's files stay root's.
* **limits**: per kernel, a cgroup caps memory (files in memory and shared memory
  included) and processes (``limits.py``); per process, ``prlimit`` caps data memory (a
  huge allocation fails with an error in the student's cell), written file size and core
  dumps, and, where no cgroup can be made, the address space. Time, output and message
  sizes are kept by the grader (``execute.py``, ``kernels.py``). On a GPU (``--device
  cuda``), PyTorch's allocator caps the kernel's GPU memory, set as the kernel starts CUDA
  (``torch.cuda.set_per_process_memory_fraction``): a guard against one kernel filling the
  GPU by mistake, not a wall, since the student's code could lift it.
* **one kernel, one submission**: every kernel is a new process with its own namespaces,
  environment and random state; a restart starts a new one.
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from . import limits as cgroups

#: The user and group the sandbox runs as, inside its user namespaces.
SANDBOX_UID = SANDBOX_GID = 1000
#: Who the sandbox is outside when the grader runs as root: ``nobody``.
UNPRIVILEGED_UID = UNPRIVILEGED_GID = 65534
#: The largest file a kernel may write.
FILE_BYTES = 256 * 2**20
#: Address space a PyTorch process reserves beyond what it uses (about 4 GiB at rest): without a
#: cgroup the address space is capped at the memory limit plus this.
ADDRESS_SPACE_SLACK = 8 * 2**30
#: A kernel's working folder, in its own ``/tmp``.
WORK_FOLDER = "/tmp/work"
#: The device nodes of a kernel's ``/dev``, as bubblewrap's ``--dev`` makes it (the GPU's are added for ``cuda``).
DEVICE_NODES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
#: The links of a kernel's ``/dev``, as bubblewrap's ``--dev`` makes them: ``{name: target}``.
DEVICE_LINKS = {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
                "stderr": "/proc/self/fd/2", "core": "/proc/kcore", "ptmx": "pts/ptmx"}
#: The parts of a kernel's ``/proc`` made read-only, as bubblewrap's ``--proc`` does.
PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus")


class SandboxUnavailable(Exception):
    """bubblewrap is missing or does not work on this machine; the message says what to do."""


@dataclass(frozen=True)
class Limits:
    """What one submission may use.

    Attributes:
        cell_seconds: wall time of one cell, and of the judging of one part.
        notebook_seconds: wall time of the notebook's cells, and again of its judging.
        memory_mb: memory of the kernel: all its processes, files in memory included.
        processes: processes and threads the kernel may run at once.
        output_bytes: text and images a notebook may print in all; more is cut off.
        threads: PyTorch CPU threads of the kernel.
        device: ``"cpu"`` (CUDA hidden from the kernel) or ``"cuda"``.
        sandbox: run the kernel under bubblewrap (``False`` only for machines without it).
        zygote: fork kernels from a warm zygote (``zygote.py``); ``False`` starts each
            kernel from scratch (slower, equally sandboxed).
        gpu_memory_mb: the kernel's memory on each GPU, for ``cuda``; ``None``: ``memory_mb``.
        added_cells: cells of the student's own read from a notebook (``notebooks.read_bounded``).
        code_kb: KiB of the student's own code taken from a notebook, answers and added cells
            in notebook order (``notebooks.assemble``).
    """

    cell_seconds: float = 120.0
    notebook_seconds: float = 600.0
    memory_mb: int = 4096
    processes: int = 256
    output_bytes: int = 2_000_000
    threads: int = 1
    device: str = "cpu"
    sandbox: bool = True
    zygote: bool = True
    gpu_memory_mb: int | None = None
    added_cells: int = 200
    code_kb: int = 256


@dataclass(frozen=True)
class Policy:
    """Everything a kernel's sandbox is, derived from :class:`Limits` and this machine (:func:`policy`).

    Attributes:
        read_only: paths bound read-only: the system, Python, the environment, the package.
        sealed: ``{path: what is mounted over it}``: the references.
        devices: device files bound in (the GPU's, for ``--device cuda``).
        environment: the kernel's whole environment.
        rlimits: ``{prlimit option: value}`` of every process (``as`` only without a cgroup).
        tmpfs_bytes: the size of the kernel's ``/tmp`` and of its ``/dev/shm``, each.
        cgroup: where the kernel's cgroup is made, or ``None`` (``cgroup_why`` says why).
        outer_uid: who the sandbox runs as outside, when the grader is root; ``None``: as the grader.
        sandbox: bubblewrap and namespaces at all (``--no-sandbox`` keeps the limits only).
        gpu_memory_bytes: what PyTorch lets the kernel allocate on each GPU, or ``None``
            where kernels see no GPU (``cpu``): nothing about CUDA is done then.
    """

    limits: Limits
    read_only: tuple[str, ...]
    sealed: dict[str, str]
    devices: tuple[str, ...]
    environment: dict[str, str]
    rlimits: dict[str, int]
    tmpfs_bytes: int
    cgroup: cgroups.Hierarchy | None
    cgroup_why: str = ""
    outer_uid: int | None = None
    sandbox: bool = True
    notes: tuple[str, ...] = field(default_factory=tuple)
    gpu_memory_bytes: int | None = None

    def zygote_request(self) -> dict:
        """Everything a forked kernel lays out in itself, as data: ``autograder/kernel/zygote.py`` computes none of it.

        Its environment, ``prlimit`` limits, the size of its ``/tmp`` and ``/dev/shm``, and
        whether the grader places it in a cgroup; the device nodes (the GPU's included) and
        links of its fresh ``/dev``; the parts of its ``/proc`` made read-only; the read-only
        paths its fresh ``/tmp`` would hide, bound back; the sealed references (its first
        kernel reports what it sees there); its working folder; its GPU memory cap.
        """
        return {"env": self.environment, "rlimits": self.rlimits, "tmpfs_bytes": self.tmpfs_bytes,
                "place": self.cgroup is not None, "devices": [*DEVICE_NODES, *self.devices],
                "device_links": dict(DEVICE_LINKS), "proc_read_only": list(PROC_READ_ONLY),
                "read_only_under_tmp": self.read_only_under_tmp(), "sealed": list(self.sealed), "work": WORK_FOLDER,
                "gpu_memory_bytes": self.gpu_memory_bytes}

    def read_only_under_tmp(self) -> list[str]:
        """The read-only paths under ``/tmp`` (a course checked out to ``/tmp/ci``: its environment, its package).

        A forked kernel's fresh ``/tmp`` would hide them: it binds them back, read-only. Only
        the outermost are listed, since a path inside another travels with it.
        """
        under = sorted(path for path in self.read_only if (path.rstrip("/") + "/").startswith("/tmp/"))
        return [path for path in under if not any(path != outer and path.startswith(outer.rstrip("/") + "/")
                                                  for outer in under)]

    def kernel_program(self, connection_file: str) -> list[str]:
        """The command of a kernel started on its own (bubblewrap, no zygote): ipykernel's launcher, run by
        ``autograder/kernel/zygote.py --kernel`` where a GPU memory cap must be set first."""
        if self.gpu_memory_bytes is None:
            return [sys.executable, "-m", "ipykernel_launcher", "-f", connection_file]
        return [sys.executable, "-m", "autograder.kernel.zygote", "--kernel", str(self.gpu_memory_bytes),
                "-f", connection_file]

    def expectations(self, folder: str) -> dict:
        """What the zygote's first kernel must report of its sandbox (``kernels.Zygote`` compares)."""
        under_tmp = {path.split("/")[2] for path in [folder, *self.read_only] if path.startswith("/tmp/")}
        return {"pid": 2, "pids": [1, 2], "CapEff": "0" * 16, "CapBnd": "0" * 16, "NoNewPrivs": "1",
                "interfaces": ["lo"], "cwd": WORK_FOLDER, "tmp": {os.path.basename(WORK_FOLDER), ".matplotlib"} | under_tmp,
                "tmp_bytes": self.tmpfs_bytes, "sealed": {path: ["__init__.py"] for path in self.sealed},
                "shadow": False if self.outer_uid is not None or os.geteuid() != 0 else None}

    def describe(self) -> list[str]:
        """The run's first lines: which limits apply here, and as whom kernels run."""
        memory = f"{self.limits.memory_mb} MiB"
        if self.cgroup is not None:
            lines = [f"limits per kernel: memory {memory} with its files in memory, {self.limits.processes} processes "
                     f"({self.cgroup.describe()})", self._describe_cpu()]
        else:
            lines = [f"limits per kernel process: data {memory}, address space {memory} + "
                     f"{ADDRESS_SPACE_SLACK // 2**30} GiB, /tmp and /dev/shm {self.tmpfs_bytes // 2**20} MiB each, "
                     f"no process limit (no cgroup: {self.cgroup_why})", self._describe_cpu()]
        lines.append(self._describe_gpu())
        if not self.sandbox:
            lines.append("sandbox OFF: kernels run as this user, see the course's files, the network and each other")
        elif self.outer_uid is not None:
            lines.append(f"kernels run as uid {self.outer_uid} (nobody): the grader runs as root")
        elif os.geteuid() == 0:
            lines.append("kernels run as root inside their sandbox: " + "; ".join(self.notes))
        return lines

    def _describe_cpu(self) -> str:
        """The run's line on CPU: each kernel's share and quota, and the clock of the training parts' time limits."""
        hierarchy = self.cgroup
        if hierarchy is not None and hierarchy.cpu is not None:
            share = (f"CPU per kernel: the same weight as every other kernel, at most {self.limits.threads} CPU(s) "
                     "however many processes it starts")
        else:
            share = "CPU per kernel: no share or quota (no cpu cgroup here); kernels share the CPUs as processes do"
        clock = ("CPU time of the kernel's cgroup" if hierarchy is not None and hierarchy.cpuacct is not None
                 else "wall-clock time (no cgroup here counts a kernel's CPU time)")
        return f"{share}; training time limits in {clock}"

    def _describe_gpu(self) -> str:
        """The run's line on GPU memory: each kernel's cap, or that kernels see no GPU."""
        if self.gpu_memory_bytes is None:
            return "GPU memory: none, kernels see no GPU (device cpu)"
        return (f"GPU memory per kernel: at most {self.gpu_memory_bytes // 2**20} MiB of each GPU (PyTorch's "
                "per-process memory fraction, set as the kernel starts CUDA; a guard its own code could lift)")

    # ---- commands

    def outer_command(self) -> list[str]:
        """What every sandboxed command starts with: ``prlimit`` and the policy's limits."""
        return ["prlimit", *(f"--{name}={value}" for name, value in self.rlimits.items()), "--"]

    def namespaces(self, zygote: bool = False) -> list[str]:
        """bubblewrap's namespace arguments.

        The grader's own user: every namespace, a user namespace included (as user 1000 for
        the zygote, whose forks make namespaces of their own), and no capability. Root:
        every namespace but the user's, so that bubblewrap, as root, can bind paths only
        root may open (a Python under ``/root``, say); the program then drops to
        ``nobody`` inside (:meth:`inner_command`).
        """
        if self.outer_uid is None:
            user = ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_GID)] if zygote else []
            return ["--unshare-all", *user, "--cap-drop", "ALL"]
        return ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]

    def inner_command(self) -> list[str]:
        """What runs first inside the sandbox: for a root grader, ``setpriv`` to ``nobody`` with no capability left."""
        if self.outer_uid is None:
            return []
        return ["setpriv", f"--reuid={self.outer_uid}", f"--regid={self.outer_uid}", "--clear-groups",
                "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]

    def bwrap_mounts(self, *bound: str) -> list[str]:
        """What every bubblewrap sandbox holds: read-only system, Python and package, sealed references, devices.

        ``bound``: the other paths the command binds (sockets and work folders), whose
        parent folders must be there too. bubblewrap as root makes the folders on the way
        to a bound path closed to others (0700): they are made open (0755) first.
        """
        command = ["--dev", "/dev", "--perms", "1777", "--size", str(self.tmpfs_bytes), "--tmpfs", "/dev/shm",
                   "--perms", "1777", "--size", str(self.tmpfs_bytes), "--tmpfs", "/tmp", "--clearenv"]
        if self.outer_uid is not None:
            for folder in _folders_on_the_way([*self.read_only, *bound]):
                command += ["--perms", "0755", "--dir", folder]
        for path in self.read_only:
            command += ["--ro-bind", path, path]
        for path, cover in self.sealed.items():
            command += ["--ro-bind", cover, path]
        for device in self.devices:
            command += ["--dev-bind", device, device]
        if self.devices:
            command += ["--ro-bind-try", "/sys", "/sys"]
        return command + [argument for key, value in self.environment.items() for argument in ("--setenv", key, value)]

    def give(self, *paths: str) -> None:
        """Let the sandbox's user own ``paths`` (folders it writes in, files it reads) when it is not the grader."""
        if self.outer_uid is not None:
            for path in paths:
                os.chown(path, self.outer_uid, self.outer_uid)


def _folders_on_the_way(paths: list[str]) -> list[str]:
    """The folders that lead to ``paths`` and are not themselves bound (nor under a bound path), shallowest first."""
    bound = {os.path.normpath(path) for path in paths}
    folders = set()
    for path in bound:
        parent = os.path.dirname(path)
        while parent not in ("/", "") and not any(parent == b or parent.startswith(b + "/") for b in bound):
            folders.add(parent)
            parent = os.path.dirname(parent)
    return sorted(folders, key=lambda folder: (folder.count("/"), folder))


def bwrap_command(policy: Policy, kernel_command: list[str], sockets: str) -> list[str]:
    """``kernel_command`` in a bubblewrap sandbox of its own, under the policy's user and limits.

    Its working folder ``/tmp/work`` is made in its ``/tmp``, memory of a fixed size as a
    forked kernel's (``zygote.py``): nothing the kernel writes reaches the grader's disk.
    """
    if not policy.sandbox:
        return policy.outer_command() + _env(policy) + kernel_command
    command = ["bwrap", *policy.namespaces(), "--die-with-parent", "--new-session", "--proc", "/proc",
               *policy.bwrap_mounts(sockets), "--bind", sockets, sockets, "--perms", "1777", "--dir", WORK_FOLDER,
               "--chdir", WORK_FOLDER]
    return policy.outer_command() + command + policy.inner_command() + kernel_command


def zygote_command(policy: Policy, program: list[str], folder: str) -> list[str]:
    """The zygote of ``zygote.py`` (``program``): the policy's sandbox and limits, minus the student.

    Differences from :func:`bwrap_command`, all needed for the zygote's forks to sandbox
    themselves (each kernel then gets a fresh ``/tmp``, ``/dev`` and ``/proc``, its own
    namespaces, and only its own sockets folder, see ``zygote.py``):

    * a user namespace of its own for a grader that is not root (``--unshare-user``, as
      user 1000), in which a fork may create the kernel's nested namespaces; as ``nobody``
      (a root grader) a fork may create them anyway;
    * the grader's ``/proc`` instead of a new one: Linux mounts a new ``/proc`` in a nested
      namespace only where an uncovered one is visible, and bubblewrap's covers parts of
      it. No kernel ever sees it: each mounts its own over it;
    * the root read-only (bubblewrap leaves it writable, and it would be shared);
    * ``folder``, which holds the zygote's socket and every kernel's sockets folder.

    The zygote serves every student, and knows none of them.
    """
    if not policy.sandbox:
        return policy.outer_command() + _env(policy, zygote=True) + program + ["--no-namespaces", "--parent",
                                                                                 str(os.getpid())]
    command = ["bwrap", *policy.namespaces(zygote=True), "--die-with-parent", "--new-session", "--bind", "/proc",
               "/proc", *policy.bwrap_mounts(folder), "--setenv", "MPLBACKEND", _INLINE, "--bind", folder, folder,
               "--remount-ro", "/", "--chdir", "/"]
    return policy.outer_command() + command + policy.inner_command() + program


#: What ipykernel sets as matplotlib's backend, set in the zygote before matplotlib loads.
_INLINE = "module://matplotlib_inline.backend_inline"


def _env(policy: Policy, zygote: bool = False) -> list[str]:
    """``env -i`` with the policy's environment (a kernel without bubblewrap)."""
    environment = {**policy.environment, **({"MPLBACKEND": _INLINE} if zygote else {})}
    return ["env", "-i", *(f"{key}={value}" for key, value in environment.items())]


# --------------------------------------------------------------------------------------
# The policy of this machine
# --------------------------------------------------------------------------------------


@functools.cache
def policy(limits: Limits) -> Policy:
    """The sandbox of kernels graded under ``limits`` on this machine."""
    hierarchy = cgroups.available()
    cgroup = hierarchy if isinstance(hierarchy, cgroups.Hierarchy) else None
    memory = limits.memory_mb * 2**20
    rlimits = {"data": memory, "core": 0, "fsize": FILE_BYTES}
    if cgroup is None:
        rlimits["as"] = memory + ADDRESS_SPACE_SLACK
    outer_uid, notes = _outer_user(limits)
    devices = tuple(glob.glob("/dev/nvidia*")) if limits.device == "cuda" else ()
    return Policy(limits=limits, read_only=tuple(visible_paths()), sealed=sealed_paths(), devices=devices,
                  environment=kernel_environment(limits), rlimits=rlimits,
                  tmpfs_bytes=memory if cgroup is not None else max(64 * 2**20, memory // 8), cgroup=cgroup,
                  cgroup_why="" if cgroup is not None else str(hierarchy), outer_uid=outer_uid,
                  sandbox=limits.sandbox, notes=tuple(notes), gpu_memory_bytes=gpu_memory_bytes(limits))


def gpu_memory_bytes(limits: Limits) -> int | None:
    """What a kernel may allocate on each GPU: ``gpu_memory_mb``, else as much as its memory, for ``cuda``.

    The default is the kernel's memory because a submission's tensors are as large on the GPU
    as on the CPU (the checks run the same inputs on both), and because it is known without
    asking the GPU: nothing here may start CUDA, since the grading processes and the zygote
    fork. ``None`` for ``cpu``: kernels see no GPU.
    """
    if limits.device != "cuda":
        return None
    return (limits.gpu_memory_mb or limits.memory_mb) * 2**20


def _outer_user(limits: Limits) -> tuple[int | None, list[str]]:
    """``nobody`` when the grader is root (and ``setpriv`` is there to become it); else the grader's own."""
    if os.geteuid() != 0 or not limits.sandbox:
        return None, []
    if shutil.which("setpriv") is None:
        return None, ["setpriv (util-linux) is missing"]
    return UNPRIVILEGED_UID, []


@functools.cache
def check_bubblewrap(limits: Limits) -> None:
    """Raise :class:`SandboxUnavailable` unless ``bwrap`` can create a sandbox here, as the sandbox's user."""
    if shutil.which("bwrap") is None:
        raise SandboxUnavailable("bubblewrap is not installed: `apt-get install bubblewrap` (Debian/Ubuntu), "
                                 "or grade without a sandbox with --no-sandbox (unsafe)")
    sandboxed = policy(limits)
    probe = subprocess.run(["bwrap", "--ro-bind", "/", "/", *sandboxed.namespaces(), *sandboxed.inner_command(), "true"],
                           capture_output=True, text=True)
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


def sealed_paths() -> dict[str, str]:
    """``{path: what is mounted over it}``: the references, covered by a package that cannot be imported."""
    import autograder

    package = Path(autograder.__file__).resolve().parent
    return {str(package / "reference"): str(package / "kernel" / "sealed_reference")}


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
