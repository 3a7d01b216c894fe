"""Runs inside the student's kernel: set-up before any student code, and an integrity audit.

:func:`install` is the kernel's first code. It imports what the checks rely on, takes a
snapshot of the objects a check's verdict depends on (``torch.allclose``, tensor methods,
builtins such as ``AssertionError``, the autograder's own functions, IPython's traceback
display and cell runner) and turns on fault handling. After each test cell the grader
calls :func:`audit`, which compares every object with its snapshot, puts back whatever
was changed, and names it: the part is then graded ``tampered``.

This is a second line of defence behind the static scan (``scan.py``), for patches made
in ways the scan cannot see. Code in the same process can, with enough effort, defeat
any check made in that process; the README says what the sandbox does and does not cover.
"""

from __future__ import annotations

import builtins
import importlib
import os
import pkgutil
import sys

_MISSING = object()
#: Builtins that IPython itself swaps in and out around every execution.
_IPYTHON_BUILTINS = {"get_ipython", "input", "raw_input", "display", "exit", "quit", "help", "_", "__", "___"}
#: Methods of the shell that decide what a cell's outcome looks like; an instance
#: attribute of one of these names can only be a patch.
_SHELL_METHODS = ("showtraceback", "_showtraceback", "showsyntaxerror", "run_cell", "run_cell_async",
                  "run_code", "run_ast_nodes", "transform_cell", "should_run_async")
#: Modules whose callbacks may legitimately join IPython's events (the inline plots).
_TRUSTED_CALLBACKS = ("IPython", "ipykernel", "matplotlib", "matplotlib_inline")
_snapshots: dict[str, tuple[object, dict]] = {}
_hooks: dict[str, object] = {}


def install(threads: int) -> None:
    """Prepare the kernel for grading and take the snapshot (call before student code)."""
    import torch
    import torch.testing

    torch.set_num_threads(max(1, threads))
    import autograder

    for module in pkgutil.iter_modules(autograder.__path__, "autograder."):
        if module.name.startswith("autograder.ch") or module.name in ("autograder.core", "autograder.runner",
                                                                       "autograder.plots"):
            importlib.import_module(module.name)
    try:  # the references and hidden cases, which the test cells import later
        import autograder.reference as reference
    except ImportError:
        reference = None
    for module in pkgutil.iter_modules(getattr(reference, "__path__", []), "autograder.reference."):
        importlib.import_module(module.name)
    for name, owner in _watched().items():
        _snapshots[name] = (owner, dict(vars(owner)))
    _hooks.update(_hook_state())


def audit() -> str:
    """``"clean"``, or ``"changed: a, b"`` naming what student code altered (now restored)."""
    changed = []
    for name, (owner, saved) in _snapshots.items():
        current = vars(owner)
        for key, value in saved.items():
            if owner is builtins and key in _IPYTHON_BUILTINS:
                continue
            now = current.get(key, _MISSING)
            if now is value:
                continue
            if _wrapped_by_torch(now, value):
                saved[key] = now  # e.g. torch._dynamo wraps torch.manual_seed when first imported
                continue
            changed.append(f"{name}.{key}")
            _restore(owner, key, value)
    for name, value in _hook_state().items():
        if value != _hooks[name]:
            changed.append(name)
    _restore_hooks()
    return "clean" if not changed else "changed: " + ", ".join(sorted(changed)[:8])


def _wrapped_by_torch(new: object, old: object) -> bool:
    """Whether ``new`` is PyTorch's own wrapper of ``old`` (its code lives inside torch)."""
    import torch

    code = getattr(new, "__code__", None)
    return (getattr(new, "__wrapped__", None) is old and code is not None
            and code.co_filename.startswith(os.path.dirname(torch.__file__)))


def _watched() -> dict[str, object]:
    """The namespaces whose contents a verdict depends on, by a readable name."""
    import torch
    import torch.nn.functional
    import torch.testing
    from IPython.core.interactiveshell import InteractiveShell

    watched = {
        "builtins": builtins,
        "torch": torch,
        "torch.Tensor": torch.Tensor,
        "torch._C.TensorBase": torch._C.TensorBase,
        "torch.testing": torch.testing,
        "torch.nn.functional": torch.nn.functional,
        "InteractiveShell": InteractiveShell,
    }
    for name, module in list(sys.modules.items()):
        if name.startswith("autograder") and not name.startswith("autograder.grading") and module is not None:
            watched[name] = module
            for attribute, value in vars(module).items():  # classes of the checks, e.g. Case
                if isinstance(value, type) and value.__module__ == name:
                    watched[f"{name}.{attribute}"] = value
    return watched


def _hook_state() -> dict[str, object]:
    """Interpreter and IPython hooks that could rewrite or hide what a test cell does."""
    from IPython import get_ipython

    shell = get_ipython()
    state = {
        "sys.gettrace()": sys.gettrace(),
        "sys.getprofile()": sys.getprofile(),
        "sys.meta_path": list(sys.meta_path),
    }
    if shell is not None:
        state["IPython events"] = [getattr(cb, "__qualname__", repr(cb)) for cbs in shell.events.callbacks.values()
                                   for cb in cbs if not getattr(cb, "__module__", "").startswith(_TRUSTED_CALLBACKS)]
        state["IPython input transformers"] = list(shell.input_transformers_post) + list(
            shell.input_transformer_manager.cleanup_transforms) + list(shell.input_transformer_manager.line_transforms)
        state["IPython shell methods"] = {name: vars(shell).get(name) for name in _SHELL_METHODS}
    return state


def _restore(owner: object, key: str, value: object) -> None:
    try:
        if value is _MISSING:
            delattr(owner, key)
        elif isinstance(owner, type):
            setattr(owner, key, value)
        else:
            vars(owner)[key] = value
    except (AttributeError, TypeError):
        pass  # a slot that cannot be written back: reported all the same


def _restore_hooks() -> None:
    from IPython import get_ipython

    sys.settrace(None)
    sys.setprofile(None)
    sys.meta_path[:] = _hooks["sys.meta_path"]
    shell = get_ipython()
    if shell is not None:
        for callbacks in shell.events.callbacks.values():
            callbacks[:] = [cb for cb in callbacks if getattr(cb, "__module__", "").startswith(_TRUSTED_CALLBACKS)]
        for name, value in _hooks["IPython shell methods"].items():
            if value is None:
                vars(shell).pop(name, None)
            else:
                vars(shell)[name] = value
