"""A submission graded in this process: the grading path without its sandbox, for the course's own tests.

:class:`InProcessSession` runs an assembled notebook's code cells in one namespace of this
process and pins each test cell's answers as the kernel session does; the judge then asks
:class:`~autograder.judge.LocalRespondent`\\ s instead of a kernel. Everything else is the
grading command's own code: assembly (``notebooks.py``), the judging of every test cell
and the autograded notebook (``verdict.py``). It runs the notebook's code without any
sandbox, so it is for the course's own notebooks and the checks' catalogues of answers
(the one-bug matrix grades each solution notebook a hundred times with it), never for a
student's submission.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from typing import Any

import nbformat
import torch

from ..judge import LocalRespondent
from ..kernel.respond import ABSENT, missing
from ..protocol import Reply, Request
from .execute import CellResult, CellStatus
from .notebooks import Assembled, assemble
from .verdict import PartResult, judge_test_cells


class _Missing:
    """A respondent for an answer that was not defined when its test cell came."""

    def __init__(self, answer: str):
        self.answer = answer

    def ask_all(self, requests: list[Request]) -> list[Reply]:
        return [missing(self.answer) for _ in requests]

    def check_earlier(self, declaration) -> None:
        pass


class InProcessSession:
    """The cells of ``assembled`` run in one namespace here; answers pinned at each test cell.

    ``replace``: ``{name: object}`` put in place of the notebook's own right after the cell
    that defines ``name`` (a wrong answer for the one-bug matrix, say). ``as_kernel``: take what
    this process observes of an answer as a kernel's word, advice only, as grading does (by
    default it decides, as in a student's visible check).
    """

    def __init__(self, assembled: Assembled, replace: dict[str, Any] | None = None, as_kernel: bool = False):
        self.assembled, self.replace, self.as_kernel = assembled, replace or {}, as_kernel
        self.results = [CellResult(CellStatus.NOT_RUN) for _ in assembled.notebook.cells]
        self.deadline = float("inf")
        self.namespace: dict = {"__name__": "__main__"}
        self.pinned: dict[str, dict[str, Any]] = {}

    alive = True

    def run_cells(self) -> None:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for index, cell in enumerate(self.assembled.notebook.cells):
                if self.assembled.roles[index] == "test":
                    test = self.assembled.test_id(index)
                    names = {call.answer for call in self.assembled.checks.get(index, [])}
                    self.pinned[test] = {name: self.namespace.get(name, ABSENT) for name in names}
                elif cell.cell_type == "code":
                    self.results[index] = self._execute(cell.source)

    def _execute(self, source: str) -> CellResult:
        try:
            exec(compile(source, "<cell>", "exec"), self.namespace)  # noqa: S102 (the course's own notebooks)
        except Exception as error:  # noqa: BLE001 - a cell's error is its result
            return CellResult(CellStatus.ERROR, f"{type(error).__name__}: {error}")
        finally:
            for name, value in self.replace.items():
                if name in _defined_by(source):
                    self.namespace[name] = value
        return CellResult(CellStatus.OK)

    def recover(self) -> bool:
        return True

    def respondent(self, declaration, check: str, test: str, answer: str, deadline: float):
        value = self.pinned.get(test, {}).get(answer, ABSENT)
        return _Missing(answer) if value is ABSENT else LocalRespondent(declaration, value,
                                                                          observes_for_the_judge=not self.as_kernel)


def _defined_by(source: str) -> set[str]:
    """The top-level names a cell defines with ``def``, ``class`` or an assignment."""
    import ast

    try:
        body = ast.parse(source).body
    except SyntaxError:
        return set()
    names = {node.name for node in body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    names |= {target.id for node in body if isinstance(node, ast.Assign) for target in node.targets
              if isinstance(target, ast.Name)}
    return names


def grade_in_process(source: nbformat.NotebookNode, submission: nbformat.NotebookNode, chapter, key: str = "in-process",
                     replace: dict[str, Any] | None = None, seconds: float = 600.0,
                     as_kernel: bool = False) -> list[PartResult]:
    """The grade of every part of ``submission`` (against the instructor's ``source``), judged here.

    Args:
        chapter: the checks module, e.g. ``autograder.ch03_masking``.
        replace, as_kernel: see :class:`InProcessSession`.
    """
    assembled = assemble(source, submission)
    session = InProcessSession(assembled, replace, as_kernel)
    session.run_cells()
    verdicts = judge_test_cells(session, assembled, chapter, seconds, key, [torch.device("cpu")])
    return [result for result, _ in verdicts.values()]
