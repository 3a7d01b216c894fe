"""Every assignment's checks accept correct answers and reject realistic wrong ones.

Each ``catalogue_chNN`` module lists ``CORRECT`` answers (with the autograder's own
reference, which a check must refuse as not the student's work) and wrong answers
(``WRONG_AND_WHY``), each with the check meant to catch it, whether only the hidden cases
can, and a phrase of the message that check gives for that mistake.
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
import catalogue_ch08
from autograder.core import CheckFailed

CATALOGUES = [catalogue_ch01, catalogue_ch02, catalogue_ch03, catalogue_ch04, catalogue_ch05, catalogue_ch06, catalogue_ch07,
              catalogue_ch08]
CORRECT = [(m.__name__[-4:], *entry) for m in CATALOGUES for entry in m.CORRECT]
#: (chapter, name, check, answer, hidden, a phrase of the message that says why it is wrong)
WRONG = [(m.__name__[-4:], *entry) for m in CATALOGUES for entry in m.WRONG_AND_WHY]
#: Wrong answers the checks refuse, but for another reason than their own mistake: known problems of the
#: checks, marked xfail (strict: the test says so once they are fixed). (chapter, name) -> the problem.
REFUSED_FOR_ANOTHER_REASON: dict[tuple[str, str], str] = {}
#: Checks that train a model (seconds each): left out of the fast run, ``pytest -m "not slow"``.
TRAINING_CHECKS = {check for m in CATALOGUES for check in getattr(m, "TRAINING_CHECKS", ())}


def cases(entries, ids):
    """``entries`` as pytest parameters, those of a training check marked slow."""
    return [pytest.param(*entry, id=name, marks=[pytest.mark.slow] if entry[1] in TRAINING_CHECKS else [])
            for entry, name in zip(entries, ids, strict=True)]


@pytest.mark.parametrize("hidden", [False, True], ids=["visible", "hidden"])
@pytest.mark.parametrize("chapter, check, answer, reference", cases(CORRECT, [f"{c[0]}-{c[2].__name__}" for c in CORRECT]))
def test_correct_answer_passes(chapter, check, answer, reference, hidden):
    check(answer, hidden=hidden)


@pytest.mark.parametrize("chapter, check, answer, reference", cases(CORRECT, [f"{c[0]}-{c[2].__name__}" for c in CORRECT]))
def test_the_autograders_own_reference_is_refused(chapter, check, answer, reference):
    with pytest.raises(AssertionError, match="from the autograder package"):
        check(reference)


def _wrong_marks(chapter, name, check):
    marks = [pytest.mark.slow] if check in TRAINING_CHECKS else []
    if (chapter, name) in REFUSED_FOR_ANOTHER_REASON:
        marks.append(pytest.mark.xfail(reason=REFUSED_FOR_ANOTHER_REASON[chapter, name], raises=AssertionError,
                                       strict=True))
    return marks


@pytest.mark.parametrize("chapter, name, check, answer, hidden, why", [
    pytest.param(*w, id=f"{w[0]}-{w[1]}", marks=_wrong_marks(*w[:3])) for w in WRONG])
def test_wrong_answer_is_rejected_for_its_reason(chapter, name, check, answer, hidden, why):
    """Refused with a :class:`CheckFailed` (not a crash of the check's own code) whose message
    says what the catalogued mistake is: ``why``, a phrase of that message."""
    with pytest.raises(CheckFailed) as failure:
        check(answer, hidden=hidden)
    message = str(failure.value)
    assert re.match(r"^\w+: ", message), f"the message does not start with the part's name: {message}"
    assert why in message, f"refused, but not for {name!r} (expected {why!r} in the message):\n{message}"
    if hidden:
        assert "hidden case (seed" in message and "expected:" not in message, message


def test_each_catalogue_has_at_least_five_wrong_answers_per_assignment():
    for catalogue in CATALOGUES:
        assert len(catalogue.WRONG) >= 5, catalogue.__name__


def test_every_wrong_answer_says_why_it_is_wrong():
    for catalogue in CATALOGUES:
        assert catalogue.WRONG == [entry[:4] for entry in catalogue.WRONG_AND_WHY], catalogue.__name__
        for name, *_, why in catalogue.WRONG_AND_WHY:
            assert isinstance(why, str) and why.strip(), f"{catalogue.__name__}: {name!r} has no reason"
    assert set(REFUSED_FOR_ANOTHER_REASON) <= {(w[0], w[1]) for w in WRONG}, "a known problem names no wrong answer"
