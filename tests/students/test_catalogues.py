"""Every assignment's checks accept correct answers and reject realistic wrong ones.

Each ``catalogue_chNN`` module lists ``CORRECT`` answers (with the autograder's own
reference, which a check must refuse as not the student's work) and ``WRONG`` answers,
each with the check meant to catch it and whether only the hidden cases can.
"""

import re

import pytest

import catalogue_ch01
import catalogue_ch02
import catalogue_ch03
import catalogue_ch04
import catalogue_ch05
import catalogue_ch06
import catalogue_ch07

CATALOGUES = [catalogue_ch01, catalogue_ch02, catalogue_ch03, catalogue_ch04, catalogue_ch05, catalogue_ch06, catalogue_ch07]
CORRECT = [(m.__name__[-4:], *entry) for m in CATALOGUES for entry in m.CORRECT]
WRONG = [(m.__name__[-4:], *entry) for m in CATALOGUES for entry in m.WRONG]
#: Checks that train a model (seconds each): left out of the fast run, ``pytest -m "not slow"``.
TRAINING_CHECKS = {check for m in CATALOGUES for check in getattr(m, "TRAINING_CHECKS", ())}


def cases(entries, ids):
    """``entries`` as pytest parameters, those of a training check marked slow."""
    return [pytest.param(*entry, id=name, marks=[pytest.mark.slow] if entry[1] in TRAINING_CHECKS else [])
            for entry, name in zip(entries, ids)]


@pytest.mark.parametrize("hidden", [False, True], ids=["visible", "hidden"])
@pytest.mark.parametrize("chapter, check, answer, reference", cases(CORRECT, [f"{c[0]}-{c[2].__name__}" for c in CORRECT]))
def test_correct_answer_passes(chapter, check, answer, reference, hidden):
    check(answer, hidden=hidden)


@pytest.mark.parametrize("chapter, check, answer, reference", CORRECT, ids=[f"{c[0]}-{c[2].__name__}" for c in CORRECT])
def test_the_autograders_own_reference_is_refused(chapter, check, answer, reference):
    with pytest.raises(AssertionError, match="from the autograder package"):
        check(reference)


@pytest.mark.parametrize("chapter, name, check, answer, hidden", [
    pytest.param(*w, id=f"{w[0]}-{w[1]}", marks=[pytest.mark.slow] if w[2] in TRAINING_CHECKS else []) for w in WRONG])
def test_wrong_answer_is_rejected(chapter, name, check, answer, hidden):
    with pytest.raises(AssertionError) as failure:
        check(answer, hidden=hidden)
    message = str(failure.value)
    assert re.match(r"^\w+: ", message), f"the message does not start with the part's name: {message}"
    if hidden:
        assert "hidden case (seed" in message and "expected:" not in message, message


def test_each_catalogue_has_at_least_five_wrong_answers_per_assignment():
    for catalogue in CATALOGUES:
        assert len(catalogue.WRONG) >= 5, catalogue.__name__
