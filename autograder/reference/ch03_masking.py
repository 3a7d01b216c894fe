"""Reference answers and cases of assignment 03_masking (grading side only).

Contract section 03: masked softmax with valid lengths, the causal (top-left and
bottom-right aligned), padding and window masks, and masked attention. One mask convention throughout, that of
``torch.nn.functional.scaled_dot_product_attention``: a bool mask, ``True`` = may attend.
The book's chapter 3 demonstrates with these functions.
"""

from __future__ import annotations

import random

import torch

from ..parts import Call, derived_seeds
from .ch02_attention_scoring import scaled_dot_product_scores

# --------------------------------------------------------------------------------------
# Reference implementations
# --------------------------------------------------------------------------------------


def softmax_with_mask(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Softmax over the last axis where ``mask`` is ``True``; exact zeros elsewhere.

    Args:
        scores: ``(..., q, k)``.
        mask: bool, broadcastable to ``scores``.

    Returns:
        ``(..., q, k)`` weights; a row with no allowed key is all zeros, never NaN.
    """
    mask = mask.expand_as(scores)
    has_key = mask.any(dim=-1, keepdim=True)  # (..., q, 1)
    # -inf gives masked keys exactly zero weight; an all-masked row is set to 0s instead,
    # so its softmax is finite (uniform), and the final `* mask` zeroes it.
    scores = scores.masked_fill(~mask, float("-inf")).masked_fill(~has_key, 0.0)
    return torch.softmax(scores, dim=-1) * mask


def masked_softmax(X: torch.Tensor, valid_lens: torch.Tensor | None) -> torch.Tensor:
    """Softmax over the last axis of ``X`` that ignores keys at or past each valid length (book, chapter 3).

    Args:
        X: ``(batch, q, k)`` scores.
        valid_lens: ``None`` (no masking), ``(batch,)`` (one length per sequence) or
            ``(batch, q)`` (one length per query).

    Returns:
        ``(batch, q, k)`` weights; ``X`` is left unchanged.
    """
    if X.dim() != 3:
        raise ValueError(f"X must be (batch, q, k), got shape {tuple(X.shape)}")
    if valid_lens is None:
        return torch.softmax(X, dim=-1)
    batch, q, k = X.shape
    if valid_lens.shape not in ((batch,), (batch, q)):
        raise ValueError(f"valid_lens must be (batch,) = ({batch},) or (batch, q) = ({batch}, {q}), got {tuple(valid_lens.shape)}")
    # (batch,) -> (batch, 1) so that both forms broadcast over queries as (batch, q or 1, 1)
    lens = (valid_lens if valid_lens.dim() == 2 else valid_lens[:, None])[..., None]
    positions = torch.arange(k, device=X.device)  # (k,)
    return softmax_with_mask(X, positions < lens)  # mask (batch, q or 1, k)


def causal_mask(num_queries: int, num_keys: int, device=None) -> torch.Tensor:
    """Bool ``(q, k)``, ``True`` where key ``j ≤`` query ``i`` (top-left aligned)."""
    return torch.ones(num_queries, num_keys, dtype=torch.bool, device=device).tril()


def padding_mask(valid_lens: torch.Tensor, num_keys: int) -> torch.Tensor:
    """Bool ``(batch, 1, k)``, ``True`` where key ``j < valid_lens[b]``.

    Args:
        valid_lens: ``(batch,)`` integer lengths.
    """
    if valid_lens.dim() != 1:
        raise ValueError(f"valid_lens must be (batch,), got shape {tuple(valid_lens.shape)}")
    # (k,) against (batch, 1, 1) -> (batch, 1, k)
    return torch.arange(num_keys, device=valid_lens.device) < valid_lens[:, None, None]


def causal_mask_bottom_right(num_queries: int, num_keys: int, device=None) -> torch.Tensor:
    """Bool ``(q, k)``, ``True`` where ``j ≤ i + (k - q)``: the causal mask of the last ``q`` of ``k`` positions.

    Query ``i`` of the block sits at position ``i + k - q`` of the sequence (decoding with a
    key/value cache); with ``q > k`` the first ``q - k`` rows allow no key (book, chapter 3).
    """
    # tril's diagonal shifts the boundary right by k - q: row i keeps columns j <= i + k - q
    return torch.ones(num_queries, num_keys, dtype=torch.bool, device=device).tril(diagonal=num_keys - num_queries)


def window_mask(num_queries: int, num_keys: int, radius: int, device=None) -> torch.Tensor:
    """Bool ``(q, k)``, ``True`` where ``|i - j| ≤ radius`` (restricted self-attention)."""
    if radius < 0:
        raise ValueError(f"radius must be non-negative, got {radius}")
    i = torch.arange(num_queries, device=device)[:, None]  # (q,) -> (q, 1)
    j = torch.arange(num_keys, device=device)[None, :]  # (k,) -> (1, k)
    return (i - j).abs() <= radius


def masked_attention(queries, keys, values, mask=None):
    """Scaled dot-product attention with an optional bool mask (``True`` = may attend).

    Args:
        queries: ``(..., q, d)``; keys: ``(..., k, d)``; values: ``(..., k, v)``.
        mask: bool, broadcastable to ``(..., q, k)``, or ``None``.

    Returns:
        ``(output, weights)``: ``(..., q, v)`` and ``(..., q, k)``; fully masked rows are zeros.
    """
    if values.dim() < 2 or values.shape[-2] != keys.shape[-2]:
        raise ValueError(f"values must be (..., k, v) with k = {keys.shape[-2]}, got shape {tuple(values.shape)}")
    scores = scaled_dot_product_scores(queries, keys)  # (..., q, k)
    if mask is None:
        weights = torch.softmax(scores, dim=-1)
    else:
        if mask.dtype != torch.bool:
            raise ValueError(f"mask must be a bool tensor (True = may attend), got dtype {mask.dtype}")
        weights = softmax_with_mask(scores, mask)
    return weights @ values, weights


REFERENCES = {
    "masked_softmax": masked_softmax,
    "causal_mask": causal_mask,
    "causal_mask_bottom_right": causal_mask_bottom_right,
    "padding_mask": padding_mask,
    "window_mask": window_mask,
    "masked_attention": masked_attention,
}

# --------------------------------------------------------------------------------------
# Known mistakes: the judge names the one a wrong answer's values match (judge.py)
# --------------------------------------------------------------------------------------


def _within_lengths(X: torch.Tensor, valid_lens: torch.Tensor) -> torch.Tensor:
    """Bool ``(batch, q, k)``: ``True`` where key ``j <`` the valid length of its sequence or query."""
    lens = (valid_lens if valid_lens.dim() == 2 else valid_lens[:, None])[..., None]
    return (torch.arange(X.shape[-1], device=X.device) < lens).expand_as(X)


def _softmax_masked_with_zero(X, valid_lens):
    """Masked scores set to 0 instead of −∞: they still get weight."""
    return torch.softmax(X if valid_lens is None else X.masked_fill(~_within_lengths(X, valid_lens), 0.0), dim=-1)


def _softmax_large_negative_fill(X, valid_lens):
    """Masked scores set to −1e6: a row with no valid key gets uniform weights."""
    return torch.softmax(X if valid_lens is None else X.masked_fill(~_within_lengths(X, valid_lens), -1e6), dim=-1)


def _softmax_lengths_off_by_one(X, valid_lens):
    """One key more than each valid length is kept."""
    return masked_softmax(X, None if valid_lens is None else valid_lens + 1)


def _softmax_over_queries(X, valid_lens):
    """The softmax runs down the queries' axis (dim 1), not along the keys'."""
    scores = X if valid_lens is None else X.masked_fill(~_within_lengths(X, valid_lens), float("-inf"))
    return torch.softmax(scores, dim=1).nan_to_num(0.0)


def _causal_strict(num_queries, num_keys, device=None):
    """``j < i``: the diagonal is masked too."""
    return torch.ones(num_queries, num_keys, dtype=torch.bool, device=device).tril(-1)


def _causal_transposed(num_queries, num_keys, device=None):
    """``j ≥ i``: the upper triangle instead of the lower."""
    return torch.ones(num_queries, num_keys, dtype=torch.bool, device=device).triu()


def _bottom_right_top_left(num_queries, num_keys, device=None):
    """``j ≤ i``, as ``causal_mask``: the offset ``k - q`` is left out."""
    return torch.ones(num_queries, num_keys, dtype=torch.bool, device=device).tril()


def _bottom_right_offset_negated(num_queries, num_keys, device=None):
    """``j ≤ i + (q - k)``: the offset with its sign reversed."""
    return torch.ones(num_queries, num_keys, dtype=torch.bool, device=device).tril(num_queries - num_keys)


def _bottom_right_never_empty(num_queries, num_keys, device=None):
    """The offset clamped at 0: with more queries than keys, no row is left empty."""
    return torch.ones(num_queries, num_keys, dtype=torch.bool, device=device).tril(max(num_keys - num_queries, 0))


def _attention_masked_with_zero(queries, keys, values, mask=None):
    """Masked scores set to 0 instead of −∞: they still get weight."""
    scores = scaled_dot_product_scores(queries, keys)
    weights = torch.softmax(scores if mask is None else scores.masked_fill(~mask, 0.0), dim=-1)
    return weights @ values, weights


def _attention_unscaled(queries, keys, values, mask=None):
    """Scores ``QKᵀ`` without the ``1/√d``."""
    scores = queries @ keys.transpose(-2, -1)
    weights = torch.softmax(scores, dim=-1) if mask is None else softmax_with_mask(scores, mask)
    return weights @ values, weights


#: ``{part: ((what the student did, in their words), the function that does it), ...}``: the one whose values a
#: wrong answer's match is named in its message (of several, the one matching it on most cases; then the first).
MISTAKES = {
    "masked_softmax": (
        ("masked positions filled with 0 instead of −∞", _softmax_masked_with_zero),
        ("masked positions filled with −1e6, so a row with no valid key gets uniform weights instead of zeros",
         _softmax_large_negative_fill),
        ("valid lengths off by one (one key too many kept)", _softmax_lengths_off_by_one),
        ("softmax over the queries' axis instead of the keys'", _softmax_over_queries),
    ),
    "causal_mask": (
        ("a strict mask: a query may not see its own position", _causal_strict),
        ("a transposed mask: keys after the query allowed instead of before", _causal_transposed),
    ),
    "causal_mask_bottom_right": (
        ("aligned top-left, as causal_mask (the offset k − q left out)", _bottom_right_top_left),
        ("the offset k − q with the wrong sign", _bottom_right_offset_negated),
        ("never leaves a row empty (the offset clamped at 0)", _bottom_right_never_empty),
    ),
    "masked_attention": (
        ("masked positions filled with 0 instead of −∞", _attention_masked_with_zero),
        ("scores not scaled by 1/√d", _attention_unscaled),
    ),
}

# --------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------


def _length_calls(seeds) -> list[Call]:
    """Scores ``(batch, q, k)`` with ``valid_lens`` None, ``(batch,)`` and ``(batch, q)``; zeros included."""
    calls = []
    for seed in seeds:
        rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
        batch, q, k = rng.randint(2, 4), rng.randint(1, 5), rng.randint(2, 7)
        X = torch.randn(batch, q, k, generator=g) * 3
        per_sequence = torch.randint(0, k + 1, (batch,), generator=g)
        per_sequence[0] = 0  # an empty sequence: all-zero weights
        per_query = torch.randint(0, k + 1, (batch, q), generator=g)
        per_query[-1, 0] = k  # a query that sees every key
        for lens in (None, per_sequence, per_query):
            described = f"X {tuple(X.shape)}, valid_lens " + ("None" if lens is None else f"{lens.tolist()}")
            calls.append(Call(described, (X, lens)))
    return calls


def _extreme_lengths_call() -> Call:
    """Scores of ±200: exp overflows float32, so a softmax must subtract the row maximum."""
    X = torch.tensor([[[200.0, -200.0, 150.0, 0.0]], [[-200.0, 199.0, 200.0, 50.0]]])
    return Call("X (2, 1, 4) with scores of ±200, valid_lens [3, 0]", (X, torch.tensor([3, 0])))


def _masked_softmax_visible() -> list[Call]:
    return _length_calls([0, 1, 2]) + [_extreme_lengths_call()]


def _masked_softmax_hidden(seed: int) -> list[Call]:
    return _length_calls(derived_seeds(seed)) + [_extreme_lengths_call()]


def _mask_sizes(seed: int | None) -> list[tuple[int, int]]:
    """``(q, k)`` pairs: square, wide, tall and single; random ones when seeded."""
    if seed is None:
        return [(4, 4), (3, 5), (5, 3), (1, 1)]
    rng = random.Random(seed)
    n = rng.randint(2, 9)
    return [(n, n), (1, 1)] + [(rng.randint(1, 9), rng.randint(1, 9)) for _ in range(3)]


def _causal_calls(seed: int | None, name: str = "causal_mask") -> list[Call]:
    return [Call(f"{name}({q}, {k}, device=...)", (q, k), {"device": torch.device("cpu")})
            for q, k in _mask_sizes(seed)]


def _bottom_right_calls(seed: int | None) -> list[Call]:
    """Square, wide and tall blocks, and always a block of more keys than queries (where the offset's sign and
    its leaving-out show) and one of more queries than keys (empty rows)."""
    calls = _causal_calls(seed, "causal_mask_bottom_right")
    return calls + [Call(f"causal_mask_bottom_right({q}, {k}, device=...)", (q, k), {"device": torch.device("cpu")})
                    for q, k in ((2, 6), (6, 2))]


def _padding_calls(seeds) -> list[Call]:
    calls = []
    for seed in seeds:
        rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
        k = rng.randint(1, 8)
        lens = torch.randint(0, k + 1, (rng.randint(1, 4),), generator=g)
        calls.append(Call(f"valid_lens {lens.tolist()}, num_keys {k}", (lens, k)))
    # the extremes: an empty sequence and a full one
    calls.append(Call("valid_lens [0, 5], num_keys 5", (torch.tensor([0, 5]), 5)))
    return calls


def _window_calls(seed: int | None) -> list[Call]:
    return [Call(f"window_mask({q}, {k}, radius={r}, device=...)", (q, k, r), {"device": torch.device("cpu")})
            for q, k in _mask_sizes(seed) for r in (0, 1, 2, max(q, k))]


def _attention_calls(seeds) -> list[Call]:
    """Queries, keys, values with 1 to 3 leading dimensions and masks of several shapes.

    The first seed's keys are at least 2 wide: with width 1, √d = 1 and attention without the
    1/√d scale is right, so every student's cases must hold a wider one.
    """
    calls = []
    for index, seed in enumerate(seeds):
        rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
        batch = tuple(rng.randint(1, 3) for _ in range(rng.randint(1, 3)))
        q, k, d, v = rng.randint(1, 6), rng.randint(2, 7), rng.randint(1, 8), rng.randint(1, 5)
        d = max(d, 2) if index == 0 else d  # the draws that follow stay those of the seed
        queries = torch.randn(*batch, q, d, generator=g)
        keys, values = torch.randn(*batch, k, d, generator=g), torch.randn(*batch, k, v, generator=g)
        random_mask = torch.rand(*batch, q, k, generator=g) < 0.6
        random_mask[..., 0, :] = False  # the first query may attend to nothing
        masks = {"None": None, "causal (q, k)": causal_mask(q, k), "random with an empty row": random_mask,
                 "window radius 1 (1, q, k)": window_mask(q, k, 1)[None]}
        for name, mask in masks.items():
            described = f"queries {tuple(queries.shape)}, keys {tuple(keys.shape)}, values {tuple(values.shape)}, mask {name}"
            calls.append(Call(described, (queries, keys, values), {"mask": mask}))
    # scores in the hundreds, with a masked key holding the largest score
    g = torch.Generator().manual_seed(seeds[0])
    queries, keys = torch.randn(2, 3, 4, generator=g) * 40, torch.randn(2, 5, 4, generator=g) * 40
    calls.append(Call("queries (2, 3, 4), keys (2, 5, 4) with scores in the hundreds, values (2, 5, 2), mask causal",
                      (queries, keys, torch.randn(2, 5, 2, generator=g)), {"mask": causal_mask(3, 5)}))
    return calls


VISIBLE = {
    "masked_softmax": _masked_softmax_visible,
    "causal_mask": lambda: _causal_calls(None),
    "causal_mask_bottom_right": lambda: _bottom_right_calls(None),
    "padding_mask": lambda: _padding_calls([0, 1, 2]),
    "window_mask": lambda: _window_calls(None),
    "masked_attention": lambda: _attention_calls([0, 1, 2]),
}
HIDDEN = {
    "masked_softmax": _masked_softmax_hidden,
    "causal_mask": _causal_calls,
    "causal_mask_bottom_right": _bottom_right_calls,
    "padding_mask": lambda seed: _padding_calls(derived_seeds(seed)),
    "window_mask": _window_calls,
    "masked_attention": lambda seed: _attention_calls(derived_seeds(seed)),
}
