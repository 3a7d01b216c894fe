"""Answers to assignment 02, right and wrong, for the checks' tests (tests/students/test_catalogues.py)."""

import math

import torch
import torch.nn.functional as F

from autograder import ch02_attention_scoring as ch02
from autograder.reference import ch02_attention_scoring as ref02

# ---- correct answers, written differently from the reference ----


def _validate(queries, keys, same_width=True):
    for name, t in (("queries", queries), ("keys", keys)):
        if t.ndim < 2:
            raise ValueError(f"{name} needs at least 2 dimensions")
    if same_width and keys.size(-1) != queries.size(-1):
        raise ValueError("keys and queries differ in width")


def sdp_scores(queries, keys):
    _validate(queries, keys)
    return torch.matmul(queries / queries.size(-1) ** 0.5, keys.mT)


def bilinear(queries, keys, W):
    _validate(queries, keys, same_width=False)
    if W.shape != (queries.size(-1), keys.size(-1)):
        raise ValueError("W has the wrong shape")
    return torch.einsum("...qd,de,...ke->...qk", queries, W, keys)


def additive(queries, keys, W_q, W_k, w_v):
    _validate(queries, keys, same_width=False)
    if W_q.shape[0] != queries.size(-1):
        raise ValueError("W_q does not fit the queries")
    if W_k.shape != (keys.size(-1), W_q.shape[1]):
        raise ValueError("W_k does not fit")
    if w_v.shape != (W_q.shape[1],):
        raise ValueError("w_v does not fit")
    projected_q, projected_k = queries @ W_q, keys @ W_k  # (..., q, h), (..., k, h)
    return torch.einsum("...qkh,h->...qk", torch.tanh(projected_q[..., :, None, :] + projected_k[..., None, :, :]), w_v)


def attend(queries, keys, values, score_fn=ref02.scaled_dot_product_scores):
    if values.size(-2) != keys.size(-2):
        raise ValueError("values need one row per key")
    weights = F.softmax(score_fn(queries, keys), dim=-1)
    return torch.matmul(weights, values), weights


def variance(d, num_samples=10000, generator=None):
    if d < 1:
        raise ValueError("d must be positive")
    pairs = torch.randn(2, num_samples, d, generator=generator)
    dots = torch.einsum("nd,nd->n", pairs[0], pairs[1])
    return float(dots.var()), float((dots / math.sqrt(d)).var())


CORRECT = [  # (check, a correct answer, the autograder's reference, which must be refused)
    (ch02.check_scaled_dot_product_scores, sdp_scores, ref02.scaled_dot_product_scores),
    (ch02.check_bilinear_scores, bilinear, ref02.bilinear_scores),
    (ch02.check_additive_scores, additive, ref02.additive_scores),
    (ch02.check_attention, attend, ref02.attention),
    (ch02.check_dot_product_variance, variance, ref02.dot_product_variance),
    (ch02.check_scaled_dot_product_scores_arguments, sdp_scores, ref02.scaled_dot_product_scores),
    (ch02.check_bilinear_scores_arguments, bilinear, ref02.bilinear_scores),
    (ch02.check_additive_scores_arguments, additive, ref02.additive_scores),
    (ch02.check_attention_arguments, attend, ref02.attention),
    (ch02.check_dot_product_variance_arguments, variance, ref02.dot_product_variance),
]

# ---- wrong answers ----


def _scaled_by_d(queries, keys):
    _validate(queries, keys)
    return queries @ keys.transpose(-2, -1) / queries.shape[-1]  # d instead of √d


def _unscaled(queries, keys):
    _validate(queries, keys)
    return queries @ keys.transpose(-2, -1)


def _only_3d(queries, keys):
    _validate(queries, keys)
    return torch.bmm(queries, keys.transpose(1, 2)) / math.sqrt(queries.shape[-1])  # needs (batch, n, d)


def _keys_by_queries(queries, keys):
    _validate(queries, keys)
    return keys @ queries.transpose(-2, -1) / math.sqrt(queries.shape[-1])  # (..., k, q)


def _no_width_check(queries, keys):
    return queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])


def _scores_keys_by_queries(queries, keys, W):
    if W.shape != (queries.size(-1), keys.size(-1)):
        raise ValueError("W has the wrong shape")
    return keys @ W.T @ queries.transpose(-2, -1)  # kᵀWᵀq laid out (..., k, q)


def _w_forgotten_when_square(queries, keys, W):
    if W.shape != (queries.size(-1), keys.size(-1)):
        raise ValueError("W has the wrong shape")
    if W.shape[0] == W.shape[1]:
        return queries @ keys.transpose(-2, -1)  # "the widths match, so W is not needed"
    return queries @ W @ keys.transpose(-2, -1)


def _broadcast_inputs_first(queries, keys, W_q, W_k, w_v):
    additive(queries[..., :1, :], keys[..., :1, :], W_q, W_k, w_v)  # argument checks
    q, k = queries.shape[-2], keys.shape[-2]
    # every (query, key) pair concatenated, as the additive score is often first written: (..., q, k, dq + dk), O(q·k·d)
    wide_q = queries.unsqueeze(-2).expand(*queries.shape[:-1], k, queries.shape[-1])
    wide_k = keys.unsqueeze(-3).expand(*keys.shape[:-2], q, k, keys.shape[-1])
    pairs = torch.cat([wide_q, wide_k], dim=-1)
    return torch.tanh(pairs @ torch.cat([W_q, W_k])) @ w_v


def _tanh_forgotten(queries, keys, W_q, W_k, w_v):
    additive(queries, keys, W_q, W_k, w_v)  # argument checks
    return ((queries @ W_q).unsqueeze(-2) + (keys @ W_k).unsqueeze(-3)) @ w_v


def _softmax_over_queries(queries, keys, values, score_fn=ref02.scaled_dot_product_scores):
    weights = torch.softmax(score_fn(queries, keys), dim=-2)
    return weights @ values, weights


def _ignores_score_fn(queries, keys, values, score_fn=ref02.scaled_dot_product_scores):
    return attend(queries, keys, values)


def _delegates_to_pytorch(queries, keys, values, score_fn=ref02.scaled_dot_product_scores):
    weights = torch.softmax(score_fn(queries, keys), dim=-1)
    if queries.shape[-1] == keys.shape[-1]:
        return F.scaled_dot_product_attention(queries, keys, values), weights
    return weights @ values, weights


def _ignores_generator(d, num_samples=10000, generator=None):
    return variance(d, num_samples, None)


def _scaled_by_d_variance(d, num_samples=10000, generator=None):
    var_dot, _ = variance(d, num_samples, generator)
    return var_dot, var_dot / d**2


#: (name, check, answer, only the hidden cases catch it, a phrase of the message that says why)
WRONG_AND_WHY = [
    ("scaling by d instead of √d", ch02.check_scaled_dot_product_scores, _scaled_by_d, False,
     "the output: wrong values"),
    ("no scaling", ch02.check_scaled_dot_product_scores, _unscaled, False, "the output: wrong values"),
    ("scores that only work for 3-D inputs", ch02.check_scaled_dot_product_scores, _only_3d, False,
     "raised IndexError"),
    ("scores transposed (keys by queries)", ch02.check_scaled_dot_product_scores, _keys_by_queries, False,
     "the output: shape"),
    ("no ValueError for mismatched widths", ch02.check_scaled_dot_product_scores_arguments, _no_width_check, False,
     "should raise ValueError naming `keys`"),
    ("bilinear scores laid out (keys, queries)", ch02.check_bilinear_scores, _scores_keys_by_queries, False,
     "the output: shape"),
    ("bilinear without W when the widths match", ch02.check_bilinear_scores, _w_forgotten_when_square, False,
     "the output: wrong values"),
    ("additive scores broadcasting the inputs first", ch02.check_additive_scores, _broadcast_inputs_first, False,
     "project queries and keys to h features first"),
    ("additive scores without tanh", ch02.check_additive_scores, _tanh_forgotten, False, "the output: wrong values"),
    ("softmax over the wrong axis", ch02.check_attention, _softmax_over_queries, False, "output: wrong values"),
    ("score_fn ignored", ch02.check_attention, _ignores_score_fn, False, "output: wrong values"),
    ("delegates to F.scaled_dot_product_attention", ch02.check_attention, _delegates_to_pytorch, False,
     "calls torch.nn.functional.scaled_dot_product_attention"),
    ("random numbers not drawn from the generator", ch02.check_dot_product_variance, _ignores_generator, False,
     "the same generator seed gives different results"),
    ("scaled variance divided by d²", ch02.check_dot_product_variance, _scaled_by_d_variance, False,
     "expected about 1"),
]
#: the same without the phrase (as tests/students/test_one_bug.py reads them)
WRONG = [entry[:4] for entry in WRONG_AND_WHY]
#: ``{name of a wrong answer above: the known mistake its message names}`` (tests/students/test_mistakes.py); the
#: others fail for another reason than a wrong result, except "score_fn ignored", which raises on the hidden cases
KNOWN_MISTAKES = {
    "scaling by d instead of √d": "scores divided by d instead of √d",
    "no scaling": "scores not scaled by 1/√d",
    "bilinear without W when the widths match": "W left out when queries and keys have the same width "
                                                "(qᵀk instead of qᵀ W k)",
    "additive scores without tanh": "tanh left out: w_vᵀ (q W_q + k W_k)",
    "softmax over the wrong axis": "softmax over the queries' axis instead of the keys'",
}
