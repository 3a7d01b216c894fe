"""Answers to assignment 03, right and wrong, for the checks' tests (tests/students/test_catalogues.py)."""

import math

import torch

from autograder import ch03_masking as ch03
from autograder.reference import ch03_masking as ref03

# ---- correct answers, written differently from the reference ----


def softmax_lengths(X, valid_lens):
    if valid_lens is None:
        return X.softmax(-1)
    lens = valid_lens.reshape(X.shape[0], -1, 1)  # (batch, q or 1, 1)
    allowed = torch.arange(X.shape[-1], device=X.device).expand_as(X) < lens  # (batch, q, k)
    weights = X.masked_fill(~allowed, -math.inf).softmax(-1)
    return torch.nan_to_num(weights, nan=0.0)  # all-masked rows: NaN -> 0


def causal(num_queries, num_keys, device=None):
    i = torch.arange(num_queries, device=device).unsqueeze(1)
    j = torch.arange(num_keys, device=device).unsqueeze(0)
    return j <= i


def padding(valid_lens, num_keys):
    positions = torch.arange(num_keys, device=valid_lens.device).expand(len(valid_lens), 1, num_keys)
    return positions < valid_lens.view(-1, 1, 1)


def bottom_right(num_queries, num_keys, device=None):
    offset = num_keys - num_queries  # query i sits at position i + offset of the sequence
    positions = torch.arange(num_queries, device=device)[:, None] + offset  # (q, 1)
    return torch.arange(num_keys, device=device) <= positions  # (k,) against (q, 1) -> (q, k)


def window(num_queries, num_keys, radius, device=None):
    band = torch.ones(num_queries, num_keys, dtype=torch.bool, device=device)
    return band.triu(-radius) & band.tril(radius)  # diagonals -radius … +radius


def attention_with_mask(queries, keys, values, mask=None):
    if queries.size(-1) != keys.size(-1):
        raise ValueError("keys must match the width of queries")
    if values.size(-2) != keys.size(-2):
        raise ValueError("values need one row per key")
    if mask is not None and mask.dtype != torch.bool:
        raise ValueError("mask must be boolean")
    scores = queries @ keys.mT / math.sqrt(queries.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    weights = torch.nan_to_num(scores.softmax(-1), nan=0.0)
    return weights @ values, weights


CORRECT = [  # (check, a correct answer, the autograder's reference, which must be refused)
    (ch03.check_masked_softmax, softmax_lengths, ref03.masked_softmax),
    (ch03.check_causal_mask, causal, ref03.causal_mask),
    (ch03.check_causal_mask_bottom_right, bottom_right, ref03.causal_mask_bottom_right),
    (ch03.check_padding_mask, padding, ref03.padding_mask),
    (ch03.check_window_mask, window, ref03.window_mask),
    (ch03.check_masked_attention, attention_with_mask, ref03.masked_attention),
    (ch03.check_masked_attention_arguments, attention_with_mask, ref03.masked_attention),
]

# ---- wrong answers ----


def _masked_with_zero(X, valid_lens):
    if valid_lens is None:
        return X.softmax(-1)
    lens = valid_lens.reshape(X.shape[0], -1, 1)
    allowed = torch.arange(X.shape[-1]).expand_as(X) < lens
    return X.masked_fill(~allowed, 0.0).softmax(-1)  # masked scores of 0 still get weight


def _large_negative_fill(X, valid_lens):
    if valid_lens is None:
        return X.softmax(-1)
    lens = valid_lens.reshape(X.shape[0], -1, 1)
    allowed = torch.arange(X.shape[-1]).expand_as(X) < lens
    return X.masked_fill(~allowed, -1e6).softmax(-1)  # d2l's fill: an empty row becomes uniform


def _off_by_one(X, valid_lens):
    return softmax_lengths(X, None if valid_lens is None else valid_lens + 1)


def _softmax_over_queries(X, valid_lens):
    if valid_lens is None:
        return X.softmax(1)
    allowed = torch.arange(X.shape[-1]).expand_as(X) < valid_lens.reshape(X.shape[0], -1, 1)
    return torch.nan_to_num(X.masked_fill(~allowed, -math.inf).softmax(1), nan=0.0)  # over queries


def _writes_into_scores(X, valid_lens):
    if valid_lens is not None:
        lens = valid_lens.reshape(X.shape[0], -1, 1)
        X[~(torch.arange(X.shape[-1], device=X.device).expand_as(X) < lens)] = -math.inf  # the caller's X
    return torch.nan_to_num(X.softmax(-1), nan=0.0)


def _delegates_to_pytorch(X, valid_lens):
    positions = torch.arange(X.shape[-1], device=X.device)
    mask = None if valid_lens is None else positions < valid_lens.reshape(X.shape[0], -1, 1)
    identity = torch.eye(X.shape[-1], dtype=X.dtype, device=X.device).expand(X.shape[0], -1, -1)
    # SDPA with keys = I·√k reproduces X's scores; its output is then the weights themselves
    return torch.nn.functional.scaled_dot_product_attention(X, identity * math.sqrt(X.shape[-1]), identity, attn_mask=mask)


def _strict_causal(num_queries, num_keys, device=None):
    return torch.ones(num_queries, num_keys, dtype=torch.bool, device=device).tril(-1)  # j < i


def _transposed_causal(num_queries, num_keys, device=None):
    return torch.ones(num_queries, num_keys, dtype=torch.bool, device=device).triu()  # j >= i


def _float_causal(num_queries, num_keys, device=None):
    return torch.ones(num_queries, num_keys, device=device).tril()  # 1.0/0.0, not bool


def _causal_ignores_device(num_queries, num_keys, device=None):
    return torch.ones(num_queries, num_keys, dtype=torch.bool).tril()


def _bottom_right_as_top_left(num_queries, num_keys, device=None):
    return torch.ones(num_queries, num_keys, dtype=torch.bool, device=device).tril()  # right only if q == k


def _bottom_right_offset_reversed(num_queries, num_keys, device=None):
    return torch.ones(num_queries, num_keys, dtype=torch.bool, device=device).tril(num_queries - num_keys)


def _bottom_right_never_empty(num_queries, num_keys, device=None):
    # clamps the offset at 0, so queries before every key see the first keys
    return torch.ones(num_queries, num_keys, dtype=torch.bool, device=device).tril(max(num_keys - num_queries, 0))


def _bottom_right_ignores_device(num_queries, num_keys, device=None):
    return torch.ones(num_queries, num_keys, dtype=torch.bool).tril(num_keys - num_queries)


def _padding_on_default_device(valid_lens, num_keys):
    return torch.arange(num_keys) < valid_lens[:, None, None]  # arange on the CPU


def _padding_without_query_axis(valid_lens, num_keys):
    return torch.arange(num_keys, device=valid_lens.device) < valid_lens[:, None]  # (batch, k)


def _window_one_sided(num_queries, num_keys, radius, device=None):
    i, j = torch.arange(num_queries, device=device)[:, None], torch.arange(num_keys, device=device)[None, :]
    return (i - j >= 0) & (i - j <= radius)  # forgets the keys after the query


def _window_without_device(num_queries, num_keys, radius):
    i, j = torch.arange(num_queries)[:, None], torch.arange(num_keys)[None, :]
    return (i - j).abs() <= radius  # the contract's device argument is missing


def _checked(queries, keys, values, mask):
    """The argument checks of a right answer: each wrong answer below makes one mistake only."""
    attention_with_mask(queries, keys, values, mask)


def _mask_with_zero(queries, keys, values, mask=None):
    _checked(queries, keys, values, mask)
    scores = queries @ keys.mT / math.sqrt(queries.size(-1))
    weights = (scores * (mask if mask is not None else 1)).softmax(-1)  # zeroed scores still get weight
    return weights @ values, weights


def _nan_on_empty_rows(queries, keys, values, mask=None):
    _checked(queries, keys, values, mask)
    scores = queries @ keys.mT / math.sqrt(queries.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    weights = scores.softmax(-1)  # all -inf rows: NaN
    return weights @ values, weights


def _accepts_float_masks(queries, keys, values, mask=None):
    return attention_with_mask(queries, keys, values, None if mask is None else mask.bool())


def _unscaled_masked(queries, keys, values, mask=None):
    return attention_with_mask(queries * math.sqrt(queries.size(-1)), keys, values, mask)


def _sdpa_masked(queries, keys, values, mask=None):
    attention_with_mask(queries, keys, values, mask)  # argument checks
    output = torch.nn.functional.scaled_dot_product_attention(queries, keys, values, attn_mask=mask)
    return output.nan_to_num(0.0), attention_with_mask(queries, keys, values, mask)[1]


#: (name, check, answer, only the hidden cases catch it, a phrase of the message that says why)
WRONG_AND_WHY = [
    ("masking with 0 instead of -inf", ch03.check_masked_softmax, _masked_with_zero, False,
     "the weights: wrong values"),
    ("-1e6 fill: uniform weights on an empty row", ch03.check_masked_softmax, _large_negative_fill, False,
     "the weights: wrong values"),
    ("off-by-one valid lengths", ch03.check_masked_softmax, _off_by_one, False, "the weights: wrong values"),
    ("softmax over the wrong axis", ch03.check_masked_softmax, _softmax_over_queries, False,
     "the weights: wrong values"),
    ("in-place write into the caller's scores", ch03.check_masked_softmax, _writes_into_scores, False,
     "modifies its input `X` in place"),
    ("delegates to F.scaled_dot_product_attention", ch03.check_masked_softmax, _delegates_to_pytorch, False,
     "calls torch.nn.functional.scaled_dot_product_attention"),
    ("strict causal mask", ch03.check_causal_mask, _strict_causal, False, "the mask has wrong entries"),
    ("transposed causal mask", ch03.check_causal_mask, _transposed_causal, False, "the mask has wrong entries"),
    ("float mask where bool is required", ch03.check_causal_mask, _float_causal, False,
     "the mask: dtype torch.float32, expected torch.bool"),
    ("causal mask ignores device", ch03.check_causal_mask, _causal_ignores_device, False, "is not device-agnostic"),
    ("bottom-right mask aligned top-left", ch03.check_causal_mask_bottom_right, _bottom_right_as_top_left, False,
     "the mask has wrong entries"),
    ("bottom-right offset with the wrong sign", ch03.check_causal_mask_bottom_right, _bottom_right_offset_reversed,
     False, "the mask has wrong entries"),
    ("bottom-right mask never leaves a row empty", ch03.check_causal_mask_bottom_right, _bottom_right_never_empty,
     False, "the mask has wrong entries"),
    ("bottom-right mask ignores device", ch03.check_causal_mask_bottom_right, _bottom_right_ignores_device, False,
     "is not device-agnostic"),
    ("mask built on the wrong device", ch03.check_padding_mask, _padding_on_default_device, False,
     "is not device-agnostic"),
    ("padding mask without the query axis", ch03.check_padding_mask, _padding_without_query_axis, False,
     "the mask: shape"),
    ("window on one side only", ch03.check_window_mask, _window_one_sided, False, "the mask has wrong entries"),
    ("window mask without a device argument", ch03.check_window_mask, _window_without_device, False,
     "unexpected keyword argument 'device'"),
    ("masked attention masking with 0", ch03.check_masked_attention, _mask_with_zero, False, "output: wrong values"),
    ("NaN on a query with no allowed key", ch03.check_masked_attention, _nan_on_empty_rows, False,
     "output: NaN where none is expected"),
    ("float mask accepted", ch03.check_masked_attention_arguments, _accepts_float_masks, False,
     "should raise ValueError naming `mask`"),
    ("masked attention without 1/√d", ch03.check_masked_attention, _unscaled_masked, False, "output: wrong values"),
    ("delegates to F.scaled_dot_product_attention", ch03.check_masked_attention, _sdpa_masked, False,
     "calls torch.nn.functional.scaled_dot_product_attention"),
]
#: the same without the phrase (as tests/students/test_one_bug.py reads them)
#: the wrong answers above that grading tells as advice (what only the answer's process observes: an input changed in
#: place, a tensor made on a fixed device, seen in the ``meta`` replay), each with whether a grader with a GPU still
#: fails it on its results (a tensor on the CPU where the case's inputs are on CUDA); the visible checks in a
#: student's own process fail them all
ADVICE_AT_GRADING = {"in-place write into the caller's scores": False, "causal mask ignores device": True,
                     "bottom-right mask ignores device": True, "mask built on the wrong device": True}
WRONG = [entry[:4] for entry in WRONG_AND_WHY]
#: the wrong answers above whose mistake the grading side knows (the reference's ``MISTAKES``), and how its
#: message names it (tests/students/test_mistakes.py)
KNOWN_MISTAKES = {
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
