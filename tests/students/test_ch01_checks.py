"""Behaviour of the assignment-01 checks beyond the shared catalogue tests."""

import pytest

from autograder import ch01_nadaraya_watson as ch01
from catalogue_ch01 import _fallback_on_default_device, _gaussian_without_half, _hard_coded_visible_case
from catalogue_ch01 import _no_empty_row_guard, _weights_over_queries, gaussian


def test_warnings_in_student_code_are_not_printed(capsys):
    def noisy_gaussian(u):
        import warnings

        warnings.warn("harmless")
        return gaussian(u)

    ch01.check_gaussian_kernel(noisy_gaussian)
    assert capsys.readouterr().err == ""


def test_hard_coded_answer_passes_the_visible_case_only():
    ch01.check_leave_one_out(_hard_coded_visible_case)  # no error: only hidden cases expose it


@pytest.mark.parametrize("answer", [_weights_over_queries, _no_empty_row_guard], ids=["axis", "nan"])
def test_hidden_failures_do_not_reveal_the_reference(answer):
    with pytest.raises(AssertionError) as failure:
        ch01.check_nadaraya_watson(answer, hidden=True)
    message = str(failure.value)
    assert "hidden case (seed" in message
    assert "expected:" not in message and "tensor(" not in message, message


def test_visible_failures_show_expected_and_actual_values():
    with pytest.raises(AssertionError, match=r"(?s)wrong values.*expected: tensor\(.*got: +tensor\("):
        ch01.check_gaussian_kernel(_gaussian_without_half)


def test_device_mistake_is_named_even_without_a_gpu():
    with pytest.raises(AssertionError, match="not device-agnostic"):
        ch01.check_nadaraya_watson(_fallback_on_default_device)
