"""Reference answers and cases of assignment 02_attention_scoring (grading side only).

Contract section 02: scaled dot-product, bilinear and additive scores, attention over any
scoring function, and the variance experiment. The book's chapter 2 demonstrates with them.
"""

from __future__ import annotations

import functools
import math
import random

import torch

from ..ch02_attention_scoring import cosine_scores, negative_squared_distance_scores
from ..parts import Call, derived_seeds

# --------------------------------------------------------------------------------------
# Reference implementations
# --------------------------------------------------------------------------------------


def scaled_dot_product_scores(queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """Scores ``QKᵀ/√d`` (book, chapter 2).

    Args:
        queries: ``(..., q, d)``.
        keys: ``(..., k, d)``; leading dimensions broadcast against those of ``queries``.

    Returns:
        ``(..., q, k)``.
    """
    _require_matrices(queries=queries, keys=keys)
    if keys.shape[-1] != queries.shape[-1]:
        raise ValueError(f"keys must have the feature size d = {queries.shape[-1]} of queries, got {keys.shape[-1]}")
    # (..., q, d) @ (..., d, k) -> (..., q, k)
    return queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])


def bilinear_scores(queries: torch.Tensor, keys: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """General (bilinear) scores ``qᵀ W k``.

    Args:
        queries: ``(..., q, dq)``.
        keys: ``(..., k, dk)``.
        W: ``(dq, dk)``.

    Returns:
        ``(..., q, k)``.
    """
    _require_matrices(queries=queries, keys=keys)
    if W.dim() != 2 or W.shape != (queries.shape[-1], keys.shape[-1]):
        raise ValueError(f"W must be (dq, dk) = {(queries.shape[-1], keys.shape[-1])}, got {tuple(W.shape)}")
    # (..., q, dq) @ (dq, dk) @ (..., dk, k) -> (..., q, k)
    return queries @ W @ keys.transpose(-2, -1)


def additive_scores(queries, keys, W_q, W_k, w_v) -> torch.Tensor:
    """Additive scores ``w_vᵀ tanh(q W_q + k W_k)``: a one-hidden-layer MLP without bias.

    Args:
        queries: ``(..., q, dq)``.
        keys: ``(..., k, dk)``.
        W_q: ``(dq, h)``; W_k: ``(dk, h)``; w_v: ``(h,)``.

    Returns:
        ``(..., q, k)``, using ``O(q·k·h)`` memory (the broadcast hidden features).
    """
    _require_matrices(queries=queries, keys=keys)
    if W_q.dim() != 2 or W_q.shape[0] != queries.shape[-1]:
        raise ValueError(f"W_q must be (dq, h) with dq = {queries.shape[-1]}, got {tuple(W_q.shape)}")
    if W_k.dim() != 2 or W_k.shape != (keys.shape[-1], W_q.shape[1]):
        raise ValueError(f"W_k must be (dk, h) = {(keys.shape[-1], W_q.shape[1])}, got {tuple(W_k.shape)}")
    if w_v.shape != (W_q.shape[1],):
        raise ValueError(f"w_v must be (h,) = ({W_q.shape[1]},), got {tuple(w_v.shape)}")
    # (..., q, 1, h) + (..., 1, k, h) -> (..., q, k, h): every query's features with every key's
    hidden = torch.tanh((queries @ W_q).unsqueeze(-2) + (keys @ W_k).unsqueeze(-3))
    return hidden @ w_v  # (..., q, k, h) @ (h,) -> (..., q, k)


def attention(queries, keys, values, score_fn=scaled_dot_product_scores):
    """Softmax attention over the scores of ``score_fn`` (book, chapter 2).

    Args:
        queries: ``(..., q, dq)``; keys: ``(..., k, dk)``; values: ``(..., k, v)``.
        score_fn: ``(queries, keys) -> (..., q, k)``.

    Returns:
        ``(output, weights)``: output ``(..., q, v)``, weights ``(..., q, k)`` (rows sum to 1).
    """
    _require_matrices(queries=queries, keys=keys, values=values)
    if values.shape[-2] != keys.shape[-2]:
        raise ValueError(f"values must have one row per key (k = {keys.shape[-2]}), got {values.shape[-2]}")
    weights = torch.softmax(score_fn(queries, keys), dim=-1)  # (..., q, k)
    return weights @ values, weights  # (..., q, k) @ (..., k, v) -> (..., q, v)


def dot_product_variance(d: int, num_samples: int = 10000, generator: torch.Generator | None = None):
    """Empirical variances of ``q·k`` and ``q·k/√d`` for standard-normal ``q, k ∈ R^d``.

    Returns:
        ``(var_dot, var_scaled)`` as floats, close to ``d`` and ``1``.
    """
    if d < 1:
        raise ValueError(f"d must be a positive integer, got {d}")
    if num_samples < 2:
        raise ValueError(f"num_samples must be at least 2, got {num_samples}")
    q = torch.randn(num_samples, d, generator=generator)  # (samples, d)
    k = torch.randn(num_samples, d, generator=generator)
    dots = (q * k).sum(dim=-1)  # (samples,)
    return dots.var().item(), (dots / math.sqrt(d)).var().item()


def _require_matrices(**tensors: torch.Tensor) -> None:
    """Raise ``ValueError`` naming any argument with fewer than 2 dimensions."""
    for name, t in tensors.items():
        if t.dim() < 2:
            raise ValueError(f"{name} must have at least 2 dimensions (..., n, d), got shape {tuple(t.shape)}")


REFERENCES = {
    "scaled_dot_product_scores": scaled_dot_product_scores,
    "bilinear_scores": bilinear_scores,
    "additive_scores": additive_scores,
    "attention": attention,
    "dot_product_variance": dot_product_variance,
}

# --------------------------------------------------------------------------------------
# Known mistakes: the judge names the one a wrong answer's values match (judge.py)
# --------------------------------------------------------------------------------------


def _scores_scaled_by_d(queries, keys):
    """Scores ``QKᵀ/d``: divided by ``d`` instead of ``√d``."""
    return queries @ keys.transpose(-2, -1) / queries.shape[-1]


def _scores_unscaled(queries, keys):
    """Scores ``QKᵀ`` without the ``1/√d``."""
    return queries @ keys.transpose(-2, -1)


def _bilinear_without_w_when_square(queries, keys, W):
    """``qᵀk`` when ``dq = dk`` (``W`` left out), ``qᵀ W k`` otherwise."""
    if queries.shape[-1] == keys.shape[-1]:
        return queries @ keys.transpose(-2, -1)
    return bilinear_scores(queries, keys, W)


def _additive_without_tanh(queries, keys, W_q, W_k, w_v):
    """``w_vᵀ (q W_q + k W_k)``: the ``tanh`` left out."""
    return ((queries @ W_q).unsqueeze(-2) + (keys @ W_k).unsqueeze(-3)) @ w_v


def _attention_softmax_over_queries(queries, keys, values, score_fn=scaled_dot_product_scores):
    """The softmax runs down the queries' axis (dim -2), not along the keys'."""
    weights = torch.softmax(score_fn(queries, keys), dim=-2)
    return weights @ values, weights


#: ``{part: ((what the student did, in their words), the function that does it), ...}``: the one whose values a
#: wrong answer's match is named in its message (of several, the one matching it on most cases; then the first).
#: Not declared: ``attention`` ignoring ``score_fn`` (on the hidden cases its dot product of queries and keys of
#: different widths raises before any value can be compared) and ``dot_product_variance`` (judged by its
#: statistics, not against the reference).
MISTAKES = {
    "scaled_dot_product_scores": (
        ("scores divided by d instead of √d", _scores_scaled_by_d),
        ("scores not scaled by 1/√d", _scores_unscaled),
    ),
    "bilinear_scores": (
        ("W left out when queries and keys have the same width (qᵀk instead of qᵀ W k)",
         _bilinear_without_w_when_square),
    ),
    "additive_scores": (
        ("tanh left out: w_vᵀ (q W_q + k W_k)", _additive_without_tanh),
    ),
    "attention": (
        ("softmax over the queries' axis instead of the keys'", _attention_softmax_over_queries),
    ),
}

# --------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------


def _qk_calls(seeds, dq=None, dk=None, weights=lambda g, dq, dk: {}) -> list[Call]:
    """Queries ``(..., q, dq)`` and keys ``(..., k, dk)`` with 0, 1 and 2 batch dimensions.

    ``dk=None``: keys as wide as queries; ``weights`` draws the named matrices passed
    after queries and keys.
    """
    calls = []
    for seed in seeds:
        rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
        for batch in [(), (rng.randint(1, 3),), (rng.randint(1, 3), rng.randint(1, 3))]:
            q, k, d = rng.randint(1, 6), rng.randint(1, 7), dq or rng.randint(1, 9)
            queries = torch.randn(*batch, q, d, generator=g)
            keys = torch.randn(*batch, k, dk or d, generator=g)
            extra = weights(g, d, dk or d)
            described = f"queries {tuple(queries.shape)}, keys {tuple(keys.shape)}" + "".join(
                f", {name} {tuple(t.shape)}" for name, t in extra.items())
            calls.append(Call(described, (queries, keys, *extra.values())))
    return calls


def _float64(call: Call) -> Call:
    args = tuple(a.double() if isinstance(a, torch.Tensor) else a for a in call.args)
    return Call(call.description + ", float64", args, call.kwargs)


def _bilinear_weights(g, dq, dk):
    return {"W": torch.randn(dq, dk, generator=g)}


def _additive_weights(h: int):
    return lambda g, dq, dk: {"W_q": torch.randn(dq, h, generator=g), "W_k": torch.randn(dk, h, generator=g),
                              "w_v": torch.randn(h, generator=g)}


def _sdp_visible() -> list[Call]:
    calls = _qk_calls([0, 1, 2])
    return calls + [_float64(calls[4])]


def _sdp_hidden(seed: int) -> list[Call]:
    calls = _qk_calls(derived_seeds(seed))
    return calls + [_float64(calls[-1])]


def _bilinear_visible() -> list[Call]:
    return _qk_calls([0, 1], dq=3, dk=5, weights=_bilinear_weights) + _qk_calls([2], weights=_bilinear_weights)


def _bilinear_hidden(seed: int) -> list[Call]:
    first, second = derived_seeds(seed)[:2]
    return _qk_calls([first], dq=3, dk=5, weights=_bilinear_weights) + _qk_calls([second], weights=_bilinear_weights)


def _additive_visible() -> list[Call]:
    return _qk_calls([0, 1], dq=3, dk=5, weights=_additive_weights(4)) + _qk_calls([2], dq=6, dk=2, weights=_additive_weights(7))


def _additive_hidden(seed: int) -> list[Call]:
    first, second, _ = derived_seeds(seed)
    return (_qk_calls([first], dq=3, dk=5, weights=_additive_weights(4))
            + _qk_calls([second], dq=6, dk=2, weights=_additive_weights(7)))


def _with_values(calls: list[Call], seed: int, score_fn, v: int = 3) -> list[Call]:
    """Attention calls: each ``(queries, keys)`` call with values and a scoring function."""
    g = torch.Generator().manual_seed(seed)
    name = getattr(score_fn, "__name__", None) or score_fn.func.__name__
    out = []
    for call in calls:
        queries, keys = call.args[:2]
        values = torch.randn(*keys.shape[:-1], v, generator=g)
        out.append(Call(f"{call.description}, values {tuple(values.shape)}, score_fn={name}",
                        (queries, keys, values), {"score_fn": score_fn}))
    return out


def _extreme_scores(seed: int, score_fn) -> Call:
    """Scores of several hundred: a softmax computed as exp(s) / sum(exp(s)) overflows to NaN."""
    g = torch.Generator().manual_seed(seed)
    queries, keys, values = torch.randn(2, 3, 4, generator=g) * 30, torch.randn(2, 5, 4, generator=g) * 30, \
        torch.randn(2, 5, 2, generator=g)
    name = getattr(score_fn, "__name__", None) or score_fn.func.__name__
    return Call(f"queries (2, 3, 4), keys (2, 5, 4) with scores in the hundreds, values (2, 5, 2), score_fn={name}",
                (queries, keys, values), {"score_fn": score_fn})


def _attention_visible() -> list[Call]:
    return (_with_values(_qk_calls([0, 1]), 7, negative_squared_distance_scores)
            + _with_values(_qk_calls([2]), 8, cosine_scores)
            + [_extreme_scores(9, negative_squared_distance_scores)])


def _attention_hidden(seed: int) -> list[Call]:
    first, second, third = derived_seeds(seed)
    bilinear = functools.partial(bilinear_scores, W=torch.randn(3, 5, generator=torch.Generator().manual_seed(third)))
    return (_with_values(_qk_calls([first]), first, scaled_dot_product_scores)
            + _with_values(_qk_calls([second], dq=3, dk=5), second, bilinear)
            + [_extreme_scores(third, scaled_dot_product_scores)])


def _variance_visible() -> list[Call]:
    return [Call(f"d = {d}, num_samples = 20000, generator seeded with {d}", (d, 20000, d)) for d in (1, 16, 256)]


def _variance_hidden(seed: int) -> list[Call]:
    rng = random.Random(seed)
    dims = [rng.choice([2, 3, 5, 8, 13]), rng.choice([21, 34, 55]), 200]
    return [Call(f"d = {d}, num_samples = 20000", (d, 20000, rng.randrange(2**31))) for d in dims]


VISIBLE = {
    "scaled_dot_product_scores": _sdp_visible,
    "bilinear_scores": _bilinear_visible,
    "additive_scores": _additive_visible,
    "attention": _attention_visible,
    "dot_product_variance": _variance_visible,
}
HIDDEN = {
    "scaled_dot_product_scores": _sdp_hidden,
    "bilinear_scores": _bilinear_hidden,
    "additive_scores": _additive_hidden,
    "attention": _attention_hidden,
    "dot_product_variance": _variance_hidden,
}
