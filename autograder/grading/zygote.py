"""Warm kernels: each submission's kernel is forked, already sandboxed, from a zygote.

Starting a Python kernel and importing PyTorch costs about two seconds, more than most
notebooks take to grade. So each grading process starts one *zygote* (lazily, on its
first kernel, or once for a pool of processes with :func:`prestart`): a Python process
inside a bubblewrap sandbox (``sandbox.zygote_command``) that imports once what every
kernel needs (PyTorch and ``torch._dynamo``, IPython and ipykernel, matplotlib, the
course's respondent and checks) and then waits on a Unix socket. For each kernel, the grader
connects and the zygote forks; the copy sandboxes itself a second time, on its own, and
becomes the kernel, ready in about a tenth of a second.

The zygote imports nothing that depends on a submission (and no reference: they are not
even in its sandbox), and it runs no PyTorch operation (no thread pool or CUDA context
exists before a fork). It never even reads a request: it accepts a connection and forks,
and only the fork reads what the grader asks, so nothing of one submission is ever in the
memory of the zygote, hence of another submission's kernel.

Per kernel, three processes (Linux only):

* **C**, forked from the zygote, reads the request, then calls ``unshare`` for new user,
  mount, network, IPC, UTS and PID namespaces. In its mount namespace it puts a fresh
  ``/tmp`` (with the working folder ``/tmp/work``) and a fresh ``/dev`` (the usual device
  nodes, its own ``/dev/shm`` and pseudo-terminals), both ``tmpfs`` of at most the memory
  limit, hides every other kernel's sockets folder (only its own is bound back), brings up
  its own loopback, and sets the resource limits. C stays outside the new PID namespace:
  it holds the grader's connection as the kernel's handle (it reports the kernel's exit
  there, and kills the whole namespace when asked or when the grader goes away) and never
  runs student code.
* **I**, the first process of the new PID namespace, mounts a new ``/proc`` that shows only
  this sandbox's two processes (and covers ``/proc/sys`` and friends read-only, as
  bubblewrap does), forks the kernel, drops every capability and waits: when the kernel
  exits, I exits, which kills whatever the kernel left behind. (The kernel is not PID 1
  itself, so that, as under bubblewrap, ``os.kill(os.getpid(), SIGKILL)`` kills it.)
* **K**, the kernel: a new session, every capability dropped (bounding set included;
  ``no_new_privs`` stays set), the environment cleared to exactly what
  ``sandbox.kernel_environment`` says, standard streams
  on ``/dev/null``, fresh random seeds, then ``IPKernelApp`` on the connection file, as
  ``python -m ipykernel_launcher`` would.

Together with the zygote's own sandbox (read-only system, Python and ``autograder``; no
course directory; ``prlimit`` limits), a kernel gets everything ``sandbox.py``'s docstring
promises, and one kernel serves one submission only: a restart forks a new one. What
forked kernels do share with the zygote is what a fork shares: its address-space layout
and Python's string-hash seed (nothing secret: the zygote holds no submission's data).
Every process of a kernel's sandbox dies with its parent (C with the zygote, the zygote
with bubblewrap's init, or with the grading process for ``--no-sandbox``).

``--no-sandbox`` (``Limits.sandbox`` false) forks from a zygote too, started with
``prlimit`` and a cleared environment but no bubblewrap and no namespaces; C and I then
only set limits and wait, and the kernel runs in the grader's working folder for it.

If a zygote cannot start or fails its first probe (no user namespaces, say), the grader
says so in one line on stderr and starts each kernel in its own bubblewrap sandbox as
before (``sandbox.SandboxedKernelManager``): slower, never less sandboxed. Setting
``AUTOGRADER_ZYGOTE=0`` (or ``Limits.zygote`` false) chooses that path outright.

This module is also the zygote's program (``python -m autograder.grading.zygote SOCKET``),
so at module level it imports the standard library only.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import select
import signal
import socket
import sys
import threading
import time

#: The user and group the sandbox runs as (inside its user namespaces).
SANDBOX_UID = SANDBOX_GID = 1000
#: What the zygote imports before forking: what every kernel imports, nothing that
#: depends on a submission. ``matplotlib_inline`` is left out on purpose: importing it
#: inside a kernel is what hooks inline figures into IPython. ``torch._dynamo`` (with
#: sympy) is what the checks' replay on the ``meta`` device imports: a second or two;
#: ``ipykernel.debugger`` (debugpy) and the rest, what a kernel imports as it starts.
PRELOAD = ("torch", "torch.nn", "torch.nn.functional", "torch.testing", "numpy", "matplotlib.pyplot",
           "matplotlib.backends.backend_agg", "IPython", "ipykernel.kernelapp", "ipykernel.ipkernel",
           "ipykernel.zmqshell", "ipykernel.debugger", "IPython.core.debugger", "IPython.core.completerlib",
           "IPython.extensions.storemagic", "sqlite3", "jupyter_client.session", "autograder.respond", "autograder.plots",
           "torch._dynamo")
#: Left out of a zygote for ``--device cuda``: they load GPU libraries, and CUDA must
#: not be touched before a fork.
NOT_WITH_CUDA = ("torch._dynamo",)
#: Modules the zygote must never import (the sandbox seals them; importing one would fail).
FORBIDDEN = ("autograder.reference",)
#: Device nodes of a kernel's ``/dev``, as bubblewrap's ``--dev`` makes it.
DEVICE_NODES = ("null", "zero", "full", "random", "urandom", "tty")
#: Parts of ``/proc`` made read-only, as bubblewrap's ``--proc`` does.
PROC_COVERED = ("sys", "sysrq-trigger", "irq", "bus")
#: The largest file a kernel may write (``prlimit --fsize``).
FILE_BYTES = 256 * 2**20
#: Signals a kernel's init process passes on to the kernel.
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)

_CLONE_NEWNS, _CLONE_NEWUTS, _CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
_CLONE_NEWUSER, _CLONE_NEWPID, _CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18
_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_CAPBSET_DROP = 1, 4, 24
_PR_SET_NO_NEW_PRIVS, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 38, 47, 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1
_SYS_OPEN_TREE, _SYS_MOVE_MOUNT = 428, 429  # the same number on every architecture (Linux >= 5.2)
_AT_FDCWD, _OPEN_TREE_CLONE, _MOVE_MOUNT_F_EMPTY_PATH, _AT_RECURSIVE = -100, 1, 4, 0x8000


# --------------------------------------------------------------------------------------
# Linux system calls (Python 3.11 has no os.unshare or os.mount)
# --------------------------------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


def _unshare(flags: int) -> None:
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    encode = lambda text: None if text is None else text.encode()  # noqa: E731
    result = _libc.mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(data))
    _check(result, f"mount {fstype or source} on {target}")


def _detach(path: str) -> int:
    """A copy of the mount at ``path`` and the mounts under it, not attached anywhere yet (``open_tree``)."""
    descriptor = _libc.syscall(ctypes.c_long(_SYS_OPEN_TREE), ctypes.c_int(_AT_FDCWD), path.encode(),
                               ctypes.c_uint(_OPEN_TREE_CLONE | _AT_RECURSIVE | os.O_CLOEXEC))
    if descriptor < 0:
        _check(-1, f"open_tree {path}")
    return descriptor


def _attach(descriptor: int, target: str) -> None:
    """Mount what :func:`_detach` returned on ``target`` (``move_mount``)."""
    _check(_libc.syscall(ctypes.c_long(_SYS_MOVE_MOUNT), ctypes.c_int(descriptor), b"", ctypes.c_int(_AT_FDCWD),
                         target.encode(), ctypes.c_uint(_MOVE_MOUNT_F_EMPTY_PATH)), f"move_mount on {target}")
    os.close(descriptor)


def _die_with(parent: int) -> None:
    """Be killed when ``parent`` (this process's parent, as this process sees it) goes."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it went before the line above
        os._exit(1)


def _prctl(option: int, argument: int = 0) -> None:
    _check(_libc.prctl(ctypes.c_int(option), ctypes.c_ulong(argument), ctypes.c_ulong(0), ctypes.c_ulong(0),
                       ctypes.c_ulong(0)), f"prctl {option}")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities() -> None:
    """Drop every capability for good: bounding set, ambient set, then all three sets."""
    cap = 0
    while True:  # up to the kernel's last capability (prctl says EINVAL past it)
        if _libc.prctl(ctypes.c_int(_PR_CAPBSET_DROP), ctypes.c_ulong(cap), ctypes.c_ulong(0), ctypes.c_ulong(0),
                       ctypes.c_ulong(0)) != 0:
            if ctypes.get_errno() == 22:  # EINVAL: no such capability
                break
            _check(-1, f"dropping capability {cap} from the bounding set")
        cap += 1
    _prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL)
    header, data = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "capset")
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)


# --------------------------------------------------------------------------------------
# The zygote (runs in the sandbox)
# --------------------------------------------------------------------------------------

_namespaces = True  # False for --no-sandbox zygotes
_folder = ""  # the folder of the zygote's socket, which holds every kernel's sockets folder


def main(argv: list[str]) -> None:
    """``python -m autograder.grading.zygote SOCKET [--no-namespaces --parent PID]``.

    Under bubblewrap the zygote dies with bubblewrap's init (``--die-with-parent`` then
    ties that to the grader); without it, with ``--parent``, the grading process.
    """
    global _namespaces, _folder
    path = argv[0]
    _folder = os.path.dirname(path)
    _namespaces = "--no-namespaces" not in argv
    _die_with(int(argv[argv.index("--parent") + 1]) if "--parent" in argv else os.getppid())
    if sys.path and sys.path[0] in ("", os.getcwd()):  # as ipykernel_launcher does
        del sys.path[0]
    os.chdir("/")
    cuda = bool(os.environ.get("CUDA_VISIBLE_DEVICES"))
    for name in PRELOAD:
        if not (cuda and name in NOT_WITH_CUDA):
            __import__(name)
    torch = sys.modules["torch"]
    if torch.cuda.is_initialized() or threading.active_count() != 1 or any(
            name.startswith(FORBIDDEN) for name in sys.modules):
        raise SystemExit("the zygote's imports started CUDA, a thread or a submission's module: refusing to fork")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    print("ready", flush=True)  # to the grader, which waits for it on a pipe
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    listener.settimeout(5.0)
    while True:
        try:
            connection, _ = listener.accept()
        except socket.timeout:
            connection = None
        _reap()
        if connection is None:
            continue
        zygote = os.getpid()
        pid = os.fork()
        if pid == 0:  # C: everything from here on is about one kernel
            code = 1
            try:
                _die_with(zygote)  # a kernel never outlives its zygote
                listener.close()
                connection.settimeout(None)
                code = _serve(connection)
            except BaseException:  # noqa: BLE001 - never return into the zygote's loop
                pass
            finally:
                os._exit(code)
        connection.close()


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _send(connection: socket.socket, message: dict) -> None:
    connection.sendall(json.dumps(message).encode() + b"\n")


def _read_line(stream, deadline: float) -> bytes:
    """One line from a socket or a pipe's file descriptor, or what came before EOF."""
    data = b""
    while not data.endswith(b"\n") and len(data) < 2**20:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no answer in time")
        fileno = stream if isinstance(stream, int) else stream.fileno()
        if not select.select([fileno], [], [], left)[0]:
            continue
        chunk = os.read(stream, 65536) if isinstance(stream, int) else stream.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def _serve(connection: socket.socket) -> int:
    """In C: read the request, sandbox this process, start I and K, then watch them."""
    request = json.loads(_read_line(connection, time.monotonic() + 30) or b"{}")
    if request.get("op") == "modules":  # for the tests: what the zygote had imported
        _send(connection, {"modules": sorted(sys.modules), "threads": threading.active_count(),
                           "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd"))})
        return 0
    try:
        if os.path.dirname(os.path.normpath(request["sockets"])) != _folder:
            raise ValueError("a kernel's sockets folder must be in the zygote's folder")
        if _namespaces:
            _enter_namespaces(request)
        _set_limits(request)
        reader, writer = os.pipe()
        here = os.getpid()
        init = os.fork()
    except Exception as error:  # noqa: BLE001 - the grader falls back or reports it
        _send(connection, {"error": f"{type(error).__name__}: {error}"})
        return 1
    if init == 0:  # I
        code = 1
        try:
            _die_with(0 if _namespaces else here)  # C is outside I's PID namespace: its pid reads 0
            os.close(reader)
            connection.close()
            code = _init(writer, request)
        finally:
            os._exit(code)
    os.close(writer)
    try:
        line = _read_line(reader, time.monotonic() + 60)
        status = json.loads(line or b'{"error": "the kernel exited while starting"}')
    except (TimeoutError, ValueError) as error:
        status = {"error": f"the kernel did not start: {error}"}
    os.close(reader)
    if not status.get("ok"):
        _kill(init, signal.SIGKILL)
        os.waitpid(init, 0)
        _send(connection, {"error": status.get("error", "unknown")})
        return 1
    _send(connection, {"ok": True, "pid": init, "report": status.get("report")})
    return _watch(connection, init, status["pid"])


def _enter_namespaces(request: dict) -> None:
    """In C: new namespaces; a fresh /tmp and /dev; only this kernel's sockets folder."""
    sockets, parent = request["sockets"], os.path.dirname(request["sockets"])
    size = f"size={int(request['tmpfs_mb'])}m"
    uid, gid, zygote = os.getuid(), os.getgid(), os.getppid()
    _unshare(_CLONE_NEWUSER | _CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWIPC | _CLONE_NEWUTS | _CLONE_NEWPID)
    _die_with(zygote)  # again: new credentials may have cleared it
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as handle:
            handle.write(text)
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    _loopback_up()
    # what is bound back once /tmp and /dev are covered, taken while it is still visible
    own = _detach(sockets)
    nodes = {name: _detach(f"/dev/{name}") for name in DEVICE_NODES}
    for name in os.listdir("/dev"):
        if name.startswith("nvidia"):  # the GPU's device files (only there for --device cuda)
            nodes[name] = _detach(f"/dev/{name}")
    kept = {path: _detach(path) for path in _read_only_under_tmp()}
    _mount("tmpfs", "/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV, f"mode=0755,{size}")
    for path, descriptor in kept.items():  # a course checked out under /tmp keeps its Python and package
        os.makedirs(path, exist_ok=True)
        _attach(descriptor, path)
        _mount(None, path, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    os.mkdir("/tmp/work")
    if not (parent + "/").startswith("/tmp/"):  # the fresh /tmp did not cover the other kernels' folders
        _mount("tmpfs", parent, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=1m")
    os.makedirs(sockets, mode=0o700)
    _attach(own, sockets)
    _mount("tmpfs", "/dev", "tmpfs", _MS_NOSUID, f"mode=0755,{size}")
    for name, descriptor in nodes.items():
        os.close(os.open(f"/dev/{name}", os.O_CREAT | os.O_WRONLY, 0o666))
        _attach(descriptor, f"/dev/{name}")
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2"), ("core", "/proc/kcore"), ("ptmx", "pts/ptmx")):
        os.symlink(target, f"/dev/{name}")
    os.mkdir("/dev/shm")
    os.chmod("/dev/shm", 0o1777)
    os.mkdir("/dev/pts", 0o755)
    _mount("devpts", "/dev/pts", "devpts", _MS_NOSUID | _MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620")


def _read_only_under_tmp() -> list[str]:
    """The read-only paths of the zygote's sandbox (``sandbox.visible_paths``) that lie under ``/tmp``.

    A fresh ``/tmp`` would hide them from the kernel, e.g. the virtual environment and the
    ``autograder`` package of a course cloned to ``/tmp/ci``; they are bound back, read-only.
    """
    import autograder

    paths = {sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable)),
             os.path.dirname(os.path.realpath(autograder.__file__))}
    under = sorted(p for p in paths if (p.rstrip("/") + "/").startswith("/tmp/") and os.path.isdir(p))
    # a path inside another one travels with it
    return [p for p in under if not any(p != q and p.startswith(q.rstrip("/") + "/") for q in under)]


def _loopback_up() -> None:
    """Bring up ``lo`` in the new network namespace (bubblewrap does too); nothing else exists."""
    import fcntl
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        request = struct.pack("16sh22x", b"lo", 0)
        flags = struct.unpack("16sh22x", fcntl.ioctl(probe, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(probe, _SIOCSIFFLAGS, struct.pack("16sh22x", b"lo", flags | _IFF_UP))


def _set_limits(request: dict) -> None:
    """What ``prlimit`` sets for a per-kernel sandbox (the zygote's own limits are the same)."""
    import resource

    for limit, value in ((resource.RLIMIT_DATA, request["memory_bytes"]), (resource.RLIMIT_CORE, 0),
                         (resource.RLIMIT_FSIZE, request["file_bytes"])):
        resource.setrlimit(limit, (value, value))


def _init(writer: int, request: dict) -> int:
    """In I: a new /proc, then the kernel; wait for it, pass signals on, exit with it."""
    if _namespaces:
        _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
        for name in PROC_COVERED:
            path = f"/proc/{name}"
            if os.path.exists(path):
                _mount(path, path, None, _MS_BIND | _MS_REC)
                _mount(None, path, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    here = os.getpid()
    kernel = os.fork()
    if kernel == 0:  # K
        try:
            _die_with(here)
            _kernel(writer, request)
        except BaseException as error:  # noqa: BLE001 - report why, then go
            try:
                os.write(writer, json.dumps({"error": f"{type(error).__name__}: {error}"}).encode() + b"\n")
            finally:
                os._exit(1)
        os._exit(0)
    os.close(writer)
    if _namespaces:
        drop_capabilities()
    _prctl(_PR_SET_DUMPABLE, 0)  # the kernel may not look into this process
    for number in FORWARDED:
        signal.signal(number, lambda received, frame: _kill(kernel, received))
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return 1
        if pid == kernel:
            code = os.waitstatus_to_exitcode(status)
            return code if code >= 0 else 128 - code


def _kernel(writer: int, request: dict) -> None:
    """In K: the last steps of the sandbox, then the IPython kernel (never returns)."""
    os.setsid()
    if _namespaces:
        drop_capabilities()
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)
    os.chdir("/tmp/work" if _namespaces else request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    if "MPLCONFIGDIR" in os.environ:  # matplotlib, loaded in the zygote, made it in the zygote's /tmp
        os.makedirs(os.environ["MPLCONFIGDIR"], exist_ok=True)
    for number in range(1, signal.NSIG):  # as a freshly started Python has them
        if number in (signal.SIGKILL, signal.SIGSTOP, 32, 33):
            continue
        try:
            signal.signal(number, signal.default_int_handler if number == signal.SIGINT else
                          signal.SIG_IGN if number in (signal.SIGPIPE, signal.SIGXFSZ) else signal.SIG_DFL)
        except (OSError, ValueError):
            pass
    null = os.open("/dev/null", os.O_RDWR)
    for descriptor in (0, 1, 2):
        os.dup2(null, descriptor)
    os.close(null)
    for name in os.listdir("/proc/self/fd"):  # nothing of the zygote's but the standard streams
        descriptor = int(name)
        if descriptor > 2 and descriptor != writer:
            try:
                os.close(descriptor)
            except OSError:
                pass
    _reseed()
    if request.get("op") == "probe":
        os.write(writer, json.dumps({"ok": True, "pid": os.getpid(), "report": _report(request)}).encode() + b"\n")
        os._exit(0)
    code = 0
    try:
        import importlib.util

        from ipykernel.kernelapp import IPKernelApp

        # what `python -m ipykernel_launcher -f CONNECTION_FILE` does, in two steps: the
        # grader hears of the kernel once its sockets are bound, so it connects at once
        sys.argv = [importlib.util.find_spec("ipykernel_launcher").origin, "-f", request["connection_file"]]
        app = IPKernelApp.instance()
        app.initialize(sys.argv[1:])
        os.write(writer, json.dumps({"ok": True, "pid": os.getpid()}).encode() + b"\n")
        os.close(writer)
        app.start()
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 0
    finally:
        try:
            import atexit as _atexit

            _atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _reseed() -> None:
    """New random states: a fork would otherwise share the zygote's with every kernel."""
    import random

    random.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.seed()  # a fresh process would draw its own; forks must not share the zygote's


def _report(request: dict) -> dict:
    """What a probe kernel sees of its sandbox (checked by the grader before first use)."""
    sockets = request["sockets"]
    status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\t" in line)
    return {"pid": os.getpid(), "uid": os.getuid(), "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
            "CapEff": status.get("CapEff", "").strip(), "CapBnd": status.get("CapBnd", "").strip(),
            "NoNewPrivs": status.get("NoNewPrivs", "").strip(), "cwd": os.getcwd(),
            "tmp": sorted(os.listdir("/tmp")), "interfaces": [name for _, name in socket.if_nameindex()],
            "sockets": sorted(os.listdir(os.path.dirname(sockets))), "own": os.path.basename(sockets)}


def _watch(connection: socket.socket, init: int, kernel: int) -> int:
    """In C: pass the grader's signals on; report the kernel's end; kill it if the grader goes.

    SIGKILL to I, the first process of the kernel's PID namespace, kills everything in it.
    Without namespaces, the kernel's session is killed as well (the kernel dies with I anyway).
    """
    pidfd = os.pidfd_open(init)
    poller = select.poll()
    poller.register(connection, select.POLLIN)
    poller.register(pidfd, select.POLLIN)
    pending = b""
    while True:
        for descriptor, _ in poller.poll():
            if descriptor == pidfd:
                _, status = os.waitpid(init, 0)
                code = os.waitstatus_to_exitcode(status)
                try:
                    _send(connection, {"exit": -(code - 128) if code > 128 else code})
                except OSError:
                    pass
                return 0
            data = b""
            try:
                data = connection.recv(4096)
            except OSError:
                pass
            if not data:  # the grader is gone or done: the whole sandbox goes
                poller.unregister(connection)
                _kill_all(init, kernel)
                continue
            pending += data
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                words = line.split()
                if len(words) == 2 and words[0] == b"signal" and words[1].isdigit():
                    if int(words[1]) == signal.SIGKILL:
                        _kill_all(init, kernel)
                    else:
                        _kill(init, int(words[1]))


def _kill_all(init: int, kernel: int) -> None:
    if not _namespaces:
        try:
            os.killpg(kernel, signal.SIGKILL)
        except OSError:
            pass
    _kill(init, signal.SIGKILL)


def _kill(pid: int, number: int) -> None:
    try:
        os.kill(pid, number)
    except ProcessLookupError:
        pass


# --------------------------------------------------------------------------------------
# The grader's side
# --------------------------------------------------------------------------------------


class ZygoteUnavailable(Exception):
    """A zygote could not be started here; the message says why."""


class KernelHandle:
    """A forked kernel, seen from the grader: what ``subprocess.Popen`` offers jupyter_client.

    The connection to the kernel's C process is the handle: C reports the kernel's exit on
    it, passes signals on, and kills the kernel's whole sandbox when it is closed.
    """

    stdin = stdout = stderr = None

    def __init__(self, connection: socket.socket, pid: int, report: dict | None = None):
        self.connection, self.pid, self.report = connection, pid, report
        self.returncode: int | None = None
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
            self.returncode = self.returncode if self.returncode is not None else -signal.SIGKILL
            return
        self._pending += data
        while b"\n" in self._pending:
            line, self._pending = self._pending.split(b"\n", 1)
            try:
                self.returncode = int(json.loads(line)["exit"])
            except (ValueError, KeyError, TypeError):
                pass

    def poll(self) -> int | None:
        while self.returncode is None and select.select([self.connection], [], [], 0)[0]:
            self._read(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                import subprocess

                raise subprocess.TimeoutExpired("kernel", timeout)
            self._read(left)
        self.connection.close()
        return self.returncode

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


class Zygote:
    """One zygote process, started for one set of limits, and how to ask it for kernels."""

    def __init__(self, limits):
        import shutil
        import subprocess
        import tempfile

        from .sandbox import zygote_command

        self.limits, self.owner = limits, os.getpid()
        _sweep(tempfile.gettempdir())
        self.folder = tempfile.mkdtemp(prefix="autograder-zygote-")
        self.path = os.path.join(self.folder, "zygote.sock")
        self.log = os.path.join(self.folder, "zygote.log")
        command = zygote_command(self.path, self.folder, limits)
        try:
            with open(self.log, "wb") as log:
                self.process = _spawn(lambda: subprocess.Popen(command, stdin=subprocess.DEVNULL,
                                                               stdout=subprocess.PIPE, stderr=log, close_fds=True))
        except BaseException:
            shutil.rmtree(self.folder, ignore_errors=True)  # nothing started: leave nothing behind
            raise
        try:
            line = _read_line(self.process.stdout.fileno(), time.monotonic() + 300)
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
        if not self.limits.sandbox:
            return
        problems = []
        if report.get("CapEff") != "0000000000000000" or report.get("CapBnd") != "0000000000000000":
            problems.append(f"capabilities left: {report.get('CapEff')}/{report.get('CapBnd')}")
        if report.get("pids") != [1, 2] or report.get("pid") != 2:
            problems.append(f"processes visible: {report.get('pids')}")
        from .sandbox import visible_paths

        # besides the kernel's own: where its sockets live, and read-only paths of the course under /tmp
        expected = {"work", ".matplotlib"} | {path.split("/")[2] for path in [self.folder, *visible_paths()]
                                              if path.startswith("/tmp/")}
        if not set(report.get("tmp", ["?"])) <= expected or report.get("cwd") != "/tmp/work":
            problems.append(f"/tmp is not fresh: {report.get('tmp')}")
        if report.get("sockets") != [report.get("own")]:
            problems.append(f"other kernels' sockets are visible: {report.get('sockets')}")
        if report.get("interfaces") != ["lo"]:
            problems.append(f"network interfaces: {report.get('interfaces')}")
        if report.get("NoNewPrivs") != "1":
            problems.append("no_new_privs is not set")
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

    def request(self, message: dict, timeout: float = 120) -> tuple[socket.socket, dict]:
        """Send ``message`` on a new connection; the connection and the first answer."""
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.connect(self.path)
            connection.sendall(json.dumps(message).encode() + b"\n")
            line = _read_line(connection, time.monotonic() + timeout)
            if not line:
                raise ZygoteUnavailable(f"the zygote did not answer: {self._log_tail()}")
            return connection, json.loads(line)
        except BaseException:
            connection.close()
            raise

    def launch(self, connection_file: str | None, limits=None, work: str | None = None,
               op: str = "launch") -> KernelHandle:
        """Fork a kernel on ``connection_file`` (its folder holds the kernel's sockets).

        ``limits`` are this submission's; ``work`` is the working
        folder of a kernel without namespaces. ``op="probe"`` forks a kernel that only
        reports what it sees of its sandbox.
        """
        import tempfile

        from .sandbox import kernel_environment

        limits = limits or self.limits
        sockets = os.path.dirname(connection_file) if connection_file else tempfile.mkdtemp(dir=self.folder,
                                                                                            prefix="probe-")
        message = {"op": op, "connection_file": connection_file, "sockets": sockets, "cwd": work or sockets,
                   "env": kernel_environment(limits), "memory_bytes": limits.memory_mb * 2**20,
                   "file_bytes": FILE_BYTES, "tmpfs_mb": limits.memory_mb}
        connection, answer = self.request(message)
        if not answer.get("ok"):
            connection.close()
            if op == "probe":
                raise ZygoteUnavailable(f"the zygote could not start a kernel: {answer.get('error')}")
            raise RuntimeError(f"the grading kernel could not be started: {answer.get('error')}")
        handle = KernelHandle(connection, answer["pid"], answer.get("report"))
        handle.sockets = sockets
        return handle

    def modules(self) -> dict:
        """What the zygote has imported, its threads and open files (for the tests)."""
        connection, answer = self.request({"op": "modules"})
        connection.close()
        return answer

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


def _sweep(folder: str) -> None:
    """Remove the folders of zygotes that are gone (a grading process killed outright leaves them).

    A zygote is gone when its socket, bound more than a minute ago, refuses connections.
    """
    import glob
    import shutil

    for path in glob.glob(os.path.join(folder, "autograder-zygote-*", "zygote.sock")):
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if os.stat(path).st_mtime > time.time() - 60 or os.stat(path).st_uid != os.getuid():
                continue
            probe.connect(path)
        except ConnectionRefusedError:
            shutil.rmtree(os.path.dirname(path), ignore_errors=True)
        except OSError:
            pass
        finally:
            probe.close()


def key(limits) -> tuple:
    """Kernels of one zygote share its sandbox, thread settings, device and memory limit."""
    return (limits.sandbox, limits.threads, limits.device, limits.memory_mb)


_lock = threading.Lock()
_zygotes: dict[tuple, Zygote] = {}
_failed: dict[tuple, str] = {}


def _after_fork() -> None:
    global _lock
    _lock = threading.Lock()  # another thread may have held it at the fork


os.register_at_fork(after_in_child=_after_fork)


def for_limits(limits) -> Zygote | None:
    """The zygote for ``limits``, or ``None`` to start kernels the old way.

    A process uses the zygote it started (on first use) or the one its parent had when
    it was forked (see :func:`prestart`).
    """
    if os.environ.get("AUTOGRADER_ZYGOTE", "1") == "0" or not getattr(limits, "zygote", True) \
            or not sys.platform.startswith("linux"):
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
            zygote = Zygote(limits)
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


def prestart(limits) -> None:
    """Start the zygote for ``limits`` now, in this process, to be shared by the processes forked from it.

    Call it before starting a pool of grading processes (``fork``): they then fork their
    kernels from one zygote, instead of each starting (and holding in memory) its own.
    The zygote lives as long as this process. Without it each grading process starts
    its own zygote on its first kernel.
    """
    for_limits(limits)


@atexit.register
def stop_all() -> None:
    """Stop the zygotes this process started (they would die with it anyway, see ``zygote_command``)."""
    with _lock:
        for wanted, zygote in list(_zygotes.items()):
            if zygote.owner == os.getpid():
                zygote.close()
                del _zygotes[wanted]


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


if __name__ == "__main__":
    main(sys.argv[1:])
