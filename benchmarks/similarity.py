"""Does ``python -m autograder similarity`` find disguised copies, and flag how many honest pairs?

    .venv/bin/python benchmarks/similarity.py [--assignment 04_multihead] [--students 300] [--seed 0]
        [--copies 0.1] [--threshold T] [--identical-writers] [--shared-mistakes]

Builds a measured class of ``--students`` notebooks of one assignment in a temporary course folder
(``submitted/``, and the released notebook where the course's config puts it), runs
:func:`autograder.instructor.similarity.similarity` on it as the command does (files read, every
pair scored, the page written), and prints what it found against what was made.

**Honest students.** Each part of each honest student is drawn on its own, seeded, from that
part's independent answers: the solution notebook's, the catalogue's right answer
(``tests/catalogue_chNN.py`` ``CORRECT``, written differently from the reference) and the
grader's reference (``autograder/reference/chNN_*.py``), each with the helpers it calls; with
probability 0.2 one of the catalogue's wrong answers to that part instead (an honest mistake; each
goes to one student only, as a mistake written in an odd way of its own is: two students who write
the same one the same way are what the command is for; ``--shared-mistakes`` hands them out freely),
and with 0.05 the released stub (a part left blank). Then each student writes what they drew
(:func:`written`): at every place where people write the same step differently (``x.size(-1)`` or
``x.shape[-1]``, ``@`` or ``torch.matmul``, ``.mT`` or ``.transpose(-2, -1)``, a result named or
returned at once: :data:`CHOICES`), one way drawn for that place alone. Three answers per part are
few next to a real class, where no two students write the same twelve lines; without these choices
(``--identical-writers``), two honest students who draw the same answers hand in the same code.

**Copies.** A share ``--copies`` of the class copies an honest student, disguised as a copier
would: local variables renamed (through ``ast``), independent statements next to each other
swapped, the code laid out again by ``ast.unparse`` (comments dropped, spacing and parentheses
changed), comments and blank lines added, and one answered part rewritten (replaced by another
of that part's answers, written by the copier). A third of the copies copy another copy in the
same way (a copy of a copy: one more part rewritten).

**What is printed.** Students, copies, pairs; recall (every direct copy pair found? those missed,
named), the copy pairs found through a copy of a copy, the honest pairs flagged (false positives)
and their rate, precision; how many pairs that are not copies hand in answers of one lineage on k
of the n parts by construction, and how many of those are flagged; a sweep of thresholds (evidence,
in nats), and the time the analysis took.

**The threshold** is the command's own: ``ln(pairs / 2)``, 10.0 for 300 students (the module
docstring of ``autograder/instructor/similarity.py`` says why), not fitted to this class; the sweep
shows what another would find.
"""

from __future__ import annotations

import argparse
import ast
import copy
import importlib
import inspect
import json
import random
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from autograder.instructor.similarity import groups, similarity  # noqa: E402

#: The chance that an honest student's part is one of the catalogue's wrong answers, or the blank stub.
WRONG_SHARE, BLANK_SHARE = 0.2, 0.05
BLANK = "blank"
THRESHOLDS = [6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0]
#: Names a copier gives to renamed locals.
WORDS = ["tmp", "val", "res", "out", "acc", "buf", "aux", "cur", "data", "item", "thing", "stuff", "z", "w", "q2"]
COMMENTS = ["# compute it", "# TODO check shapes", "# the main step", "# as in the lecture", "# helper",
            "# returns the result", "# fixed a bug here", "# done"]


# --------------------------------------------------------------------------------------
# Each part's answers
# --------------------------------------------------------------------------------------


def notebook(folder: Path, assignment: str) -> dict:
    return json.loads((folder / assignment / f"{assignment}.ipynb").read_text(encoding="utf-8"))


def answer_cells(nb: dict) -> dict[str, dict]:
    """``{grade id: cell}`` of a notebook's answer cells."""
    return {c["metadata"]["nbgrader"]["grade_id"]: c for c in nb["cells"]
            if c.get("metadata", {}).get("nbgrader", {}).get("solution")}


def _text(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def with_helpers(answer, module, others: frozenset = frozenset()) -> str:
    """The source of ``answer`` after that of the functions and classes of ``module`` it reaches, except
    ``others`` (the answers to other parts: the notebook defines them in their own cells). A wrong answer that
    subclasses a right one is written out as one class, as a student who made that mistake would write it."""
    needed = sorted(_reached(answer, module, others), key=lambda item: inspect.getsourcelines(item)[1]) + [answer]
    sources = {item: inspect.getsource(item) for item in needed}
    for item in needed:
        base = next((b for b in getattr(item, "__bases__", ()) if b in sources), None)
        if base is not None:
            sources[item], sources[base] = _flattened(sources[base], sources[item]), ""
    return "\n\n\n".join(sources[item] for item in needed if sources[item])


def _reached(answer, module, others: frozenset = frozenset()) -> set:
    """The functions and classes of ``module`` that ``answer`` reaches, not through ``others``."""
    defined = {name: value for name, value in vars(module).items()
               if (inspect.isfunction(value) or inspect.isclass(value)) and value.__module__ == module.__name__}
    seen, todo = set(), [answer]
    while todo:
        item = todo.pop()
        if item not in seen and (item is answer or item not in others):
            seen.add(item)
            todo += [defined[name] for name in _names_used(item) if name in defined]
    return seen - {answer}


def _flattened(base: str, subclass: str) -> str:
    """The class ``subclass`` with ``base``'s methods it does not override, and a ``super()`` call to the method
    it overrides replaced by that method's body."""
    parent, child = ast.parse(base).body[0], ast.parse(subclass).body[0]
    inherited = {node.name: node for node in parent.body if isinstance(node, ast.FunctionDef)}
    own = {node.name for node in child.body if isinstance(node, ast.FunctionDef)}
    for method in (node for node in child.body if isinstance(node, ast.FunctionDef)):
        body = []
        for statement in method.body:
            call = statement.value if isinstance(statement, (ast.Expr, ast.Return)) else None
            if isinstance(call, ast.Call) and "super()" in ast.unparse(call.func):
                body += [s for s in inherited[method.name].body if not _is_docstring(s)]
            else:
                body.append(statement)
        method.body = body
    child.body = [node for node in parent.body if not (isinstance(node, ast.FunctionDef) and node.name in own)] + [
        node for node in child.body if not _is_docstring(node)]
    child.bases = parent.bases
    return ast.unparse(child) + "\n"


def _names_used(item) -> set[str]:
    """The global names a function or class refers to (its bases, and its methods' code, nested code too)."""
    codes = [item.__code__] if inspect.isfunction(item) else [
        f.__code__ for f in vars(item).values() if inspect.isfunction(f)]
    names = {base.__name__ for base in getattr(item, "__bases__", ())}
    while codes:
        code = codes.pop()
        names |= set(code.co_names)
        codes += [c for c in code.co_consts if inspect.iscode(c)]
    return names


def _aliased(code: str, answer, name: str) -> str:
    return code if answer.__name__ == name else f"{code}\n\n\n{name} = {answer.__name__}\n"


def variants(assignment: str) -> tuple[dict[str, dict[str, str]], dict[str, dict[str, str]], dict[str, str]]:
    """``({part: {variant: code}} right, {part: {variant: code}} wrong, {variant: lineage})`` of ``assignment``.

    A variant's lineage is the independent answer it is written from: ``solution``, ``catalogue`` or
    ``reference``; a wrong answer built on the catalogue's right one (calling it, or a subclass of it) is of the
    catalogue's lineage, any other wrong answer a lineage of its own.
    """
    from one_bug import answer_name

    catalogue = importlib.import_module(f"catalogue_ch{assignment[:2]}")
    reference = importlib.import_module(f"autograder.reference.ch{assignment}")
    right: dict[str, dict[str, str]] = {}
    for part, cell in answer_cells(notebook(ROOT / "solutions", assignment)).items():
        lines = [line for line in _text(cell).splitlines() if "### BEGIN SOLUTION" not in line
                 and "### END SOLUTION" not in line]
        right[part] = {"solution": "\n".join(lines) + "\n"}
    wrong: dict[str, dict[str, str]] = {part: {} for part in right}
    parts = {answer_name(assignment, check.__name__): (answer, ref) for check, answer, ref in catalogue.CORRECT}
    mine = frozenset(answer for answer, _ in parts.values())
    theirs = frozenset(ref for _, ref in parts.values())
    lineage = {"solution": "solution", "catalogue": "catalogue", "reference": "reference"}
    for part, (answer, ref) in parts.items():
        right[part]["catalogue"] = _aliased(with_helpers(answer, catalogue, mine), answer, part)
        right[part]["reference"] = _aliased(with_helpers(ref, reference, theirs), ref, part)
    for entry in catalogue.WRONG:
        part, answer, name = answer_name(assignment, entry[1].__name__), entry[2], f"wrong: {entry[0]}"
        wrong[part][name] = _aliased(with_helpers(answer, catalogue, mine - {parts[part][0]}), answer, part)
        built_on = parts[part][0] in _reached(answer, catalogue)
        lineage[name] = "catalogue" if built_on else name
    return right, wrong, lineage


# --------------------------------------------------------------------------------------
# The class
# --------------------------------------------------------------------------------------


@dataclass
class Student:
    """A notebook of the measured class and what it was made of.

    Attributes:
        choices: ``{part: variant}`` (``blank``, ``solution``, ``catalogue``, ``reference``, ``wrong: ...``).
        lineages: ``{part: lineage}`` of those variants (:func:`variants`).
        codes: ``{part: code}`` as handed in; sizes: ``{part: characters}`` of each variant before any disguise
            (0: blank).
        source: the student copied (``None``: honest).
    """

    name: str
    choices: dict[str, str]
    lineages: dict[str, str]
    codes: dict[str, str]
    sizes: dict[str, int]
    source: str | None = None
    rewritten: list[str] = field(default_factory=list)


#: The small choices two people who write the same answer make differently, each drawn on its own at every place
#: it can be made: ``(pattern, the ways to write what it matches)``. They change the tokens, which renaming,
#: comments and layout do not; a copier copies them with the code.
CHOICES = [
    (r"\b([A-Za-z_][\w.]*)\.size\((-?\d+)\)", [r"\1.size(\2)", r"\1.shape[\2]"]),  # one axis's length
    (r"\b([A-Za-z_][\w.]*)\.shape\[(-?\d+)\]", [r"\1.size(\2)", r"\1.shape[\2]"]),
    (r"\b([A-Za-z_]\w*) @ ([A-Za-z_]\w*(?:\.mT\b|\.transpose\(-[12], -[12]\))?)",
     [r"\1 @ \2", r"torch.matmul(\1, \2)"]),  # a product of matrices
    (r"\.mT\b|\.transpose\(-2, -1\)|\.transpose\(-1, -2\)", [".mT", ".transpose(-2, -1)", ".transpose(-1, -2)"]),
    (r"math\.sqrt\(([^()]*(?:\([^()]*\))?[^()]*)\)", [r"math.sqrt(\1)", r"(\1) ** 0.5"]),  # a square root
    (r"-math\.inf\b|float\(['\"]-inf['\"]\)|-torch\.inf\b", ["-math.inf", "float('-inf')", "-torch.inf"]),
    (r"\.softmax\((?:dim=)?-1\)", [".softmax(-1)", ".softmax(dim=-1)"]),
    (r"torch\.softmax\(([\w.]+), dim=-1\)", [r"torch.softmax(\1, dim=-1)", r"\1.softmax(dim=-1)"]),
    (r"\.(sum|mean|cumsum|argmax)\((?:dim=)?(-?\d+)", [r".\1(dim=\2", r".\1(\2"]),  # an axis named or not
    (r"\.reshape\(", [".reshape(", ".view("]),
    (r"\bnan=0\.0\b", ["nan=0.0", "nan=0"]),
    (r"\b([A-Za-z_]\w*)\.unsqueeze\(-1\)", [r"\1.unsqueeze(-1)", r"\1[..., None]"]),  # a new last axis
    (r"\b([A-Za-z_]\w*)\.unsqueeze\(0\)", [r"\1.unsqueeze(0)", r"\1[None]"]),
    (r"\b([A-Za-z_]\w*)\.unsqueeze\(1\)", [r"\1.unsqueeze(1)", r"\1[:, None]"]),
    (r"\.float\(\)", [".float()", ".to(torch.float32)"]),
    (r"\.contiguous\(\)\.view\(|\.reshape\(", [".contiguous().view(", ".reshape("]),
    (r"torch\.cat\(\[([^\[\]]+)\], dim=(-?\d+)\)", [r"torch.cat([\1], dim=\2)", r"torch.cat((\1), \2)"]),
    (r"\blen\(([A-Za-z_]\w*)\)", [r"len(\1)", r"\1.shape[0]"]),
    (r"torch\.arange\(([A-Za-z_]\w*)([,)])", [r"torch.arange(\1\2", r"torch.arange(0, \1\2"]),
    (r"~([A-Za-z_]\w*)\b(?!\s*[.(\[])", [r"~\1", r"\1.logical_not()", r"(\1 == 0)"]),  # a mask negated
    (r"(?<![\w.*/)\]] )(?<![\w.])([A-Za-z_]\w*) \* ([A-Za-z_]\w*)\b(?!\s*(?:\*\*|[.(\[]))",
     [r"\1 * \2", r"\2 * \1"]),  # the factors of a product of two names
    (r"torch\.(sin|cos|exp|log|sqrt|abs|tanh|sigmoid|relu)\(([A-Za-z_][\w.]*)\)",
     [r"torch.\1(\2)", r"\2.\1()"]),  # a function of one tensor, or its method
    (r"\b0::2\]", ["0::2]", "::2]"]),  # every other element, from the first
    (r"torch\.(zeros|ones|empty)\(([^()=]+?), (dtype|device)=", [r"torch.\1(\2, \3=", r"torch.\1((\2), \3="]),
    (r"dtype=torch\.float32\b|dtype=torch\.float\b", ["dtype=torch.float32", "dtype=torch.float"]),
    (r"\.to\(([A-Za-z_][\w.]*)\.device\)", [r".to(\1.device)", r".to(device=\1.device)"]),
    (r"(?m)^(\s*)([A-Za-z_]\w*) = ([\w.]+)\(([\w.]+\([^()]*\))(.*)\)$",  # a call's argument named first
     [r"\1\2 = \3(\4\5)", r"\1inner = \4\n\1\2 = \3(inner\5)"]),
    (r"(?m)^(\s*)return (\S.*[(@*/+].*)$", [r"\1return \2", r"\1result = \2\n\1return result"]),  # a result named
]


def written(code: str, draw: random.Random) -> str:
    """``code`` as one student writes it: at each place where :data:`CHOICES` offers several ways, one drawn for
    that place alone (the code unchanged where the outcome would not parse)."""
    out = code
    for pattern, ways in CHOICES:
        out = re.sub(pattern, lambda match, ways=ways: match.expand(draw.choice(ways)), out)
    try:
        ast.parse(out)
    except SyntaxError:
        return code
    return out


def honest(name: str, answers: tuple, blank: dict[str, str], draw: random.Random, writers: bool = True,
           unused: dict[str, list[str]] | None = None) -> Student:
    """Each part drawn on its own: blank, a wrong answer, or one of the right ones, then written by this student
    (:func:`written`; ``writers=False``: as drawn, so that two students who draw one answer hand in the same
    code)."""
    right, wrong, lineage = answers
    choices, codes = {}, {}
    for part in right:
        roll = draw.random()
        if roll < BLANK_SHARE:
            choice, code = BLANK, blank[part]
        elif roll < BLANK_SHARE + WRONG_SHARE and (unused[part] if unused is not None else wrong[part]):
            choice = unused[part].pop() if unused is not None else draw.choice(sorted(wrong[part]))
            code = wrong[part][choice]
        else:
            choice = draw.choice(sorted(right[part]))
            code = right[part][choice]
        choices[part], codes[part] = choice, written(code, draw) if writers and choice != BLANK else code
    return Student(name, choices, {p: lineage.get(c, c) for p, c in choices.items()}, codes,
                   {p: 0 if choices[p] == BLANK else len(code) for p, code in codes.items()})


def copied(name: str, source: Student, answers: tuple, draw: random.Random, writers: bool = True) -> Student:
    """``source``'s notebook disguised, one answered part rewritten with another of its answers (written by the
    copier, as an honest student writes one)."""
    right, wrong, lineage = answers
    choices, codes = dict(source.choices), {part: disguised(code, draw) for part, code in source.codes.items()}
    answered = [part for part, choice in choices.items() if choice != BLANK] or list(choices)
    part = draw.choice(answered)
    others = {**right[part], **wrong[part]}
    options = sorted(v for v in others if v != choices[part]) or sorted(others)
    choices[part] = draw.choice(options)
    codes[part] = disguised(written(others[choices[part]], draw) if writers else others[choices[part]], draw)
    sizes = {**source.sizes, part: len(others[choices[part]])}
    return Student(name, choices, {p: lineage.get(c, c) for p, c in choices.items()}, codes, sizes,
                   source=source.name, rewritten=[*source.rewritten, part])


def disguised(code: str, draw: random.Random) -> str:
    """``code`` as a copier hides it: locals renamed, independent statements swapped, laid out again by
    ``ast.unparse`` (comments gone), comments and blank lines added."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return code
    _Renamer(draw).visit(tree)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.For, ast.If, ast.With)):
            node.body = _swapped(node.body, draw)
    return _commented(ast.unparse(tree), draw)


class _Renamer(ast.NodeTransformer):
    """Renames the names each function assigns (not its parameters, which callers may name)."""

    def __init__(self, draw: random.Random):
        self.draw = draw

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        parameters = {a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)}
        assigned = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        renames = {name: f"{self.draw.choice(WORDS)}_{index}" for index, name in
                   enumerate(sorted(assigned - parameters))}
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and n.id in renames:
                n.id = renames[n.id]
        self.generic_visit(node)
        return node


def _swapped(body: list[ast.stmt], draw: random.Random) -> list[ast.stmt]:
    """``body`` with some pairs of neighbouring statements swapped where neither reads or writes what the other
    writes (assignments and calls only; a docstring stays first)."""
    body = list(body)
    for i in range(1 if _is_docstring(body[0]) else 0, len(body) - 1):
        first, second = body[i], body[i + 1]
        if _simple(first) and _simple(second) and _independent(first, second) and draw.random() < 0.7:
            body[i], body[i + 1] = second, first
    return body


def _is_docstring(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant) \
        and isinstance(statement.value.value, str)


def _simple(statement: ast.stmt) -> bool:
    return isinstance(statement, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr)) and not _is_docstring(statement)


def _independent(a: ast.stmt, b: ast.stmt) -> bool:
    def names(statement, store):
        return {n.id for n in ast.walk(statement) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) == store}

    def attributes(statement):  # self.x = ... and self.x read: keep their order
        return {ast.unparse(n) for n in ast.walk(statement) if isinstance(n, ast.Attribute)}

    written_a, written_b = names(a, True), names(b, True)
    touched = written_a & (names(b, False) | written_b) or written_b & names(a, False)
    calls = any(isinstance(n, ast.Call) for s in (a, b) for n in ast.walk(s) if isinstance(s, ast.Expr))
    return not touched and not calls and not (attributes(a) & attributes(b))


def _commented(code: str, draw: random.Random) -> str:
    """Comments and blank lines added at random, as a copier would to make it look reworked."""
    out = []
    for line in code.splitlines():
        indent = line[:len(line) - len(line.lstrip())]
        roll = draw.random()
        if roll < 0.15 and line.strip():
            out.append(f"{indent}{draw.choice(COMMENTS)}")
        elif roll < 0.25:
            out.append("")
        out.append(f"{line}  {draw.choice(COMMENTS)}" if draw.random() < 0.1 and line.strip()
                   and not line.rstrip().endswith((":", ",", "(", "[", "\\")) and '"""' not in line else line)
    return "\n".join(out) + "\n"


def the_class(assignment: str, students: int, copy_share: float, seed: int, writers: bool = True,
              shared_mistakes: bool = False) -> tuple[list[Student], dict]:
    """Honest students, then copies of honest students and copies of copies; the released notebook."""
    draw = random.Random(seed)
    answers = variants(assignment)
    release = notebook(ROOT / "exercises", assignment)
    blank = {part: _text(cell) for part, cell in answer_cells(release).items()}
    copies = round(students * copy_share)
    unused = None  # each wrong answer once: the catalogue's mistakes are each written in one way of its own
    if not shared_mistakes:
        unused = {part: draw.sample(sorted(found), len(found)) for part, found in answers[1].items()}
    made = [honest(f"h{i:03d}", answers, blank, draw, writers, unused) for i in range(students - copies)]
    of_copy = copies // 3
    originals = draw.sample(made, copies - of_copy)
    firsts = [copied(f"c{i:03d}", source, answers, draw, writers) for i, source in enumerate(originals)]
    seconds = [copied(f"d{i:03d}", source, answers, draw, writers)
               for i, source in enumerate(draw.sample(firsts, of_copy))]
    return made + firsts + seconds, release


def write_course(directory: Path, assignment: str, students: list[Student], release: dict) -> Path:
    """A course folder: the repository's config, the released notebook, each student's notebook."""
    (directory / "nbgrader_config.py").write_text((ROOT / "nbgrader_config.py").read_text())
    folder = directory / "exercises" / assignment
    folder.mkdir(parents=True)
    (folder / f"{assignment}.ipynb").write_text(json.dumps(release))
    for student in students:
        nb = copy.deepcopy(release)
        for part, cell in answer_cells(nb).items():
            cell["source"] = student.codes[part]
        path = directory / "submitted" / student.name / assignment / f"{assignment}.ipynb"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(nb))
    return directory


# --------------------------------------------------------------------------------------
# The measurement
# --------------------------------------------------------------------------------------


def copy_pairs(students: list[Student]) -> tuple[set[frozenset], set[frozenset]]:
    """``(direct, related)``: each copy with what it copied, and every pair within a group of copies."""
    direct = {frozenset((s.name, s.source)) for s in students if s.source}
    related = {frozenset(pair) for group in groups([tuple(p) for p in direct]) for pair in combinations(group, 2)}
    return direct, related


def same_parts(a: Student, b: Student) -> int:
    """On how many parts the two handed in answers of one lineage (blank parts not counted)."""
    return sum(a.lineages[p] == b.lineages[p] != BLANK for p in a.lineages)


def identical_share(a: Student, b: Student) -> float:
    """The share of the smaller notebook's answer code that is, by construction, of the other's lineage: the parts
    where both drew answers of one lineage, by their length."""
    same = sum(min(a.sizes[p], b.sizes[p]) for p in a.lineages if a.lineages[p] == b.lineages[p] != BLANK)
    smaller = min(sum(a.sizes.values()), sum(b.sizes.values()))
    return same / smaller if smaller else 0.0


def measure(students: list[Student], scores: dict[frozenset, float], threshold: float) -> dict:
    direct, related = copy_pairs(students)
    flagged = {pair for pair, score in scores.items() if score >= threshold}
    honest_pairs = len(students) * (len(students) - 1) // 2 - len(related)
    false = flagged - related
    return {"threshold": threshold, "recall": len(flagged & direct) / len(direct),
            "missed": sorted(tuple(sorted(p)) for p in direct - flagged), "related found": len(flagged & related),
            "related": len(related), "flagged": len(flagged), "honest flagged": len(false),
            "honest rate": len(false) / max(1, honest_pairs), "honest pairs": honest_pairs,
            "precision": len(flagged & related) / len(flagged) if flagged else 1.0, "false": false}


def all_scores(analysis) -> dict[frozenset, float]:
    """The evidence of every pair with some (:attr:`Pair.score`)."""
    matrix = analysis.evidence()
    names = analysis.students
    return {frozenset((names[i], names[j])): float(matrix[i, j]) for i, j in combinations(range(len(names)), 2)
            if matrix[i, j] > 0}


def by_construction(students: list[Student], related: set[frozenset], flagged: set[frozenset]) -> list[str]:
    """Lines: the pairs that are not copies, by how many parts they hand in answers of one lineage to, and by the
    share of their code that is of one lineage (:func:`identical_share`), and how many of them are flagged."""
    parts = len(students[0].choices)
    counts, hits = [0] * (parts + 1), [0] * (parts + 1)
    bins = [0.0, 0.25, 0.5, 0.75, 1.01]
    shares, shared_hits = [0] * 4, [0] * 4
    for a, b in combinations(students, 2):
        pair = frozenset((a.name, b.name))
        if pair in related:
            continue
        k, share = same_parts(a, b), identical_share(a, b)
        counts[k] += 1
        hits[k] += pair in flagged
        slot = next(i for i in range(4) if share < bins[i + 1])
        shares[slot] += 1
        shared_hits[slot] += pair in flagged
    lines = [f"    same lineage on {k} of {parts} parts: {counts[k]:6d} pairs, {hits[k]:5d} flagged "
             f"({hits[k] / counts[k]:.1%})" for k in range(parts + 1) if counts[k]]
    lines += [f"    {bins[i]:.0%} to {min(bins[i + 1], 1):.0%} of the smaller notebook's code of one lineage: "
              f"{shares[i]:6d} pairs, {shared_hits[i]:5d} flagged ({shared_hits[i] / max(1, shares[i]):.1%})"
              for i in range(4)]
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--assignment", default="04_multihead")
    parser.add_argument("--students", type=int, default=300)
    parser.add_argument("--copies", type=float, default=0.1, help="share of the class that copies (default 0.1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threshold", type=float, default=None, help="evidence, in nats (default: the command's)")
    parser.add_argument("--shared-mistakes", action="store_true",
                        help="the catalogue's wrong answers may go to several honest students, as written (by default "
                             "each goes to one: two students who write the same odd mistake the same way are what the "
                             "command is for)")
    parser.add_argument("--identical-writers", action="store_true",
                        help="honest students hand in the answers they draw as written in the repository, without "
                             "the small choices each makes (two who draw the same answers hand in the same code)")
    args = parser.parse_args(argv)
    students, release = the_class(args.assignment, args.students, args.copies, args.seed, not args.identical_writers,
                                  args.shared_mistakes)
    with tempfile.TemporaryDirectory(prefix="similarity-bench-") as directory:
        course = write_course(Path(directory), args.assignment, students, release)
        began = time.perf_counter()
        analysis = similarity(args.assignment, course_dir=course, threshold=args.threshold)
        analysed = time.perf_counter() - began
        from autograder.instructor.similarity import page_path, write_page

        page = write_page(analysis, page_path(course, analysis.assignment))
        seconds, size = time.perf_counter() - began, page.stat().st_size
    report(args, students, analysis, analysed, seconds, size)


def report(args, students: list[Student], analysis, analysed: float, seconds: float, size: int) -> None:
    scores = all_scores(analysis)
    direct, related = copy_pairs(students)
    copies = sum(s.source is not None for s in students)
    args.threshold = analysis.threshold
    result = measure(students, scores, args.threshold)
    print(f"{args.assignment}: {len(students)} students ({copies} copies, {copies // 3 if copies else 0} of them "
          f"of a copy), {len(students) * (len(students) - 1) // 2} pairs, {len(analysis.parts)} parts, seed {args.seed}")
    print(f"threshold {args.threshold:g}: recall {result['recall']:.0%} of {len(direct)} direct copy pairs"
          + (f"; missed: {result['missed']}" if result["missed"] else " (none missed)"))
    through = related - direct
    found = {p for p in through if scores.get(p, 0.0) >= args.threshold}
    print(f"  pairs made through a copy of a copy (the first student and the second copy): {len(found)} of "
          f"{len(through)} flagged")
    print(f"  honest pairs flagged: {result['honest flagged']} of {result['honest pairs']} "
          f"({result['honest rate']:.3%}); precision {result['precision']:.1%} ({result['flagged']} flagged)")
    lowest = min((scores.get(p, 0.0) for p in direct), default=0.0)
    print(f"  lowest direct copy evidence {lowest:.1f}; highest honest evidence "
          f"{max((s for p, s in scores.items() if p not in related), default=0.0):.1f}")
    print("  pairs that are not copies, by construction:")
    print("\n".join(by_construction(students, related, {p for p, s in scores.items() if s >= args.threshold})))
    print("  threshold  recall  honest flagged  rate     precision")
    for threshold in THRESHOLDS:
        row = measure(students, scores, threshold)
        print(f"  {threshold:9.1f}  {row['recall']:6.0%}  {row['honest flagged']:14d}  {row['honest rate']:7.3%}  "
              f"{row['precision']:8.1%}")
    print(f"time: {analysed:.1f} s to read and compare {len(students)} notebooks, {seconds:.1f} s with the page "
          f"({size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
