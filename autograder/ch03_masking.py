"""Assignment 03_masking: masked softmax and the masks of attention.

The first half holds the course's reference implementations of contract section 03;
the book's chapter 3 demonstrates with them. The second half holds the checks that the
notebook's test cells call. One mask convention throughout, that of
``torch.nn.functional.scaled_dot_product_attention``: a bool mask, ``True`` = may attend.
"""

from __future__ import annotations

import torch

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
    """Softmax over the last axis of ``X`` that ignores keys at or past each valid length.

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


def window_mask(num_queries: int, num_keys: int, radius: int) -> torch.Tensor:
    """Bool ``(q, k)``, ``True`` where ``|i - j| ≤ radius`` (restricted self-attention)."""
    if radius < 0:
        raise ValueError(f"radius must be non-negative, got {radius}")
    i = torch.arange(num_queries)[:, None]  # (q, 1)
    j = torch.arange(num_keys)[None, :]  # (1, k)
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


# --------------------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------------------

import random  # noqa: E402

import torch.nn.functional as F  # noqa: E402

from .core import (  # noqa: E402
    Case,
    check_on_meta,
    compare_on_cases,
    devices,
    expect_no_delegation,
    expect_own_code,
    new_seed,
    passed,
    shape_of,
)


def _seeds(hidden: bool, visible=(0, 1, 2), count=3):
    """``(seed, visible?)`` pairs: fixed seeds for visible cases, fresh ones for hidden."""
    return [(new_seed(), True) for _ in range(count)] if hidden else [(s, False) for s in visible]


def _length_cases(hidden: bool):
    """Scores ``(batch, q, k)`` with ``valid_lens`` None, ``(batch,)`` and ``(batch, q)``; zeros included."""
    for seed, is_hidden in _seeds(hidden):
        rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
        batch, q, k = rng.randint(2, 4), rng.randint(1, 5), rng.randint(2, 7)
        X = torch.randn(batch, q, k, generator=g) * 3
        per_sequence = torch.randint(0, k + 1, (batch,), generator=g)
        per_sequence[0] = 0  # an empty sequence: all-zero weights
        per_query = torch.randint(0, k + 1, (batch, q), generator=g)
        for lens in (None, per_sequence, per_query):
            described = f"X {shape_of(X)}, valid_lens " + ("None" if lens is None else f"{lens.tolist()}")
            yield (seed if is_hidden else None), described, (X, lens), {}


def check_masked_softmax(fn, hidden: bool = False) -> None:
    """Check ``masked_softmax``: values, exact zeros past each valid length, X unchanged."""
    part = "masked_softmax"
    expect_no_delegation(Case(part, "X (2, 3, 4), valid_lens [2, 3]"), fn, torch.randn(2, 3, 4), torch.tensor([2, 3]))
    count = compare_on_cases(part, fn, masked_softmax, _length_cases(hidden), names=("the weights",))
    for seed, described, (X, lens), _ in _length_cases(hidden):
        if lens is not None:
            case = Case(part, described, seed)
            weights = case.call(fn, X, lens)
            lens = lens if lens.dim() == 2 else lens[:, None]
            beyond = torch.arange(X.shape[-1]) >= lens[..., None]  # (batch, q or 1, k)
            case.check(bool((weights[beyond.expand_as(weights)] == 0).all()),
                       "positions at or past a valid length must get weight exactly 0")
    passed(part, count, hidden)


def _mask_sizes(hidden: bool):
    """``(q, k)`` pairs: square, wide and tall; random when hidden."""
    if not hidden:
        return [(4, 4), (3, 5), (5, 3), (1, 1)]
    rng = random.Random(new_seed())
    return [(n, n) for n in [rng.randint(2, 9)]] + [(rng.randint(1, 9), rng.randint(1, 9)) for _ in range(3)]


def _check_mask(case: Case, mask, expected) -> None:
    """A mask must be a bool tensor equal to ``expected``."""
    case.expect_tensor("the mask", mask, shape=expected.shape, dtype=torch.bool, device=expected.device)
    case.check(torch.equal(mask, expected), "the mask has wrong entries"
               + ("" if case.hidden else f"\n    expected: {expected.int().tolist()}\n    got:      {mask.int().tolist()}"))


def check_causal_mask(fn, hidden: bool = False) -> None:
    """Check ``causal_mask``: bool, ``True`` where ``j ≤ i``, on the requested device."""
    part = "causal_mask"
    sizes = _mask_sizes(hidden)
    for q, k in sizes:
        for device in [None, *devices(), torch.device("meta")]:
            case = Case(part, f"causal_mask({q}, {k}, device={device})")
            expect_own_code(case, fn)
            mask = case.call(fn, q, k) if device is None else case.call(fn, q, k, device=device)
            expected = causal_mask(q, k, device=device)
            if device is not None and device.type == "meta":
                case.expect_tensor("the mask", mask, shape=expected.shape, dtype=torch.bool, device="meta")
            else:
                _check_mask(case, mask, expected)
    passed(part, len(sizes), hidden)


def check_padding_mask(fn, hidden: bool = False) -> None:
    """Check ``padding_mask``: bool ``(batch, 1, k)``, ``True`` where ``j < valid_lens[b]``."""
    part = "padding_mask"
    count = 0
    for seed, is_hidden in _seeds(hidden):
        g = torch.Generator().manual_seed(seed)
        k = random.Random(seed).randint(1, 8)
        lens = torch.randint(0, k + 1, (random.Random(seed).randint(1, 4),), generator=g)
        for device in devices():
            case = Case(part, f"valid_lens {lens.tolist()}, num_keys {k}, on {device.type}", seed if is_hidden else None)
            expect_own_code(case, fn)
            _check_mask(case, case.call(fn, lens.to(device), k), padding_mask(lens.to(device), k))
            count += 1
        check_on_meta(Case(part, f"valid_lens of shape {shape_of(lens)}, num_keys {k}, on the meta device"), fn, lens, k)
    passed(part, count, hidden)


def check_window_mask(fn, hidden: bool = False) -> None:
    """Check ``window_mask``: bool, ``True`` where ``|i - j| ≤ radius``."""
    part = "window_mask"
    sizes = _mask_sizes(hidden)
    count = 0
    for q, k in sizes:
        for radius in (0, 1, 2, max(q, k)):
            case = Case(part, f"window_mask({q}, {k}, radius={radius})")
            expect_own_code(case, fn)
            _check_mask(case, case.call(fn, q, k, radius), window_mask(q, k, radius))
            count += 1
    passed(part, count, hidden)


def _attention_cases(hidden: bool):
    """Queries, keys, values with 1 to 3 leading dimensions and masks of several shapes."""
    for seed, is_hidden in _seeds(hidden):
        rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
        batch = tuple(rng.randint(1, 3) for _ in range(rng.randint(1, 3)))
        q, k, d, v = rng.randint(1, 6), rng.randint(2, 7), rng.randint(1, 8), rng.randint(1, 5)
        queries = torch.randn(*batch, q, d, generator=g)
        keys, values = torch.randn(*batch, k, d, generator=g), torch.randn(*batch, k, v, generator=g)
        random_mask = torch.rand(*batch, q, k, generator=g) < 0.6
        random_mask[..., 0, :] = False  # the first query may attend to nothing
        masks = {"None": None, "causal (q, k)": causal_mask(q, k), "random with an empty row": random_mask,
                 "window radius 1 (1, q, k)": window_mask(q, k, 1)[None]}
        for name, mask in masks.items():
            described = f"queries {shape_of(queries)}, keys {shape_of(keys)}, values {shape_of(values)}, mask {name}"
            yield (seed if is_hidden else None), described, (queries, keys, values), {"mask": mask}


def check_masked_attention(fn, hidden: bool = False) -> None:
    """Check masked attention against the reference and PyTorch's own, empty rows, zeros, bad masks."""
    part = "masked_attention"
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    expect_no_delegation(Case(part, "queries (2, 3, 4), keys (2, 5, 4), values (2, 5, 6)"), fn, q, k, v, mask=causal_mask(3, 5))
    count = compare_on_cases(part, fn, masked_attention, _attention_cases(hidden), names=("output", "weights"))
    for seed, described, args, kwargs in _attention_cases(hidden):
        for device in devices():
            case = Case(part, f"{described}, on {device.type}", seed)
            moved = [t.to(device) for t in args]
            mask = None if kwargs["mask"] is None else kwargs["mask"].to(device)
            output, weights = case.call(fn, *moved, mask=mask)
            _check_against_pytorch(case, moved, mask, output)
            _check_empty_rows(case, mask, output, weights)
    case = Case(part, "bad arguments")
    case.expect_value_error(fn, "mask", q, k, v, mask=causal_mask(3, 5).float())
    case.expect_value_error(fn, "keys", q, torch.randn(2, 5, 3), v)
    case.expect_value_error(fn, "values", q, k, torch.randn(2, 4, 6))
    passed(part, count, hidden)


def _check_against_pytorch(case: Case, args, mask, output) -> None:
    """Rows with an allowed key equal ``F.scaled_dot_product_attention`` (same mask convention)."""
    with torch.no_grad():
        expected = F.scaled_dot_product_attention(*args, attn_mask=mask)
    if mask is not None:
        # PyTorch leaves rows with no allowed key undefined: compare the others only.
        has_key = mask.expand(*output.shape[:-1], mask.shape[-1]).any(dim=-1, keepdim=True)
        output, expected = output * has_key, expected.nan_to_num(0) * has_key
    case.expect_close("output (compared with F.scaled_dot_product_attention)", output, expected)


def _check_empty_rows(case: Case, mask, output, weights) -> None:
    """Masked keys get exactly 0; a query with no allowed key gets zero weights and output."""
    if mask is None:
        return
    allowed = mask.expand_as(weights)
    case.check(bool((weights[~allowed] == 0).all()), "masked keys must get weight exactly 0 (mask with -inf, not 0)")
    empty = ~allowed.any(dim=-1)  # (..., q)
    case.check(not torch.isnan(output).any(), "the output contains NaN: a query with no allowed key must give zeros")
    case.check(bool((output[empty] == 0).all() and (weights[empty] == 0).all()),
               "a query with no allowed key must get all-zero weights and an all-zero output")
