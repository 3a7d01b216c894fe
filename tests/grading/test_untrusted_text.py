"""What a student's process sends is untrusted text, and a fault of the course is never a wrong answer.

Unit tests, on hand-built strings, notebooks and checks, of ``autograder/text.py`` (text made
storable, kernel messages cut short with runs of numbers elided), of how the judge shows what
an answer raised (a hidden case: the grader's words only), and of how the judge tells the
answer's fault (:class:`~autograder.core.CheckFailed`) from the course's (:class:`JudgeFault`).
The same attacks, graded by the real command, are section 10 of ``submissions.py``.
"""

from __future__ import annotations

import json
import re

import nbformat
import pytest
from test_grader_units import RIGHT_DOUBLE, answered, graded

from autograder import ch03_masking
from autograder.core import Case, CheckFailed
from autograder.grading.notebooks import clean_outputs, read_submission
from autograder.judge import JudgeFault, kernel_error, kind_of
from autograder.protocol import Reply
from autograder.text import EXCERPT_CHARACTERS, NUMBERS_KEPT, REPLACEMENT, clean, clean_tree, excerpt

LONE_SURROGATE = "\ud800"


def storable(text: str) -> bool:
    """Whether ``text`` can be written as UTF-8 (a file, the CSV, a database) as it is."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


def longest_run_of_numbers(text: str) -> int:
    runs = re.findall(r"(?:[-+]?\d+(?:\.\d*)?(?:e[-+]?\d+)?[\s,;\[\]()]*)+", text)
    return max((len(re.findall(r"\d+(?:\.\d*)?(?:e[-+]?\d+)?", run)) for run in runs), default=0)


# --------------------------------------------------------------------------------------
# text.py
# --------------------------------------------------------------------------------------


def test_clean_makes_lone_surrogates_and_nul_storable_and_keeps_the_rest():
    text = f"odd {LONE_SURROGATE} and \x00 kept: é, 中文, tab\t, newline\n, \x1b[31mcolour"
    cleaned = clean(text)
    assert storable(cleaned) and not storable(text)
    assert cleaned == text.replace(LONE_SURROGATE, REPLACEMENT).replace("\x00", REPLACEMENT)


def test_clean_for_one_line_messages_replaces_terminal_escapes_too():
    assert clean("a\x1b[2Jb\tc\nd", controls=True) == f"a{REPLACEMENT}[2Jb\tc\nd"


def test_clean_tree_cleans_every_string_of_json_data_keys_included():
    tree = {f"key{LONE_SURROGATE}": [f"v{LONE_SURROGATE}", 1, 2.5, None, {"x": "\x00"}]}
    assert json.dumps(clean_tree(tree), ensure_ascii=False).encode("utf-8")
    assert clean_tree(tree) == {f"key{REPLACEMENT}": [f"v{REPLACEMENT}", 1, 2.5, None, {"x": REPLACEMENT}]}


def test_an_excerpt_is_one_short_storable_line():
    shown = excerpt("first line\nsecond " + "word " * 200 + LONE_SURROGATE)
    assert "\n" not in shown and len(shown) <= EXCERPT_CHARACTERS and storable(shown)
    assert shown.startswith("first line second word") and shown.endswith("[…]")


def test_an_excerpt_elides_long_runs_of_numbers_and_long_tokens():
    values = ", ".join(f"{0.1 * i:.4f}" for i in range(60))
    shown = excerpt(f"seen: tensor([[{values}]]) and aGVsbG8gd29ybGQgdGhpcyBpcyBhIGxvbmcgYmFzZTY0IHN0cmluZw== too")
    assert longest_run_of_numbers(shown) <= NUMBERS_KEPT, shown
    assert "[…]" in shown and "aGVsbG8" not in shown and shown.endswith("too")


@pytest.mark.parametrize("message", ["valid_lens must be 1-D or 2-D, got shape (2, 3, 4)",
                                     "one long number 12345678901234567890 is one number, not a run"])
def test_an_excerpt_keeps_a_short_message_as_it_is(message):
    assert excerpt(message) == message


# --------------------------------------------------------------------------------------
# What a grade shows of what an answer raised
# --------------------------------------------------------------------------------------


def test_a_hidden_case_shows_only_the_type_of_what_the_answer_raised():
    shown = kernel_error("ValueError: the hidden input was tensor([0.25, 0.5])", hidden=True)
    assert shown.startswith("ValueError") and "0.25" not in shown and "hidden input" not in shown


def test_a_visible_case_shows_an_excerpt_of_what_the_answer_raised():
    shown = kernel_error(f"ValueError: bad {LONE_SURROGATE} " + "1, " * 100)
    assert shown.startswith("ValueError: bad ") and storable(shown) and longest_run_of_numbers(shown) <= NUMBERS_KEPT


def test_a_reply_from_the_kernel_holds_only_storable_text():
    reply = Reply.from_data({"error": f"ValueError: {LONE_SURROGATE}\x00", "module": LONE_SURROGATE,
                             "missing": "", "library": [LONE_SURROGATE]})
    assert all(storable(text) for text in (reply.error, reply.module, *reply.library))


def test_a_submission_with_lone_surrogates_is_read_and_its_outputs_kept_storable(tmp_path):
    notebook = answered(causal_mask=RIGHT_DOUBLE + f"\n# {LONE_SURROGATE}")
    notebook.cells.append(nbformat.v4.new_markdown_cell(f"never runs {LONE_SURROGATE}"))
    path = tmp_path / "submission.ipynb"
    path.write_text(json.dumps(notebook))  # JSON escapes the surrogate as \ud800, as a hand-edited file may
    read = read_submission(path)
    assert storable(nbformat.writes(read)) and REPLACEMENT in read.cells[-1].source
    outputs = clean_outputs([nbformat.v4.new_output("stream", name="stdout", text=LONE_SURROGATE),
                             nbformat.v4.new_output("error", ename="E", evalue="\x00", traceback=[LONE_SURROGATE])])
    assert storable(json.dumps(outputs, ensure_ascii=False))


# --------------------------------------------------------------------------------------
# The answer's fault, or the course's
# --------------------------------------------------------------------------------------


def test_a_failed_case_is_a_check_failed():
    with pytest.raises(CheckFailed, match="wrong"):
        Case("part", "inputs").fail("wrong")


def test_kinds_are_the_structure_of_a_result_without_its_values():
    import torch

    assert kind_of((torch.zeros(2), 3)) == kind_of((torch.ones(5), 1.5)) == ("tensor", "number")
    assert kind_of(torch.zeros(2)) != kind_of((torch.zeros(2),))


@pytest.mark.parametrize("broken_check", [
    lambda case, result, expected: 1 / 0,  # a bug of the course's
    lambda case, result, expected: _bare_assert(),  # a bare assert of the course's, not a CheckFailed
])
def test_a_check_that_fails_on_data_of_the_kind_it_expects_is_the_courses_fault(monkeypatch, broken_check):
    monkeypatch.setattr(ch03_masking.CAUSAL, "compare", broken_check)
    with pytest.raises(JudgeFault, match=r"(?s)causal_mask: the check's own code failed .*(ZeroDivisionError|AssertionError).* in "):
        graded(answered())


def test_a_result_of_another_kind_that_a_check_cannot_handle_is_the_answers_fault(monkeypatch):
    def compare_shapes(case, result, expected):
        case.check(result.shape == expected.shape, "wrong shape")  # AttributeError on a list

    monkeypatch.setattr(ch03_masking.PADDING, "compare", compare_shapes)
    results, *_ = graded(answered(padding_mask="def padding_mask(valid_lens, num_keys):\n    return [[True]]"))
    failed = results["test_padding_mask"]
    assert failed.status == "failed" and "returned something that cannot be checked" in failed.message
    assert results["test_causal_mask"].status == "passed"


def _bare_assert():
    raise AssertionError("the course's own assertion")
