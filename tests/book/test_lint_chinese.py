"""The Chinese edition's lint gate (``_ext/lint_chinese.py``) on small texts, and on the edition itself."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from course import ROOT

sys.path.insert(0, str(ROOT / "_ext"))
import lint_chinese

PAGE = Path(ROOT / "zh" / "book" / "page.md")


def rules(text: str) -> list[str]:
    return [problem.rule for problem in lint_chinese.check_prose(PAGE, text)]


@pytest.mark.parametrize("text, rule", [
    ("沿最后一个轴做softmax，得到权重。\n", "spacing (autocorrect)"),
    ("见第4章。\n", "spacing (autocorrect)"),
    ("第一行的末尾是汉字\n第二行的开头也是汉字。\n", "a line break between two Chinese characters"),
    ("这里的*自注意力*是斜体。\n", "italic Chinese (use bold)"),
    ("准确率为 95 %。\n", "a space before a percent sign"),
])
def test_each_rule_finds_its_problem(text, rule):
    assert rule in rules(text)


@pytest.mark.parametrize("text", [
    "沿最后一个轴做 softmax，见第 4 章，准确率为 95%。\n",
    "这里的**自注意力**是粗体，*softmax* 的斜体是拉丁字母。\n",
    "一个列表：\n\n* 第一项\n* 第二项\n",
    "```{code-cell} ipython3\nx = 1  # 中文注释\n中文\n```\n",
    "$$\n\\text{中文}\\times2\n$$\n",
    "行内代码 `a*b*c` 与行内公式 $a*b$ 不算。\n",
])
def test_good_prose_code_and_math_pass(text):
    assert rules(text) == []


def test_the_chinese_edition_passes_its_lint_gate():
    problems = lint_chinese.lint()
    assert not problems, "\n".join(map(str, problems[:20]))


def test_fixing_applies_every_rule_and_leaves_code_and_math_alone():
    code = "```{code-cell} ipython3\nx = 1  # 中文\n中文\n中文\n```\n$$\n\\text{中}\n\\text{文}\n$$\n"
    text = "第一行的末尾是汉字\n第二行，*强调*与 `*code*`，95 %，见第4章。\n\n" + code
    fixed = lint_chinese.fixed(text)
    assert rules(fixed) == [] and rules(text)
    assert fixed.startswith("第一行的末尾是汉字第二行，**强调**与 `*code*`，95%，见第 4 章。\n") and fixed.endswith(code)
