"""Static scan of a student's code for attempts to tamper with grading.

The scan reads the source, never runs it, so nothing the student's code does at run time
can hide from it. It flags the ways into the grader's process that an exercise on
attention never needs: rebinding attributes of imported modules (``torch.allclose = ...``),
the interpreter's back doors (``exec``, ``__import__``, frames, ``__globals__``), the
notebook machinery (``get_ipython``, IPython, the autograder itself) and tensor subclasses
that could answer every comparison with "equal". A flagged cell is not run; the part it
belongs to scores 0 with status ``tampered``.
"""

from __future__ import annotations

import ast

#: Modules an answer never needs and tampering always does.
FORBIDDEN_MODULES = {
    "autograder", "IPython", "ipykernel", "jupyter_client", "zmq", "builtins", "gc",
    "ctypes", "importlib", "inspect", "traceback",
}
#: Attributes of ``sys`` that reach the interpreter's machinery (``sys.exit`` stays allowed).
FORBIDDEN_SYS_ATTRIBUTES = {
    "modules", "_getframe", "settrace", "setprofile", "meta_path", "path_hooks", "excepthook", "displayhook",
}
#: Names whose only use in an answer would be to reach around the grader.
FORBIDDEN_NAMES = {
    "get_ipython", "exec", "eval", "compile", "__import__", "globals", "vars", "breakpoint",
    "__builtins__", "__loader__", "__spec__",
}
#: Attributes that lead to frames, code objects, module dictionaries or hooks.
FORBIDDEN_ATTRIBUTES = {
    "__globals__", "__code__", "__builtins__", "__dict__", "__subclasses__", "__closure__",
    "f_globals", "f_locals", "f_back", "f_builtins", "gi_frame", "tb_frame", "cr_frame",
    "__torch_function__", "__torch_dispatch__", "as_subclass", "_make_subclass", "__setattr__", "__delattr__",
}


def scan(source: str, modules: set[str] = frozenset()) -> list[str]:
    """Every tampering construct in ``source``, one readable line each (empty if none).

    ``modules`` names modules imported elsewhere in the notebook (the instructor's
    set-up cells), whose attributes the code must not rebind either.

    Code that does not parse is not flagged here: running it gives the student the
    ``SyntaxError`` to read, like any other mistake.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    modules = _rebound(tree, _module_aliases(tree) | set(modules))
    sys_names = _rebound(tree, {"sys"} | _sys_aliases(tree))
    findings = []
    for node in ast.walk(tree):
        problem = _problem(node, modules, sys_names)
        if problem:
            findings.append(f"line {getattr(node, 'lineno', '?')}: {problem}")
    return findings


def module_aliases(source: str) -> set[str]:
    """Names that the imports in ``source`` bind (empty if it does not parse)."""
    try:
        return _module_aliases(ast.parse(source))
    except SyntaxError:
        return set()


def _module_aliases(tree: ast.AST) -> set[str]:
    """Names bound to modules by imports in ``tree``, plus the usual ``torch``/``F``/``nn``."""
    names = {"torch", "F", "nn", "math", "np", "numpy", "plt", "matplotlib"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            # `from torch import nn` binds a module; `from math import sqrt` binds a function,
            # but rebinding an attribute of either is tampering all the same.
            names.update(a.asname or a.name for a in node.names)
    return names


def _sys_aliases(tree: ast.AST) -> set[str]:
    """Names that ``import sys as ...`` binds."""
    return {a.asname or a.name for node in ast.walk(tree) if isinstance(node, ast.Import)
            for a in node.names if a.name == "sys"}


def _rebound(tree: ast.AST, names: set[str]) -> set[str]:
    """``names`` and every plain name assigned one of them (``t = torch``, ``t = s = torch``),
    however many times removed."""
    names = set(names)
    while True:
        more = {target.id for node in ast.walk(tree) if isinstance(node, (ast.Assign, ast.NamedExpr))
                and isinstance(node.value, ast.Name) and node.value.id in names
                for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
                if isinstance(target, ast.Name)} - names
        if not more:
            return names
        names |= more


def _root_name(node: ast.AST) -> str | None:
    """``torch`` for ``torch.testing.assert_close`` or ``torch.__dict__['x']``; else ``None``."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _problem(node: ast.AST, modules: set[str], sys_names: set[str] = frozenset({"sys"})) -> str | None:
    """What is wrong with one syntax node, or ``None``."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
        bad = [n for n in names if n.split(".")[0] in FORBIDDEN_MODULES]
        if isinstance(node, ast.ImportFrom) and node.module == "sys":
            bad += [f"sys.{a.name}" for a in node.names if a.name in FORBIDDEN_SYS_ATTRIBUTES | {"*"}]
        return f"imports `{bad[0]}`, which an answer does not need" if bad else None
    if isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
        return f"uses `{node.id}`"
    if isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_ATTRIBUTES:
        return f"uses the attribute `{node.attr}`"
    if isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_SYS_ATTRIBUTES and _root_name(node) in sys_names:
        return f"uses `sys.{node.attr}`"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "setattr",
                                                                                          "delattr", "hasattr"):
        attribute = node.args[1] if len(node.args) > 1 else None
        if isinstance(attribute, ast.Constant) and attribute.value in FORBIDDEN_ATTRIBUTES | FORBIDDEN_SYS_ATTRIBUTES:
            return f"uses the attribute `{attribute.value}` through `{node.func.id}`"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "type" and len(node.args) == 3:
        if isinstance(node.args[1], ast.Tuple) and any(ast.unparse(b).split(".")[-1] == "Tensor"
                                                       for b in node.args[1].elts):
            return "makes a subclass of torch.Tensor with type()"
    if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
        targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
        for target in targets:
            for element in ast.walk(target):
                if isinstance(element, (ast.Attribute, ast.Subscript)) and _root_name(element) in modules:
                    return f"changes `{ast.unparse(element)}`, part of the module `{_root_name(element)}`"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
        if node.args and _root_name(node.args[0]) in modules:
            return f"calls `{node.func.id}` on the module `{_root_name(node.args[0])}`"
    if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in ("setattr", "delattr"):
        return f"renames `{node.value.id}`"
    if isinstance(node, ast.ClassDef):
        for base in node.bases:
            if ast.unparse(base).split(".")[-1] == "Tensor":
                return f"defines `{node.name}`, a subclass of torch.Tensor"
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in FORBIDDEN_ATTRIBUTES:
        return f"defines `{node.name}`"
    return None
