"""Limits that hold for a whole kernel: one cgroup per kernel where this machine lets the grader make one.

Resource limits of a process (``prlimit``) hold per process and leave out shared memory
and files in memory (``/tmp``, ``/dev/shm``). A *cgroup* holds for every process of a
kernel together, all of its memory included. Each kernel gets one (:class:`KernelCgroup`)
as it starts, before any student code, with these limits:

* ``memory``: the kernel's memory, its ``tmpfs`` files and shared memory included;
* ``pids``: its processes and threads at once (a fork bomb stops there);
* ``cpu`` (where this machine has it): every kernel the same weight, and at most as many
  CPUs as the threads it is given, however many processes or sessions it starts (the
  scheduler's autogroups give each *session* a share only outside a cgroup).

The cgroup also says how much CPU time the kernel has used (``cpuacct`` in v1, ``cpu.stat``
in v2): the time limits of training parts are measured on it, from outside. And it says the
peak of the kernel's memory since a mark (``memory.max_usage_in_bytes`` in v1, restarted by
writing it; ``memory.peak`` in v2, restarted through an open descriptor since Linux 6.12): the
working memory of a memory-efficient answer is measured on it, from outside, threads and child
processes included.

:func:`available` finds where this machine lets the grader make cgroups: cgroup v2 (a
``cgroup2`` hierarchy with ``memory`` and ``pids`` in the parent's ``subtree_control``, or,
for root, a new parent under the hierarchy's root) or cgroup v1 (``memory`` and ``pids``
hierarchies, as on older hosts and many containers); ``cpu`` and ``cpuacct`` are used
where they are there too, and left out where they are not. Where neither can be written, each
process keeps its ``prlimit`` limits only, with the address space capped too (see
``sandbox.py``), and the run's first lines say so.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import signal
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

#: The period of the CPU quota, in microseconds (the kernel's default).
CPU_PERIOD_US = 100_000


@dataclass(frozen=True)
class Hierarchy:
    """Where kernels' cgroups are made: ``version`` 1 or 2; ``memory`` and ``pids`` (the same folder in v2);
    ``cpu`` (weight and quota) and ``cpuacct`` (CPU time used; in v2 every cgroup's ``cpu.stat``) or ``None``."""

    version: int
    memory: Path
    pids: Path
    cpu: Path | None = None
    cpuacct: Path | None = None

    def describe(self) -> str:
        return f"cgroup v{self.version}"

    def without_cpu(self) -> "Hierarchy":
        """The same hierarchy with no CPU limit, where a kernel's ``cpu`` cgroup cannot be made (in v1 without
        ``cpuacct`` either, a hierarchy of its own too; in v2 ``cpu.stat`` needs no controller)."""
        return dataclasses.replace(self, cpu=None, cpuacct=self.cpuacct if self.version == 2 else None)


@functools.cache
def available() -> Hierarchy | str:
    """The hierarchy kernels' cgroups are made in, or why there is none (a sentence)."""
    reasons = []
    for find in (_v2, _v1):
        try:
            found = find()
        except OSError as error:
            reasons.append(f"{find.__doc__.split(':')[0]}: {error.strerror or error}")
            continue
        if isinstance(found, Hierarchy) and found.cpu is not None and not _can_make(found):
            found = found.without_cpu()
        if isinstance(found, Hierarchy) and _can_make(found):
            return found
        reasons.append(found if isinstance(found, str) else f"{found.describe()} cannot be written here")
    return "; ".join(reasons)


def _own_paths() -> dict[str, str]:
    """``{controller or "": path}`` of this process's cgroups, from ``/proc/self/cgroup``."""
    paths = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            paths[controller] = path
    return paths


def _v2() -> Hierarchy | str:
    """cgroup v2: a parent whose children may limit memory and processes."""
    mount = next((Path(line.split()[4]) for line in Path("/proc/self/mountinfo").read_text().splitlines()
                  if " - cgroup2 " in line), None)
    if mount is None:
        return "cgroup v2: not mounted"
    own = mount / _own_paths().get("", "/").lstrip("/")
    if {"memory", "pids"} <= set((own / "cgroup.subtree_control").read_text().split()):
        return _v2_at(own)
    if os.geteuid() == 0 and {"memory", "pids"} <= set((mount / "cgroup.subtree_control").read_text().split()):
        parent = mount / "autograder"  # root's own parent: it holds no process, so it may pass controllers on
        parent.mkdir(exist_ok=True)
        try:
            (parent / "cgroup.subtree_control").write_text("+memory +pids")
        except OSError:
            parent.rmdir()
            raise
        try:
            (parent / "cgroup.subtree_control").write_text("+cpu")
        except OSError:
            pass  # no CPU limit: the run's first lines say so
        return _v2_at(parent)
    return "cgroup v2: no parent cgroup passes memory and pids on to the grader's"


def _v2_at(parent: Path) -> Hierarchy:
    """The v2 hierarchy whose kernels' cgroups are made under ``parent`` (``cpu`` where it passes it on)."""
    cpu = parent if "cpu" in (parent / "cgroup.subtree_control").read_text().split() else None
    return Hierarchy(2, parent, parent, cpu=cpu, cpuacct=parent)


def _v1() -> Hierarchy | str:
    """cgroup v1: the memory and pids hierarchies (and cpu, cpuacct where mounted)."""
    own, mounts = _own_paths(), _v1_mounts()
    folders = {controller: mounts[controller] / own[controller].lstrip("/")
               for controller in ("memory", "pids", "cpu", "cpuacct") if controller in own and controller in mounts}
    if "memory" not in folders or "pids" not in folders:
        return "cgroup v1: no memory and pids hierarchies"
    return Hierarchy(1, folders["memory"], folders["pids"], folders.get("cpu"), folders.get("cpuacct"))


def _v1_mounts() -> dict[str, Path]:
    """``{controller: where its v1 hierarchy is mounted}`` (``cpu`` and ``cpuacct`` often share one)."""
    mounts = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields, _, after = line.partition(" - ")
        kind = after.split(" ")  # type, source, super options
        if len(kind) >= 3 and kind[0] == "cgroup":
            for controller in kind[2].split(","):
                mounts.setdefault(controller, Path(fields.split()[4]))
    return mounts


def _can_make(hierarchy: Hierarchy) -> bool:
    """Whether a kernel's cgroup can be made, limited and removed here (tried once)."""
    try:
        KernelCgroup(hierarchy, memory_bytes=64 * 2**20, processes=8, cpus=1).close()
        return True
    except OSError:
        return False


class KernelCgroup:
    """The cgroup (v2) or cgroups (v1: one per hierarchy) of one kernel, limits written; :meth:`close` removes it.

    Args:
        cpus: the CPUs the kernel may use at once (its threads): its CPU quota, where the
            hierarchy has ``cpu``; its weight is the same as every other kernel's.
    """

    def __init__(self, hierarchy: Hierarchy, memory_bytes: int, processes: int, cpus: int):
        self.hierarchy = hierarchy
        name = f"autograder-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.memory, self.pids = hierarchy.memory / name, hierarchy.pids / name
        self.cpu = hierarchy.cpu / name if hierarchy.cpu is not None else None
        self.cpuacct = hierarchy.cpuacct / name if hierarchy.cpuacct is not None else None
        self.folders = list(dict.fromkeys(f for f in (self.memory, self.pids, self.cpu, self.cpuacct) if f is not None))
        for folder in self.folders:
            folder.mkdir()
        try:
            if hierarchy.version == 2:
                self._write(self.memory / "memory.max", memory_bytes)
                self._write(self.memory / "memory.swap.max", 0, optional=True)
                self._write(self.pids / "pids.max", processes)
            else:
                self._write(self.memory / "memory.limit_in_bytes", memory_bytes)
                self._write(self.memory / "memory.memsw.limit_in_bytes", memory_bytes, optional=True)
                self._write(self.pids / "pids.max", processes)
            if self.cpu is not None:
                self._limit_cpu(cpus)
        except OSError:
            self.close()
            raise

    def _limit_cpu(self, cpus: int) -> None:
        """The default weight (the same for every kernel) and a quota of ``cpus`` CPUs per period."""
        quota = cpus * CPU_PERIOD_US
        if self.hierarchy.version == 2:
            self._write(self.cpu / "cpu.weight", 100)
            self.cpu.joinpath("cpu.max").write_text(f"{quota} {CPU_PERIOD_US}")
        else:
            self._write(self.cpu / "cpu.shares", 1024)
            self._write(self.cpu / "cpu.cfs_period_us", CPU_PERIOD_US)
            self._write(self.cpu / "cpu.cfs_quota_us", quota)

    def cpu_seconds(self) -> float | None:
        """The CPU time all the kernel's processes have used so far, in seconds; ``None`` where no cgroup says."""
        if self.cpuacct is None or self.closed:
            return None
        try:
            if self.hierarchy.version == 2:
                usage = dict(line.split() for line in (self.cpuacct / "cpu.stat").read_text().splitlines())
                return int(usage["usage_usec"]) / 1e6
            return int((self.cpuacct / "cpuacct.usage").read_text()) / 1e9
        except (OSError, KeyError, ValueError):
            return None

    def memory_mark(self) -> "MemoryMark | None":
        """Start measuring the peak of the kernel's memory from now (its processes, threads and files in memory
        together), and watching its lowest usage; ``None`` where this cgroup cannot restart its peak (cgroup v2
        before Linux 6.12, or closed)."""
        if self.closed:
            return None
        usage = self.memory / ("memory.usage_in_bytes" if self.hierarchy.version == 1 else "memory.current")
        try:
            if self.hierarchy.version == 1:
                (self.memory / "memory.max_usage_in_bytes").write_text("0")  # restarts it at the usage now
                return MemoryMark(int(usage.read_text()), usage)
            descriptor = os.open(self.memory / "memory.peak", os.O_RDWR)
        except (OSError, ValueError):
            return None
        try:
            os.write(descriptor, b"reset")  # restarts the peak read through this descriptor (Linux 6.12)
            return MemoryMark(int(usage.read_text()), usage, descriptor)
        except (OSError, ValueError):
            os.close(descriptor)
            return None

    def memory_peak(self, mark: "MemoryMark | None") -> int | None:
        """The peak of the kernel's memory since ``mark``, above the least it held meanwhile (what it held at the
        mark, or less where it let memory go during the call), in bytes; ``None`` without a mark, or where the
        cgroup is gone (the kernel died)."""
        if mark is None:
            return None
        try:
            if mark.descriptor is None:
                peak = int((self.memory / "memory.max_usage_in_bytes").read_text())
            else:
                peak = int(os.pread(mark.descriptor, 64, 0))
        except (OSError, ValueError):
            return None
        finally:
            mark.close()
        return max(0, peak - min(mark.baseline, mark.lowest))

    @staticmethod
    def _write(path: Path, value: int, optional: bool = False) -> None:
        if optional and not path.exists():
            return
        path.write_text(str(value))

    @property
    def procs_files(self) -> list[str]:
        """The files a process's pid is written to, to put it (and all it will start) in the cgroup."""
        return [str(folder / "cgroup.procs") for folder in self.folders]

    def add(self, pid: int) -> None:
        """Put process ``pid`` in the cgroup; its children will be born there."""
        for path in self.procs_files:
            Path(path).write_text(str(pid))

    def out_of_memory(self) -> bool:
        """Whether the kernel hit its memory limit and a process of it was killed (known after :meth:`close` too)."""
        if self.closed:
            return self.killed_for_memory
        events = self.memory / "memory.events"
        if events.exists():
            counts = dict(line.split() for line in events.read_text().splitlines())
            return int(counts.get("oom_kill", 0)) > 0 or int(counts.get("max", 0)) > 0
        control = self.memory / "memory.oom_control"  # v1
        if control.exists():
            counts = dict(line.split() for line in control.read_text().splitlines())
            return int(counts.get("oom_kill", 0)) > 0
        return False

    closed = False
    killed_for_memory = False

    def close(self) -> None:
        """Kill whatever is still in the cgroup, then remove it (what it knew of memory is kept)."""
        if self.closed:
            return
        try:
            self.killed_for_memory = self.out_of_memory()
        except OSError:
            pass
        self.closed = True
        for folder in self.folders:
            _empty_and_remove(folder)


class MemoryMark:
    """Where a measurement of a kernel's memory peak started: the usage then, in bytes, (cgroup v2) the open
    ``memory.peak`` whose reads count from the restart, and the lowest usage seen since.

    A call's working memory is its peak above the least the kernel held during it: memory the
    kernel held before the call and let go during it (to make room, say, for a whole score
    matrix) counts as working memory too. The lowest usage is read from outside by a thread that
    polls the cgroup every :data:`POLL_SECONDS` until :meth:`close`.
    """

    #: How often the lowest usage is looked at: a matrix of hundreds of MiB lives far longer.
    POLL_SECONDS = 0.002

    def __init__(self, baseline: int, usage: Path, descriptor: int | None = None):
        self.baseline, self.lowest, self.usage, self.descriptor = baseline, baseline, usage, descriptor
        self._stop = threading.Event()
        self._watch = threading.Thread(target=self._poll, daemon=True, name="memory-low-watch")
        self._watch.start()

    def _poll(self) -> None:
        while not self._stop.wait(self.POLL_SECONDS):
            try:
                self.lowest = min(self.lowest, int(self.usage.read_text()))
            except (OSError, ValueError):
                return

    def close(self) -> None:
        """Stop watching; close the ``memory.peak`` descriptor."""
        self._stop.set()
        self._watch.join()
        if self.descriptor is not None:
            os.close(self.descriptor)
            self.descriptor = None


def remove_left_by(pid: int) -> int:
    """Remove the kernels' cgroups that process ``pid`` made and left (it died first), killing what runs in them.

    A kernel's cgroups are named after the process that made them (:class:`KernelCgroup`).
    Returns how many folders were found.
    """
    hierarchy = available()
    if not isinstance(hierarchy, Hierarchy):
        return 0
    parents = {hierarchy.memory, hierarchy.pids, hierarchy.cpu, hierarchy.cpuacct} - {None}
    folders = [folder for parent in parents for folder in parent.glob(f"autograder-{pid}-*")]
    for folder in folders:
        _empty_and_remove(folder)
    return len(folders)


def _empty_and_remove(folder: Path) -> None:
    """Kill every process in the cgroup ``folder``, then remove it (tried for 5 s)."""
    deadline = time.monotonic() + 5
    while folder.exists():
        try:
            pids = [int(p) for p in (folder / "cgroup.procs").read_text().split()]
        except OSError:
            pids = []
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            folder.rmdir()
        except OSError:
            if time.monotonic() > deadline:
                break  # left for the machine to clean; it holds no process we could kill
            time.sleep(0.02)
