"""The code handed in, read by the grader: the library attention an answer can reach, and what no reading sees past.

A graded part that forbids library attention (``Part.forbid_library``) earns its points for
implementing attention, not for calling PyTorch's or d2l's. Whether an answer calls library
attention is not something the student's kernel can be asked: code in that process can make it
report anything. So the grader reads the submission's own cells (answer cells and cells the
student added; never the instructor's), in its own process, with Python's ``ast`` after
IPython's transformation of magics, as contest judges read a submission's source. It reads in
two passes:

1. **What each name may hold** (:class:`_Aliases`): every binding of a name to a path (imports,
   ``F = torch.nn.functional``, ``Box.M = ...``, class attributes), in every cell, at any depth,
   in any order. A name keeps every path it was ever given: a later binding, a dead branch or an
   annotation adds to what the reading assumes, never takes away.
2. **What each binding uses** (:class:`Reading`): a student's top-level statement *binds* the
   names it assigns, defines or imports, and *changes* the objects it stores into or calls a
   mutating method on (``table["f"] = ...``, ``helpers.append(...)``, ``setattr(Box, ...)``, at any
   depth, from inside functions too). Each binding keeps the global names its code uses and the
   library attention it reaches, resolved through the aliases: PyTorch's fused and multi-head
   attention, ``nn.Transformer*``, ``torch.nn.attention``, ATen's attention operators, d2l's
   attention and the course's own modules that call them (:func:`is_library`), whatever module
   they are reached through.

**Library attention an answer reaches** (:meth:`Reading.library`): from the answer's definition
that stands at its test cell, the global names it uses are followed through the bindings that
stand when it runs (the last one that replaces a name, and what changed its object after), and
every library use found withholds the part's points; the message names the cell and line.

**What a static reading cannot see past** (:attr:`Reading.unsure`): code that can change what a
name holds, or run code the reading never sees, at run time — a name built from pieces
(``getattr`` on a module with a computed name), ``setattr`` or assignments into a module,
``globals()``, ``vars()``, ``exec``, ``eval``, the import machinery (``importlib``,
``__import__``, ``sys.modules``, ``import *``, a module the grader cannot find), frames and
introspection (``sys._getframe``, ``inspect``, ``f_back``), ``gc``'s object lists, ``input()``,
threads and processes, global module hooks, files written, magics beyond timing, capturing and
plotting, shell commands beyond a few that only look, dunder attributes beyond a short allowlist,
PyTorch's private entry points, the kernel object, a module kept as a value. A part that forbids
library attention and passed on its results then *needs a look*: its points wait until an
instructor reads the cells named. It is never a pass on the kernel's word. The allowlist keeps
honest answers clean: no solution notebook and no catalogued answer is flagged
(``tests/grading/test_reading.py`` measures it).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import inspect
import io
import re
import symtable
import sys
import tokenize
import types
from dataclasses import dataclass, field
from typing import Callable, Iterable

from ..kernel.measure import LIBRARY_ATTENTION, LIBRARY_ATTENTION_PREFIXES
from .notebooks import Assembled, nbgrader_meta

#: Names of library attention, wherever a path reaches them (``torch.nn.modules.MultiheadAttention``,
#: ``autograder.ch03_masking.F.scaled_dot_product_attention``, ``d2l.torch.nn.MultiheadAttention``): PyTorch's, and
#: the course's own modules that call it (stand-ins for earlier parts, the decoder it gives).
LIBRARY_NAMES = {
    "scaled_dot_product_attention", "multi_head_attention_forward", "MultiheadAttention", "Transformer",
    "TransformerEncoder", "TransformerEncoderLayer", "TransformerDecoder", "TransformerDecoderLayer", "flex_attention",
    "FallbackMultiHeadAttention", "FallbackEncoderBlock", "TinyDecoder", "MarkedDecoder", "_DecoderLayer",
}
#: d2l's attention, by the names d2l gives it (any path through d2l).
D2L_NAMES = {"masked_softmax", "DotProductAttention", "AdditiveAttention", "MultiHeadAttention", "PositionalEncoding",
             "TransformerEncoderBlock", "TransformerDecoderBlock", "AttentionDecoder", "BERTEncoder",
             "Seq2SeqAttentionDecoder", "TransformerDecoder"}
#: Paths below which everything is library attention.
LIBRARY_PREFIXES = ("torch.nn.attention.", "torch.nn.modules.transformer.")
#: Paths whose every use the reading cannot see past (what they do runs code, or changes it, unseen), and why.
UNSURE_PATHS = {
    "importlib": "the import machinery", "pkgutil": "the import machinery", "runpy": "the import machinery",
    "zipimport": "the import machinery", "imp": "the import machinery", "builtins": "Python's builtins",
    "inspect": "frames and introspection", "traceback": "frames and introspection",
    "gc.get_objects": "the garbage collector's objects", "gc.get_referrers": "the garbage collector's objects",
    "gc.get_referents": "the garbage collector's objects", "threading": "threads", "_thread": "threads",
    "concurrent": "threads or processes", "asyncio": "an event loop", "multiprocessing": "processes",
    "subprocess": "processes", "signal": "signals", "ctypes": "native code", "cffi": "native code",
    "marshal": "code as data", "pickle": "code as data", "dill": "code as data", "cloudpickle": "code as data",
    "types.FunctionType": "code objects", "types.CodeType": "code objects", "types.ModuleType": "modules made",
    "types.MethodType": "methods made", "code": "code as data", "ipykernel": "the kernel",
    "torch.multiprocessing": "processes", "torch.overrides": "PyTorch's function modes",
    "torch.library": "operators defined at run time", "torch.jit.load": "code loaded from a file",
    "torch.nn.modules.module.register_module_": "hooks on every module's calls",
    "sys.modules": "the import machinery", "sys._getframe": "frames", "sys.settrace": "frames",
    "sys.setprofile": "frames", "sys.meta_path": "the import machinery", "sys.path_hooks": "the import machinery",
    "os.system": "processes", "os.popen": "processes", "os.fork": "processes", "os.exec": "processes",
    "os.spawn": "processes", "os.posix_spawn": "processes", "os.kill": "processes",
}
#: Builtins that run code, reach namespaces or read the grader's channel: unsure wherever they are used.
UNSURE_BUILTINS = {"exec": "runs code in a string", "eval": "runs code in a string", "compile": "compiles code",
                   "__import__": "imports by a computed name", "globals": "reaches a namespace",
                   "locals": "reaches a namespace", "vars": "reaches a namespace",
                   "input": "reads the channel input() shares with the grader", "breakpoint": "starts a debugger",
                   "memoryview": "reaches raw memory"}
#: Builtins that reach an attribute by name: unsure with a computed name on a module, or used as values.
ATTRIBUTE_BUILTINS = ("getattr", "setattr", "delattr")
#: Builtins that only look at what they are given: a module passed to them is kept nowhere.
LOOKING = {"hasattr", "isinstance", "issubclass", "print", "repr", "str", "type", "id", "len", "dir", "callable", "help"}
#: Dunder attributes an honest answer uses; any other (``__globals__``, ``__code__``, ``__dict__``, ...) is unsure.
DUNDERS = {"__init__", "__name__", "__qualname__", "__doc__", "__class__", "__len__", "__call__", "__repr__",
           "__str__", "__module__", "__version__", "__eq__"}
#: Attributes of frames, tracebacks, generators and coroutines.
FRAME_ATTRIBUTES = {"f_back", "f_globals", "f_locals", "f_code", "f_builtins", "tb_frame", "tb_next", "gi_frame",
                    "cr_frame", "ag_frame", "gi_code", "cr_code"}
#: IPython magics that only time, capture or draw, and what of them runs as code: ``line`` (its line), ``body``.
QUIET_MAGICS = {"time": ("line", "body"), "timeit": ("line", "body"), "capture": ("body",), "matplotlib": (),
                "load_ext": (), "autoreload": ()}
#: Shell commands that only look (``!nvidia-smi``); any other shell command is unsure.
LOOKING_COMMANDS = {"nvidia-smi", "ls", "pwd", "nproc", "free", "df", "cat", "head", "tail", "echo", "which", "uname",
                    "date", "lscpu", "du"}
#: Methods that change the object they are called on (``helpers.append(f)``): the call owns the object's name.
MUTATORS = {"append", "extend", "insert", "update", "setdefault", "add", "__setitem__", "appendleft", "register"}
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
        what: what was found, e.g. ``"calls F.scaled_dot_product_attention"``.
    """

    cell: int
    where: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.where} (cell {self.cell + 1}), line {self.line}: {self.what}"


@dataclass
class Binding:
    """A student's statement that binds a global name, or changes the object it holds.

    Attributes:
        cell: the cell's index; replaces: it binds the name unconditionally at the top level
            (``def``, ``class``, ``x = ...``, ``import``), so what the name held before is gone.
        uses: the global names its code uses; library: the library attention it reaches.
    """

    cell: int
    replaces: bool
    uses: set[str] = field(default_factory=set)
    library: list[Finding] = field(default_factory=list)


@dataclass
class Reading:
    """What the grader read in a submission's own cells.

    Attributes:
        unsure: what the reading cannot see past, in notebook order.
        bindings: per global name, the student's bindings of it, in notebook order.
    """

    unsure: list[Finding] = field(default_factory=list)
    bindings: dict[str, list[Binding]] = field(default_factory=dict)

    def standing(self, name: str, before: int | None = None) -> list[Binding]:
        """The bindings of ``name`` that stand (in cells before ``before``, if given): from the last that replaces
        it on, or every one where none does."""
        found = [b for b in self.bindings.get(name, []) if before is None or b.cell < before]
        last = max((i for i, b in enumerate(found) if b.replaces), default=0)
        return found[last:]

    def library(self, answer: str, skip: Iterable[str] = (), before: int | None = None) -> list[Finding]:
        """The library attention ``answer`` reaches: from its bindings standing at cell ``before`` (its test cell),
        through the global names they use, those standing when it runs; the names in ``skip`` (what the grader
        replaces while the part is judged) are not followed."""
        seen, waiting, found = set(skip), [(answer, before)], []
        while waiting:
            name, until = waiting.pop()
            if name in seen:
                continue
            seen.add(name)
            for binding in self.standing(name, until):
                found += binding.library
                waiting += [(used, None) for used in sorted(binding.uses - seen)]
        return sorted(set(found), key=lambda finding: (finding.cell, finding.line, finding.what))


def read(assembled: Assembled) -> Reading:
    """The reading of ``assembled``'s student cells (answer cells and cells the student added); every code cell
    is read for what its names may hold (``F`` for ``torch.nn.functional``), the instructor's included."""
    cells = [(index, cell.source, role) for index, (cell, role) in
             enumerate(zip(assembled.notebook.cells, assembled.roles, strict=True))
             if cell.cell_type == "code" and role != "test"]
    aliases = _Aliases.of([source for _, source, _ in cells])
    students = _names_bound([source for _, source, role in cells if role in ("answer", "extra")])
    reading = Reading()
    for index, source, role in cells:
        if role in ("answer", "extra"):
            where = (f"answer cell `{nbgrader_meta(assembled.notebook.cells[index]).get('grade_id')}`"
                     if role == "answer" else "a cell the student added")
            _read_cell(source, index, aliases, students, reading,
                       lambda line, what, i=index, w=where: Finding(i, w, line, what))
    return reading


def read_source(source: str) -> Reading:
    """The reading of one cell read alone, as a student's added cell (a test's entry point); its findings' cell is 0."""
    reading = Reading()
    _read_cell(source, 0, _Aliases.of([source]), _names_bound([source]), reading,
               lambda line, what: Finding(0, "the cell", line, what))
    return reading


# --------------------------------------------------------------------------------------
# What names may hold
# --------------------------------------------------------------------------------------


#: Names a notebook has without importing them (an earlier cell, the kernel's, Python's own).
_GIVEN = {"get_ipython": "IPython.get_ipython", "torch": "torch", "autograder": "autograder",
          **{name: f"builtins.{name}" for name in (*UNSURE_BUILTINS, *ATTRIBUTE_BUILTINS, *LOOKING, "open")}}


class _Aliases:
    """Every path each name may hold: ``{name or "Owner.attribute": {dotted path, ...}}``, only ever added to."""

    def __init__(self):
        self.paths: dict[str, set[str]] = {name: {path} for name, path in _GIVEN.items()}

    @classmethod
    def of(cls, sources: list[str]) -> "_Aliases":
        """The aliases bound anywhere in ``sources``: read twice, so that a name bound after its use counts."""
        aliases = cls()
        trees = [tree for tree in (_parse(source) for source in sources) if tree is not None]
        for _ in range(2):
            for tree in trees:
                try:
                    _AliasCollector(aliases).visit(tree)
                except RecursionError:
                    pass  # code nested too deeply: the cell's reading says so (unsure)
        return aliases

    def add(self, name: str, paths: set[str]) -> None:
        if paths:
            self.paths.setdefault(name, set()).update(paths)

    def resolve(self, node: ast.AST) -> set[str]:
        """Every dotted path ``node`` may evaluate to (``{"torch.nn.functional.softmax"}``), ``set()`` if none."""
        if isinstance(node, ast.Name):
            return set(self.paths.get(node.id, ()))
        if isinstance(node, ast.Attribute):
            found = {f"{base}.{node.attr}" for base in self.resolve(node.value)}
            if isinstance(node.value, ast.Name):  # Box.M, where a class body or a store put a path
                found |= self.paths.get(f"{node.value.id}.{node.attr}", set())
            return found
        if isinstance(node, ast.Subscript):  # sys.modules["torch.nn.functional"]
            key = _string(node.slice)
            return {key} if key and "sys.modules" in self.resolve(node.value) else set()
        if isinstance(node, ast.Call):
            called = self.resolve(node.func)
            if "builtins.getattr" in called and len(node.args) >= 2 and _string(node.args[1]):
                return {f"{base}.{_string(node.args[1])}" for base in self.resolve(node.args[0])}
            if "IPython.get_ipython" in called:
                return {"IPython.shell"}
        return set()


class _AliasCollector(ast.NodeVisitor):
    """Adds to ``aliases`` what every binding in a tree may give a name: imports, assignments of paths, class
    attributes (``Box.M`` as well as ``M``), stores into attributes of names (``Box.f = ...``)."""

    def __init__(self, aliases: _Aliases):
        self.aliases, self.classes = aliases, []

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            name = alias.asname or alias.name.split(".")[0]
            self._bind(name, {alias.name if alias.asname else name})

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = "." * node.level + (node.module or "")
        for alias in node.names:
            if alias.name != "*":
                self._bind(alias.asname or alias.name, {f"{module}.{alias.name}"})

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.classes.append(node.name)
        self.generic_visit(node)
        self.classes.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        classes, self.classes = self.classes, []  # a method's names are not the class's
        self.generic_visit(node)
        self.classes = classes

    visit_AsyncFunctionDef = visit_FunctionDef  # noqa: N815 - ast.NodeVisitor's naming

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._assigned(target, node.value)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self._assigned(node.target, node.value)
        self.generic_visit(node)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self._assigned(node.target, node.value)
        self.generic_visit(node)

    def _assigned(self, target: ast.AST, value: ast.AST) -> None:
        paths = self.aliases.resolve(value)
        if isinstance(target, ast.Name):
            self._bind(target.id, paths)
        elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
            self.aliases.add(f"{target.value.id}.{target.attr}", paths)  # Box.f = ..., self.f = ...

    def _bind(self, name: str, paths: set[str]) -> None:
        self.aliases.add(name, paths)
        for owner in self.classes[-1:]:  # a class attribute: Box.M, and self.M / cls.M in any method
            for base in (owner, "self", "cls"):
                self.aliases.add(f"{base}.{name}", paths)


# --------------------------------------------------------------------------------------
# What each binding uses
# --------------------------------------------------------------------------------------


def _names_bound(sources: list[str]) -> set[str]:
    """The names the student's cells bind anywhere (assigned, defined, imported): followed as uses, through their
    bindings, rather than taken for what they may hold where they are used."""
    names = set()
    for tree in (_parse(source) for source in sources):
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names |= {alias.asname or alias.name.split(".")[0] for alias in node.names if alias.name != "*"}
    return names


def _read_cell(source: str, index: int, aliases: _Aliases, students: set[str], reading: Reading,
               finding: Callable) -> None:
    """Read one student cell into ``reading``: its bindings, what they use, and what is unsure, each as
    ``finding(line, what)``; ``students``: the names the student's cells bind."""
    python = _python(source)
    tree = _parse(source)
    if tree is None:  # it raises SyntaxError in the kernel too, unless the kernel reads it otherwise
        reading.unsure += [finding(line, what) for line, what in _tokens_found(source)]
        return
    cell = _Cell(aliases, _global_uses(python), students)
    try:
        cell.read(tree.body)
    except RecursionError:
        reading.unsure.append(finding(1, "code nested too deeply to be read"))
        return
    reading.unsure += [finding(line, what) for line, what in sorted(set(cell.unsure))]
    for name, binding in cell.bindings:
        reading.bindings.setdefault(name, []).append(Binding(
            index, binding.replaces, binding.uses, [finding(line, what) for line, what in binding.library]))


@dataclass
class _Bound:
    """A binding as a cell's reading builds it: lines and words, not yet findings."""

    replaces: bool
    uses: set[str] = field(default_factory=set)
    library: list[tuple[int, str]] = field(default_factory=list)


class _Cell(ast.NodeVisitor):
    """One cell's statements as bindings of global names, what they use, and what is unsure.

    A top-level statement *owns* the global names it binds, and the names of the objects it
    changes; a statement anywhere that stores into an object, or calls a mutating method on it,
    owns that object's name too. The library attention found in a statement is recorded for each
    of its owners; a library function used as a value in a statement that owns nothing is unsure.
    """

    def __init__(self, aliases: _Aliases, scopes: dict[tuple[str, int], set[str]], students: set[str]):
        self.aliases, self.scopes, self.students = aliases, scopes, students
        self.bindings: list[tuple[str, _Bound]] = []
        self.unsure: list[tuple[int, str]] = []
        self.owners: list[_Bound] = []
        self.in_function = 0
        self.called: set[int] = set()  # ids of the nodes calls call
        self.placed: set[int] = set()  # ids of the nodes whose value the reading follows (a base, a binding's value)

    # ---- statements and their owners

    def read(self, statements: list[ast.stmt], conditional: bool = False, line: int = 0) -> None:
        """Read a cell's (or a magic's) top-level statements; ``conditional``: inside a branch, a loop, a ``try``."""
        for statement in statements:
            if line:
                ast.increment_lineno(statement, line)
            nested = _bodies(statement)
            if nested is not None:
                self._header(statement)
                for body in nested:
                    self.read(body, conditional=True)
            else:
                self._statement(statement, conditional)

    def _statement(self, node: ast.stmt, conditional: bool) -> None:
        bound = self._own(node, conditional)
        self.owners = bound
        for binding in bound:
            binding.uses |= self._used_names(node)
        self.visit(node)
        self.owners = []

    def _header(self, node: ast.stmt) -> None:
        """The header of a compound statement (``for x in ...``, ``with f() as y``, ``match v``): its targets bound."""
        parts = [getattr(node, name) for name in ("test", "iter", "target", "subject") if getattr(node, name, None)]
        parts += [item for item in getattr(node, "items", [])]
        names = sorted({name for part in parts for name in _bound_names(part)} |
                       {root for part in parts for root in self._changed(part)})
        self.owners = [self._bind(name, replaces=False) for name in names]
        for binding in self.owners:
            binding.uses |= {name for part in parts for name in _loaded_names(part)}
        for part in parts:
            self.visit(part)
        self.owners = []

    def _own(self, node: ast.stmt, conditional: bool) -> list[_Bound]:
        """The bindings a top-level statement makes: of the names it binds (replacing them where it is
        unconditional), and of the objects it changes."""
        replaces = not conditional and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                                                         ast.Assign, ast.AnnAssign, ast.Import, ast.ImportFrom))
        if isinstance(node, ast.AnnAssign) and node.value is None:
            return []  # `x: int` binds nothing
        names = [node.name] if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
            else _bound_names(node)
        bound = [self._bind(name, replaces) for name in names]
        return bound + [self._bind(name, replaces=False) for name in self._changed(node) - set(names)]

    def _changed(self, node: ast.AST) -> set[str]:
        """The names of the objects a statement stores into or calls a mutating method on."""
        roots = set()
        for sub in ast.walk(node):
            if isinstance(sub, (ast.Attribute, ast.Subscript)) and isinstance(sub.ctx, (ast.Store, ast.Del)):
                roots.add(_root(sub))
            elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr in MUTATORS:
                roots.add(_root(sub.func.value))
            elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id == "setattr" and sub.args:
                roots.add(_root(sub.args[0]))
        return {root for root in roots if root and root not in ("self", "cls") and not self.aliases.paths.get(root)}

    def _bind(self, name: str, replaces: bool) -> _Bound:
        binding = _Bound(replaces)
        self.bindings.append((name, binding))
        return binding

    def _used_names(self, node: ast.stmt) -> set[str]:
        """The global names a top-level statement uses (a function's or class's by its symbol table)."""
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            scoped = self.scopes.get((node.name, node.lineno))
            outside = {n for part in (*node.decorator_list, *getattr(node, "bases", []),
                                      *getattr(node, "keywords", [])) for n in _loaded_names(part)}
            defaults = {n for d in (*getattr(getattr(node, "args", None), "defaults", []),
                                    *getattr(getattr(node, "args", None), "kw_defaults", [])) if d is not None
                        for n in _loaded_names(d)}
            return (scoped if scoped is not None else _loaded_names(node)) | outside | defaults
        return _loaded_names(node)

    # ---- what a statement does, anywhere in it

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.in_function += 1
        self.generic_visit(node)
        self.in_function -= 1

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self.visit_FunctionDef(node)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.visit_FunctionDef(node)

    def visit_Global(self, node: ast.Global) -> None:
        """``global x`` in a function: what the function does, it may leave in ``x``."""
        for name in node.names:
            binding = self._bind(name, replaces=False)
            binding.uses = set().union(*(owner.uses for owner in self.owners))
            binding.library = [found for owner in self.owners for found in owner.library]
            self.owners = self.owners + [binding]

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._imported(node, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = "." * node.level + (node.module or "")
        self._imported(node, module)
        for alias in node.names:
            if alias.name == "*":
                self._unsure(node, f"imports every name of {module}")
                continue
            path = f"{module}.{alias.name}"
            self._imported(node, path)
            self._library(node, {path})

    def _imported(self, node: ast.AST, module: str) -> None:
        """An import of ``module``: unsure where it is one the reading cannot see past, or one the grader cannot
        find (a file the submission wrote, say)."""
        why = _unsure_path(module)
        if why:
            self._unsure(node, f"imports {module} ({why})")
        elif module and not module.startswith(".") and not _findable(module):
            self._unsure(node, f"imports {module}, which the grader cannot find to read")

    def visit_Assign(self, node: ast.Assign) -> None:
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            self.placed.add(id(node.value))  # `m = torch.nn.functional`: m is followed as an alias
        self._stored(node.targets, node.value)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if isinstance(node.target, ast.Name) and node.value is not None:
            self.placed.add(id(node.value))
        self._stored([node.target], node.value)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._stored([node.target], node.value)

    def visit_Delete(self, node: ast.Delete) -> None:
        self._stored(node.targets, None)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.placed.add(id(node.value))
        self.generic_visit(node)

    def _stored(self, targets: list[ast.AST], value: ast.AST | None) -> None:
        """Stores into targets: what the value uses is the stored-into objects' too (from inside a function as
        well); a store into a module, or into a dunder, is unsure."""
        changed = {_root(t) for t in targets if isinstance(t, (ast.Attribute, ast.Subscript))} if self.in_function else ()
        extra = [self._bind(root, replaces=False) for root in sorted(changed)
                 if root and root not in ("self", "cls") and not self.aliases.paths.get(root)]
        for target in targets:
            for sub in ast.walk(target):
                if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, (ast.Store, ast.Del)):
                    if sub.attr.startswith("__") and sub.attr.endswith("__"):
                        self._unsure(sub, f"assigns a dunder attribute ({sub.attr})")
                    if self.aliases.resolve(sub.value):
                        self._unsure(sub, f"changes {_first(self.aliases.resolve(sub.value))} in the kernel")
                elif isinstance(sub, ast.Subscript) and isinstance(sub.ctx, (ast.Store, ast.Del)) \
                        and self.aliases.resolve(sub.value):
                    self._unsure(sub, f"changes {_first(self.aliases.resolve(sub.value))} in the kernel")
        owners, self.owners = self.owners, self.owners + extra
        if value is not None:
            self.visit(value)
        for target in targets:
            self.visit(target)
        self.owners = owners

    def visit_Call(self, node: ast.Call) -> None:
        self.called.add(id(node.func))
        called = self.aliases.resolve(node.func)
        builtin = {path.removeprefix("builtins.") for path in called if path.startswith("builtins.")}
        if builtin & LOOKING:
            self.placed.update(id(argument) for argument in node.args)  # hasattr(torch, ...): a look, not a copy
        for name in builtin & set(ATTRIBUTE_BUILTINS):
            self._attribute_builtin(node, name)
        if "builtins.open" in called:
            self._opened(node)
        for path in called:
            if path.startswith("IPython.shell."):
                self._shell(node, path.removeprefix("IPython.shell."))
        self._library(node, self.aliases.resolve(node))  # getattr(F, "scaled_dot_product_attention")
        extra = []
        if self.in_function and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
            extra = [self._bind(root, replaces=False) for root in self._changed(ast.Expr(node))]
        owners, self.owners = self.owners, self.owners + extra
        self.generic_visit(node)
        self.owners = owners

    def _attribute_builtin(self, node: ast.Call, name: str) -> None:
        """``getattr``/``setattr``/``delattr``: unsure on a module with a computed name, or where it changes a module
        or a dunder; ``getattr(torch, "softmax")`` is followed as ``torch.softmax``."""
        if not node.args:
            return
        target = node.args[0]
        attribute = _string(node.args[1]) if len(node.args) > 1 else ""
        on_module = bool(self.aliases.resolve(target))
        if attribute:
            self.placed.add(id(target))
        if name == "getattr" and attribute and not on_module and is_library(f"?.{attribute}"):
            self._library(node, {f"getattr(…).{attribute}"})  # on a value the reading cannot follow: the name says it
        if not attribute and on_module:
            self._unsure(node, f"{name}() on {_first(self.aliases.resolve(target))} with a name built at run time")
        elif attribute.startswith("__") and attribute.endswith("__") and attribute not in DUNDERS:
            self._unsure(node, f"{name}() of a dunder attribute ({attribute})")
        elif name != "getattr" and on_module:
            self._unsure(node, f"{name}() on {_first(self.aliases.resolve(target))}")

    def _opened(self, node: ast.Call) -> None:
        """``open(...)`` for writing (or with a mode computed at run time) writes what the kernel may run later."""
        mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"), None)
        text = _string(mode) if mode is not None else "r"
        if mode is not None and not text or set(text) & set("wax+"):
            self._unsure(node, "writes a file")

    def _shell(self, node: ast.Call, method: str) -> None:
        """A call of the shell: a quiet magic is read as code, a looking command passes; anything else is unsure."""
        magic = _string(node.args[0]) if node.args else ""
        if method in ("run_line_magic", "run_cell_magic") and magic in QUIET_MAGICS:
            for part, argument in zip(("line", "body"), node.args[1:3], strict=False):
                if part in QUIET_MAGICS[magic]:  # a cell magic's body starts on the cell's next line
                    self._magic_code(node, argument, node.lineno if part == "body" else node.lineno - 1)
            return
        if method in ("system", "getoutput") and not self.in_function and magic.split()[:1] and \
                magic.split()[0] in LOOKING_COMMANDS:
            return
        what = f"the magic %{magic}" if method.startswith("run_") else f"the shell ({method})"
        self._unsure(node, f"runs {what} (beyond a static reading)")

    def _magic_code(self, node: ast.Call, argument: ast.AST, line: int) -> None:
        """A quiet magic's code (``%time x = ...``, a ``%%timeit`` body): read as the cell's next statements."""
        text = _string(argument)
        if not isinstance(argument, ast.Constant):
            self._unsure(node, "a magic's code built at run time")
            return
        tree = _parse(text)
        if tree is None:
            self._unsure(node, "a magic's code that does not parse")
            return
        owners, self.owners = self.owners, []
        self.read(tree.body, conditional=True, line=line)
        self.owners = owners

    def visit_Name(self, node: ast.Name) -> None:
        if not isinstance(node.ctx, ast.Load):
            return  # a name bound: what it may hold is the aliases' affair
        paths = self.aliases.resolve(node)
        builtins = {path.removeprefix("builtins.") for path in paths if path.startswith("builtins.")}
        for name in builtins & set(UNSURE_BUILTINS):
            verb = "calls" if self._called(node) else "uses"
            self._unsure(node, f"{verb} {name}{'()' if verb == 'calls' else ''} ({UNSURE_BUILTINS[name]})")
        if builtins & set(ATTRIBUTE_BUILTINS) and not self._called(node):
            self._unsure(node, f"uses {_first(builtins & set(ATTRIBUTE_BUILTINS))} as a value")
        if node.id in self.students or not self._library(node, paths):  # a student's name: followed as a use
            self._kept(node, paths)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.placed.add(id(node.value))  # the base of an attribute: followed through the path
        paths = self.aliases.resolve(node)
        odd = self._odd_attribute(node)
        if odd:
            self._unsure(node, odd)
        elif paths and not self._library(node, paths):
            why = next((f"uses {path} ({_unsure_path(path)})" for path in sorted(paths) if _unsure_path(path)), "")
            if why:
                self._unsure(node, why)
            else:
                self._kept(node, paths)
        if paths:  # the chain is one path, judged whole: only its root is read on its own (a call, a name)
            root = node.value
            while isinstance(root, ast.Attribute):
                self.placed.add(id(root.value))
                root = root.value
            self.visit(root)
        else:
            self.generic_visit(node)

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

    def _kept(self, node: ast.AST, paths: set[str]) -> None:
        """A module kept as a value where the reading cannot follow it (``[torch.nn.functional][0]``, an argument, a
        default, a return) is unsure: what is then called on it has no name the reading can resolve."""
        if id(node) in self.placed or id(node) in self.called:
            return
        modules = sorted(path for path in paths if not path.startswith(("builtins.", "IPython.")) and _is_module(path))
        if modules:
            self._unsure(node, f"keeps the module {modules[0]} as a value where the reading cannot follow it")

    def visit_Constant(self, node: ast.Constant) -> None:
        pass  # text is data here; code built from it at run time is unsure where it is run (exec, getattr, ...)

    def _library(self, node: ast.AST, paths: set[str]) -> bool:
        """Record the library attention among ``paths`` for the statement's owners (unsure where a library function
        is kept as a value by a statement that owns nothing); whether there was any."""
        found = sorted(path for path in paths if is_library(path))
        if not found:
            return False
        called = self._called(node)
        what = f"{'calls' if called else 'uses'} {_public(found[0])}"
        if self.owners:
            for owner in self.owners:
                owner.library.append((getattr(node, "lineno", 1), what))
        elif not called and not self.in_function:
            self._unsure(node, f"keeps {_public(found[0])} as a value where the reading cannot follow it")
        return True

    def _called(self, node: ast.AST) -> bool:
        """Whether ``node`` is what a call calls (``F.softmax`` in ``F.softmax(x)``), not a value kept."""
        return id(node) in self.called

    def _unsure(self, node: ast.AST, what: str) -> None:
        self.unsure.append((getattr(node, "lineno", 1), what))


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------


def _python(source: str) -> str:
    """``source`` as the kernel runs it: IPython's magics and shell escapes turned into calls, lines kept."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        return TransformerManager().transform_cell(source)
    except Exception:  # noqa: BLE001 - an odd cell IPython cannot transform: read as written
        return source


def _parse(source: str) -> ast.Module | None:
    """The tree of ``source`` as the kernel runs it (top-level ``await`` allowed), ``None`` if it does not parse."""
    try:
        return compile(_python(source), "<cell>", "exec", flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _global_uses(python: str) -> dict[tuple[str, int], set[str]]:
    """``{(name, line) of a top-level function or class: the global names its code uses}``, by Python's own
    symbol tables (a function's parameters and locals are not globals); empty where they cannot be built."""
    try:
        table = symtable.symtable(python, "<cell>", "exec")
    except (SyntaxError, ValueError, RecursionError):
        return {}

    def globals_of(scope: symtable.SymbolTable) -> set[str]:
        names = {s.get_name() for s in scope.get_symbols() if s.is_referenced() and s.is_global()}
        return names.union(*(globals_of(child) for child in scope.get_children()))

    try:
        return {(child.get_name(), child.get_lineno()): globals_of(child) for child in table.get_children()}
    except RecursionError:
        return {}


def _bodies(statement: ast.stmt) -> list[list[ast.stmt]] | None:
    """The statement lists of a compound statement (``if``, loops, ``with``, ``try``, ``match``), ``None`` for
    a simple one or a definition."""
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return None
    bodies = [getattr(statement, name) for name in ("body", "orelse", "finalbody") if getattr(statement, name, None)]
    bodies += [handler.body for handler in getattr(statement, "handlers", [])]
    bodies += [case.body for case in getattr(statement, "cases", [])]
    return bodies if bodies else None


def _bound_names(node: ast.AST) -> list[str]:
    """The plain names a statement (or a ``for`` target, a ``with`` item) binds at its own level."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [alias.asname or alias.name.split(".")[0] for alias in node.names if alias.name != "*"]
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        targets = [node.target]
    elif isinstance(node, ast.withitem):
        targets = [node.optional_vars] if node.optional_vars is not None else []
    elif isinstance(node, (ast.Name, ast.Tuple, ast.List, ast.Starred)):
        targets = [node]
    else:
        targets = []
    found = [sub.id for target in targets for sub in ast.walk(target)
             if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store)]
    found += [sub.target.id for sub in ast.walk(node) if isinstance(sub, ast.NamedExpr)]
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


def _first(paths: set[str]) -> str:
    return sorted(paths)[0] if paths else ""


def is_library(path: str) -> bool:
    """Whether ``path`` is library attention: a part of it names PyTorch's attention or the course's modules that
    call it (:data:`LIBRARY_NAMES`, ATen's operators), or d2l's attention (through d2l), or it lies below
    :data:`LIBRARY_PREFIXES`; whatever module it is reached through."""
    parts = path.split(".")
    if path.startswith(LIBRARY_PREFIXES):
        return True
    if any(part in LIBRARY_NAMES or part in LIBRARY_ATTENTION or part.startswith(LIBRARY_ATTENTION_PREFIXES)
           for part in parts[1:]):
        return True
    return parts[0] == "d2l" and any(part in D2L_NAMES for part in parts[1:])


def _public(path: str) -> str:
    return path.replace("torch.nn.functional.", "F.", 1) if path.startswith("torch.nn.functional.") else path


def _unsure_path(path: str) -> str:
    """Why the reading cannot see past ``path`` (``""`` if it can): one of :data:`UNSURE_PATHS`, PyTorch's private
    entry points, or the kernel."""
    if path.startswith("builtins."):
        return ""  # a builtin by its name (print, open): the ones beyond a reading are UNSURE_BUILTINS
    for prefix, why in UNSURE_PATHS.items():
        if path == prefix or path.startswith(prefix + ".") or (prefix.endswith("_") and path.startswith(prefix)) \
                or (prefix in ("os.exec", "os.spawn") and path.startswith(prefix)):
            return why
    parts = path.split(".")
    if parts[0] == "torch" and any(part == "ops" or (part.startswith("_") and not part.startswith("__"))
                                   for part in parts[1:]):
        return "PyTorch's private entry points"
    if path.startswith(("IPython.shell.kernel", "IPython.core")) or path == "IPython.shell.user_ns":
        return "the kernel"
    return ""


@functools.cache
def _is_module(path: str) -> bool:
    """Whether ``path`` names a module the grader can find (``torch.nn.functional``), not an object in one: by its
    import name, or as an attribute of a module the grader has imported (``torch.nn.modules.linear.F``)."""
    try:
        if importlib.util.find_spec(path) is not None:
            return True
    except (ImportError, ValueError, AttributeError):
        pass
    return isinstance(_attribute_of_imported(path), types.ModuleType)


def _attribute_of_imported(path: str) -> object:
    """What ``path`` names below a module already imported in this process, read from the modules' own
    dictionaries (``inspect.getattr_static``: no module's ``__getattr__`` runs, nothing is imported); ``None`` if
    it names nothing there."""
    first, *rest = path.split(".")
    found: object = sys.modules.get(first)
    for name in rest:
        if found is None:
            return None
        try:
            found = inspect.getattr_static(found, name)
        except AttributeError:
            return None
    return found


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
