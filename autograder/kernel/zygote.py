"""Warm kernels: each submission's kernel is forked, already sandboxed, from a zygote.

Starting a Python kernel and importing PyTorch costs about two seconds, more than most
notebooks take to grade. So each grading process starts one *zygote* (lazily, on its
first kernel, or once for a pool of processes with ``kernels.prestart``): a Python process
inside a bubblewrap sandbox (``grading/sandbox.zygote_command``) that imports once what every
kernel needs (PyTorch and ``torch._dynamo``, IPython and ipykernel, matplotlib, the
course's respondent and checks) and then waits on a Unix socket. For each kernel, the grader
connects and the zygote forks; the copy sandboxes itself a second time, on its own, and
becomes the kernel, ready in about a tenth of a second.

The zygote imports nothing that depends on a submission (and no reference: they are not
even in its sandbox), and it runs no PyTorch operation (no thread pool or CUDA context
exists before a fork). It never even reads a request: it accepts a connection and forks,
and only the fork reads what the grader asks, so nothing of one submission is ever in the
memory of the zygote, hence of another submission's kernel. At start-up it writes what it
holds before its first fork (the modules it imported, its threads, whether CUDA started)
as one line of its log (:data:`STATE`).

What each kernel's sandbox holds (device nodes, ``/proc`` covered, paths bound back, its
working folder, its limits) comes in the request, as data, from the grader's
``grading/sandbox.Policy.zygote_request``: this module lays it out and decides none of it.

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
  ``grading/sandbox.kernel_environment`` says, standard streams
  on ``/dev/null``, fresh random seeds, its GPU memory capped for when it starts CUDA
  (:func:`cap_gpu_memory`), then ``IPKernelApp`` on the connection file, as
  ``python -m ipykernel_launcher`` would.

Together with the zygote's own sandbox (read-only system, Python and ``autograder``; no
course directory; ``prlimit`` limits), a kernel gets everything ``grading/sandbox.py``'s docstring
promises, and one kernel serves one submission only: a restart forks a new one. What
forked kernels do share with the zygote is what a fork shares: its address-space layout
and Python's string-hash seed (nothing secret: the zygote holds no submission's data).
Every process of a kernel's sandbox dies with its parent (C with the zygote, the zygote
with bubblewrap's init, or with the grading process for ``--no-sandbox``).

``--no-sandbox`` (``Limits.sandbox`` false) forks from a zygote too, started with
``prlimit`` and a cleared environment but no bubblewrap and no namespaces; C and I then
only set limits and wait, and the kernel runs in the grader's working folder for it.

If a zygote cannot start or fails its first probe (no user namespaces, say), the grader
says so in one line on stderr and starts each kernel in its own bubblewrap sandbox
(``grading/kernels.BubblewrapProvisioner``): slower, never less sandboxed. Setting
``AUTOGRADER_ZYGOTE=0`` (or ``Limits.zygote`` false) chooses that path outright.

This module is the zygote's program (``python -m autograder.kernel.zygote SOCKET``), and
that of a kernel started on its own whose GPU memory is capped (``--kernel``, see
:func:`launch`), so at module level it imports the standard library only.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import threading
import time

from . import linux

#: What the zygote imports before forking: what every kernel imports, nothing that
#: depends on a submission. ``matplotlib_inline`` is left out on purpose: importing it
#: inside a kernel is what hooks inline figures into IPython. ``torch._dynamo`` (with
#: sympy) is what the checks' replay on the ``meta`` device imports: a second or two;
#: ``ipykernel.debugger`` (debugpy) and the rest, what a kernel imports as it starts.
PRELOAD = ("torch", "torch.nn", "torch.nn.functional", "torch.testing", "numpy", "matplotlib.pyplot",
           "matplotlib.backends.backend_agg", "IPython", "ipykernel.kernelapp", "ipykernel.ipkernel",
           "ipykernel.zmqshell", "ipykernel.debugger", "IPython.core.debugger", "IPython.core.completerlib",
           "IPython.extensions.storemagic", "sqlite3", "jupyter_client.session", "autograder.kernel.serve", "autograder.plots",
           "torch._dynamo")
#: Left out of a zygote for ``--device cuda``: they load GPU libraries, and CUDA must
#: not be touched before a fork.
NOT_WITH_CUDA = ("torch._dynamo",)
#: Modules the zygote must never import (the sandbox seals them; importing one would fail).
FORBIDDEN = ("autograder.reference",)
#: How the line of the zygote's log that says what it holds before its first fork begins (JSON follows).
STATE = "zygote state: "
#: Signals a kernel's init process passes on to the kernel.
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


# --------------------------------------------------------------------------------------
# The zygote (runs in the sandbox)
# --------------------------------------------------------------------------------------

_namespaces = True  # False for --no-sandbox zygotes
_folder = ""  # the folder of the zygote's socket, which holds every kernel's sockets folder


def main(argv: list[str]) -> None:
    """``python -m autograder.kernel.zygote SOCKET [--no-namespaces --parent PID]``.

    Under bubblewrap the zygote dies with bubblewrap's init (``--die-with-parent`` then
    ties that to the grader); without it, with ``--parent``, the grading process.
    """
    global _namespaces, _folder
    path = argv[0]
    _folder = os.path.dirname(path)
    _namespaces = "--no-namespaces" not in argv
    linux.die_with(int(argv[argv.index("--parent") + 1]) if "--parent" in argv else os.getppid())
    if sys.path and sys.path[0] in ("", os.getcwd()):  # as ipykernel_launcher does
        del sys.path[0]
    os.chdir("/")
    cuda = bool(os.environ.get("CUDA_VISIBLE_DEVICES"))
    for name in PRELOAD:
        if not (cuda and name in NOT_WITH_CUDA):
            __import__(name)
    state = _state()
    if state["cuda"] or state["threads"] != 1 or any(name.startswith(FORBIDDEN) for name in state["course"]):
        raise SystemExit("the zygote's imports started CUDA, a thread or a submission's module: refusing to fork")
    print(STATE + json.dumps(state), file=sys.stderr, flush=True)  # to its log
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
                linux.die_with(zygote)  # a kernel never outlives its zygote
                listener.close()
                connection.settimeout(None)
                code = _serve(connection)
            except BaseException:  # noqa: BLE001 - never return into the zygote's loop
                pass
            finally:
                os._exit(code)
        connection.close()


def _state() -> dict:
    """What the zygote holds, which every kernel inherits: the packages it imported (top-level names), the
    course's modules among them, its Python threads, and whether PyTorch started CUDA."""
    return {"packages": sorted({name.partition(".")[0] for name in sys.modules}),
            "course": sorted(name for name in sys.modules if name.partition(".")[0] == "autograder"),
            "threads": threading.active_count(), "cuda": sys.modules["torch"].cuda.is_initialized()}


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


def read_line(stream, deadline: float) -> bytes:
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
    request = json.loads(read_line(connection, time.monotonic() + 30) or b"{}")
    try:
        if os.path.dirname(os.path.normpath(request["sockets"])) != _folder:
            raise ValueError("a kernel's sockets folder must be in the zygote's folder")
        if request.get("place"):  # the grader puts this process (and so the kernel) in its cgroup
            _send(connection, {"placing": True})  # Linux tells the grader who sent it (SO_PASSCRED)
            if read_line(connection, time.monotonic() + 30).strip() != b"placed":
                raise RuntimeError("the grader did not place the kernel in its cgroup")
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
            linux.die_with(0 if _namespaces else here)  # C is outside I's PID namespace: its pid reads 0
            os.close(reader)
            connection.close()
            code = _init(writer, request)
        finally:
            os._exit(code)
    os.close(writer)
    try:
        line = read_line(reader, time.monotonic() + 60)
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
    return _watch(connection, init, status["pid"], request["sockets"])


def _enter_namespaces(request: dict) -> None:
    """In C: new namespaces; a fresh /tmp and /dev, laid out as the request says; only this kernel's sockets folder."""
    sockets, parent = request["sockets"], os.path.dirname(request["sockets"])
    size = f"size={int(request['tmpfs_bytes'])}"
    uid, gid, zygote = os.getuid(), os.getgid(), os.getppid()
    linux.unshare(linux.CLONE_NEWUSER | linux.CLONE_NEWNS | linux.CLONE_NEWNET | linux.CLONE_NEWIPC | linux.CLONE_NEWUTS | linux.CLONE_NEWPID)
    linux.die_with(zygote)  # again: new credentials may have cleared it
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as handle:
            handle.write(text)
    linux.mount(None, "/", None, linux.MS_REC | linux.MS_PRIVATE)
    linux.loopback_up()
    # what is bound back once /tmp and /dev are covered, taken while it is still visible
    own = linux.detach(sockets)
    nodes = {path: (linux.detach(path), os.path.isdir(path)) for path in request["devices"]}
    kept = {path: linux.detach(path) for path in request["read_only_under_tmp"]}
    linux.mount("tmpfs", "/tmp", "tmpfs", linux.MS_NOSUID | linux.MS_NODEV, f"mode=0755,{size}")
    for path, descriptor in kept.items():  # a course checked out under /tmp keeps its Python and package
        os.makedirs(path, exist_ok=True)
        linux.attach(descriptor, path)
        linux.mount(None, path, None, linux.MS_REMOUNT | linux.MS_BIND | linux.MS_RDONLY | linux.MS_NOSUID | linux.MS_NODEV)
    os.mkdir(request["work"])
    if not (parent + "/").startswith("/tmp/"):  # the fresh /tmp did not cover the other kernels' folders
        linux.mount("tmpfs", parent, "tmpfs", linux.MS_NOSUID | linux.MS_NODEV, "mode=0755,size=1m")
    os.makedirs(sockets, mode=0o700)
    linux.attach(own, sockets)
    linux.mount("tmpfs", "/dev", "tmpfs", linux.MS_NOSUID, "mode=0755,size=1m")  # device nodes and links only
    for path, (descriptor, folder) in nodes.items():  # a mount point of the same kind: file, or folder (nvidia-caps)
        if folder:
            os.mkdir(path)
        else:
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o666))
        linux.attach(descriptor, path)
    for name, target in request["device_links"].items():
        os.symlink(target, f"/dev/{name}")
    os.mkdir("/dev/shm")
    linux.mount("tmpfs", "/dev/shm", "tmpfs", linux.MS_NOSUID | linux.MS_NODEV, f"mode=1777,{size}")
    os.mkdir("/dev/pts", 0o755)
    linux.mount("devpts", "/dev/pts", "devpts", linux.MS_NOSUID | linux.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620")


def _set_limits(request: dict) -> None:
    """What ``prlimit`` sets for a per-kernel sandbox (the policy's, ``grading/sandbox.Policy.rlimits``)."""
    import resource

    names = {"data": resource.RLIMIT_DATA, "core": resource.RLIMIT_CORE, "fsize": resource.RLIMIT_FSIZE,
             "as": resource.RLIMIT_AS}
    for name, value in request["rlimits"].items():
        resource.setrlimit(names[name], (value, value))


def _init(writer: int, request: dict) -> int:
    """In I: a new /proc, then the kernel; wait for it, pass signals on, exit with it."""
    if _namespaces:
        linux.mount("proc", "/proc", "proc", linux.MS_NOSUID | linux.MS_NODEV | linux.MS_NOEXEC)
        for path in request["proc_read_only"]:
            if os.path.exists(path):
                linux.mount(path, path, None, linux.MS_BIND | linux.MS_REC)
                linux.mount(None, path, None, linux.MS_REMOUNT | linux.MS_BIND | linux.MS_RDONLY | linux.MS_NOSUID | linux.MS_NODEV | linux.MS_NOEXEC)
    here = os.getpid()
    kernel = os.fork()
    if kernel == 0:  # K
        try:
            linux.die_with(here)
            _kernel(writer, request)
        except BaseException as error:  # noqa: BLE001 - report why, then go
            try:
                os.write(writer, json.dumps({"error": f"{type(error).__name__}: {error}"}).encode() + b"\n")
            finally:
                os._exit(1)
        os._exit(0)
    os.close(writer)
    if _namespaces:
        linux.drop_capabilities()
    linux.prctl(linux.PR_SET_DUMPABLE, 0)  # the kernel may not look into this process
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
        linux.drop_capabilities()
    linux.prctl(linux.PR_SET_NO_NEW_PRIVS, 1)
    os.chdir(request["work"] if _namespaces else request["cwd"])
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
    if request["gpu_memory_bytes"] is not None:
        cap_gpu_memory(request["gpu_memory_bytes"])
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


def gpu_memory_fraction(cap_bytes: int, total_bytes: int) -> float:
    """The share of a GPU of ``total_bytes`` that is ``cap_bytes``, as ``torch.cuda.set_per_process_memory_fraction``
    takes it: a float from 0 to 1 (a cap above the GPU's memory is the whole GPU)."""
    if total_bytes <= 0 or cap_bytes < 0:
        raise ValueError(f"no share of {total_bytes} bytes is {cap_bytes} bytes")
    return min(1.0, cap_bytes / total_bytes)


def cap_gpu_memory(cap_bytes: int) -> None:
    """In a kernel, before any student code: let PyTorch allocate at most ``cap_bytes`` on each GPU it sees.

    Nothing CUDA happens here: a kernel that never uses the GPU must not hold a CUDA
    context (hundreds of MiB of the GPU each), and the zygote, which imported PyTorch, never
    starts CUDA. The cap is queued with PyTorch's own lazy start of CUDA (``_lazy_call``, as
    ``torch.cuda.manual_seed`` queues its seed): it is set when the kernel's first CUDA call
    starts CUDA, before that call allocates anything, and only if CUDA does start. It caps
    PyTorch's allocator (the CUDA context itself is outside it), and the student's code
    could lift it: a guard against filling the GPU by mistake, not a wall.
    """
    import torch

    def cap() -> None:
        for index in range(torch.cuda.device_count()):
            total = torch.cuda.get_device_properties(index).total_memory
            torch.cuda.set_per_process_memory_fraction(gpu_memory_fraction(cap_bytes, total), index)

    torch.cuda._lazy_call(cap)


def launch(argv: list[str]) -> None:
    """``python -m autograder.kernel.zygote --kernel CAP_BYTES -f CONNECTION_FILE``: a kernel started on its own
    (bubblewrap, where no zygote runs; ``grading/sandbox.Policy.kernel_program``), its GPU memory capped, then
    ``python -m ipykernel_launcher -f CONNECTION_FILE`` in this same process."""
    import runpy

    cap_gpu_memory(int(argv[0]))
    sys.argv = ["ipykernel_launcher", *argv[1:]]
    runpy.run_module("ipykernel_launcher", run_name="__main__", alter_sys=True)


def _report(request: dict) -> dict:
    """What a probe kernel sees of its sandbox (checked by the grader before first use)."""
    sockets = request["sockets"]
    status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\t" in line)
    tmp = os.statvfs("/tmp")
    try:
        open("/etc/shadow", "rb").close()
        shadow = True
    except OSError:
        shadow = False
    return {"pid": os.getpid(), "uid": os.getuid(), "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
            "CapEff": status.get("CapEff", "").strip(), "CapBnd": status.get("CapBnd", "").strip(),
            "NoNewPrivs": status.get("NoNewPrivs", "").strip(), "cwd": os.getcwd(),
            "tmp": sorted(os.listdir("/tmp")), "tmp_bytes": tmp.f_blocks * tmp.f_frsize, "shadow": shadow,
            "interfaces": [name for _, name in socket.if_nameindex()],
            "sealed": {path: sorted(os.listdir(path)) if os.path.isdir(path) else [] for path in request["sealed"]},
            "sockets": sorted(os.listdir(os.path.dirname(sockets))), "own": os.path.basename(sockets)}


def _watch(connection: socket.socket, init: int, kernel: int, sockets: str) -> int:
    """In C: pass the grader's signals on; seal the sockets folder when asked; report the kernel's end;
    kill it if the grader goes.

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
                if words == [b"seal"]:
                    _send(connection, _seal(sockets))
                elif len(words) == 2 and words[0] == b"signal" and words[1].isdigit():
                    if int(words[1]) == signal.SIGKILL:
                        _kill_all(init, kernel)
                    else:
                        _kill(init, int(words[1]))


def _seal(sockets: str) -> dict:
    """In C: the kernel's sockets folder made read-only, in the kernel's mount namespace.

    The kernel has bound its sockets there by now; the grader, outside, still connects to
    them. From here on nothing the kernel does can write a file where the grader's disk is.
    """
    if not _namespaces:
        return {"sealed": False, "error": "no namespaces"}
    kept = 0  # a bind remount keeps the flags Linux locked on the mount in a user namespace
    for flag, mount_flag in ((os.ST_NOSUID, linux.MS_NOSUID), (os.ST_NODEV, linux.MS_NODEV),
                             (os.ST_NOEXEC, linux.MS_NOEXEC), (os.ST_NOATIME, linux.MS_NOATIME),
                             (os.ST_NODIRATIME, linux.MS_NODIRATIME), (os.ST_RELATIME, linux.MS_RELATIME)):
        if os.statvfs(sockets).f_flag & flag:
            kept |= mount_flag
    try:
        linux.mount(None, sockets, None, linux.MS_REMOUNT | linux.MS_BIND | linux.MS_RDONLY | kept)
    except OSError as error:
        return {"sealed": False, "error": str(error)}
    return {"sealed": True}


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


if __name__ == "__main__":
    if sys.argv[1:2] == ["--kernel"]:
        launch(sys.argv[2:])
    else:
        main(sys.argv[1:])
