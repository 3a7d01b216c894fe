"""Kernels forked from a zygote (``autograder/kernel/zygote.py``) keep every sandbox guarantee.

Real kernels, forked from one real zygote: each test starts kernels the way the grading
command does and asks them, from inside, what they can see and do.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest
from jupyter_core.utils import run_sync

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux namespaces"),
              pytest.mark.sandbox]


def _limits(**changes):
    from autograder.grading.sandbox import Limits

    return Limits(**{"memory_mb": 2048, "cell_seconds": 30, "notebook_seconds": 120, **changes})


@pytest.fixture(scope="module")
def zygote():
    from autograder.grading import kernels

    found = kernels.for_limits(_limits())
    if found is None:  # on CI it must: the 5x grading speed depends on it
        if os.environ.get("CI"):
            pytest.fail("no zygote could start (see the notice above)")
        pytest.skip("no zygote can start here (see the notice above)")
    yield found
    kernels.stop_all()


class Kernel:
    """One kernel forked from ``zygote`` as ``execute.py`` starts it, and a way to ask it things."""

    def __init__(self, zygote, limits):
        from jupyter_client.blocking import BlockingKernelClient

        from autograder.grading.kernels import SandboxedKernelManager

        self.sockets = tempfile.mkdtemp(dir=zygote.folder, prefix="sockets-")
        self.km = SandboxedKernelManager(transport="ipc", ip=os.path.join(self.sockets, "kernel"),
                                         connection_file=os.path.join(self.sockets, "kernel.json"), limits=limits,
                                         zygote=zygote)
        run_sync(self.km.start_kernel)()
        self.kc = BlockingKernelClient()
        self.kc.load_connection_info(self.km.get_connection_info())
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)
        self.sealed = self.km.handle().seal()

    def ask(self, code: str, timeout: float = 60):
        """Run ``code``, which sets ``result``; its value (through JSON), or the error's name and text."""
        reply = self.kc.execute_interactive(code, user_expressions={"result": "__import__('json').dumps(result)"},
                                            timeout=timeout, output_hook=lambda msg: None)
        content = reply["content"]
        if content["status"] != "ok":
            return {"error": content["ename"], "message": content["evalue"]}
        value = content["user_expressions"]["result"]
        assert value["status"] == "ok", value
        return json.loads(value["data"]["text/plain"].strip("'"))

    def alive(self) -> bool:
        return run_sync(self.km.is_alive)()

    def shutdown(self):
        run_sync(self.km.shutdown_kernel)(now=True)

    def close(self):
        self.kc.stop_channels()
        if self.km.has_kernel:
            self.shutdown()


@pytest.fixture
def kernels(zygote):
    """``start(**limits)``: a new kernel; all of them are shut down after the test."""
    started = []

    def start(**changes):
        started.append(Kernel(zygote, _limits(**changes)))
        return started[-1]

    yield start
    for kernel in started:
        kernel.close()


@pytest.mark.slow
def test_the_zygote_checked_its_first_kernel_before_using_it(zygote):
    report = zygote.probe.report
    assert report["pid"] == 2 and report["pids"] == [1, 2]
    assert report["CapEff"] == report["CapBnd"] == "0000000000000000"
    assert report["interfaces"] == ["lo"] and report["cwd"] == "/tmp/work"


@pytest.mark.slow
def test_a_kernel_has_its_own_tmp_dev_and_sockets_folder_and_sees_no_other(kernels):
    first, second = kernels(), kernels()
    written = first.ask("""
for path in ['/tmp/left_by_a', '/tmp/work/left_by_a', '/dev/shm/left_by_a', '/dev/left_by_a']:
    open(path, 'w').write('a secret')
result = sorted(os.listdir('/tmp/work')) if (os := __import__('os')) else None
""")
    assert written == ["left_by_a"]
    seen = second.ask("""
import os
result = {'found': [p for p in ['/tmp/left_by_a', '/tmp/work/left_by_a', '/dev/shm/left_by_a', '/dev/left_by_a']
                    if os.path.exists(p)],
          'work': os.listdir('/tmp/work'), 'cwd': os.getcwd()}
""")
    assert seen == {"found": [], "work": [], "cwd": "/tmp/work"}
    folder = os.path.dirname(second.sockets)
    siblings = second.ask(f"import os\nresult = sorted(os.listdir({folder!r}))")
    assert siblings == [os.path.basename(second.sockets)]  # not the first kernel's, not the zygote's socket
    assert second.ask(f"import os\nresult = os.path.exists({os.path.join(folder, 'zygote.sock')!r})") is False


@pytest.mark.slow
def test_a_kernel_has_no_network(kernels):
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    try:
        result = kernels().ask(f"""
import socket
try:
    socket.create_connection(('127.0.0.1', {port}), timeout=2).close()
    connected = True
except OSError:
    connected = False
result = {{'connected': connected, 'interfaces': [name for _, name in socket.if_nameindex()]}}
""")
    finally:
        server.close()
    assert result == {"connected": False, "interfaces": ["lo"]}


@pytest.mark.slow
def test_a_kernel_sees_no_other_process_and_has_no_capabilities(kernels):
    result = kernels().ask("""
import os
status = dict(line.split(':\\t', 1) for line in open('/proc/self/status').read().splitlines() if ':\\t' in line)
result = {'pid': os.getpid(), 'pids': sorted(int(p) for p in os.listdir('/proc') if p.isdigit()),
          'caps': [status[k].strip() for k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb')],
          'no_new_privs': status['NoNewPrivs'].strip(), 'session_leader': os.getsid(0) == os.getpid()}
""")
    assert result["pid"] == 2 and result["pids"] == [1, 2]  # the sandbox's init and the kernel
    assert result["caps"] == ["0000000000000000"] * 5
    assert result["no_new_privs"] == "1" and result["session_leader"]


@pytest.mark.slow
def test_proc_sys_is_read_only_in_a_kernel(kernels):
    result = kernels().ask("""
failures = []
for path in ['/proc/sys/kernel/hostname', '/proc/sysrq-trigger']:
    try:
        open(path, 'w').write('x')
    except OSError as error:
        failures.append(type(error).__name__)
result = failures
""")
    assert len(result) == 2


@pytest.mark.slow
def test_the_course_directory_is_not_visible_and_the_autograder_is_read_only(kernels):
    result = kernels().ask(f"""
import os
result = {{'solutions': os.path.exists({str(ROOT / 'solutions')!r}), 'tests': os.path.exists({str(ROOT / 'tests')!r}),
           'autograder': os.path.isdir({str(ROOT / 'autograder')!r}), 'home': os.path.exists('/root/.config')}}
try:
    open({str(ROOT / 'autograder' / 'pwned.txt')!r}, 'w')
    result['wrote'] = True
except OSError:
    result['wrote'] = False
""")
    assert result == {"solutions": False, "tests": False, "autograder": True, "home": False, "wrote": False}


@pytest.mark.slow
def test_memory_is_limited_and_the_kernel_survives_a_huge_allocation(kernels):
    kernel = kernels()
    failed = kernel.ask("import torch\nwaste = torch.ones(3 * 2**30 // 4)\nresult = 'allocated'")
    assert failed.get("error") in ("RuntimeError", "MemoryError"), failed
    assert kernel.ask("result = 1 + 1") == 2


@pytest.mark.slow
def test_each_kernel_gets_a_clean_environment_without_any_key_and_its_own_random_state(kernels):
    os.environ["AUTOGRADER_LEAK_CHECK"] = "the grader's environment"
    try:
        question = """
import os, random, numpy, torch
result = {'leak': os.environ.get('AUTOGRADER_LEAK_CHECK'), 'keys': sorted(os.environ),
          'random': random.random(), 'numpy': float(numpy.random.random()), 'torch': float(torch.rand(()))}
"""
        first, second = kernels().ask(question), kernels().ask(question)
    finally:
        del os.environ["AUTOGRADER_LEAK_CHECK"]
    assert first["leak"] is None and second["leak"] is None
    from autograder.grading.sandbox import kernel_environment

    assert set(kernel_environment(_limits())) <= set(first["keys"])
    set_by_ipykernel = {"MPLBACKEND", "TERM", "CLICOLOR", "FORCE_COLOR", "CLICOLOR_FORCE", "PAGER", "GIT_PAGER"}
    assert not set(first["keys"]) - set(kernel_environment(_limits())) - set_by_ipykernel
    assert not [key for key in first["keys"] if "KEY" in key or "SECRET" in key]
    assert first["random"] != second["random"] and first["numpy"] != second["numpy"]
    assert first["torch"] != second["torch"], "every kernel must draw its own torch random stream"


@pytest.mark.slow
def test_the_zygote_forks_with_torch_and_the_respondent_loaded_but_no_thread_cuda_or_reference(zygote):
    from autograder.kernel.zygote import STATE

    lines = Path(zygote.log).read_text().splitlines()
    state = json.loads(next(line for line in lines if line.startswith(STATE))[len(STATE):])
    assert {"torch", "numpy", "IPython", "ipykernel"} <= set(state["packages"])
    assert {"autograder.kernel.serve", "autograder.kernel.respond"} <= set(state["course"])
    assert not [name for name in state["course"] if name.startswith("autograder.reference")]
    assert state["threads"] == 1 and state["cuda"] is False


@pytest.mark.slow
def test_the_references_cannot_be_imported_or_read_in_a_kernel(kernels):
    references = ROOT / "autograder" / "reference"
    result = kernels().ask(f"""
import os
found = {{}}
for module in ('autograder.reference', 'autograder.reference.ch03_masking'):
    try:
        __import__(module)
        found[module] = 'imported'
    except ImportError as error:
        found[module] = 'sealed' if 'not in a grading kernel' in str(error) else 'missing'
result = {{'imports': found, 'files': sorted(os.listdir({str(references)!r})),
          'readable': os.path.exists({str(references / 'ch03_masking.py')!r})}}
""")
    assert set(result["imports"].values()) == {"sealed"}, result
    assert result["files"] == ["__init__.py"] and result["readable"] is False
    assert (references / "ch03_masking.py").exists(), "outside the sandbox they are where they were"


@pytest.mark.slow
def test_a_killed_kernel_is_seen_dead_and_its_sandbox_is_gone(kernels):
    kernel = kernels()
    kernel.kc.execute("import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    deadline = time.monotonic() + 20
    while kernel.alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not kernel.alive()
    other = kernels()  # killed from the grader's side this time
    handle = other.km.provisioner.process
    other.shutdown()
    assert handle.poll() is not None


def _session_results(limits, *sources: str) -> list[str]:
    """How each cell of a notebook of ``sources`` (and a last, empty test cell) ends in a grading session."""
    from autograder.grading.execute import open_session
    from autograder.grading.notebooks import Assembled, GradedCell

    cells = [nbformat.v4.new_code_cell(source) for source in sources]
    cells.append(nbformat.v4.new_code_cell("", metadata={"nbgrader": {"grade_id": "test_end", "grade": True}}))
    assembled = Assembled(nbformat.v4.new_notebook(cells=cells), [GradedCell("test_end", 1)], ["course"] * len(sources) + ["test"])
    with open_session(assembled, limits) as session:
        session.run_cells()
    return [result.status for result in session.results]


@pytest.mark.slow
def test_a_grading_session_restarts_a_killed_kernel_from_the_zygote(zygote):
    results = _session_results(_limits(), "x = 41", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)",
                               "assert x + 1 == 42")
    assert results == ["ok", "died", "ok", "not run"]  # the third ran in a new kernel, after a replay of the first


@pytest.mark.slow
def test_without_the_sandbox_kernels_are_forked_too(tmp_path):
    from autograder.grading import kernels

    limits = _limits(sandbox=False)
    zygote = kernels.Zygote(limits)
    try:
        kernel = Kernel(zygote, limits)
        try:
            assert kernel.ask("import os\nresult = os.environ['HOME']") == "/tmp"
        finally:
            kernel.close()
    finally:
        zygote.close()


def test_no_zygote_when_it_is_switched_off(monkeypatch):
    from autograder.grading import kernels

    assert kernels.for_limits(_limits(zygote=False)) is None
    monkeypatch.setenv("AUTOGRADER_ZYGOTE", "0")
    assert kernels.for_limits(_limits()) is None


def test_a_zygote_that_cannot_start_falls_back_with_a_notice(monkeypatch, capsys):
    from autograder.grading import kernels, sandbox

    monkeypatch.setattr(sandbox, "zygote_command", lambda *args: [sys.executable, "-c", "raise SystemExit('no')"])
    monkeypatch.setattr(kernels, "_zygotes", {})
    monkeypatch.setattr(kernels, "_failed", {})
    limits = _limits(memory_mb=1234)
    assert kernels.for_limits(limits) is None
    assert "no kernel zygote" in capsys.readouterr().err
    assert kernels.for_limits(limits) is None  # said once, not tried again
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("command", [[sys.executable, "-c", "raise SystemExit('no')"], ["/nonexistent/bwrap"]],
                         ids=["exits", "cannot-start"])
def test_a_zygote_that_cannot_start_leaves_no_folder_behind(monkeypatch, tmp_path, capsys, command):
    import tempfile

    from autograder.grading import kernels, sandbox

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(sandbox, "zygote_command", lambda *args: command)
    monkeypatch.setattr(kernels, "_zygotes", {})
    monkeypatch.setattr(kernels, "_failed", {})
    assert kernels.for_limits(_limits(memory_mb=1235)) is None
    assert "no kernel zygote" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def _folder_and_answer(limits):
    """In a forked grading process: the zygote it uses, and how a kernel's cell ended."""
    from autograder.grading import kernels

    return kernels.for_limits(limits).folder, _session_results(limits, "import os\nassert os.getpid() == 2")


@pytest.mark.slow
def test_processes_forked_after_prestart_share_its_zygote(zygote):
    import multiprocessing

    from autograder.grading import kernels

    kernels.prestart(_limits())  # the module's zygote: already started, so nothing new
    with multiprocessing.get_context("fork").Pool(2) as pool:
        answers = pool.map(_folder_and_answer, [_limits(), _limits()])
    assert answers == [(zygote.folder, ["ok", "not run"])] * 2
    assert zygote.alive()  # the pool's processes ended; the zygote is this process's


# --------------------------------------------------------------------------------------
# Limits that hold for the whole kernel
# --------------------------------------------------------------------------------------


def _cgroup_or_skip():
    from autograder.grading import limits

    found = limits.available()
    if not isinstance(found, limits.Hierarchy):
        if os.environ.get("CI"):
            pytest.fail(f"no cgroup can be made on CI: {found}")
        pytest.skip(f"no cgroup can be made here: {found}")
    return found


@pytest.mark.slow
def test_a_kernel_cannot_write_where_its_sockets_are(kernels):
    kernel = kernels()
    assert kernel.sealed, "the sockets folder was not sealed"
    result = kernel.ask(f"""
import errno
try:
    open({os.path.join(kernel.sockets, 'flood')!r}, 'wb').write(b'x' * 2**20)
    result = 'written'
except OSError as error:
    result = errno.errorcode.get(error.errno, str(error))
""")
    assert result == "EROFS" and not os.path.exists(os.path.join(kernel.sockets, "flood"))
    assert kernel.ask("result = 6 * 7") == 42, "its sockets still work"


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the grader is not root here")
def test_a_root_graders_kernels_run_as_nobody(kernels):
    result = kernels().ask("""
try:
    open('/etc/shadow', 'rb').read(1)
    result = 'read'
except OSError as error:
    result = type(error).__name__
""")
    assert result == "PermissionError"


def _died_or(kernel, code: str):
    """``kernel.ask(code)``, or ``"died"`` if the kernel is gone after it."""
    try:
        answer = kernel.ask(code, timeout=20)
    except Exception:  # noqa: BLE001 - no reply: the kernel was killed
        answer = None
    return "died" if not kernel.alive() else answer


@pytest.mark.slow
def test_memory_is_limited_across_all_of_a_kernels_processes(kernels):
    _cgroup_or_skip()
    kernel = kernels()  # 2048 MiB; each child alone stays under it
    outcome = _died_or(kernel, """
import subprocess, sys
children = [subprocess.Popen([sys.executable, '-c', 'x = bytearray(800 * 2**20); import time; time.sleep(3)'])
            for _ in range(4)]
result = [child.wait() for child in children]
""")
    assert outcome == "died" or -9 in outcome, f"3.2 GB in four processes under a 2 GiB limit: {outcome}"


@pytest.mark.slow
@pytest.mark.parametrize("where", ["shared memory", "/tmp", "/dev/shm"])
def test_memory_outside_the_heap_counts_too(kernels, where):
    _cgroup_or_skip()
    kernel = kernels()
    write = {
        "shared memory": "import mmap\nblock = mmap.mmap(-1, 3 * 2**30)\nfor i in range(0, len(block), 4096):\n"
                         "    block[i] = 1\nresult = len(block)",
        "/tmp": "result = 0\ntry:\n    with open('/tmp/flood', 'wb') as f:\n        for _ in range(3 * 1024):\n"
                "            f.write(b'x' * 2**20)\n            result += 2**20\nexcept OSError:\n    pass",
        "/dev/shm": "result = 0\ntry:\n    with open('/dev/shm/flood', 'wb') as f:\n        for _ in range(3 * 1024):\n"
                    "            f.write(b'x' * 2**20)\n            result += 2**20\nexcept OSError:\n    pass",
    }[where]
    outcome = _died_or(kernel, write)
    assert outcome == "died" or outcome <= 2048 * 2**20, f"{where}: {outcome} bytes under a 2 GiB limit"


@pytest.mark.slow
def test_processes_are_limited(kernels):
    _cgroup_or_skip()
    kernel = kernels()
    started = _died_or(kernel, """
import subprocess
children = []
try:
    for _ in range(600):
        children.append(subprocess.Popen(['sleep', '30']))
except OSError:
    pass
result = len(children)
for child in children:
    child.kill()
""")
    assert started != "died" and started < 256, f"{started} processes started under a limit of 256"


# --------------------------------------------------------------------------------------
# What the policy tells a forked kernel, and the GPU memory cap (no kernel, no CUDA)
# --------------------------------------------------------------------------------------


def test_the_zygote_is_told_every_path_it_lays_out():
    import dataclasses

    from autograder.grading import sandbox

    policy = dataclasses.replace(sandbox.policy(_limits()), devices=("/dev/nvidia0", "/dev/nvidiactl"),
                                 read_only=("/usr", "/tmp/ci/.venv", "/tmp/ci/.venv/bin", "/tmp/ci/autograder"))
    request = json.loads(json.dumps(policy.zygote_request()))  # it crosses a socket as JSON
    assert request["devices"] == ["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty",
                                  "/dev/nvidia0", "/dev/nvidiactl"]
    assert request["read_only_under_tmp"] == ["/tmp/ci/.venv", "/tmp/ci/autograder"]  # bin travels with .venv
    assert request["sealed"] == [str(ROOT / "autograder" / "reference")]
    assert "/proc/sys" in request["proc_read_only"] and request["device_links"]["fd"] == "/proc/self/fd"
    assert request["work"] == policy.expectations("/tmp/x")["cwd"] == "/tmp/work"


def test_the_gpu_memory_cap_is_the_settings_or_the_kernels_memory_and_the_run_says_which():
    from autograder.grading import sandbox

    on_cpu, default, set_ = (sandbox.policy(_limits(**changes)) for changes in
                             ({}, {"device": "cuda"}, {"device": "cuda", "gpu_memory_mb": 1024}))
    assert on_cpu.zygote_request()["gpu_memory_bytes"] is None
    assert "GPU memory: none, kernels see no GPU (device cpu)" in on_cpu.describe()
    assert on_cpu.kernel_program("k.json") == [sys.executable, "-m", "ipykernel_launcher", "-f", "k.json"]
    assert default.zygote_request()["gpu_memory_bytes"] == 2048 * 2**20
    assert any(line.startswith("GPU memory per kernel: at most 2048 MiB") for line in default.describe())
    assert set_.zygote_request()["gpu_memory_bytes"] == 1024 * 2**20
    assert set_.kernel_program("k.json") == [sys.executable, "-m", "autograder.kernel.zygote", "--kernel",
                                             str(1024 * 2**20), "-f", "k.json"]


def test_the_gpu_memory_fraction_is_the_caps_share_of_the_gpu():
    from autograder.kernel.zygote import gpu_memory_fraction

    assert gpu_memory_fraction(4 * 2**30, 80 * 2**30) == 0.05
    assert gpu_memory_fraction(200 * 2**30, 80 * 2**30) == 1.0
    assert isinstance(gpu_memory_fraction(1, 2), float)
    with pytest.raises(ValueError):
        gpu_memory_fraction(1, 0)


def test_the_gpu_memory_cap_waits_for_cuda_then_caps_every_gpu(monkeypatch):
    import types

    import torch

    from autograder.kernel.zygote import cap_gpu_memory

    queued, fractions = [], []
    monkeypatch.setattr(torch.cuda, "_lazy_call", queued.append)  # this process's CUDA stays as it is
    cap_gpu_memory(4 * 2**30)
    assert len(queued) == 1 and not torch.cuda.is_initialized()
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: types.SimpleNamespace(total_memory=80 * 2**30))
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction",
                        lambda fraction, index: fractions.append((fraction, index)))
    queued[0]()  # as PyTorch calls it once CUDA starts
    assert fractions == [(0.05, 0), (0.05, 1)]


def test_a_kernel_started_on_its_own_caps_its_gpu_memory_before_ipykernel_starts(monkeypatch):
    import runpy

    from autograder.kernel import zygote

    calls = []
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(zygote, "cap_gpu_memory", lambda cap: calls.append(("cap", cap)))
    monkeypatch.setattr(runpy, "run_module", lambda name, **kwargs: calls.append(("run", name, sys.argv[1:])))
    zygote.launch(["1073741824", "-f", "k.json"])
    assert calls == [("cap", 2**30), ("run", "ipykernel_launcher", ["-f", "k.json"])]
