"""The exercise contract (``../shared/CONTRACT.md``), the notebooks and the chapters name the same graded parts
with the same signatures.

The contract is the public face of the exercises: for each part a row whose signature column gives the
function or class as students write it (``causal_lm_loss(logits, tokens, pad_id=None)``), a class's
``forward`` beside it. Here every such signature is compared with the definition in the solution notebook
that grades it, parameters and defaults alike; every graded part of a notebook must have its row; and every
chapter's "Exercise" section, in both editions, names the parts its notebook grades.
"""

from __future__ import annotations

import ast
import json
import re

import pytest

from course import ASSIGNMENTS, ROOT, notebook
from layout import chapters

CONTRACT = ROOT.parent / "shared" / "CONTRACT.md"
#: A contract section whose parts "may be split between two assignments, one on decoding strategies (07) and one on
#: fast inference (08), as the two chapters are" (its words): the assignments that may grade its rows.
SPLIT = {"07_decoding": ("07_decoding", "08_fast_inference")}
#: ``name(parameters)`` in a signature's code span.
SIGNATURE = re.compile(r"`(\w+)\(([^`]*)\)`")

pytestmark = pytest.mark.skipif(not CONTRACT.exists(), reason=f"no exercise contract at {CONTRACT}")


def contract_rows() -> list[tuple[str, list[tuple[str, str]]]]:
    """``[(section id, [(name, parameters), ...] of one row's signature column), ...]``."""
    rows, section = [], None
    for line in CONTRACT.read_text(encoding="utf-8").splitlines():
        heading = re.match(r"^## (\d\d_\w+)", line)
        if heading:
            section = heading.group(1)
        elif section and line.startswith("| ") and not line.startswith(("| part", "| ---")):
            signature = line.split(" | ")[1]
            rows.append((section, [(m.group(1), _normal(m.group(2))) for m in SIGNATURE.finditer(signature)]))
    return rows


def _normal(parameters: str) -> str:
    """Parameters as ``a, b=None``: spaces after commas only."""
    return ", ".join(part.strip().replace(" = ", "=") for part in parameters.split(",") if part.strip())


def _parameters(function: ast.FunctionDef) -> str:
    """A definition's parameters as the contract writes them, ``self`` left out."""
    arguments = function.args
    names = [a.arg for a in arguments.args]
    defaults = [None] * (len(names) - len(arguments.defaults)) + list(arguments.defaults)
    shown = [name if default is None else f"{name}={ast.unparse(default)}" for name, default in zip(names, defaults,
                                                                                                      strict=True)]
    return ", ".join(shown[1:] if names[:1] == ["self"] else shown)


def solution(assignment: str) -> dict:
    return json.loads(notebook(ROOT / "solutions", assignment).read_text(encoding="utf-8"))


def definitions(assignment: str) -> dict[str, str]:
    """``{name: parameters}`` of the functions and classes the notebook's answer cells define, and
    ``{Class.forward: parameters}`` of their ``forward``."""
    found = {}
    for cell in solution(assignment)["cells"]:
        if cell["cell_type"] != "code" or not cell["metadata"].get("nbgrader", {}).get("solution"):
            continue
        for node in ast.parse("".join(cell["source"])).body:
            if isinstance(node, ast.FunctionDef):
                found[node.name] = _parameters(node)
            elif isinstance(node, ast.ClassDef):
                methods = {m.name: m for m in node.body if isinstance(m, ast.FunctionDef)}
                found[node.name] = _parameters(methods["__init__"]) if "__init__" in methods else ""
                if "forward" in methods:
                    found[f"{node.name}.forward"] = _parameters(methods["forward"])
    return found


def graded_parts(assignment: str) -> set[str]:
    """The parts the notebook's test cells grade: ``test_<part>`` and ``test_<part>_arguments`` give ``<part>``."""
    ids = {cell["metadata"]["nbgrader"]["grade_id"] for cell in solution(assignment)["cells"]
           if cell["metadata"].get("nbgrader", {}).get("grade")}
    return {grade_id.removeprefix("test_").removesuffix("_arguments") for grade_id in ids}


def _agree(contract: str, notebook: str) -> bool:
    """The same parameters in the same order, each default of the contract's with its value; the notebook may
    give a default the contract does not (``forward(X, valid_lens)`` written ``forward(X, valid_lens=None)``)."""
    split = [[p.partition("=") for p in _normal(parameters).split(", ") if p] for parameters in (contract, notebook)]
    if [name for name, _, _ in split[0]] != [name for name, _, _ in split[1]]:
        return False
    return all(not said or value == given for (_, said, value), (_, _, given) in zip(*split, strict=True))


def where_graded(section: str) -> tuple[str, ...]:
    return SPLIT.get(section, (section,))


def test_the_contract_has_a_section_for_every_assignment():
    sections = {section for section, _ in contract_rows()}
    covered = {assignment for section in sections for assignment in where_graded(section)}
    assert set(ASSIGNMENTS) <= covered, f"assignments without a contract section: {sorted(set(ASSIGNMENTS) - covered)}"


def test_every_signature_of_the_contract_is_the_notebooks():
    problems = []
    defined = {assignment: definitions(assignment) for assignment in ASSIGNMENTS}
    for section, signatures in contract_rows():
        owner = None  # the class whose `forward` follows it in the row
        for name, parameters in signatures:
            key = f"{owner}.forward" if name == "forward" and owner else name
            homes = [a for a in where_graded(section) if a in defined and key in defined[a]]
            if name[0].isupper():
                owner = name
            if len(homes) != 1:
                if name == "forward" or name in ("model", "log_prob_fn", "K") or not homes and not any(
                        key in d for d in defined.values()):
                    continue  # a signature of something the student does not write (a given model, a callback)
                problems.append(f"{section}: `{name}` is defined in {homes or 'no notebook'} of {where_graded(section)}")
                continue
            if not _agree(parameters, defined[homes[0]][key]):
                problems.append(f"{section}: `{key}({parameters})` in the contract, `({defined[homes[0]][key]})` in "
                                f"solutions/{homes[0]}")
    assert not problems, "\n".join(problems)


def test_every_graded_part_has_its_row_in_the_contract():
    named = {name for _, signatures in contract_rows() for name, _ in signatures}
    missing = {assignment: sorted(graded_parts(assignment) - named) for assignment in ASSIGNMENTS}
    # parts graded by a name the contract's signatures do not use (a module's checks named by its forward, …)
    assert not {a: m for a, m in missing.items() if m}, f"graded parts the contract does not name: {missing}"


@pytest.mark.parametrize("edition", ["", "zh"])
@pytest.mark.parametrize("chapter", chapters())
def test_every_chapter_names_the_parts_its_notebook_grades(chapter, edition):
    page = (ROOT / edition / "book" / f"{chapter}.md").read_text(encoding="utf-8")
    section = re.search(r"^## (?:Exercise|作业)\s*$(.*?)(?=^## |\Z)", page, re.MULTILINE | re.DOTALL)
    assert section, f"{edition or 'en'} {chapter}: no Exercise section"
    unnamed = sorted(part for part in graded_parts(chapter) if f"`{part}`" not in section.group(1)
                     and f"`{part}(" not in section.group(1))
    assert not unnamed, f"{edition or 'en'} {chapter}: the Exercise section does not name {unnamed}"
