"""What a submission's own cells do to the course's code, the kernel or PyTorch's private entry points.

Some of what decides a part is observed inside the student's kernel by the course's own
code there (``autograder.respond``: which library attention an answer called, the largest
tensor it created, its inputs after the call, the ``meta`` replay, a probe's report). A
submission that changes that code, or reaches under it, could forge those reports; it
cannot be caught from inside the kernel it controls. So the grader reads the submission's
own cells (answer cells and cells it added; never the instructor's) before judging, with
Python's ``ast`` (after IPython's transformation of magics), and flags:

* assignments into the course's modules (``autograder.*``) by any route it can see:
  attribute or item assignment, ``del``, ``setattr``/``delattr``, ``__dict__``/``vars``
  updates, a function's ``__code__`` replaced, and ``pkgutil.resolve_name``,
  ``importlib.import_module``, ``__import__`` or ``sys.modules`` reaching ``autograder``;
* PyTorch's private entry points: ``torch.ops``, ``torch._C`` and any ``torch…._name``
  (where library attention can be called, or PyTorch's modes switched off, unseen);
* the kernel object: ``get_ipython().kernel`` and ``ipykernel`` (``IPKernelApp``).

An import line (``from autograder import ch03_masking as checks``, ``import
torch.nn.functional as F``) is not a finding; names it binds are followed, the
instructor's cells included, so ``checks.check_x = ...`` in a student's cell is. A cell
that does not parse (it would not run either, unless the kernel reads it otherwise) is
read token by token, strings included. Findings are what the grade withholds points for
until an instructor looks (``verdict.py``, status ``needs a look``); nothing is refused.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass
from typing import Callable

from .notebooks import Assembled, nbgrader_meta

#: Calls that import a module named by a string: ``importlib.import_module("autograder.kernel.serve")``.
_IMPORTERS = ("import_module", "resolve_name", "__import__")
#: Calls that run code given as a string (``exec``, a cell magic's body).
_RUNS_CODE = ("exec", "eval", "compile", "run_cell", "run_cell_magic")
#: Methods that change a namespace they are called on (``vars(module).update(...)``).
_MUTATORS = ("update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__")
#: The path given to what ``get_ipython()`` returns: the shell, whose ``kernel`` is the kernel object.
_SHELL = "IPython.shell"
#: Text that reaches what the grader flags, in a string or a line that does not parse.
_PATTERNS = (
    (re.compile(r"\bautograder\s*\.\s*\w"), "names a module of the course (autograder.…)"),
    (re.compile(r"\btorch(\s*\.\s*\w+)*?\s*\.\s*(ops\b|_(?!_)\w*)"), "reaches PyTorch's private entry points"),
    (re.compile(r"\bipykernel\b|\bIPKernelApp\b|\bget_ipython\s*\(\s*\)\s*\.\s*kernel\b"), "reaches the kernel object"),
    (re.compile(r"\.\s*__code__\s*=[^=]"), "replaces a function's code (__code__)"),
)
#: An import of the course's checks, alone on its line: what students are told to write.
_PLAIN_IMPORT = re.compile(r"^\s*(from\s+autograder[\w.]*\s+import\s+[\w\s,()*]+|import\s+autograder[\w.]*(\s+as\s+\w+)?)\s*$")


@dataclass(frozen=True)
class Finding:
    """One thing a submission's cell does that the grader flags.

    Attributes:
        cell: the cell's index in the graded (autograded) notebook, from 0.
        where: the cell in words: ``"answer cell `window_mask`"`` or ``"a cell the student added"``.
        line: the line in the cell, from 1.
        what: what was found, e.g. ``"assigns into autograder.kernel.serve.respond"``.
    """

    cell: int
    where: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.where} (cell {self.cell + 1}), line {self.line}: {self.what}"


def scan(assembled: Assembled) -> list[Finding]:
    """The findings in the submission's own cells of ``assembled``, in notebook order.

    Every code cell is read, in order, for the names its imports bind (``checks`` for
    ``autograder.ch03_masking``); only answer cells and cells the student added are flagged.
    """
    scanner = _Scanner()
    findings = []
    for index, (cell, role) in enumerate(zip(assembled.notebook.cells, assembled.roles, strict=True)):
        if cell.cell_type != "code" or role == "test":
            continue
        found = scanner.read(cell.source)
        if role in ("answer", "extra"):
            where = (f"answer cell `{nbgrader_meta(cell).get('grade_id')}`" if role == "answer"
                     else "a cell the student added")
            findings += [Finding(index, where, line, what) for line, what in found]
    return findings


def scan_source(source: str) -> list[tuple[int, str]]:
    """``[(line, what)]`` found in one cell's ``source`` read alone (a test's entry point)."""
    return _Scanner().read(source)


def _python(source: str) -> str:
    """``source`` as the kernel runs it: IPython's magics and shell escapes turned into calls, lines kept."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        return TransformerManager().transform_cell(source)
    except Exception:  # noqa: BLE001 - an odd cell IPython cannot transform: read as written
        return source


class _Scanner:
    """Reads cells in notebook order, following the names bound to the course's modules, torch and the shell."""

    def __init__(self):
        # names a notebook has without importing them here (an earlier cell, the kernel's own)
        self.aliases: dict[str, str] = {"get_ipython": "IPython.get_ipython", "torch": "torch", "autograder": "autograder"}

    def read(self, source: str) -> list[tuple[int, str]]:
        """``[(line, what)]`` of one cell, one finding per line (the first)."""
        try:
            tree = ast.parse(_python(source))
        except (SyntaxError, ValueError):
            found = _tokens_found(source)
        else:
            visitor = _Visitor(self.aliases)
            visitor.visit(tree)
            found = visitor.found
        lines: dict[int, str] = {}
        for line, what in found:
            lines.setdefault(line, what)
        return sorted(lines.items())


class _Visitor(ast.NodeVisitor):
    """One cell's tree: records findings, and updates ``aliases`` (name -> dotted path) as it binds names."""

    def __init__(self, aliases: dict[str, str]):
        self.aliases, self.found = aliases, []
        self.read_as_code: set[int] = set()  # ids of the strings read as code (not matched as text again)

    def flag(self, node: ast.AST, what: str) -> None:
        self.found.append((getattr(node, "lineno", 1), what))

    # ---- what an expression is: a dotted path where it can be told

    def path(self, node: ast.AST) -> str:
        """The dotted path ``node`` evaluates to (``"autograder.kernel.serve.respond"``), ``""`` if unknown."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id, "")
        if isinstance(node, ast.Attribute):
            base = self.path(node.value)
            return f"{base}.{node.attr}" if base else ""
        if isinstance(node, ast.Subscript):  # sys.modules["autograder.kernel.serve"], vars(m)["x"]
            base, key = self.path(node.value), _string(node.slice)
            if base == "sys.modules" and key:
                return key
            return f"{base}.{key}" if base and key else ""
        if isinstance(node, ast.Call):
            return self._call_path(node)
        return ""

    def _call_path(self, node: ast.Call) -> str:
        name, first = self._called(node), _string(node.args[0]) if node.args else ""
        if name in _IMPORTERS and first:
            return first.replace(":", ".")
        if name == "get_ipython":
            return _SHELL
        if name == "getattr" and len(node.args) >= 2:
            base, attribute = self.path(node.args[0]), _string(node.args[1])
            return f"{base}.{attribute}" if base and attribute else ""
        if name == "vars" and node.args:
            return self.path(node.args[0])
        return ""

    def _called(self, node: ast.Call) -> str:
        """The name of what ``node`` calls: ``"import_module"`` for ``importlib.import_module(...)``,
        ``"sys.modules.get"`` kept whole (an importer too), ``""`` if it cannot be told."""
        function = self.path(node.func)
        if function == "sys.modules.get":
            return "__import__"
        if function:
            return function.rsplit(".", 1)[-1]
        return getattr(node.func, "id", getattr(node.func, "attr", ""))

    # ---- bindings

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._check_module(node, alias.name)
            if alias.asname:
                self.aliases[alias.asname] = alias.name
            else:
                top = alias.name.split(".")[0]
                self.aliases[top] = top

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        self._check_module(node, module)
        for alias in node.names:
            self._check_module(node, f"{module}.{alias.name}")
            self.aliases[alias.asname or alias.name] = f"{module}.{alias.name}"

    def _check_module(self, node: ast.AST, module: str) -> None:
        if _private_torch(module):
            self.flag(node, f"imports PyTorch's private {_private_torch(module)}")
        elif module.split(".")[0] == "ipykernel":
            self.flag(node, "imports ipykernel, the kernel's own code")

    def visit_Assign(self, node: ast.Assign) -> None:
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
            self._assigned(target, None, verb="deletes")

    def _assigned(self, target: ast.AST, value: ast.AST | None, verb: str = "assigns into") -> None:
        """A name bound (followed), or an attribute or item of something assigned (flagged if the course's)."""
        if isinstance(target, ast.Name):
            bound = self.path(value) if value is not None else ""
            if bound:
                self.aliases[target.id] = bound
            else:
                self.aliases.pop(target.id, None)
            return
        if isinstance(target, (ast.Tuple, ast.List, ast.Starred)):
            for element in (target.elts if not isinstance(target, ast.Starred) else [target.value]):
                self._assigned(element, None, verb)
            return
        if isinstance(target, ast.Attribute) and target.attr == "__code__":
            self.flag(target, "replaces a function's code (__code__)")
        owner = self.path(target.value) if isinstance(target, (ast.Attribute, ast.Subscript)) else ""
        if _course(owner):
            name = target.attr if isinstance(target, ast.Attribute) else _string(target.slice) or "…"
            self.flag(target, f"{verb} the course's {owner}.{name}")
        self.visit(target)

    # ---- uses

    def visit_Call(self, node: ast.Call) -> None:
        name, args = self._called(node), node.args
        first = args[0] if args else None
        if name in ("setattr", "delattr") and first is not None and _course(self.path(first)):
            self.flag(node, f"{name}() on the course's {self.path(first)}")
        elif name == "setattr" and len(args) >= 2 and _string(args[1]) == "__code__":
            self.flag(node, "replaces a function's code (__code__)")
        elif isinstance(node.func, ast.Attribute) and node.func.attr in _MUTATORS and _course(self.path(node.func.value)):
            self.flag(node, f"changes the course's {self.path(node.func.value)} ({node.func.attr})")
        elif name in _IMPORTERS and _course(_string(first)):
            self.flag(node, f"reaches the course's {_string(first)} through {name}()")
        if name in _RUNS_CODE:  # code in a string, run: read as code too (a cell magic's body: the cell's next lines)
            line_of = (lambda line: node.lineno + line) if name == "run_cell_magic" else (lambda line: node.lineno)
            for argument in args:
                if self._read_code(_string(argument), line_of):
                    self.read_as_code.add(id(argument))
        self.generic_visit(node)

    def _read_code(self, text: str, line_of: Callable[[int], int]) -> bool:
        """Findings of ``text`` read as code (with the names bound so far), its line ``n`` at the cell's
        ``line_of(n)``; whether it was code."""
        try:
            tree = ast.parse(_python(text)) if text else None
        except (SyntaxError, ValueError):
            return False
        if tree is None:
            return False
        inner = _Visitor(self.aliases)
        inner.visit(tree)
        self.found += [(line_of(line), what) for line, what in inner.found]
        return True

    def visit_Attribute(self, node: ast.Attribute) -> None:
        path = self.path(node)
        if _private_torch(path):
            self.flag(node, f"reaches PyTorch's private {_private_torch(path)}")
        elif path == f"{_SHELL}.kernel":
            self.flag(node, "reaches the kernel object (get_ipython().kernel)")
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if self.path(node.value) == "sys.modules" and _course(_string(node.slice)):
            self.flag(node, f"reaches the course's {_string(node.slice)} through sys.modules")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and id(node) not in self.read_as_code:
            for pattern, what in _PATTERNS:
                if pattern.search(node.value):
                    self.flag(node, f"a string that {what}")
                    break


def _tokens_found(source: str) -> list[tuple[int, str]]:
    """``[(line, what)]`` of a cell that does not parse: its lines' code and strings, comments left out."""
    found = []
    for number, text in _code_lines(source).items():
        if _PLAIN_IMPORT.match(text):
            continue
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


def _string(node: ast.AST | None) -> str:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ""


def _course(path: str) -> bool:
    return path == "autograder" or path.startswith("autograder.")


def _private_torch(path: str) -> str:
    """``"torch._C"`` for ``"torch._C._nn.x"``: the path up to its first private part, if a torch path has one."""
    parts = path.split(".")
    if parts[0] != "torch":
        return ""
    for index, part in enumerate(parts[1:], start=1):
        if part == "ops" or (part.startswith("_") and not part.startswith("__")):
            return ".".join(parts[:index + 1])
    return ""
