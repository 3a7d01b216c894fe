"""A throw-away PostgreSQL server for the tests, on a Unix socket in a temporary folder.

``initdb`` refuses to run as root, so as root the server's commands run as Debian's
``postgres`` user (``runuser``). The server listens on no TCP port, keeps nothing after
the tests (``stop`` removes its folder) and trusts every local connection.
``make postgres`` installs the binaries (Debian's ``postgresql`` package).
"""

from __future__ import annotations

import glob
import importlib.util
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def binaries() -> Path | None:
    """The folder of ``initdb`` and ``pg_ctl``: Debian's newest, else the ones on PATH."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb and (Path(initdb).parent / "pg_ctl").exists() else None


def unavailable_reason() -> str | None:
    """Why no server can be started here, or ``None``."""
    if binaries() is None:
        return "PostgreSQL's server (initdb, pg_ctl) is not installed: `make postgres` installs Debian's package"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root, and there is no `postgres` user to run initdb as (Debian's package makes it)"
    if importlib.util.find_spec("psycopg") is None:
        return "the PostgreSQL driver is not installed (psycopg, in requirements.txt: `make install`)"
    return None


class Server:
    """One PostgreSQL cluster: ``start``, ``stop``, ``create_database``, ``url``."""

    def __init__(self):
        self.bin = binaries()
        self.base = Path(tempfile.mkdtemp(prefix="autograder-pg-"))
        self.data, self.socket, self.log = self.base / "data", self.base / "socket", self.base / "server.log"
        self.socket.mkdir()
        self.as_root = os.geteuid() == 0
        if self.as_root:  # the server runs as `postgres`, and owns its folder
            user = pwd.getpwnam("postgres")
            for path in (self.base, self.socket):
                os.chown(path, user.pw_uid, user.pw_gid)
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8")

    def _run(self, program: str, *args: str) -> subprocess.CompletedProcess:
        command = [str(self.bin / program), *args]
        if self.as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=self.base)
        if result.returncode != 0:
            log = self.log.read_text()[-3000:] if self.log.exists() else ""
            raise RuntimeError(f"{program} {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}\n{log}")
        return result

    def start(self) -> None:
        # no TCP; fsync off: a test server needs no durability against a crash of the machine
        options = f"-k {self.socket} -c listen_addresses='' -c fsync=off -c max_connections=200"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", "60", "start")

    def stop(self) -> None:
        """Stop at once, as a crash would (the server recovers on the next start)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def running(self) -> bool:
        command = [str(self.bin / "pg_ctl"), "-D", str(self.data), "status"]
        if self.as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        return subprocess.run(command, capture_output=True).returncode == 0

    def connect(self, database: str = "postgres", **kwargs):
        """A psycopg connection (autocommit unless told otherwise)."""
        import psycopg

        kwargs.setdefault("autocommit", True)
        return psycopg.connect(host=str(self.socket), user="postgres", dbname=database, **kwargs)

    def create_database(self, name: str) -> str:
        """A new, empty database; its SQLAlchemy URL."""
        with self.connect() as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@/{database}?host={self.socket}"

    def remove(self) -> None:
        if self.running():
            self.stop()
        shutil.rmtree(self.base, ignore_errors=True)


def wait_for(condition, timeout: float, what: str, interval: float = 0.05):
    """Poll ``condition()`` until it is true (returned), or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


@contextmanager
def throwaway_server() -> Iterator[Server]:
    """A running throw-away server, removed at the end; the test is skipped only where none
    can be had, and never in CI (``CI`` set), where ``make test`` installs the server."""
    reason = unavailable_reason()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (CI must run the PostgreSQL tests: `make test` installs it)")
        pytest.skip(reason)
    server = Server()
    try:
        server.start()
        yield server
    finally:
        server.remove()
