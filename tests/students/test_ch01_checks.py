"""Behaviour of the assignment-01 checks beyond the shared catalogue tests."""

import subprocess
import sys
import warnings

import pytest

from autograder import ch01_nadaraya_watson as ch01
from catalogue_ch01 import (
    _fallback_on_default_device,
    _gaussian_without_half,
    _hard_coded_visible_case,
    _no_empty_row_guard,
    _weights_over_queries,
    gaussian,
)
from course import ROOT


def test_a_warning_the_answer_raises_while_a_check_calls_it_does_not_escape_the_check():
    def noisy_gaussian(u):
        warnings.warn("harmless", stacklevel=2)
        return gaussian(u)

    with warnings.catch_warnings(record=True) as escaped:
        warnings.simplefilter("always")
        ch01.check_gaussian_kernel(noisy_gaussian)
    assert not [w for w in escaped if "harmless" in str(w.message)], [str(w.message) for w in escaped]


#: A test cell as a student runs it: the answer warns in the student's own call (shown as Python
#: shows warnings, outside any check) and again while the check calls it.
_CELL = """
import warnings

import torch

from autograder import ch01_nadaraya_watson as ch01


def noisy_gaussian(u):
    warnings.warn("harmless")
    return torch.exp(-(u**2) / 2)


noisy_gaussian(torch.zeros(3))
ch01.check_gaussian_kernel(noisy_gaussian)
"""


def test_a_warning_in_a_students_cell_is_shown_on_stdout_and_the_part_still_passes():
    """nbgrader gives 0 points to a graded cell that writes to stderr: importing ``autograder``
    moves warnings to stdout, where the student still sees them. In a fresh interpreter, since
    pytest records the warnings of its own process instead of showing them."""
    ran = subprocess.run([sys.executable, "-c", _CELL], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stderr
    assert ran.stderr == ""
    assert "UserWarning: harmless" in ran.stdout, ran.stdout
    assert "✔ gaussian_kernel" in ran.stdout, ran.stdout


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
