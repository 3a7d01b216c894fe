"""A real Dask cluster on localhost for the tests and the grading benchmark: a ``dask scheduler``
and named ``dask worker`` processes, started from this environment's ``dask`` command."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent


class Cluster:
    """A scheduler and named workers, each in a process group of its own so it can be killed whole."""

    def __init__(self, folder: Path):
        self.folder, self.file = folder, folder / "scheduler.json"
        self.processes: dict[str, subprocess.Popen] = {}
        self._start("scheduler", [str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0",
                                  "--no-dashboard", "--scheduler-file", str(self.file)])
        deadline = time.monotonic() + 60
        while not self.file.exists():
            assert time.monotonic() < deadline, self._logs("the scheduler did not start")
            time.sleep(0.2)

    @property
    def address(self) -> str:
        return json.loads(self.file.read_text())["address"]

    def add_worker(self, name: str) -> None:
        self._start(name, [str(BIN / "dask"), "worker", "--scheduler-file", str(self.file), "--name", name,
                           "--nworkers", "1", "--nthreads", "1", "--no-dashboard", "--local-directory",
                           str(self.folder / name)])

    def wait_for_workers(self, count: int) -> None:
        from distributed import Client

        with Client(self.address, timeout="30s") as client:
            client.wait_for_workers(count, timeout=120)

    def processing(self) -> dict[str, int]:
        """Tasks each worker holds now, by worker name."""
        from distributed import Client

        with Client(self.address, timeout="30s") as client:
            names = {address: info["name"] for address, info in client.scheduler_info()["workers"].items()}
            return {names.get(address, address): len(tasks) for address, tasks in client.processing().items()}

    def kill(self, name: str) -> None:
        """SIGKILL a worker and its nanny: no goodbye to the scheduler."""
        os.killpg(self.processes[name].pid, signal.SIGKILL)
        self.processes[name].wait()

    def close(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()

    def _start(self, name: str, command: list[str]) -> None:
        log = (self.folder / f"{name}.log").open("w")
        env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
        self.processes[name] = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                                start_new_session=True, cwd=self.folder)

    def _logs(self, message: str) -> str:
        return message + "".join(f"\n--- {p.name}\n{p.read_text()[-2000:]}" for p in self.folder.glob("*.log"))

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
