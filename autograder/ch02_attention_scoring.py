"""Assignment 02_attention_scoring: scoring functions and attention over them.

The first half holds the course's reference implementations of contract section 02;
the book's chapter 2 demonstrates with them. The second half holds the checks that the
notebook's test cells call, one ``check_<part>`` per graded part.
"""

from __future__ import annotations

import math

import torch

# --------------------------------------------------------------------------------------
# Reference implementations
# --------------------------------------------------------------------------------------


def scaled_dot_product_scores(queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """Scores ``QKᵀ/√d``.

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
    """Softmax attention over the scores of ``score_fn``.

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


# --------------------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------------------

import functools  # noqa: E402
import random  # noqa: E402

import torch.nn.functional as F  # noqa: E402

from .core import (  # noqa: E402
    Case,
    compare_on_cases,
    devices,
    expect_no_delegation,
    expect_own_code,
    largest_tensor_created,
    new_seed,
    passed,
    shape_of,
)


def _batch_shapes(rng: random.Random) -> list[tuple[int, ...]]:
    """Leading batch shapes to try: none, one and two dimensions."""
    return [(), (rng.randint(1, 3),), (rng.randint(1, 3), rng.randint(1, 3))]


def _qk_cases(hidden: bool, dq=None, dk=None, extra=lambda g, dq, dk: {}):
    """Yield ``(seed, description, args, kwargs)`` for queries ``(..., q, dq)`` and keys ``(..., k, dk)``.

    ``dk=None`` means keys share the width of queries; ``extra`` returns the named weight
    matrices to pass after them, drawn from the case's generator.
    """
    seeds = [new_seed() for _ in range(3)] if hidden else [0, 1, 2]
    for seed in seeds:
        rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
        for batch in _batch_shapes(rng):
            q, k, d = rng.randint(1, 6), rng.randint(1, 7), dq or rng.randint(1, 9)
            width_k = dk or d
            queries = torch.randn(*batch, q, d, generator=g)
            keys = torch.randn(*batch, k, width_k, generator=g)
            weights = extra(g, d, width_k)  # passed positionally after queries and keys
            described = f"queries {shape_of(queries)}, keys {shape_of(keys)}" + "".join(
                f", {name} {shape_of(t)}" for name, t in weights.items()
            )
            yield (seed if hidden else None), described, (queries, keys, *weights.values()), {}


def check_scaled_dot_product_scores(fn, hidden: bool = False) -> None:
    """Check ``QKᵀ/√d`` on 2-, 3- and 4-D inputs, float64, and bad arguments."""
    part = "scaled_dot_product_scores"
    count = compare_on_cases(part, fn, scaled_dot_product_scores, _qk_cases(hidden))
    _check_float64(part, fn, scaled_dot_product_scores, torch.randn(2, 3, 4), torch.randn(2, 5, 4))
    case = Case(part, "bad arguments")
    case.expect_value_error(fn, "keys", torch.zeros(3, 4), torch.zeros(5, 6))
    case.expect_value_error(fn, "queries", torch.zeros(4), torch.zeros(5, 4))
    passed(part, count, hidden)


def check_bilinear_scores(fn, hidden: bool = False) -> None:
    """Check ``qᵀ W k`` with queries and keys of different widths."""
    part = "bilinear_scores"
    weights = lambda g, dq, dk: {"W": torch.randn(dq, dk, generator=g)}  # noqa: E731
    count = compare_on_cases(part, fn, bilinear_scores, _qk_cases(hidden, dq=3, dk=5, extra=weights))
    count += compare_on_cases(part, fn, bilinear_scores, _qk_cases(hidden, extra=weights))
    case = Case(part, "bad arguments")
    case.expect_value_error(fn, "W", torch.zeros(2, 3), torch.zeros(4, 5), torch.zeros(5, 3))
    passed(part, count, hidden)


def _additive_weights(h: int):
    return lambda g, dq, dk: {
        "W_q": torch.randn(dq, h, generator=g),
        "W_k": torch.randn(dk, h, generator=g),
        "w_v": torch.randn(h, generator=g),
    }


def check_additive_scores(fn, hidden: bool = False) -> None:
    """Check ``w_vᵀ tanh(q W_q + k W_k)``, its shapes, bad arguments and its memory."""
    part = "additive_scores"
    count = compare_on_cases(part, fn, additive_scores, _qk_cases(hidden, dq=3, dk=5, extra=_additive_weights(4)))
    count += compare_on_cases(part, fn, additive_scores, _qk_cases(hidden, dq=6, dk=2, extra=_additive_weights(7)))
    _check_additive_memory(fn)
    case = Case(part, "bad arguments")
    q, k = torch.zeros(2, 3), torch.zeros(4, 5)
    case.expect_value_error(fn, "W_k", q, k, torch.zeros(3, 6), torch.zeros(4, 6), torch.zeros(6))
    case.expect_value_error(fn, "w_v", q, k, torch.zeros(3, 6), torch.zeros(5, 6), torch.zeros(5))
    passed(part, count, hidden)


def _check_additive_memory(fn) -> None:
    """Wide inputs and a narrow hidden layer: no tensor may be much larger than ``q·k·h``."""
    q, k, d, h = 16, 16, 512, 2
    args = (torch.randn(q, d), torch.randn(k, d), torch.randn(d, h), torch.randn(d, h), torch.randn(h))
    case = Case("additive_scores", f"queries ({q}, {d}), keys ({k}, {d}), hidden size h = {h}")
    largest = largest_tensor_created(fn, *args)
    budget = max(q * k * h, q * d, k * d)  # the hidden features, or an input-sized copy
    case.check(
        largest <= budget,
        f"creates a tensor of {largest} elements; with q = k = {q}, d = {d} and h = {h} it needs at most "
        f"q·k·h = {q * k * h} (project queries and keys to h features first, then broadcast)",
    )


def check_attention(fn, hidden: bool = False) -> None:
    """Check softmax attention: against the reference, PyTorch's own, and other score functions."""
    part = "attention"

    def with_values(cases, v=3):
        for seed, described, (queries, keys), kwargs in cases:  # no weight matrices here
            g = torch.Generator().manual_seed(seed or 7)
            values = torch.randn(*keys.shape[:-1], v, generator=g)
            yield seed, f"{described}, values {shape_of(values)}", (queries, keys, values), kwargs

    case = Case(part, "queries (2, 3, 4), keys (2, 5, 4), values (2, 5, 6)")
    expect_no_delegation(case, fn, torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6))
    names = ("output", "weights")
    count = compare_on_cases(part, fn, attention, with_values(_qk_cases(hidden)), names=names)
    bilinear = functools.partial(bilinear_scores, W=torch.randn(3, 5, generator=torch.Generator().manual_seed(3)))
    cases = [(s, f"{d}, score_fn=bilinear_scores", a, {"score_fn": bilinear})
             for s, d, a, _ in with_values(_qk_cases(hidden, dq=3, dk=5))]
    count += compare_on_cases(part, fn, attention, cases, names=names)
    count += _compare_with_pytorch(fn, hidden)
    case = Case(part, "bad arguments")
    case.expect_value_error(fn, "values", torch.zeros(2, 3), torch.zeros(4, 3), torch.zeros(5, 2))
    passed(part, count, hidden)


def _compare_with_pytorch(fn, hidden: bool) -> int:
    """``attention`` with the default scores equals ``F.scaled_dot_product_attention``."""
    seed = new_seed() if hidden else 11
    g = torch.Generator().manual_seed(seed)
    queries, keys, values = (torch.randn(2, 3, n, 8, generator=g) for n in (4, 6, 6))
    count = 0
    for device in devices():
        case = Case("attention", f"queries {shape_of(queries)} against PyTorch's attention, on {device.type}",
                    seed if hidden else None)
        args = [t.to(device) for t in (queries, keys, values)]
        output, _ = case.call(fn, *args)
        with torch.no_grad():
            case.expect_close("output (compared with F.scaled_dot_product_attention)", output,
                              F.scaled_dot_product_attention(*args))
        count += 1
    return count


def _check_float64(part: str, fn, reference, *args) -> None:
    case = Case(part, ", ".join(f"{shape_of(a)}" for a in args) + " in float64")
    wide = [a.double() for a in args]
    case.expect_close("the output", case.call(fn, *wide), reference(*wide))


def check_dot_product_variance(fn, hidden: bool = False) -> None:
    """Check the empirical variances (≈ d and ≈ 1) and that ``generator`` is used."""
    part = "dot_product_variance"
    dims = [random.Random(new_seed()).choice([2, 3, 5, 8, 13]) for _ in range(2)] + [200] if hidden else [1, 16, 256]
    for d in dims:
        seed = new_seed() if hidden else d
        case = Case(part, f"d = {d}, num_samples = 20000", seed if hidden else None)
        expect_own_code(case, fn)
        var_dot, var_scaled = _as_floats(case, case.call(fn, d, 20000, torch.Generator().manual_seed(seed)))
        # With 20000 samples the relative standard error is at most sqrt(8 / 20000) = 2 %.
        case.check(abs(var_dot - d) <= 0.12 * d, f"var_dot = {var_dot:.3f}, expected about d = {d}")
        case.check(abs(var_scaled - 1) <= 0.12, f"var_scaled = {var_scaled:.3f}, expected about 1")
    case = Case(part, "d = 4, num_samples = 1000, the same generator seed twice")
    first = _as_floats(case, case.call(fn, 4, 1000, torch.Generator().manual_seed(5)))
    again = _as_floats(case, case.call(fn, 4, 1000, torch.Generator().manual_seed(5)))
    case.check(first == again, "the same generator seed gives different results: draw all samples from `generator`")
    other = _as_floats(case, case.call(fn, 4, 1000, torch.Generator().manual_seed(6)))
    case.check(first != other, "different generator seeds give the same result: draw the samples from `generator`")
    passed(part, len(dims), hidden)


def _as_floats(case: Case, result) -> tuple[float, float]:
    case.check(isinstance(result, tuple) and len(result) == 2, "should return a tuple (var_dot, var_scaled)")
    try:
        return float(result[0]), float(result[1])
    except (TypeError, ValueError, RuntimeError):
        case.fail(f"var_dot and var_scaled should be numbers, got {type(result[0]).__name__}")
