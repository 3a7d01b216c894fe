"""The judge names a recognised mistake: a wrong answer whose values match one of its part's known mistakes
(``MISTAKES`` of the grading side's reference module) is told which, on the first line of its message."""

import importlib

import pytest
import torch

import catalogue_ch03
import catalogue_ch07
from autograder import ch07_decoding as ch07
from autograder import parts
from autograder.core import CheckFailed
from autograder.judge import KNOWN_MISTAKE, LocalRespondent, judge
from autograder.parts import reference_module
from autograder.reference import ch03_masking as ref03
from autograder.reference import ch07_decoding as ref07

#: three students' keys: a mistake is named alike whatever the hidden cases
KEYS = ["some key", "another student", "a third one"]
KEY = KEYS[0]
#: every catalogue that says which known mistake each of its wrong answers makes (``KNOWN_MISTAKES``)
CATALOGUES = [module for module in (importlib.import_module(f"catalogue_ch{n:02d}") for n in range(1, 9))
              if hasattr(module, "KNOWN_MISTAKES")]


def _mistaken(catalogue) -> list[tuple]:
    """``(chapter, name, declaration, answer, phrase, description)`` of each wrong answer whose mistake is known."""
    wrong = {name: (check.declaration, answer, why) for name, check, answer, _, why in catalogue.WRONG_AND_WHY}
    return [(catalogue.__name__.removeprefix("catalogue_"), name, *wrong[name], description)
            for name, description in catalogue.KNOWN_MISTAKES.items()]


MISTAKEN = [entry for catalogue in CATALOGUES for entry in _mistaken(catalogue)]
IDS = [f"{chapter}-{name}" for chapter, name, *_ in MISTAKEN]
WRONG = {name: (check.declaration, answer, why) for name, check, answer, _, why in catalogue_ch03.WRONG_AND_WHY}
OWN_MISTAKE = catalogue_ch03.KNOWN_MISTAKES


def first_line(declaration, answer, hidden=True, key=KEY, observed=False) -> str:
    """The first line of what grading tells ``answer`` (the answer's own observations taken as advice, as a
    kernel's are, unless ``observed``: known mistakes are named from results)."""
    with pytest.raises(CheckFailed) as failure:
        judge(declaration, LocalRespondent(declaration, answer, observes_for_the_judge=observed), hidden=hidden,
              key=key)
    return str(failure.value).splitlines()[0]


def test_ch03_and_more_catalogues_name_their_mistakes():
    assert catalogue_ch03 in CATALOGUES and len(MISTAKEN) >= len(catalogue_ch03.KNOWN_MISTAKES)


@pytest.mark.parametrize("catalogue", CATALOGUES, ids=lambda c: c.__name__)
def test_every_mistake_is_declared_and_every_declared_mistake_is_catalogued(catalogue):
    mistakes = reference_module(catalogue.WRONG_AND_WHY[0][1].declaration.chapter).MISTAKES
    declared = {(part, description) for part, known in mistakes.items() for description, _ in known}
    assert {(declaration.name, description) for *_, declaration, _, _, description in _mistaken(catalogue)} == declared
    for known in mistakes.values():
        assert all(function.__doc__ and len(function.__doc__.splitlines()) == 1 for _, function in known)


@pytest.mark.parametrize("chapter, name, declaration, answer, why, description", MISTAKEN, ids=IDS)
def test_the_mistake_gives_the_catalogued_answers_outputs_on_the_hidden_cases(chapter, name, declaration, answer, why,
                                                                              description):
    mistake = dict(reference_module(declaration.chapter).MISTAKES[declaration.name])[description]
    adapt = declaration.adapt
    for key in KEYS:
        for call in parts.hidden_calls(declaration, key)[0]:
            got, expected = adapt(mistake)(*call.args, **call.kwargs), adapt(answer)(*call.args, **call.kwargs)
            for g, e in zip(*((x if isinstance(x, tuple) else (x,)) for x in (got, expected)), strict=True):
                if isinstance(g, torch.Tensor):
                    assert g.dtype == e.dtype and torch.allclose(g, e, atol=1e-5, equal_nan=True), \
                        (name, call.description)
                else:
                    assert g == e, (name, call.description)


@pytest.mark.parametrize("hidden", [True, False], ids=["hidden", "visible"])
@pytest.mark.parametrize("chapter, name, declaration, answer, why, description", MISTAKEN, ids=IDS)
def test_a_wrong_answer_is_told_its_own_mistake(chapter, name, declaration, answer, why, description, hidden):
    for key in KEYS if hidden else KEYS[:1]:
        line = first_line(declaration, answer, hidden, key)
        assert line.endswith(f"{KNOWN_MISTAKE}{description}"), line
        assert why in line, line  # the check's own words are kept: the catalogue's phrase still matches


@pytest.mark.parametrize("catalogue", CATALOGUES, ids=lambda c: c.__name__)
def test_the_mistakes_named_in_one_part_differ(catalogue):
    named: dict[str, list[str]] = {}
    for _, _, declaration, answer, _, _ in _mistaken(catalogue):
        named.setdefault(declaration.name, []).append(first_line(declaration, answer).split(KNOWN_MISTAKE)[1])
    assert all(len(set(descriptions)) == len(descriptions) for descriptions in named.values()), named


@pytest.mark.parametrize("check, answer", [(check, answer) for catalogue in CATALOGUES
                                           for check, answer, _ in catalogue.CORRECT
                                           if check.declaration.name in reference_module(
                                               check.declaration.chapter).MISTAKES])
def test_correct_answers_still_pass(check, answer):
    assert judge(check.declaration, LocalRespondent(check.declaration, answer), hidden=True, key=KEY).cases > 0


@pytest.mark.parametrize("name", ["in-place write into the caller's scores",
                                  "delegates to F.scaled_dot_product_attention", "NaN on a query with no allowed key"])
def test_a_mistake_not_declared_is_not_named(name):
    declaration, answer, why = next((c.declaration, a, w) for n, c, a, _, w in catalogue_ch03.WRONG_AND_WHY
                                    if n == name and c.declaration.name in ref03.MISTAKES)
    line = first_line(declaration, answer, observed=True)  # what the answer's process observes decides here
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
    for _, _, declaration, answer, why, _ in MISTAKEN:
        line = first_line(declaration, answer, hidden=False)
        assert why in line and "known mistake" not in line, line


# ---- a name only where the mistake is the answer's ----


@pytest.mark.parametrize("key", KEYS + ["fairness-3", "fairness-5"])
def test_a_beam_that_stops_at_its_first_finished_hypothesis_is_not_named_as_the_libraries_beam(key):
    """It often agrees with the libraries' beam on the case it fails; every student's cases hold one where they
    differ, and the name goes only to a mistake that gives the answer's results on all of them."""
    declaration, answer = ch07.check_beam_search.declaration, catalogue_ch07._stops_at_the_first_finished
    libraries = dict(ref07.MISTAKES["beam_search"])[catalogue_ch07.KNOWN_MISTAKES[
        "finished hypotheses pooled as libraries do, no length penalty"]]
    calls = parts.hidden_calls(declaration, key)[0]
    assert any(not torch.equal(declaration.adapt(answer)(*call.args)[0], declaration.adapt(libraries)(*call.args)[0])
               for call in calls), "no case tells the two apart"
    line = first_line(declaration, answer, key=key)
    assert line.startswith("beam_search: ") and KNOWN_MISTAKE not in line, line


@pytest.mark.parametrize("key", KEYS + ["fairness-3", "fairness-11"])
def test_a_nucleus_taken_before_the_temperature_is_not_told_it_left_out_the_crossing_token(key):
    declaration = ch07.check_sample_next.declaration
    line = first_line(declaration, catalogue_ch07._nucleus_before_the_temperature, key=key)
    assert "the nucleus of top_p" in line and "crosses top_p" not in line, line
    line = first_line(declaration, catalogue_ch07._without_crossing_token, key=key)
    assert "It is the token that crosses top_p" in line, line
