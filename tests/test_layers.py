"""The package's folders say which process runs a file, and the imports keep to it.

``autograder/`` (the checks, the judge: the student's notebook and the grading worker),
``autograder/kernel/`` (the student's kernel), ``autograder/grading/`` (a grading worker),
``autograder/instructor/`` (the instructor's commands), ``autograder/reference/`` (the
grading side's answers). A file may import from its own layer and from the layers below it,
never from one that runs in a process it must not reach or that holds what it must not see:
the kernel's code imports nothing of the grader, the worker nothing of the instructor's
command, the checks nothing of either. And no two modules import each other, directly or
round a loop, at module level or inside a function.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from course import ROOT

PACKAGE = ROOT / "autograder"

#: What each layer may import from the package, besides itself.
ALLOWED = {
    "checks": {"kernel"},  # in the student's notebook the judge asks the answer directly
    "kernel": {"checks"},
    "grading": {"checks", "kernel", "reference"},
    "instructor": {"checks", "grading", "reference"},
    "reference": {"checks"},
}


def layer_of(module: str) -> str:
    """``"kernel"`` for ``autograder.kernel.serve``; ``"checks"`` for the package's top level, but
    ``python -m autograder`` (``__main__``), the instructor's command."""
    parts = module.split(".")
    if module == "autograder.__main__":
        return "instructor"
    return parts[1] if len(parts) >= 2 and parts[1] in ALLOWED else "checks"


def module_name(path: Path) -> str:
    relative = path.relative_to(ROOT).with_suffix("")
    parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """The package's modules that ``path`` imports, anywhere in the file (``from . import x`` resolved)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found |= {f"{base}.{alias.name}" for alias in node.names} | {base}
    return {module for module in found if module == "autograder" or module.startswith("autograder.")}


def graph() -> dict[str, set[str]]:
    """``{module: the package's modules it imports}``, names that are not modules mapped to theirs."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}

    def existing(name: str) -> str:
        while name not in modules:
            name = name.rpartition(".")[0]
        return name

    return {name: {existing(i) for i in imports_of(path)} - {name, "autograder"} for name, path in modules.items()}


def test_the_imports_keep_to_the_layers():
    crossings = sorted(f"{module} ({layer_of(module)}) imports {target} ({layer_of(target)})"
                       for module, targets in graph().items() for target in targets
                       if layer_of(target) != layer_of(module) and layer_of(target) not in ALLOWED[layer_of(module)])
    assert not crossings, "\n".join(crossings)


def test_no_module_imports_itself_round_a_loop():
    edges = graph()
    state: dict[str, str] = {}
    loops = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for target in sorted(edges.get(module, ())):
            if state.get(target) == "open":
                loops.append(" -> ".join(path[path.index(target):] + [target]))
            elif target not in state:
                visit(target, path + [target])
        state[module] = "done"

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    assert not loops, "import cycles:\n" + "\n".join(loops)


@pytest.mark.parametrize("source, expected", [
    ("from ..grading import sandbox\n", {"autograder.grading", "autograder.grading.sandbox"}),
    ("def f():\n    from .execute import KernelSession\n", {"autograder.kernel.execute",
                                                           "autograder.kernel.execute.KernelSession"}),
    ("import autograder.judge as j\nimport os\n", {"autograder.judge"}),
])
def test_imports_are_found_at_module_level_and_inside_functions(tmp_path, monkeypatch, source, expected):
    path = PACKAGE / "kernel" / "example.py"
    monkeypatch.setattr(Path, "read_text", lambda self, encoding=None: source)
    assert imports_of(path) == expected


def test_a_crossing_and_a_loop_are_seen(monkeypatch):
    """The two tests above can fail: a kernel file that imports the worker, and two modules round a loop."""
    planted = {"autograder.kernel.serve": {"autograder.grading.verdict"},
               "autograder.grading.verdict": {"autograder.kernel.serve"}}
    monkeypatch.setattr(__import__(__name__), "graph", lambda: planted, raising=False)
    with pytest.raises(AssertionError, match="autograder.kernel.serve \\(kernel\\) imports autograder.grading.verdict"):
        test_the_imports_keep_to_the_layers()
    with pytest.raises(AssertionError, match="import cycles"):
        test_no_module_imports_itself_round_a_loop()
