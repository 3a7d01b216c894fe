"""The grader's side of a student's kernel: start it in its sandbox, hold it, end it.

Kernels start the way jupyter_client starts any kernel, through its documented seams:
a kernel spec (:class:`CourseKernelSpecs`) names a *kernel provisioner*, registered as an
entry point of the package (``pyproject.toml``), which launches the kernel:

* :class:`ZygoteProvisioner` asks this process's zygote (``autograder/kernel/zygote.py``) for a fork: a
  kernel ready in a tenth of a second, in namespaces of its own;
* :class:`BubblewrapProvisioner` starts ``python -m ipykernel_launcher`` in a bubblewrap
  sandbox of its own, where no zygote can run.

Either way the kernel gets its cgroup (``limits.py``) before it runs anything, its sockets
folder is sealed read-only once it has bound its sockets (zygote kernels), and the client
that talks to it refuses messages larger than :data:`MESSAGE_BYTES`. Everything about the
sandbox itself comes from one :class:`~autograder.grading.sandbox.Policy`.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

import zmq
import zmq.asyncio
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.channels import AsyncZMQSocketChannel
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from jupyter_client.provisioning import LocalProvisioner
from traitlets import Any, DottedObjectName, Type, Unicode

from ..kernel.zygote import read_line
from . import sandbox
from .limits import KernelCgroup
from .sandbox import Limits

#: The largest message the grader reads from a kernel; a larger one drops the connection before
#: it is read (``zmq.MAXMSGSIZE``), so an output flood or a huge reply never fills the grader's memory.
MESSAGE_BYTES = 64 * 2**20
#: The most messages the grader's socket for one of a kernel's channels queues unread (``zmq.RCVHWM``);
#: with :data:`MESSAGE_BYTES`, what it holds of a kernel is bounded (``SandboxedKernelManager.client``).
QUEUED_MESSAGES = 4
#: The kernel spec names of the two ways to start a kernel.
ZYGOTE_KERNEL, BUBBLEWRAP_KERNEL = "autograder-zygote", "autograder-bubblewrap"


class ZygoteUnavailable(Exception):
    """A zygote could not be started here; the message says why."""


# --------------------------------------------------------------------------------------
# A forked kernel, held by the grader
# --------------------------------------------------------------------------------------


class KernelHandle:
    """A forked kernel, seen from the grader: what ``subprocess.Popen`` offers jupyter_client.

    The connection to the kernel's C process (see ``zygote.py``) is the handle: C reports
    the kernel's exit on it, passes signals on, seals the kernel's sockets folder when
    asked, and kills the kernel's whole sandbox when the connection is closed. The
    kernel's cgroup, if any, is removed once the kernel is gone.
    """

    stdin = stdout = stderr = None

    def __init__(self, connection: socket.socket, pid: int, report: dict | None = None,
                 cgroup: KernelCgroup | None = None):
        self.connection, self.pid, self.report, self.cgroup = connection, pid, report, cgroup
        self.returncode: int | None = None
        self.sealed: bool | None = None
        self._pending = b""

    def _read(self, timeout: float | None) -> None:
        if self.returncode is not None:
            return
        ready = select.select([self.connection], [], [], timeout)[0]
        if not ready:
            return
        try:
            data = self.connection.recv(4096)
        except OSError:
            data = b""
        if not data:
            self._ended(self.returncode if self.returncode is not None else -signal.SIGKILL)
            return
        self._pending += data
        while b"\n" in self._pending:
            line, self._pending = self._pending.split(b"\n", 1)
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict) and "exit" in message:
                self._ended(int(message["exit"]))
            elif isinstance(message, dict) and "sealed" in message:
                self.sealed = bool(message["sealed"])

    def _ended(self, code: int) -> None:
        self.returncode = code
        if self.cgroup is not None:
            self.cgroup.close()

    def poll(self) -> int | None:
        while self.returncode is None and select.select([self.connection], [], [], 0)[0]:
            self._read(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired("kernel", timeout)
            self._read(left)
        self.connection.close()
        return self.returncode

    def seal(self, timeout: float = 10) -> bool:
        """Have the kernel's sockets folder made read-only (its sockets are bound by now); whether it was."""
        try:
            self.connection.sendall(b"seal\n")
        except OSError:
            return False
        deadline = time.monotonic() + timeout
        while self.sealed is None and self.returncode is None and time.monotonic() < deadline:
            self._read(deadline - time.monotonic())
        return bool(self.sealed)

    def send_signal(self, number: int) -> None:
        """Signal the kernel; SIGKILL kills its whole sandbox and returns once it is gone (1 s at most)."""
        if self.poll() is not None:
            return
        try:
            self.connection.sendall(f"signal {int(number)}\n".encode())
        except OSError:
            pass
        deadline = time.monotonic() + 1
        while number == signal.SIGKILL and self.returncode is None and time.monotonic() < deadline:
            self._read(deadline - time.monotonic())

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def close(self) -> None:
        """Kill the kernel (if it still runs) and forget it."""
        self.kill()
        self.connection.close()
        if self.cgroup is not None:
            self.cgroup.close()


# --------------------------------------------------------------------------------------
# The zygote, seen from the grader
# --------------------------------------------------------------------------------------


class Zygote:
    """One zygote process, started for one set of limits, and how to ask it for kernels.

    ``Zygote(limits)`` returns once the zygote is ready; with ``wait=False``, as soon as its
    process is started, and :meth:`wait_ready` waits for the rest (its imports, its probe).
    """

    def __init__(self, limits: Limits, *, wait: bool = True):
        import shutil

        self.limits, self.owner, self.policy = limits, os.getpid(), sandbox.policy(limits)
        _sweep(tempfile.gettempdir())
        self.folder = tempfile.mkdtemp(prefix="autograder-zygote-")
        self.policy.give(self.folder)
        self.path = os.path.join(self.folder, "zygote.sock")
        self.log = os.path.join(self.folder, "zygote.log")
        program = [sys.executable, "-m", "autograder.kernel.zygote", self.path]
        command = sandbox.zygote_command(self.policy, program, self.folder)
        try:
            with open(self.log, "wb") as log:
                self.process = _spawn(lambda: subprocess.Popen(command, stdin=subprocess.DEVNULL,
                                                               stdout=subprocess.PIPE, stderr=log, close_fds=True))
        except BaseException:
            shutil.rmtree(self.folder, ignore_errors=True)  # nothing started: leave nothing behind
            raise
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        """Wait until the zygote says it is ready, then check what its first kernel sees; stop it if either fails."""
        import shutil

        try:
            line = read_line(self.process.stdout.fileno(), time.monotonic() + 300)
            if line.strip() != b"ready":
                raise ZygoteUnavailable(f"it exited while starting: {self._log_tail()}")
            self.process.stdout.close()
            self.probe = self.launch(None, op="probe")
            self.probe.wait()
            shutil.rmtree(self.probe.sockets, ignore_errors=True)
            self._check_probe(self.probe.report or {})
        except BaseException:
            self.close()
            raise

    def _check_probe(self, report: dict) -> None:
        """The zygote's first kernel saw its sandbox as the policy says, or the zygote is not used."""
        if not self.limits.sandbox:
            return
        expected, problems = self.policy.expectations(self.folder), []
        for name in ("pid", "pids", "CapEff", "CapBnd", "NoNewPrivs", "interfaces", "cwd", "sealed"):
            if report.get(name) != expected[name]:
                problems.append(f"{name} is {report.get(name)!r}, not {expected[name]!r}")
        if not set(report.get("tmp", ["?"])) <= expected["tmp"]:
            problems.append(f"/tmp is not fresh: {report.get('tmp')}")
        if not 0 < report.get("tmp_bytes", 0) <= expected["tmp_bytes"]:
            problems.append(f"/tmp holds {report.get('tmp_bytes')} bytes, not at most {expected['tmp_bytes']}")
        if report.get("sockets") != [report.get("own")]:
            problems.append(f"other kernels' sockets are visible: {report.get('sockets')}")
        if expected["shadow"] is not None and report.get("shadow") != expected["shadow"]:
            problems.append("/etc/shadow is readable: the sandbox runs as root")
        if problems:
            raise ZygoteUnavailable("its first kernel was not sandboxed as it must be: " + "; ".join(problems))

    def _log_tail(self) -> str:
        try:
            with open(self.log, "rb") as handle:
                lines = handle.read().decode(errors="replace").strip().splitlines()
            return lines[-1] if lines else "(no message)"
        except OSError:
            return "(no log)"

    def alive(self) -> bool:
        if self.owner == os.getpid():
            return self.process.poll() is None
        try:  # the zygote of the process this one was forked from
            os.kill(self.process.pid, 0)
            return True
        except ProcessLookupError:
            return False

    def request(self, message: dict, timeout: float = 120, cgroup: KernelCgroup | None = None
                ) -> tuple[socket.socket, dict]:
        """Send ``message`` on a new connection; the connection and the first answer.

        With a ``cgroup``, the forked process that will become the kernel is put in it
        first: it says so, Linux tells the grader its process id (``SO_PASSCRED``), and it
        goes on once placed.
        """
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.connect(self.path)
            if cgroup is not None:
                connection.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            connection.sendall(json.dumps(message).encode() + b"\n")
            if cgroup is not None:
                cgroup.add(_sender_pid(connection, time.monotonic() + timeout))
                connection.sendall(b"placed\n")
            line = read_line(connection, time.monotonic() + timeout)
            if not line:
                raise ZygoteUnavailable(f"the zygote did not answer: {self._log_tail()}")
            return connection, json.loads(line)
        except BaseException:
            connection.close()
            raise

    def launch(self, connection_file: str | None, limits: Limits | None = None, work: str | None = None,
               op: str = "launch") -> KernelHandle:
        """Fork a kernel on ``connection_file`` (its folder holds the kernel's sockets).

        ``limits`` are this submission's; ``work`` is the working folder of a kernel without
        namespaces. ``op="probe"`` forks a kernel that only reports what it sees of its sandbox.
        """
        policy = sandbox.policy(limits or self.limits)
        sockets = os.path.dirname(connection_file) if connection_file else tempfile.mkdtemp(dir=self.folder,
                                                                                            prefix="probe-")
        policy.give(sockets, *([connection_file] if connection_file else []))
        cgroup = None
        if policy.cgroup is not None:
            cgroup = KernelCgroup(policy.cgroup, policy.limits.memory_mb * 2**20, policy.limits.processes,
                                  policy.limits.threads)
        message = {"op": op, "connection_file": connection_file, "sockets": sockets, "cwd": work or sockets,
                   **policy.zygote_request()}
        try:
            connection, answer = self.request(message, cgroup=cgroup)
        except BaseException:
            if cgroup is not None:
                cgroup.close()
            raise
        if not answer.get("ok"):
            connection.close()
            if cgroup is not None:
                cgroup.close()
            if op == "probe":
                raise ZygoteUnavailable(f"the zygote could not start a kernel: {answer.get('error')}")
            raise RuntimeError(f"the grading kernel could not be started: {answer.get('error')}")
        handle = KernelHandle(connection, answer["pid"], answer.get("report"), cgroup)
        handle.sockets = sockets
        return handle

    def close(self) -> None:
        """Stop the zygote (if this process started it) and its kernels."""
        import shutil

        if self.owner != os.getpid():
            return
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self.process.stdout and not self.process.stdout.closed:
            self.process.stdout.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def _sender_pid(connection: socket.socket, deadline: float) -> int:
    """The process id, in this process's namespace, of whoever sent the next line on ``connection``."""
    size = struct.calcsize("3i")
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([connection], [], [], left)[0]:
            raise ZygoteUnavailable("the zygote's kernel did not ask to be placed in its cgroup")
        data, ancillary, _, _ = connection.recvmsg(64, socket.CMSG_SPACE(size))
        if not data:
            raise ZygoteUnavailable("the zygote's kernel went away before it was placed in its cgroup")
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                pid, _, _ = struct.unpack("3i", payload[:size])
                return pid


def _sweep(folder: str) -> None:
    """Remove the folders of zygotes that are gone (a grading process killed outright leaves them).

    A zygote is gone when its socket, bound more than a minute ago, refuses connections.
    """
    import glob
    import shutil

    ours = {os.getuid(), sandbox.UNPRIVILEGED_UID if os.getuid() == 0 else os.getuid()}
    for path in glob.glob(os.path.join(folder, "autograder-zygote-*", "zygote.sock")):
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if os.stat(path).st_mtime > time.time() - 60 or os.stat(path).st_uid not in ours:
                continue
            probe.connect(path)
        except ConnectionRefusedError:
            shutil.rmtree(os.path.dirname(path), ignore_errors=True)
        except OSError:
            pass
        finally:
            probe.close()


# --------------------------------------------------------------------------------------
# One zygote per grading process (and per set of limits)
# --------------------------------------------------------------------------------------


def key(limits: Limits) -> tuple:
    """Kernels of one zygote share its sandbox, thread settings, device and memory limit."""
    return (limits.sandbox, limits.threads, limits.device, limits.memory_mb)


_lock = threading.Lock()
_zygotes: dict[tuple, Zygote] = {}
_failed: dict[tuple, str] = {}
_spawned: dict[tuple, Zygote] = {}  # started by :func:`spawn`, not yet waited for


def _after_fork() -> None:
    global _lock
    _lock = threading.Lock()  # another thread may have held it at the fork
    _spawned.clear()  # the parent's to wait for, not this process's


os.register_at_fork(after_in_child=_after_fork)


def _wanted(limits: Limits) -> bool:
    """Whether kernels for ``limits`` are forked from a zygote at all."""
    return os.environ.get("AUTOGRADER_ZYGOTE", "1") != "0" and limits.zygote and sys.platform.startswith("linux")


def for_limits(limits: Limits) -> Zygote | None:
    """The zygote for ``limits``, or ``None`` to start kernels the old way.

    A process uses the zygote it started (on first use, or the one :func:`spawn` started)
    or the one its parent had when it was forked (see :func:`prestart`).
    """
    if not _wanted(limits):
        return None
    with _lock:
        wanted = key(limits)
        zygote = _zygotes.get(wanted)
        if zygote is not None and zygote.alive():
            return zygote
        if zygote is not None:
            zygote.close()
            del _zygotes[wanted]
        if wanted in _failed:
            return None
        try:
            zygote = _spawned.pop(wanted, None) or Zygote(limits, wait=False)
            zygote.wait_ready()
        except (ZygoteUnavailable, OSError, ValueError) as error:
            _failed[wanted] = str(error)
            print(f"autograder: no kernel zygote ({error}); each kernel starts in its own bubblewrap sandbox "
                  "instead (slower, as safe)", file=sys.stderr, flush=True)
            return None
        if not any(z.owner == os.getpid() for z in _zygotes.values()):
            import multiprocessing.util  # a pool's worker ends without atexit: stop them then too

            multiprocessing.util.Finalize(None, stop_all, exitpriority=0)
        _zygotes[wanted] = zygote
        return zygote


def prestart(limits: Limits) -> None:
    """Start the zygote for ``limits`` now, in this process, to be shared by the processes forked from it.

    Call it before starting a pool of grading processes (``fork``): they then fork their
    kernels from one zygote, instead of each starting (and holding in memory) its own.
    The zygote lives as long as this process. Without it each grading process starts
    its own zygote on its first kernel.
    """
    for_limits(limits)


def spawn(limits: Limits | None) -> None:
    """Start the zygote for ``limits`` without waiting for it: :func:`prestart` (or the first kernel) waits.

    The zygote spends seconds importing PyTorch in a process of its own: this process goes
    on with its own start meanwhile. Zygotes spawned for other limits (or any, for ``None``:
    no zygote needed) and not yet waited for are stopped. Nothing is started where
    :func:`for_limits` would start none, or has one; a zygote that cannot even be started
    here is left to it, to try again and say why.
    """
    with _lock:
        wanted = None if limits is None else key(limits)
        for other in [other for other in _spawned if other != wanted]:
            _spawned.pop(other).close()
        if limits is None or not _wanted(limits) or wanted in _zygotes or wanted in _spawned or wanted in _failed:
            return
        try:
            _spawned[wanted] = Zygote(limits, wait=False)
        except (OSError, ValueError):
            return


@atexit.register
def stop_all() -> None:
    """Stop the zygotes this process started (they would die with it anyway, see ``zygote_command``)."""
    with _lock:
        for started in (_zygotes, _spawned):
            for wanted, zygote in list(started.items()):
                if zygote.owner == os.getpid():
                    zygote.close()
                    del started[wanted]


_spawner = None
_spawner_owner = None


def _spawn(start):
    """Run ``start()`` (a Popen) in a thread that lives as long as this process.

    bubblewrap's ``--die-with-parent`` ties the zygote to the *thread* that started it;
    a thread of its own keeps it alive however grading threads come and go.
    """
    global _spawner, _spawner_owner
    from concurrent.futures import ThreadPoolExecutor

    if _spawner is None or _spawner_owner != os.getpid():
        _spawner, _spawner_owner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="zygote-spawner"), os.getpid()
    return _spawner.submit(start).result()


# --------------------------------------------------------------------------------------
# jupyter_client's seams: a kernel spec, two provisioners, a manager and a client
# --------------------------------------------------------------------------------------


class CourseKernelSpecs(KernelSpecManager):
    """The course's two kernel specs: the grader's own Python, started by one of the provisioners below."""

    def get_kernel_spec(self, kernel_name: str, **kwargs) -> KernelSpec:
        if kernel_name not in (ZYGOTE_KERNEL, BUBBLEWRAP_KERNEL):
            return super().get_kernel_spec(kernel_name, **kwargs)
        return KernelSpec(argv=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                          display_name=f"Python 3 ({kernel_name})", language="python",
                          metadata={"kernel_provisioner": {"provisioner_name": kernel_name}})


class ZygoteProvisioner(LocalProvisioner):
    """Starts the kernel by asking this process's zygote for a fork instead of ``Popen``.

    The fork's handle (:class:`KernelHandle`) stands in for the process, so jupyter_client's
    polling, signals, kill and wait, and with them nbclient's detection of a dead kernel and
    the restarts of ``execute.py``, work as for any kernel.
    """

    async def launch_kernel(self, cmd: list[str], **kwargs):
        manager = self.parent
        self.process = manager.zygote.launch(manager.connection_file, manager.limits, work=manager.work)
        self.pid, self.pgid = self.process.pid, None  # signals go through the handle
        self.cwd = sandbox.WORK_FOLDER
        return self.connection_info


class BubblewrapProvisioner(LocalProvisioner):
    """Starts ``python -m ipykernel_launcher`` in a bubblewrap sandbox of its own, in its own cgroup."""

    cgroup: KernelCgroup | None = None

    async def pre_launch(self, **kwargs):
        kwargs = await super().pre_launch(**kwargs)
        manager = self.parent
        policy = sandbox.policy(manager.limits)
        sockets = os.path.dirname(manager.connection_file)
        policy.give(sockets, manager.connection_file)
        command = sandbox.bwrap_command(policy, policy.kernel_program(manager.connection_file), sockets)
        if policy.cgroup is not None:  # the command puts itself in the cgroup, then becomes the sandbox
            self.cgroup = KernelCgroup(policy.cgroup, policy.limits.memory_mb * 2**20, policy.limits.processes,
                                       policy.limits.threads)
            place = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 1; shift; done; shift; exec "$@"'
            command = ["sh", "-c", place, "sh", *self.cgroup.procs_files, "--", *command]
        kwargs["cmd"] = command
        return kwargs

    async def cleanup(self, restart: bool = False) -> None:
        await super().cleanup(restart)
        if self.cgroup is not None:
            self.cgroup.close()


class SandboxedKernelManager(AsyncKernelManager):
    """A kernel manager of sandboxed kernels: forked from ``zygote`` when there is one, else bubblewrapped.

    Attributes:
        limits: the submission's limits; zygote: the zygote to fork from, or ``None``;
        work: the working folder of a forked kernel without namespaces (``--no-sandbox``); a
            sandboxed kernel works in ``/tmp/work`` of its own memory-backed ``/tmp``.
    """

    limits = Any(Limits())
    zygote = Any(None, allow_none=True)
    work = Unicode("/tmp")
    client_class = DottedObjectName("autograder.grading.kernels.QuickKernelClient")
    client_factory = Type("autograder.grading.kernels.QuickKernelClient",
                          klass="jupyter_client.asynchronous.AsyncKernelClient")

    def __init__(self, **kwargs):
        zygote = kwargs.get("zygote")
        super().__init__(kernel_name=ZYGOTE_KERNEL if zygote is not None else BUBBLEWRAP_KERNEL,
                         kernel_spec_manager=CourseKernelSpecs(), **kwargs)

    def client(self, **kwargs):
        """A client whose sockets refuse messages over :data:`MESSAGE_BYTES` from the kernel and queue at most
        :data:`QUEUED_MESSAGES` of them unread.

        What the grader holds of one kernel's messages is then bounded: per socket (shell,
        IOPub, stdin, control), ``QUEUED_MESSAGES`` messages queued plus the one being read,
        each frame at most ``MESSAGE_BYTES``: 4 x 5 x 64 MiB = 1.25 GiB at the very worst, a
        few frames in practice, since IOPub is read as it comes, by nbclient while cells run
        and by ``execute.KernelSession._exchange`` (read and dropped) while answers are judged. A kernel that sends faster than the grader
        reads is held back in its own memory (its cgroup's): past the high-water mark the
        grader stops reading its socket, and IOPub drops what its sender cannot queue.
        (``MAXMSGSIZE`` caps each frame; a message of many frames is not capped by it,
        only by the kernel's own memory to build it.)
        """
        context = zmq.asyncio.Context()
        context.setsockopt(zmq.MAXMSGSIZE, MESSAGE_BYTES)
        context.setsockopt(zmq.RCVHWM, QUEUED_MESSAGES)
        return super().client(context=context, **kwargs)

    def handle(self) -> KernelHandle | None:
        """The forked kernel's handle (``None`` for a bubblewrapped one)."""
        process = getattr(self.provisioner, "process", None)
        return process if isinstance(process, KernelHandle) else None

    def cgroup(self) -> KernelCgroup | None:
        """The kernel's cgroup (it says, even once removed, whether the kernel ran out of memory)."""
        handle = self.handle()
        return handle.cgroup if handle is not None else getattr(self.provisioner, "cgroup", None)


#: The type of the placeholder that stands for a message a :class:`VerifiedChannel` dropped.
DROPPED = "autograder_dropped"


class VerifiedChannel(AsyncZMQSocketChannel):
    """A channel that drops what the kernel sends when it is not a signed Jupyter message.

    A kernel is the student's process: its code can sign with another key or write raw
    frames on its sockets (and a kernel of the fork-bomb submission, its process cap
    reached, once sent a message whose signature did not verify). jupyter_client raises on
    such a message, which would end the grading of the whole submission; here it becomes a placeholder message that answers no request, so nbclient
    and the judge ignore it and wait, under their deadlines, for the real answer.
    """

    async def _recv(self, **kwargs) -> dict:
        frames = await self.socket.recv_multipart(**kwargs)
        try:
            _, message = self.session.feed_identities(frames)
            return self.session.deserialize(message)
        except Exception:  # noqa: BLE001 - anything: the frames are untrusted bytes
            return {"header": {"msg_type": DROPPED, "msg_id": ""}, "msg_type": DROPPED, "msg_id": "",
                    "parent_header": {}, "metadata": {}, "content": {}, "buffers": []}


class QuickKernelClient(AsyncKernelClient):
    """jupyter_client's asynchronous client, ready 0.2 s sooner, on :class:`VerifiedChannel` channels.

    jupyter_client's ``wait_for_ready`` ends by waiting for 0.2 s of silence on IOPub,
    to drop the kernel's first status messages; a forked kernel starts in a fraction of a
    second, so that wait would be a large part of its start. It is left out: nbclient
    ignores every IOPub message that does not answer the request it is waiting on.
    """

    shell_channel_class = Type(VerifiedChannel)
    iopub_channel_class = Type(VerifiedChannel)
    stdin_channel_class = Type(VerifiedChannel)
    control_channel_class = Type(VerifiedChannel)

    async def wait_for_ready(self, timeout: float | None = None) -> None:
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
            if not await self.is_alive():
                raise RuntimeError("Kernel died before replying to kernel_info")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kernel didn't respond in {timeout:.0f} seconds")
