"""Limits that hold for a whole kernel: one cgroup per kernel where this machine lets the grader make one.

Resource limits of a process (``prlimit``) hold per process and leave out shared memory
and files in memory (``/tmp``, ``/dev/shm``). A *cgroup* holds for every process of a
kernel together, all of its memory included. Each kernel gets one (:class:`KernelCgroup`)
as it starts, before any student code, with two limits:

* ``memory``: the kernel's memory, its ``tmpfs`` files and shared memory included;
* ``pids``: its processes and threads at once (a fork bomb stops there).

:func:`available` finds where this machine lets the grader make cgroups: cgroup v2 (a
``cgroup2`` hierarchy with ``memory`` and ``pids`` in the parent's ``subtree_control``, or,
for root, a new parent under the hierarchy's root) or cgroup v1 (``memory`` and ``pids``
hierarchies, as on older hosts and many containers). Where neither can be written, each
process keeps its ``prlimit`` limits only, with the address space capped too (see
``sandbox.py``), and the run's first lines say so.
"""

from __future__ import annotations

import functools
import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

#: Where cgroup hierarchies are mounted.
ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Hierarchy:
    """Where kernels' cgroups are made: ``version`` 1 or 2; ``memory`` and ``pids`` (the same folder in v2)."""

    version: int
    memory: Path
    pids: Path

    def describe(self) -> str:
        return f"cgroup v{self.version}"


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
        return Hierarchy(2, own, own)
    if os.geteuid() == 0 and {"memory", "pids"} <= set((mount / "cgroup.subtree_control").read_text().split()):
        parent = mount / "autograder"  # root's own parent: it holds no process, so it may pass controllers on
        parent.mkdir(exist_ok=True)
        try:
            (parent / "cgroup.subtree_control").write_text("+memory +pids")
            return Hierarchy(2, parent, parent)
        except OSError:
            parent.rmdir()
            raise
    return "cgroup v2: no parent cgroup passes memory and pids on to the grader's"


def _v1() -> Hierarchy | str:
    """cgroup v1: the memory and pids hierarchies."""
    own = _own_paths()
    if "memory" not in own or "pids" not in own:
        return "cgroup v1: no memory and pids hierarchies"
    return Hierarchy(1, ROOT / "memory" / own["memory"].lstrip("/"), ROOT / "pids" / own["pids"].lstrip("/"))


def _can_make(hierarchy: Hierarchy) -> bool:
    """Whether a kernel's cgroup can be made, limited and removed here (tried once)."""
    try:
        KernelCgroup(hierarchy, memory_bytes=64 * 2**20, processes=8).close()
        return True
    except OSError:
        return False


class KernelCgroup:
    """The cgroup (v2) or pair of cgroups (v1) of one kernel, limits written; :meth:`close` removes it."""

    def __init__(self, hierarchy: Hierarchy, memory_bytes: int, processes: int):
        self.hierarchy = hierarchy
        name = f"autograder-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.folders = [hierarchy.memory / name] + ([hierarchy.pids / name] if hierarchy.version == 1 else [])
        for folder in self.folders:
            folder.mkdir()
        try:
            if hierarchy.version == 2:
                self._write(self.folders[0] / "memory.max", memory_bytes)
                self._write(self.folders[0] / "memory.swap.max", 0, optional=True)
                self._write(self.folders[0] / "pids.max", processes)
            else:
                self._write(self.folders[0] / "memory.limit_in_bytes", memory_bytes)
                self._write(self.folders[0] / "memory.memsw.limit_in_bytes", memory_bytes, optional=True)
                self._write(self.folders[1] / "pids.max", processes)
        except OSError:
            self.close()
            raise

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

    def memory_peak(self) -> int | None:
        """The most memory the kernel used at once, in bytes, where the cgroup says."""
        for name in ("memory.peak", "memory.max_usage_in_bytes"):
            path = self.folders[0] / name
            if path.exists():
                return int(path.read_text())
        return None

    def out_of_memory(self) -> bool:
        """Whether the kernel hit its memory limit and a process of it was killed (known after :meth:`close` too)."""
        if self.closed:
            return self.killed_for_memory
        events = self.folders[0] / "memory.events"
        if events.exists():
            counts = dict(line.split() for line in events.read_text().splitlines())
            return int(counts.get("oom_kill", 0)) > 0 or int(counts.get("max", 0)) > 0
        control = self.folders[0] / "memory.oom_control"  # v1
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
