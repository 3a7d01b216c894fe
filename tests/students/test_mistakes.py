"""The judge names a recognised mistake: a wrong answer whose values match one of its part's known mistakes
(``MISTAKES`` of the grading side's reference module) is told which, on the first line of its message."""

import pytest
import torch

import catalogue_ch03
from autograder import parts
from autograder.core import CheckFailed
from autograder.judge import LocalRespondent, judge
from autograder.reference import ch03_masking as ref03

KEY = "some key"
#: catalogue_ch03's wrong answer -> the description of its mistake in ref03.MISTAKES
OWN_MISTAKE = {
    "masking with 0 instead of -inf": "masked positions filled with 0 instead of −∞",
    "-1e6 fill: uniform weights on an empty row": "masked positions filled with −1e6, so a row with no valid key "
                                                  "gets uniform weights instead of zeros",
    "off-by-one valid lengths": "valid lengths off by one (one key too many kept)",
    "softmax over the wrong axis": "softmax over the queries' axis instead of the keys'",
    "strict causal mask": "a strict mask: a query may not see its own position",
    "transposed causal mask": "a transposed mask: keys after the query allowed instead of before",
    "bottom-right mask aligned top-left": "aligned top-left, as causal_mask (the offset k − q left out)",
    "bottom-right offset with the wrong sign": "the offset k − q with the wrong sign",
    "bottom-right mask never leaves a row empty": "never leaves a row empty (the offset clamped at 0)",
    "masked attention masking with 0": "masked positions filled with 0 instead of −∞",
    "masked attention without 1/√d": "scores not scaled by 1/√d",
}
WRONG = {name: (check.declaration, answer, why) for name, check, answer, _, why in catalogue_ch03.WRONG_AND_WHY}
MISTAKEN = [(name, *WRONG[name], description) for name, description in OWN_MISTAKE.items()]


def first_line(declaration, answer, hidden=True) -> str:
    with pytest.raises(CheckFailed) as failure:
        judge(declaration, LocalRespondent(declaration, answer), hidden=hidden, key=KEY)
    return str(failure.value).splitlines()[0]


def test_every_mistake_is_declared_and_every_declared_mistake_is_catalogued():
    declared = {(part, description) for part, known in ref03.MISTAKES.items() for description, _ in known}
    assert {(declaration.name, description) for _, declaration, _, _, description in MISTAKEN} == declared
    for known in ref03.MISTAKES.values():
        assert all(function.__doc__ and len(function.__doc__.splitlines()) == 1 for _, function in known)


@pytest.mark.parametrize("name, declaration, answer, why, description", MISTAKEN, ids=list(OWN_MISTAKE))
def test_the_mistake_gives_the_catalogued_answers_outputs_on_the_hidden_cases(name, declaration, answer, why,
                                                                              description):
    mistake = dict(ref03.MISTAKES[declaration.name])[description]
    for call in parts.hidden_calls(declaration, KEY)[0]:
        got, expected = mistake(*call.args, **call.kwargs), answer(*call.args, **call.kwargs)
        for g, e in zip(*((x if isinstance(x, tuple) else (x,)) for x in (got, expected)), strict=True):
            assert g.dtype == e.dtype and torch.allclose(g, e, atol=1e-5, equal_nan=True), (name, call.description)


@pytest.mark.parametrize("hidden", [True, False], ids=["hidden", "visible"])
@pytest.mark.parametrize("name, declaration, answer, why, description", MISTAKEN, ids=list(OWN_MISTAKE))
def test_a_wrong_answer_is_told_its_own_mistake(name, declaration, answer, why, description, hidden):
    line = first_line(declaration, answer, hidden)
    assert line.endswith(f"; it matches a known mistake: {description}"), line
    assert why in line, line  # the check's own words are kept: the catalogue's phrase still matches


def test_the_mistakes_named_in_one_part_differ():
    named: dict[str, list[str]] = {}
    for _, declaration, answer, _, _ in MISTAKEN:
        named.setdefault(declaration.name, []).append(first_line(declaration, answer).split("known mistake: ")[1])
    assert all(len(set(descriptions)) == len(descriptions) for descriptions in named.values()), named


@pytest.mark.parametrize("check, answer", [(check, answer) for check, answer, _ in catalogue_ch03.CORRECT
                                           if check.declaration.name in ref03.MISTAKES])
def test_correct_answers_still_pass(check, answer):
    assert judge(check.declaration, LocalRespondent(check.declaration, answer), hidden=True, key=KEY) > 0


@pytest.mark.parametrize("name", ["in-place write into the caller's scores",
                                  "delegates to F.scaled_dot_product_attention", "NaN on a query with no allowed key"])
def test_a_mistake_not_declared_is_not_named(name):
    declaration, answer, why = next((c.declaration, a, w) for n, c, a, _, w in catalogue_ch03.WRONG_AND_WHY
                                    if n == name and c.declaration.name in ref03.MISTAKES)
    line = first_line(declaration, answer)
    assert why in line and "known mistake" not in line, line


def test_a_mistake_that_raises_is_skipped(monkeypatch):
    def raises(X, valid_lens):
        """Raises on every input."""
        raise RuntimeError("a mistake that cannot run")

    known = (("raises", raises), *ref03.MISTAKES["masked_softmax"])
    monkeypatch.setitem(ref03.MISTAKES, "masked_softmax", known)
    name = "off-by-one valid lengths"
    declaration, answer, _ = WRONG[name]
    assert first_line(declaration, answer).endswith(OWN_MISTAKE[name])


def test_on_a_students_machine_nothing_is_named(monkeypatch):
    monkeypatch.setattr(parts, "reference_module", lambda chapter: None)
    for _, declaration, answer, why, _ in MISTAKEN:
        line = first_line(declaration, answer, hidden=False)
        assert why in line and "known mistake" not in line, line
