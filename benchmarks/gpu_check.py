"""The grading command on a lent GPU machine, checked in one go: grade, test, benchmark, one summary.

    bash benchmarks/gpu_check.sh                             # on the GPU machine (installs, then `run`)
    .venv/bin/python benchmarks/gpu_check.py run             # here: "no GPU: CPU fallback", shortened
    .venv/bin/python benchmarks/gpu_check.py wheels .gpu-wheels   # `make gpu-wheels`, here

A GPU machine is lent only sometimes, for minutes, with PyTorch but without the course's other
packages and without internet. ``wheels`` makes, here, the folder that travels with the tree:
the wheels grading needs beyond PyTorch (for the machine's Python version) and a bubblewrap
binary with its libraries. ``run`` then does, within ``--deadline`` seconds:

1. grades two assignments with ``python -m autograder grade --device cuda``, through the
   sandbox (``--no-sandbox`` where bubblewrap cannot run, and the summary says so): the
   solution notebook, a notebook of the catalogue's right answers (``tests/catalogue_chNN.py``)
   and one notebook per catalogued wrong answer, each put in right after the cell it replaces.
   The right ones must get every point; each wrong one must lose points in the cells that
   check it and nowhere else; passed parts must say their results were judged on CUDA (their bad arguments, on the CPU);
2. runs the tests whose work changes with a GPU (every check of the catalogues runs on the
   CPU and on CUDA, ``autograder.core.devices``);
3. runs ``benchmarks/attention.py`` and ``benchmarks/decoding.py`` on the GPU, shortened;

and prints one summary block (also to ``$OUT/gpu_check.txt``, with every step's output in
``$OUT/gpu_check.log``, when ``$OUT`` is set). Without CUDA it says "no GPU: CPU fallback" and
runs the same steps on the CPU, fewer and smaller, which is how the course's tests run it.
"""

from __future__ import annotations

import argparse
import ast
import csv
import importlib.metadata
import importlib.util
import inspect
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # course.py, one_bug.py and the catalogues

#: Two assignments where a device matters: masks built on the device they are given (03),
#: and a module whose parameters and masks must follow its inputs onto the GPU (04).
ASSIGNMENTS = ("03_masking", "04_multihead")
#: The tests whose work changes with a GPU: each check they call runs on the CPU and, when
#: there is one, on CUDA too (``autograder.core.devices``). No other test touches CUDA.
CUDA_TESTS = ("tests/students/test_catalogues.py", "tests/students/test_ch01_checks.py")
#: Names a catalogue's answers may use without defining them: the imports a cell starts with.
CELL_IMPORTS = "import math\n\nimport torch\nimport torch.nn.functional as F\nfrom torch import nn\n"


@dataclass
class Step:
    name: str
    ok: bool
    seconds: float
    detail: str


# --------------------------------------------------------------------------------------
# Catalogue answers as notebook cells
# --------------------------------------------------------------------------------------


def answer_cell(value, name: str, taken: set[str]) -> str:
    """A cell's code that makes ``name`` the catalogue's ``value``, with the catalogue's helpers it uses.

    ``taken``: the names the notebook defines itself, which no helper may overwrite.
    """
    needed, todo = {}, [value]
    while todo:  # the catalogue's own functions and classes it refers to, and theirs
        item = todo.pop()
        if item.__name__ in needed:
            continue
        needed[item.__name__] = item
        module = sys.modules[item.__module__]
        for node in ast.walk(ast.parse(inspect.getsource(item))):
            used = getattr(module, node.id, None) if isinstance(node, ast.Name) else None
            if (inspect.isfunction(used) or inspect.isclass(used)) and used.__module__.startswith("catalogue_"):
                todo.append(used)
    clashes = set(needed) & taken - {name}
    if clashes:
        raise ValueError(f"{value.__name__}: its helpers {sorted(clashes)} would replace the notebook's own")
    in_order = sorted(needed.values(), key=lambda item: (item.__module__, inspect.getsourcelines(item)[1]))
    code = "\n\n".join(inspect.getsource(item).strip() for item in in_order)
    return f"{CELL_IMPORTS}\n\n{code}\n\n\n{name} = {value.__name__}\n"


def defined_names(nb: dict) -> dict[str, int]:
    """``{top-level name: index of the last code cell that defines it}``."""
    names = {}
    for index, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        try:
            body = ast.parse("".join(cell["source"])).body
        except SyntaxError:
            continue
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names[node.name] = index
            elif isinstance(node, ast.Assign):
                names.update((t.id, index) for t in node.targets if isinstance(t, ast.Name))
    return names


def with_answers(nb: dict, answers: dict[str, object]) -> dict:
    """A copy of ``nb`` with a cell after each answer's own that replaces it (``{name: catalogue answer}``)."""
    nb = json.loads(json.dumps(nb))
    where = defined_names(nb)
    for number, (name, value) in enumerate(sorted(answers.items(), key=lambda item: -where[item[0]])):
        cell = {"cell_type": "code", "id": f"catalogue-{number}", "metadata": {}, "execution_count": None,
                "outputs": [], "source": answer_cell(value, name, set(where))}
        nb["cells"].insert(where[name] + 1, cell)  # from the last answer up, so the indices stay right
    return nb


def submissions(assignment: str, solution: dict, wrong_limit: int | None,
                device: str = "cpu") -> dict[str, tuple[dict, set[str]]]:
    """``{student: (notebook, grade ids expected to lose points)}`` when graded on ``device``: right answers lose
    none, nor do the wrong answers grading tells as advice there."""
    import one_bug

    catalogue = importlib.import_module(f"catalogue_ch{assignment[:2]}")
    checked_by = {grade_id: {call.answer for call in calls}
                  for grade_id, calls in one_bug.test_cells(assignment).items()}
    right = {one_bug.answer_name(assignment, check.__name__): answer for check, answer, _ in catalogue.CORRECT}
    found = {"solution": (solution, set()), "catalogue-right": (with_answers(solution, right), set())}
    wrong = catalogue.WRONG
    if wrong_limit is not None and len(wrong) > wrong_limit:  # every n-th, spread over the parts
        wrong = wrong[:: math.ceil(len(wrong) / wrong_limit)]
    advice = getattr(catalogue, "ADVICE_AT_GRADING", {})  # mistakes grading tells as advice, failed on a GPU or not
    for number, (mistake, check, answer, _) in enumerate(wrong):
        name = one_bug.answer_name(assignment, check.__name__)
        own = {grade_id for grade_id, answers in checked_by.items() if name in answers}
        if mistake in advice and not (advice[mistake] and device == "cuda"):
            own = set()  # advice: no point lost
        found[f"wrong-{number:02d}-{answer.__name__.strip('_')}"] = (with_answers(solution, {name: answer}), own)
    return found


# --------------------------------------------------------------------------------------
# The steps
# --------------------------------------------------------------------------------------


class Run:
    """The run's clock (``--deadline``), its log and the environment of its commands."""

    def __init__(self, deadline: float, log: Path | None):
        self.started, self.deadline, self.log = time.monotonic(), deadline, log
        bin_folder = os.path.dirname(sys.executable)  # nbgrader, pytest of this Python
        self.env = {**os.environ, "PATH": f"{bin_folder}{os.pathsep}{os.environ['PATH']}", "PYTHONUNBUFFERED": "1"}

    def left(self) -> float:
        return self.deadline - (time.monotonic() - self.started)

    def command(self, title: str, argv: list[str], budget: float, cwd: Path = ROOT) -> tuple[int | None, str, float]:
        """Run ``argv`` for at most ``budget`` seconds and what the deadline leaves: (exit code or None, output, s)."""
        limit = max(1.0, min(budget, self.left() - 5))
        started = time.monotonic()
        try:
            done = subprocess.run(argv, cwd=cwd, env=self.env, capture_output=True, text=True, timeout=limit)
            code, output = done.returncode, done.stdout + done.stderr
        except subprocess.TimeoutExpired as stopped:
            code = None
            output = "".join(part.decode(errors="replace") if isinstance(part, bytes) else (part or "")
                             for part in (stopped.stdout, stopped.stderr)) + f"\n(stopped after {limit:.0f} s)"
        seconds = time.monotonic() - started
        self.write_log(f"$ {' '.join(map(str, argv))}   # {title}, {seconds:.1f} s, exit {code}\n{output}\n")
        return code, output, seconds

    def write_log(self, text: str) -> None:
        if self.log is not None:
            with self.log.open("a", encoding="utf-8") as handle:
                handle.write(text)


def machine() -> tuple[str, str]:
    """(the machine in words, the device to grade on)."""
    import torch

    words = f"torch {torch.__version__}, Python {platform.python_version()}, {os.cpu_count()} cores"
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        memory = torch.cuda.get_device_properties(0).total_memory / 2**30
        return f"{name} ({memory:.0f} GiB), CUDA {torch.version.cuda}, {words}", "cuda"
    return f"no GPU: CPU fallback (CUDA build: {torch.version.cuda or 'none'}), {words}", "cpu"


def sandbox_state(device: str) -> tuple[bool, str]:
    """(whether grading can use bubblewrap here, the summary's words)."""
    from autograder.grading.sandbox import Limits, SandboxUnavailable, check_bubblewrap

    where = shutil.which("bwrap")
    try:
        check_bubblewrap(Limits(device=device))
    except SandboxUnavailable as why:
        return False, f"OFF: graded with --no-sandbox, UNSAFE for students' code ({why})"
    return True, f"bubblewrap ({where})"


def grade_step(run: Run, assignment: str, device: str, sandbox: bool, wrong_limit: int | None,
               budget: float) -> Step:
    """Grade the catalogue's right and wrong answers of ``assignment`` and check every part's points."""
    from course import load, nbgrader, notebook

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as folder:
        course = Path(folder)
        shutil.copy(ROOT / "nbgrader_config.py", course)
        shutil.copytree(ROOT / "solutions" / assignment, course / "solutions" / assignment)
        nbgrader(course, "generate_assignment", assignment, "--force")
        expected = submissions(assignment, load(notebook(course / "solutions", assignment)), wrong_limit, device)
        for student, (nb, _) in expected.items():
            path = notebook(course / "submitted" / student, assignment)
            path.parent.mkdir(parents=True)
            path.write_text(json.dumps(nb))
        argv = [sys.executable, "-m", "autograder", "grade", assignment, "--course-dir", str(course),
                "--device", device, "--secret-file", str(course / "grading-secret")]
        code, output, _ = run.command(f"grade {assignment}", argv + ([] if sandbox else ["--no-sandbox"]), budget)
        table = course / "grades" / f"{assignment}.csv"
        rows = list(csv.DictReader(table.open(encoding="utf-8"))) if table.exists() else []
        # a passed part's verdict, in its autograded test cell, says where it was judged
        shown = "".join(verdicts(notebook(course / "autograded" / student, assignment)) for student in expected)
    seconds = time.monotonic() - started
    if code != 0 or not rows:
        last = output.strip().splitlines()[-3:] if output.strip() else ["no output"]
        return Step(f"grade {assignment}", False, seconds, f"exit {code}: " + " | ".join(last))
    judged_on = "on cpu and cuda" if device == "cuda" else "on cpu"  # where a passed part's results were judged
    problems, passed = [], 0
    for student, (_, loses) in expected.items():
        mine = [row for row in rows if row["student"] == student]
        lost = {row["part"] for row in mine if float(row["score"]) < float(row["max_score"])}
        if not mine:
            problems.append(f"{student}: not graded")
        elif not loses and lost:
            problems.append(f"{student}: lost points in {sorted(lost)}")
        elif loses and not lost & loses:
            problems.append(f"{student}: lost no points")
        elif lost - loses:
            problems.append(f"{student}: also lost points in {sorted(lost - loses)}")
        passed += sum(row["status"] == "passed" for row in mine)
    # a part's results judged on every device (then replayed on meta, where the part is), its bad arguments on the cpu
    on_device = len(re.findall(rf"^✔ [^,\n]*: passed, results right on .*, {judged_on}(, replayed on meta)?$", shown,
                               flags=re.MULTILINE))
    on_device += len(re.findall(r"^✔ [^,\n]*, bad arguments: passed, .*, on cpu$", shown, flags=re.MULTILINE))
    if on_device < passed:
        problems.append(f"only {on_device} of {passed} passed parts say they were judged {judged_on}")
    right = sum(not loses for _, loses in expected.values())
    detail = (f"{right} right submissions: full marks; {len(expected) - right} wrong: points lost in their own parts "
              f"only; {len(rows)} parts, {passed} passed, each judged {judged_on}")
    return Step(f"grade {assignment}", not problems, seconds, "; ".join(problems[:4]) or detail)


def verdicts(path: Path) -> str:
    """The text the cells of an autograded notebook show (each test cell: the grader's verdict), one line each."""
    if not path.exists():
        return ""
    outputs = [output for cell in json.loads(path.read_text())["cells"] for output in cell.get("outputs", [])]
    texts = [output.get("text") or output.get("data", {}).get("text/plain", "") for output in outputs]
    return "".join(("".join(text) if isinstance(text, list) else text).rstrip("\n") + "\n" for text in texts)


def tests_step(run: Run, device: str, budget: float) -> Step:
    """The tests whose checks run on CUDA too; in parallel where pytest-xdist is there."""
    options = ["-m", "not slow"] + ([] if device == "cuda" else ["-k", "ch03"])  # the CPU fallback: one chapter
    if importlib.util.find_spec("xdist") and (os.cpu_count() or 1) > 2:
        options += ["-n", str(min(8, os.cpu_count()))]  # pytest-xdist, which the GPU machines have
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *options, *CUDA_TESTS]
    code, output, seconds = run.command("tests", argv, budget)
    counts = re.findall(r"^=*\s*(\d+ (?:passed|failed|error).*?) in [\d.]+s", output, flags=re.MULTILINE)
    detail = counts[-1] if counts else (output.strip().splitlines() or ["no output"])[-1]
    return Step("tests on " + device, code == 0, seconds, f"{detail} (pytest {' '.join(options)} "
                                                          f"{' '.join(Path(t).name for t in CUDA_TESTS)})")


def benchmark_step(run: Run, name: str, argv: list[str], budget: float) -> Step:
    """One benchmark script; the summary keeps its goal lines."""
    code, output, seconds = run.command(name, [sys.executable, f"benchmarks/{name}.py", *argv], budget)
    goals = [line.strip() for line in output.splitlines() if re.match(r"(goal|N = \d|L = \d|cache ratio)", line)]
    detail = "; ".join(goals) or (output.strip().splitlines() or ["no output"])[-1]
    return Step(name, code == 0, seconds, detail)


def check(deadline: float, out: Path | None) -> int:
    """``run``: every step, then the summary; exit 0 when every step is ok."""
    log = out / "gpu_check.log" if out else None
    if log is not None:
        log.write_text("")
    run = Run(deadline, log)
    words, device = machine()
    gpu = device == "cuda"
    print(words, flush=True)
    try:
        sandbox, sandbox_words = sandbox_state(device)
    except ImportError as error:  # the installation failed: every step will say so too
        sandbox, sandbox_words = False, f"unknown ({error})"
    print(f"sandbox: {sandbox_words}", flush=True)
    steps = []
    if os.environ.get("GPU_CHECK_INSTALL"):  # what gpu_check.sh did before this
        ok, _, text = os.environ["GPU_CHECK_INSTALL"].partition(" ")
        steps.append(Step("install", ok == "ok", float(os.environ.get("GPU_CHECK_INSTALL_SECONDS", 0)), text))
    # (name, what it does): on the GPU at full size, within about 7 minutes; on the CPU shortened
    # Each step's seconds at most (the deadline may leave less): the GPU's sum is the 8 minutes'
    # worst case; each of them takes far less on an H100 machine. The decoder's reversal training
    # runs on the CPU whatever the device, so it is kept to 10 steps (a smoke test, not accuracy).
    plans = [(f"grade {a}", lambda a=a: grade_step(run, a, device, sandbox, None if gpu else 2, 120 if gpu else 300))
             for a in ASSIGNMENTS]
    plans += [("tests on " + device, lambda: tests_step(run, device, 150 if gpu else 300)),
              ("attention", lambda: benchmark_step(run, "attention", ["--device", device] + (
                  ["--sizes", "1024", "4096", "16384"] if gpu else ["--sizes", "256", "512", "--repeats", "1"]),
                  45 if gpu else 120)),
              ("decoding", lambda: benchmark_step(run, "decoding", ["--device", device, "--steps", "10"] + (
                  ["--lengths", "64", "512"] if gpu else
                  ["--lengths", "48", "96", "--new-tokens", "8", "--repeats", "1", "--cache-len", "64"]),
                  60 if gpu else 180))]
    for name, step in plans:
        started = time.monotonic()
        try:
            steps.append(step())
        except Exception as error:  # noqa: BLE001 - a step that breaks is a failed step, and the summary goes on
            steps.append(Step(name, False, time.monotonic() - started, f"{type(error).__name__}: {error}"))
            run.write_log(f"{name} raised {error!r}\n")
        print(_line(steps[-1]), flush=True)
    elapsed = time.monotonic() - run.started + sum(s.seconds for s in steps if s.name == "install")
    good = sum(step.ok for step in steps)
    summary = "\n".join(["=" * 30 + " GPU check " + "=" * 30, f"machine: {words}", f"sandbox: {sandbox_words}",
                         *map(_line, steps),
                         f"result: {'ok' if good == len(steps) else 'FAILED'}, {good}/{len(steps)} steps ok "
                         f"in {elapsed / 60:.1f} min" + ("" if gpu else " (CPU fallback: nothing ran on a GPU)"),
                         "=" * 71])
    print("\n" + summary, flush=True)
    if out is not None:
        (out / "gpu_check.txt").write_text(summary + "\n", encoding="utf-8")
    return 0 if good == len(steps) else 1


def _line(step: Step) -> str:
    return f"{step.name:<20} {'ok' if step.ok else 'FAILED':<6} {step.seconds:6.0f} s  {step.detail}"


# --------------------------------------------------------------------------------------
# The wheel folder (made here, where PyPI is reachable; the GPU machine has no internet)
# --------------------------------------------------------------------------------------

#: What grading, its kernels and the tests import beyond PyTorch: the grading extra's
#: packages, the kernel's, the tests' (their conftest imports jupyter_cache and yaml).
WHEEL_ROOTS = ("nbgrader", "nbclient", "jupyter_client", "ipykernel", "pyzmq", "nbformat", "SQLAlchemy",
               "matplotlib-inline", "jupyter-cache", "pytest", "PyYAML", "setuptools")
#: Left out, with everything only they require: PyTorch and its CUDA libraries (never
#: reinstalled), the scientific stack a PyTorch machine has (numpy, matplotlib and theirs), and
#: the browser front ends that nbgrader requires but grading never imports.
NOT_CARRIED = re.compile(r"torch|torchvision|triton|nvidia-.*|cuda-.*|numpy|matplotlib|pillow|fonttools|kiwisolver|"
                         r"contourpy|jupyterlab|jupyterlab-server|babel|ipywidgets|widgetsnbextension|"
                         r"jupyterlab-widgets|jupyter-lsp|jupyter-builder|notebook-shim|async-lru|json5")


def distributions_to_carry() -> dict[str, str]:
    """``{name: version}``: the roots and what they require, as installed in this environment."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    found, todo = {}, [(root, "") for root in WHEEL_ROOTS]
    while todo:
        name, extra = todo.pop()
        key = canonicalize_name(name)
        if key in found or re.fullmatch(NOT_CARRIED, key):
            continue
        dist = importlib.metadata.distribution(name)
        found[key] = dist.version
        for line in dist.requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": extra}):
                todo += [(requirement.name, e) for e in requirement.extras or [""]]
    return found


def make_wheels(folder: Path, python_version: str, limit_mb: float) -> int:
    """Download the wheels for ``python_version`` (Linux x86-64), copy bubblewrap; refuse a folder over the limit."""
    folder.mkdir(parents=True, exist_ok=True)
    carried = distributions_to_carry()
    pins = [f"{name}=={version}" for name, version in sorted(carried.items())]
    platforms = [f"--platform={p}" for p in ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_26_x86_64",
                                               "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")]
    download = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                               f"--python-version={python_version}", "--implementation=cp", *platforms,
                               "--dest", str(folder), *pins], capture_output=True, text=True)
    if download.returncode != 0:
        print(download.stdout[-3000:], download.stderr[-3000:], sep="\n", file=sys.stderr)
        return 1
    (folder / "requirements.txt").write_text("\n".join(pins) + "\n")
    copy_bubblewrap(folder / "bwrap")
    size = sum(path.stat().st_size for path in folder.rglob("*") if path.is_file()) / 2**20
    print(f"{folder}: {len(pins)} wheels for Python {python_version} and bubblewrap, {size:.1f} MiB")
    if size > limit_mb:
        print(f"over the {limit_mb:g} MiB the GPU machine's copy of the tree can carry", file=sys.stderr)
        return 1
    return 0


def copy_bubblewrap(folder: Path) -> None:
    """This machine's ``bwrap`` and the shared libraries it needs, behind a script that finds them."""
    binary = shutil.which("bwrap")
    if binary is None:
        print("no bwrap here (`make sandbox`): the GPU machine will grade with --no-sandbox unless it has one")
        return
    (folder / "lib").mkdir(parents=True, exist_ok=True)
    shutil.copy(binary, folder / "bwrap.bin")
    linked = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    for library in re.findall(r"=> (/\S+)", linked):
        if not re.search(r"/(libc|libm|libpthread|libdl|ld-linux[^/]*)\.so", library):  # the machine's own C library
            shutil.copy(library, folder / "lib")
    wrapper = folder / "bwrap"
    wrapper.write_text('#!/bin/sh\n# bubblewrap carried from the course machine, with its own libraries\n'
                       'here=$(dirname "$(readlink -f "$0")")\n'
                       'LD_LIBRARY_PATH="$here/lib" exec "$here/bwrap.bin" "$@"\n')
    wrapper.chmod(0o755)


def missing(folder: Path) -> int:
    """Print the folder's requirements that this Python does not have installed (what to install)."""
    from importlib.metadata import PackageNotFoundError, distribution

    for line in (folder / "requirements.txt").read_text().split():
        try:
            distribution(line.split("==")[0])
        except PackageNotFoundError:
            print(line)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    running = commands.add_parser("run", help="grade, test and benchmark on CUDA (or the CPU fallback)")
    running.add_argument("--deadline", type=float, default=450, help="seconds for all the steps (default: 450)")
    wheels = commands.add_parser("wheels", help="make the wheel folder the GPU machine installs from")
    wheels.add_argument("folder", type=Path)
    wheels.add_argument("--python-version", default="3.12", help="the GPU machine's Python (default: 3.12)")
    wheels.add_argument("--limit-mb", type=float, default=60)
    listing = commands.add_parser("missing", help="the folder's requirements this Python lacks")
    listing.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    if args.command == "wheels":
        return make_wheels(args.folder, args.python_version, args.limit_mb)
    if args.command == "missing":
        return missing(args.folder)
    out = Path(os.environ["OUT"]) if os.environ.get("OUT") else None
    return check(args.deadline, out)


if __name__ == "__main__":
    sys.exit(main())
