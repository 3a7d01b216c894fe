"""The code handed in, read by the grader: the library attention an answer can reach, and what no reading sees past.

A graded part that forbids library attention (``Part.forbid_library``) earns its points for
implementing attention, not for calling PyTorch's or d2l's. Whether an answer calls library
attention is not something the student's kernel can be asked: code in that process can make it
report anything. So the grader reads the submission's own cells (answer cells and cells the
student added; never the instructor's), in its own process, with Python's ``ast`` after
IPython's transformation of magics, as contest judges read a submission's source:

* **Library attention an answer reaches** (:meth:`Reading.library`): from the answer's
  definition, the global names it uses are followed to the student's cells that bind them
  (functions, classes, assignments, imports, and statements that change what a name holds), and
  every path those reach is resolved through the notebook's imports: PyTorch's fused and
  multi-head attention (``F.scaled_dot_product_attention``, ``nn.MultiheadAttention``,
  ``nn.Transformer*``, ``torch.nn.attention``, ATen's attention operators), d2l's attention,
  and the course's own modules that call them (:data:`LIBRARY`). The part's points are withheld,
  and the message names the cell and line.
* **What a static reading cannot see past** (:attr:`Reading.unsure`): code that can change what
  a name holds, or run code the reading never sees, at run time — a name built from pieces
  (``getattr`` with a computed name), ``setattr`` on modules, assignments into a module
  (``torch.softmax = …``), ``globals()``, ``vars()``, ``exec``, ``eval``, the import machinery
  (``importlib``, ``__import__``, ``sys.modules``, a module the grader cannot find), frames and
  introspection (``sys._getframe``, ``inspect``, ``f_back``), ``gc``, ``input()``, threads and
  processes, files written, magics beyond timing and plotting, dunder attributes beyond a short
  allowlist, PyTorch's private entry points and the kernel object. A part that forbids library
  attention and passed on its results then *needs a look*: its points wait until an instructor
  reads the cells named. It is never a pass on the kernel's word. The allowlist keeps honest
  answers clean: no solution notebook and no catalogued answer is flagged
  (``tests/grading/test_reading.py`` measures it).

Findings name the cell (its index in the graded notebook) and the line.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import io
import re
import symtable
import sys
import tokenize
from dataclasses import dataclass, field
from typing import Iterable

from ..kernel.measure import LIBRARY_ATTENTION, LIBRARY_ATTENTION_PREFIXES
from .notebooks import Assembled, nbgrader_meta

#: Library attention by the path an import gives it (a path, or a prefix of one ending in ``.``); ATen's and
#: the private operators are told by their names (:func:`_library_operator`).
LIBRARY = (
    "torch.nn.functional.scaled_dot_product_attention", "torch.nn.functional.multi_head_attention_forward",
    "torch.nn.MultiheadAttention", "torch.nn.Transformer", "torch.nn.TransformerEncoder",
    "torch.nn.TransformerEncoderLayer", "torch.nn.TransformerDecoder", "torch.nn.TransformerDecoderLayer",
    "torch.nn.modules.activation.MultiheadAttention", "torch.nn.modules.transformer.", "torch.nn.attention.",
    "d2l.torch.masked_softmax", "d2l.torch.DotProductAttention", "d2l.torch.AdditiveAttention",
    "d2l.torch.MultiHeadAttention", "d2l.torch.PositionalEncoding", "d2l.torch.TransformerEncoderBlock",
    "d2l.torch.TransformerDecoderBlock", "d2l.torch.AttentionDecoder",
    # the course's own modules that call library attention (stand-ins for earlier parts, the decoder it gives)
    "autograder.ch06_transformer.FallbackMultiHeadAttention", "autograder.ch06_transformer.FallbackEncoderBlock",
    "autograder.ch07_decoding.TinyDecoder", "autograder.ch07_decoding._DecoderLayer",
)
#: Modules whose every use the reading cannot see past (what they do runs code, or changes it, unseen).
UNSURE_MODULES = {
    "importlib": "the import machinery", "pkgutil": "the import machinery", "runpy": "the import machinery",
    "zipimport": "the import machinery", "imp": "the import machinery", "builtins": "Python's builtins",
    "inspect": "frames and introspection", "traceback": "frames and introspection", "gc": "the garbage collector",
    "threading": "threads", "_thread": "threads", "concurrent": "threads or processes", "asyncio": "an event loop",
    "multiprocessing": "processes", "subprocess": "processes", "signal": "signals", "ctypes": "native code",
    "cffi": "native code", "marshal": "code as data", "pickle": "code as data", "dill": "code as data",
    "cloudpickle": "code as data", "types": "code objects", "code": "code as data", "ipykernel": "the kernel",
    "torch.multiprocessing": "processes", "torch.overrides": "PyTorch's function modes",
    "sys.modules": "the import machinery", "sys._getframe": "frames", "sys.settrace": "frames",
    "sys.setprofile": "frames", "sys.meta_path": "the import machinery", "sys.path_hooks": "the import machinery",
    "os.system": "processes", "os.popen": "processes", "os.fork": "processes", "os.execv": "processes",
    "os.execve": "processes", "os.execl": "processes", "os.spawnv": "processes", "os.posix_spawn": "processes",
    "os.kill": "processes",
}
#: Builtins that run code, reach namespaces or read the grader's channel: unsure wherever they are used.
UNSURE_BUILTINS = {"exec": "runs code in a string", "eval": "runs code in a string", "compile": "compiles code",
                   "__import__": "imports by a computed name", "globals": "reaches a namespace",
                   "locals": "reaches a namespace", "vars": "reaches a namespace", "input": "reads the channel input() shares with the grader",
                   "breakpoint": "starts a debugger", "memoryview": "reaches raw memory"}
#: Builtins that are unsure only with a computed name or on a module: ``getattr(self, name)`` is fine.
ATTRIBUTE_BUILTINS = ("getattr", "setattr", "delattr")
#: Dunder attributes an honest answer uses; any other (``__globals__``, ``__code__``, ``__dict__``, ...) is unsure.
DUNDERS = {"__init__", "__name__", "__qualname__", "__doc__", "__class__", "__len__", "__call__", "__repr__",
           "__str__", "__module__", "__version__"}
#: Attributes of frames, tracebacks, generators and coroutines.
FRAME_ATTRIBUTES = {"f_back", "f_globals", "f_locals", "f_code", "f_builtins", "tb_frame", "tb_next", "gi_frame",
                    "cr_frame", "ag_frame", "gi_code", "cr_code"}
#: IPython magics that only time or draw: their cells are read as code; any other magic is unsure.
QUIET_MAGICS = {"time", "timeit", "matplotlib", "config"}
#: Methods of the shell (``get_ipython()``) that run magics (checked against :data:`QUIET_MAGICS`).
_MAGIC_RUNNERS = ("run_line_magic", "run_cell_magic")
#: Text that reaches what the reading cannot see past, in a cell that does not parse.
_PATTERNS = (
    (re.compile(r"\bautograder\s*\.\s*\w"), "names a module of the course (autograder.…)"),
    (re.compile(r"\btorch(\s*\.\s*\w+)*?\s*\.\s*(ops\b|_(?!_)\w*)"), "reaches PyTorch's private entry points"),
    (re.compile(r"\bipykernel\b|\bIPKernelApp\b|\bget_ipython\b"), "reaches the kernel"),
    (re.compile(r"\b(exec|eval|getattr|setattr|globals|vars|input|__import__|importlib)\b"), "runs or reaches code "
                                                                                          "by name"),
)


@dataclass(frozen=True)
class Finding:
    """One thing the reading found in a submission's cell.

    Attributes:
        cell: the cell's index in the graded (autograded) notebook, from 0.
        where: the cell in words: ``"answer cell `window_mask`"`` or ``"a cell the student added"``.
        line: the line in the cell, from 1.
        what: what was found, e.g. ``"calls torch.nn.functional.scaled_dot_product_attention"``.
    """

    cell: int
    where: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.where} (cell {self.cell + 1}), line {self.line}: {self.what}"


@dataclass
class Reading:
    """What the grader read in a submission's own cells.

    Attributes:
        unsure: what the reading cannot see past, in notebook order.
        uses: per global name bound in the student's cells, the global names its bindings use.
        library_at: per such name, the library attention its bindings use, as findings.
    """

    unsure: list[Finding] = field(default_factory=list)
    uses: dict[str, set[str]] = field(default_factory=dict)
    library_at: dict[str, list[Finding]] = field(default_factory=dict)

    def library(self, answer: str, skip: Iterable[str] = ()) -> list[Finding]:
        """The library attention ``answer`` reaches through the student's cells, in the order found; the names in
        ``skip`` (what the grader replaces while the part is judged) are not followed."""
        seen, waiting, found = set(skip), [answer], []
        while waiting:
            name = waiting.pop()
            if name in seen:
                continue
            seen.add(name)
            found += self.library_at.get(name, [])
            waiting += sorted(self.uses.get(name, set()) - seen)
        return sorted(set(found), key=lambda finding: (finding.cell, finding.line, finding.what))


def read(assembled: Assembled) -> Reading:
    """The reading of ``assembled``'s student cells; every code cell is read in order for the names its imports
    bind (``F`` for ``torch.nn.functional``), only answer cells and added cells for findings and bindings."""
    reading, aliases, students = Reading(), dict(_BUILTIN_ALIASES), set()
    for index, (cell, role) in enumerate(zip(assembled.notebook.cells, assembled.roles, strict=True)):
        if cell.cell_type != "code" or role == "test":
            continue
        student = role in ("answer", "extra")
        where = (f"answer cell `{nbgrader_meta(cell).get('grade_id')}`" if role == "answer"
                 else "a cell the student added")
        _read_cell(cell.source, aliases, students, reading if student else None,
                   lambda line, what, index=index, where=where: Finding(index, where, line, what))
    return reading


def read_source(source: str) -> Reading:
    """The reading of one cell read alone, as a student's added cell (a test's entry point); its findings' cell is 0."""
    reading = Reading()
    _read_cell(source, dict(_BUILTIN_ALIASES), set(), reading, lambda line, what: Finding(0, "the cell", line, what))
    return reading


#: Names a notebook has without importing them here (an earlier cell, the kernel's own).
_BUILTIN_ALIASES = {"get_ipython": "IPython.get_ipython", "torch": "torch", "autograder": "autograder",
                    **{name: f"builtins.{name}" for name in (*UNSURE_BUILTINS, *ATTRIBUTE_BUILTINS, "open")}}


def _read_cell(source: str, aliases: dict[str, str], students: set[str], reading: Reading | None, finding) -> None:
    """Read one cell: update ``aliases``; where ``reading`` is given (a student's cell), record its bindings (their
    names added to ``students``), the library attention they use and what is unsure, as ``finding(line, what)``."""
    python = _python(source)
    try:
        tree = compile(python, "<cell>", "exec", flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    except (SyntaxError, ValueError):
        if reading is not None:  # it raises SyntaxError in the kernel too, unless the kernel reads it otherwise
            reading.unsure += [finding(line, what) for line, what in _tokens_found(source)]
        return
    visitor = _Cell(aliases, _global_uses(python), students)
    visitor.visit(tree)
    if reading is None:
        return
    students.update(visitor.uses)
    reading.unsure += [finding(line, what) for line, what in sorted(set(visitor.unsure))]
    for name, uses in visitor.uses.items():
        reading.uses.setdefault(name, set()).update(uses)
    for name, found in visitor.library.items():
        reading.library_at.setdefault(name, []).extend(finding(line, what) for line, what in found)


def _python(source: str) -> str:
    """``source`` as the kernel runs it: IPython's magics and shell escapes turned into calls, lines kept."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        return TransformerManager().transform_cell(source)
    except Exception:  # noqa: BLE001 - an odd cell IPython cannot transform: read as written
        return source


def _global_uses(python: str) -> dict[tuple[str, int], set[str]]:
    """``{(name, line) of a top-level function or class: the global names its code uses}``, by Python's own
    symbol tables (a function's parameters and locals are not globals); empty where they cannot be built."""
    try:
        table = symtable.symtable(python, "<cell>", "exec")
    except (SyntaxError, ValueError):
        return {}

    def globals_of(scope: symtable.SymbolTable) -> set[str]:
        names = {s.get_name() for s in scope.get_symbols() if s.is_referenced() and s.is_global()}
        return names.union(*(globals_of(child) for child in scope.get_children()))

    return {(child.get_name(), child.get_lineno()): globals_of(child) for child in table.get_children()}


class _Cell(ast.NodeVisitor):
    """One cell's tree: its top-level statements as bindings of global names, what they use, what is unsure.

    ``aliases`` (name -> dotted path of what an import bound it to) is the notebook's, updated as the cell
    binds names. Each top-level statement *owns* the global names it binds or changes (``x = ...``,
    ``def f``, ``x.attr = ...``, ``x.append(...)``): the library attention and the global names used
    inside it are recorded for each of them. A library function used as a value (not called) in a
    statement that owns nothing is unsure: it could be kept anywhere.
    """

    def __init__(self, aliases: dict[str, str], scopes: dict[tuple[str, int], set[str]], students: set[str]):
        self.aliases, self.scopes, self.students = aliases, scopes, students
        self.uses: dict[str, set[str]] = {}
        self.library: dict[str, list[tuple[int, str]]] = {}
        self.unsure: list[tuple[int, str]] = []
        self.owners: list[str] = []
        self.in_function = 0
        self.called: set[int] = set()  # ids of the nodes calls call
        self.placed: set[int] = set()  # ids of the nodes the reading follows where they go (a base, a name bound)

    # ---- top-level statements: who owns what they use

    def visit_Module(self, node: ast.Module) -> None:
        for statement in node.body:
            self._statement(statement)

    def _statement(self, node: ast.stmt) -> None:
        if isinstance(node, (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try)):
            self._compound(node)
            return
        owners = self._owners(node)
        for name in owners:
            self.uses.setdefault(name, set()).update(self._used_names(node))
        self.owners = owners
        self.visit(node)
        self.owners = []

    def _compound(self, node: ast.stmt) -> None:
        """A top-level ``if``, loop, ``with`` or ``try``: its header read as a statement that owns what it binds,
        its bodies' statements as top-level statements."""
        header = [getattr(node, name) for name in ("test", "iter", "target") if getattr(node, name, None) is not None]
        header += [item for item in getattr(node, "items", [])]
        owners = sorted({n for part in header for n in _bound_by(part)})
        for name in owners:
            self.uses.setdefault(name, set()).update(n for part in header for n in _loaded_names(part))
        self.owners = owners
        for part in header:
            self.visit(part)
        self.owners = []
        for name in ("body", "orelse", "finalbody"):
            for statement in getattr(node, name, []):
                self._statement(statement)
        for handler in getattr(node, "handlers", []):
            for statement in handler.body:
                self._statement(statement)

    def _owners(self, node: ast.stmt) -> list[str]:
        """The global names a top-level statement binds, or changes the object of."""
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return [node.name]
        targets = getattr(node, "targets", None) or [getattr(node, "target", None)]
        changed = {_root(target) for target in targets if isinstance(target, (ast.Attribute, ast.Subscript))}
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            function = node.value.func
            if isinstance(function, ast.Attribute):  # helpers.append(...), d.update(...): changes `helpers`
                changed.add(_root(function.value))
            elif isinstance(function, ast.Name) and function.id == "setattr" and node.value.args:
                changed.add(_root(node.value.args[0]))
        changed = {name for name in changed if name and name not in self.aliases}  # a module's: unsure, elsewhere
        return sorted(set(_bound_by(node)) | changed)

    def _used_names(self, node: ast.stmt) -> set[str]:
        """The global names a top-level statement uses (a function's or class's by its symbol table)."""
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            scoped = self.scopes.get((node.name, node.lineno))
            decorators = {n for d in node.decorator_list for n in _loaded_names(d)}
            bases = {n for b in getattr(node, "bases", []) for n in _loaded_names(b)}
            return (scoped if scoped is not None else _loaded_names(node)) | decorators | bases
        return _loaded_names(node)

    # ---- paths

    def path(self, node: ast.AST) -> str:
        """The dotted path ``node`` evaluates to (``"torch.nn.functional.softmax"``), ``""`` if unknown."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id, "")
        if isinstance(node, ast.Attribute):
            base = self.path(node.value)
            return f"{base}.{node.attr}" if base else ""
        if isinstance(node, ast.Subscript):  # sys.modules["autograder.kernel.serve"]
            base, key = self.path(node.value), _string(node.slice)
            if base == "sys.modules" and key:
                return key
            return ""
        if isinstance(node, ast.Call):
            called = self.path(node.func)
            if called == "builtins.getattr" and len(node.args) >= 2 and _string(node.args[1]):
                base = self.path(node.args[0])
                return f"{base}.{_string(node.args[1])}" if base else ""
            if called == "IPython.get_ipython":
                return "IPython.shell"
        return ""

    # ---- bindings of aliases

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._imported(node, alias.name)
            if alias.asname:
                self._bind(alias.asname, alias.name)
            else:
                top = alias.name.split(".")[0]
                self._bind(top, top)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = "." * node.level + (node.module or "")
        self._imported(node, module)
        for alias in node.names:
            if alias.name == "*":
                if _has_library(module):
                    self._unsure(node, f"imports every name of {module}, library attention among them")
                continue
            path = f"{module}.{alias.name}"
            self._imported(node, path)
            self._bind(alias.asname or alias.name, path)
            self._library(node, path)

    def _imported(self, node: ast.AST, module: str) -> None:
        """An import of ``module``: unsure where it is one the reading cannot see past, or one the grader cannot
        find (a file the submission wrote, say)."""
        why = _unsure_path(module)
        if why:
            self._unsure(node, f"imports {module} ({why})")
        elif module and not module.startswith(".") and not _findable(module):
            self._unsure(node, f"imports {module}, which the grader cannot find to read")

    def _bind(self, name: str, path: str) -> None:
        self.aliases[name] = path

    def visit_Assign(self, node: ast.Assign) -> None:
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            self.placed.add(id(node.value))  # `m = torch.nn.functional`: m is followed as an alias
        self.visit(node.value)
        for target in node.targets:
            self._assigned(target, node.value)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)
        self._assigned(node.target, node.value)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.visit(node.value)
        self._assigned(node.target, None)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._assigned(target, None)

    def _assigned(self, target: ast.AST, value: ast.AST | None) -> None:
        """A name bound (an alias followed, at the top level), or an attribute or item assigned: unsure where it
        changes a module (``torch.softmax = ...``) or a dunder."""
        if isinstance(target, ast.Name):
            bound = self.path(value) if value is not None else ""
            if bound:
                self.aliases[target.id] = bound
            else:
                self.aliases.pop(target.id, None)
            return
        if isinstance(target, (ast.Tuple, ast.List, ast.Starred)):
            for element in (target.elts if not isinstance(target, ast.Starred) else [target.value]):
                self._assigned(element, None)
            return
        if isinstance(target, ast.Attribute) and target.attr.startswith("__") and target.attr.endswith("__"):
            self._unsure(target, f"assigns a dunder attribute ({target.attr})")
        owner = self.path(target.value) if isinstance(target, (ast.Attribute, ast.Subscript)) else ""
        if owner:
            self._unsure(target, f"changes {owner} in the kernel")
        self.visit(target)

    # ---- functions and classes

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        """A function's body: its own aliases (``m = torch.nn.functional`` inside it) are followed there only."""
        outside = dict(self.aliases)
        self.in_function += 1
        self.generic_visit(node)
        self.in_function -= 1
        self.aliases.clear()
        self.aliases.update(outside)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self.visit_FunctionDef(node)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.visit_FunctionDef(node)

    def visit_Global(self, node: ast.Global) -> None:
        """``global x`` in a function: what the function does, it may leave in ``x``."""
        for name in node.names:
            for owner in self.owners:
                self.uses.setdefault(name, set()).add(owner)

    # ---- uses

    def visit_Call(self, node: ast.Call) -> None:
        self.called.add(id(node.func))
        called = self.path(node.func)
        if called.removeprefix("builtins.") in _LOOKING or (isinstance(node.func, ast.Name) and node.func.id in _LOOKING):
            self.placed.update(id(argument) for argument in node.args)  # hasattr(torch, ...): a look, not a copy
        name = called.removeprefix("builtins.") if called.startswith("builtins.") else ""
        if name in ATTRIBUTE_BUILTINS and node.args:
            self._attribute_builtin(node, name)
            if len(node.args) > 1 and _string(node.args[1]):
                self.placed.add(id(node.args[0]))  # getattr(torch, "softmax"): followed as torch.softmax
        elif called == "builtins.open":
            self._opened(node)
        elif called.startswith("IPython.shell."):
            self._shell(node, called.removeprefix("IPython.shell."))
        self._library(node, self.path(node))  # getattr(F, "scaled_dot_product_attention")
        self.generic_visit(node)

    def _attribute_builtin(self, node: ast.Call, name: str) -> None:
        """``getattr``/``setattr``/``delattr``: unsure with a computed name (but on ``self`` or ``cls``), or where
        it changes a module."""
        target, attribute = node.args[0], _string(node.args[1]) if len(node.args) > 1 else ""
        on_self = isinstance(target, ast.Name) and target.id in ("self", "cls")
        if not attribute and not on_self:
            self._unsure(node, f"{name}() with a name built at run time")
        elif attribute.startswith("__") and attribute.endswith("__") and attribute not in DUNDERS:
            self._unsure(node, f"{name}() of a dunder attribute ({attribute})")
        elif name != "getattr" and self.path(target):
            self._unsure(node, f"{name}() on the module {self.path(target)}")

    def _opened(self, node: ast.Call) -> None:
        """``open(...)`` for writing (or with a mode computed at run time) writes what the kernel may run later."""
        mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"), None)
        text = _string(mode) if mode is not None else "r"
        if mode is not None and not text or set(text) & set("wax+"):
            self._unsure(node, "writes a file")

    def _shell(self, node: ast.Call, method: str) -> None:
        """A call of the shell: a timing or plotting magic is read as code; anything else is unsure."""
        magic = _string(node.args[0]) if node.args else ""
        if method in _MAGIC_RUNNERS and magic in QUIET_MAGICS:
            if method == "run_cell_magic" and len(node.args) >= 3 and _string(node.args[2]):
                self._magic_body(node, _string(node.args[2]))
            return
        what = f"the magic %{magic}" if method in _MAGIC_RUNNERS else f"the shell's {method}"
        self._unsure(node, f"runs {what} (beyond a static reading)")

    def _magic_body(self, node: ast.Call, body: str) -> None:
        """A timing cell magic's body, read as the cell's next lines."""
        try:
            tree = ast.parse(_python(body))
        except (SyntaxError, ValueError):
            self._unsure(node, "a magic's body that does not parse")
            return
        inner = _Cell(self.aliases, {}, self.students)
        inner.owners = self.owners
        inner.visit(tree)
        self.unsure += [(node.lineno + line, what) for line, what in inner.unsure]
        for name, found in inner.library.items():
            self.library.setdefault(name, []).extend((node.lineno + line, what) for line, what in found)
        for name, uses in inner.uses.items():
            self.uses.setdefault(name, set()).update(uses)

    def visit_Name(self, node: ast.Name) -> None:
        path = self.aliases.get(node.id, "")
        name = path.removeprefix("builtins.") if path.startswith("builtins.") else ""
        if name in UNSURE_BUILTINS and not self._called(node):
            self._unsure(node, f"uses {name} ({UNSURE_BUILTINS[name]})")
        elif name in UNSURE_BUILTINS:
            self._unsure(node, f"calls {name}() ({UNSURE_BUILTINS[name]})")
        elif name in ATTRIBUTE_BUILTINS and not self._called(node):
            self._unsure(node, f"uses {name} as a value")
        followed = node.id in self.students or node.id in self.uses  # a student's name: followed as a use
        if followed or not self._library(node, path):
            self._kept(node, path)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.placed.add(id(node.value))  # the base of an attribute: followed through the path
        path = self.path(node)
        odd = self._odd_attribute(node)
        if odd:
            self._unsure(node, odd)
        elif path and not self._library(node, path):
            why = _unsure_path(path)
            if why:
                self._unsure(node, f"uses {path} ({why})")
            else:
                self._kept(node, path)
        if not path:
            self.generic_visit(node)

    def _kept(self, node: ast.AST, path: str) -> None:
        """A module kept as a value where the reading cannot follow it (``[torch.nn.functional][0]``, an argument, a
        default, a return) is unsure: what is then called on it has no name the reading can resolve."""
        if id(node) in self.placed or id(node) in self.called or path.startswith(("builtins.", "IPython.")):
            return
        if _is_module(path):
            self._unsure(node, f"keeps the module {path} as a value where the reading cannot follow it")

    @staticmethod
    def _odd_attribute(node: ast.Attribute) -> str:
        """What a chain of attributes ``a.b.c`` reaches past a reading, if anything: a dunder beyond
        :data:`DUNDERS`, or a frame."""
        while isinstance(node, ast.Attribute):
            if node.attr.startswith("__") and node.attr.endswith("__") and node.attr not in DUNDERS:
                return f"uses a dunder attribute ({node.attr})"
            if node.attr in FRAME_ATTRIBUTES:
                return f"reaches a frame ({node.attr})"
            node = node.value
        return ""

    def visit_Constant(self, node: ast.Constant) -> None:
        pass  # text is data here; code built from it at run time is unsure where it is run (exec, getattr, ...)

    def _library(self, node: ast.AST, path: str) -> bool:
        """Record ``path`` where it is library attention (owned by the statement's owners; unsure where a library
        function is kept as a value by a statement that owns nothing); whether it was."""
        if not path or not _is_library(path):
            return False
        called = self._called(node)
        what = f"{'calls' if called else 'uses'} {_public(path)}"
        if self.owners:
            for owner in self.owners:
                self.library.setdefault(owner, []).append((getattr(node, "lineno", 1), what))
        elif not called and not self.in_function:
            self._unsure(node, f"keeps {_public(path)} as a value where the reading cannot follow it")
        return True

    def _called(self, node: ast.AST) -> bool:
        """Whether ``node`` is what a call calls (``F.softmax`` in ``F.softmax(x)``), not a value kept."""
        return id(node) in self.called

    def _unsure(self, node: ast.AST, what: str) -> None:
        self.unsure.append((getattr(node, "lineno", 1), what))


def _bound_by(node: ast.AST) -> list[str]:
    """The plain names a statement (or a ``for`` target, a ``with`` item) binds at its own level."""
    found = []
    targets = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        targets = [node.target]
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
        return [alias.asname or alias.name.split(".")[0] for alias in node.names if alias.name != "*"]
    elif isinstance(node, ast.withitem):
        targets = [node.optional_vars] if node.optional_vars is not None else []
    elif isinstance(node, (ast.Name, ast.Tuple, ast.List, ast.Starred)):
        targets = [node]
    for target in targets:
        for sub in ast.walk(target):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                found.append(sub.id)
    for sub in ast.walk(node):  # walrus
        if isinstance(sub, ast.NamedExpr):
            found.append(sub.target.id)
    return found


def _loaded_names(node: ast.AST) -> set[str]:
    return {sub.id for sub in ast.walk(node) if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load)}


def _root(node: ast.AST) -> str:
    """The name at the root of ``x.a[0].b``: ``"x"`` (``""`` if it is not a name)."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else ""


def _string(node: ast.AST | None) -> str:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ""


def _is_library(path: str) -> bool:
    """Whether ``path`` is library attention: one of :data:`LIBRARY` (or below a prefix of it), or an operator
    PyTorch names as attention (``torch.ops.aten._scaled_dot_product_attention_math``, ``torch._C._nn...``)."""
    path = path.replace("d2l.torch.torch.", "d2l.torch.")
    if any(path == entry or path.startswith(entry if entry.endswith(".") else entry + ".") for entry in LIBRARY):
        return True
    if path.startswith("d2l.") and not path.startswith("d2l.torch."):
        return _is_library("d2l.torch." + path.split(".", 1)[1])
    return path.startswith("torch.") and _library_operator(path)


def _library_operator(path: str) -> bool:
    """Whether a part of ``path`` names an attention operator (``scaled_dot_product_attention``, ``_flash_...``)."""
    return any(part.split(".")[0] in LIBRARY_ATTENTION or part.startswith(LIBRARY_ATTENTION_PREFIXES)
               for part in path.split(".")[1:])


def _has_library(module: str) -> bool:
    """Whether ``from module import *`` brings library attention in."""
    return module in ("torch", "torch.nn", "torch.nn.functional", "d2l", "d2l.torch") or \
        module.startswith(("torch.nn.modules", "torch.nn.attention", "autograder.ch06", "autograder.ch07"))


def _public(path: str) -> str:
    return path.replace("torch.nn.functional.", "F.", 1) if path.startswith("torch.nn.functional.") else path


def _unsure_path(path: str) -> str:
    """Why the reading cannot see past ``path`` (``""`` if it can): a module of :data:`UNSURE_MODULES`, PyTorch's
    private entry points, the kernel, or the course's code (which the kernel may hold changed)."""
    for module, why in UNSURE_MODULES.items():
        if path == module or path.startswith(module + "."):
            return why
    parts = path.split(".")
    if parts[0] == "torch" and any(part == "ops" or (part.startswith("_") and not part.startswith("__"))
                                   for part in parts[1:]):
        return "PyTorch's private entry points"
    if path.startswith("IPython.shell.kernel") or path.startswith("IPython.core") or path == "IPython.shell.user_ns":
        return "the kernel"
    return ""


#: Builtins that only look at what they are given: a module passed to them is not kept anywhere.
_LOOKING = {"hasattr", "isinstance", "issubclass", "print", "repr", "str", "type", "id", "len", "dir", "callable"}


@functools.cache
def _is_module(path: str) -> bool:
    """Whether ``path`` names a module the grader can find (``torch.nn.functional``), not an object in one."""
    try:
        return importlib.util.find_spec(path) is not None
    except (ImportError, ValueError, AttributeError):
        return False


def _findable(module: str) -> bool:
    """Whether the grader finds ``module`` where the kernel would: the standard library or an installed package."""
    top = module.split(".")[0]
    if top in sys.stdlib_module_names or top in sys.builtin_module_names:
        return True
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False


def _tokens_found(source: str) -> list[tuple[int, str]]:
    """``[(line, what)]`` of a cell that does not parse: its lines' code and strings, comments left out."""
    found = []
    for number, text in _code_lines(source).items():
        for pattern, what in _PATTERNS:
            if pattern.search(text):
                found.append((number, f"{what} (in a cell that does not parse)"))
                break
    return found


def _code_lines(source: str) -> dict[int, str]:
    """``{line: text}`` of ``source`` without comments; from where tokenizing fails, the raw lines."""
    lines: dict[int, list[str]] = {}
    failed_at = None
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
                lines.setdefault(token.start[0], []).append(token.string)
    except (tokenize.TokenError, SyntaxError) as error:
        failed_at = max(lines, default=0) + 1 if not isinstance(error, SyntaxError) else (error.lineno or 1)
    joined = {number: " ".join(parts) for number, parts in lines.items()}
    if failed_at is not None:
        for number, text in enumerate(source.splitlines(), start=1):
            if number >= failed_at:
                joined[number] = text
    return dict(sorted(joined.items()))
