"""The Linux system calls a kernel's sandbox is made of (Python 3.11 has no ``os.unshare`` or ``os.mount``).

Used inside the zygote's sandbox (``zygote.py``) by the processes that set up each
kernel's namespaces, mounts and capabilities, and by nothing of the grader's own.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
_PR_SET_PDEATHSIG, PR_SET_DUMPABLE, _PR_CAPBSET_DROP = 1, 4, 24
PR_SET_NO_NEW_PRIVS, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 38, 47, 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1
_SYS_OPEN_TREE, _SYS_MOVE_MOUNT = 428, 429  # the same number on every architecture (Linux >= 5.2)
_AT_FDCWD, _OPEN_TREE_CLONE, _MOVE_MOUNT_F_EMPTY_PATH, _AT_RECURSIVE = -100, 1, 4, 0x8000


_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


def unshare(flags: int) -> None:
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    encode = lambda text: None if text is None else text.encode()  # noqa: E731
    result = _libc.mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(data))
    _check(result, f"mount {fstype or source} on {target}")


def detach(path: str) -> int:
    """A copy of the mount at ``path`` and the mounts under it, not attached anywhere yet (``open_tree``)."""
    descriptor = _libc.syscall(ctypes.c_long(_SYS_OPEN_TREE), ctypes.c_int(_AT_FDCWD), path.encode(),
                               ctypes.c_uint(_OPEN_TREE_CLONE | _AT_RECURSIVE | os.O_CLOEXEC))
    if descriptor < 0:
        _check(-1, f"open_tree {path}")
    return descriptor


def attach(descriptor: int, target: str) -> None:
    """Mount what :func:`detach` returned on ``target`` (``move_mount``); ``target`` must be of its kind, file or folder."""
    _check(_libc.syscall(ctypes.c_long(_SYS_MOVE_MOUNT), ctypes.c_int(descriptor), b"", ctypes.c_int(_AT_FDCWD),
                         target.encode(), ctypes.c_uint(_MOVE_MOUNT_F_EMPTY_PATH)), f"move_mount on {target}")
    os.close(descriptor)


def die_with(parent: int) -> None:
    """Be killed when ``parent`` (this process's parent, as this process sees it) goes."""
    prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it went before the line above
        os._exit(1)


def prctl(option: int, argument: int = 0) -> None:
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
    prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL)
    header, data = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "capset")
    prctl(PR_SET_NO_NEW_PRIVS, 1)


def loopback_up() -> None:
    """Bring up ``lo`` in the new network namespace (bubblewrap does too); nothing else exists."""
    import fcntl
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        request = struct.pack("16sh22x", b"lo", 0)
        flags = struct.unpack("16sh22x", fcntl.ioctl(probe, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(probe, _SIOCSIFFLAGS, struct.pack("16sh22x", b"lo", flags | _IFF_UP))
