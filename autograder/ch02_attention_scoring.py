"""Checks of assignment 02_attention_scoring: scoring functions and attention over them.

One ``check_<part>(answer, hidden=False)`` per graded part of contract section 02, and a
``check_<part>_arguments(answer)`` for the ``ValueError``s, graded apart. Each part is
declared as data (``autograder.parts``) and judged by the course's judge
(``autograder.judge``); this module holds what is special to each part and the scoring functions that visible cases pass to ``attention`` (neither is
an answer, so ``attention`` is never graded through the student's own scores).
"""

from __future__ import annotations

import random

import torch

from .core import Case
from .judge import checks
from .parts import ArgumentCheck, Call, Part, Probe

CHAPTER = "ch02_attention_scoring"

# --------------------------------------------------------------------------------------
# Helpers the visible cases pass to answers (none of them is an answer)
# --------------------------------------------------------------------------------------


def negative_squared_distance_scores(queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """``-‖q - k‖² / 2``, the Gaussian kernel's exponent of chapter 1: ``(..., q, d), (..., k, d) -> (..., q, k)``."""
    # (..., q, 1, d) - (..., 1, k, d) -> (..., q, k, d), summed over d
    return -((queries.unsqueeze(-2) - keys.unsqueeze(-3)) ** 2).sum(-1) / 2


def cosine_scores(queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """Cosine similarity times 4: ``(..., q, d), (..., k, d) -> (..., q, k)``."""
    unit_q = queries / queries.norm(dim=-1, keepdim=True).clamp(min=1e-6)
    unit_k = keys / keys.norm(dim=-1, keepdim=True).clamp(min=1e-6)
    return 4 * unit_q @ unit_k.transpose(-2, -1)  # (..., q, d) @ (..., d, k)


HELPERS = {"negative_squared_distance_scores": negative_squared_distance_scores, "cosine_scores": cosine_scores}

# --------------------------------------------------------------------------------------
# Scores
# --------------------------------------------------------------------------------------

SCALED_DOT_PRODUCT = Part("scaled_dot_product_scores", CHAPTER, arguments=("queries", "keys"))
BILINEAR = Part("bilinear_scores", CHAPTER, arguments=("queries", "keys", "W"))


@checks(SCALED_DOT_PRODUCT)
def check_scaled_dot_product_scores(fn, hidden: bool = False) -> None:
    """Check ``QKᵀ/√d`` on 2-, 3- and 4-D inputs and in float64."""


@checks(ArgumentCheck("scaled_dot_product_scores", CHAPTER, lambda: [
    ("keys", (torch.zeros(3, 4), torch.zeros(5, 6)), {}),
    ("queries", (torch.zeros(4), torch.zeros(5, 4)), {}),
]))
def check_scaled_dot_product_scores_arguments(fn, hidden: bool = False) -> None:
    """Keys of another width, or inputs with fewer than 2 dimensions, raise ``ValueError``."""


@checks(BILINEAR)
def check_bilinear_scores(fn, hidden: bool = False) -> None:
    """Check ``qᵀ W k``, with queries and keys of the same and of different widths."""


@checks(ArgumentCheck("bilinear_scores", CHAPTER, lambda: [
    ("W", (torch.zeros(2, 3), torch.zeros(4, 5), torch.zeros(5, 3)), {}),
]))
def check_bilinear_scores_arguments(fn, hidden: bool = False) -> None:
    """A ``W`` that is not ``(dq, dk)`` raises ``ValueError``."""


#: Wide inputs and a narrow hidden layer for the memory probe: q = k = 256, d = 1024, h = 4. Broadcasting the
#: queries against the keys before projecting them makes a (q, k, d) tensor of 256 MiB; projecting first, the
#: (q, k, h) features take 1 MiB.
_Q, _K, _D, _H = 256, 256, 1024, 4
#: The working memory the probe's call may take above what the process held before it: eight times less than the
#: (q, k, d) tensor, room for the features, the inputs' copies and the request itself (measured at grading from
#: outside the kernel, by its cgroup).
ADDITIVE_MEMORY_BYTES = 32 * 2**20


def wide_inputs(seed: int) -> tuple[torch.Tensor, ...]:
    """The memory probe's inputs, drawn from ``seed``: queries ``(256, 1024)``, keys ``(256, 1024)``, ``W_q`` and
    ``W_k`` ``(1024, 4)``, ``w_v`` ``(4,)``. They are drawn where the answer runs, so that the request carries a
    seed, not 2 MiB of inputs, and the call's memory is the answer's own."""
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(*shape, generator=g) / shape[0] ** 0.5
                 for shape in ((_Q, _D), (_K, _D), (_D, _H), (_D, _H), (_H,)))


def _wide_calls(seed: int) -> list[Call]:
    return [Call(f"queries ({_Q}, {_D}), keys ({_K}, {_D}), hidden size h = {_H}, drawn from seed {seed}", (seed,))]


def _expect_small_memory(case: Case, args, kwargs, peak) -> None:
    """The call's working memory stays far below the ``(q, k, d)`` broadcast. (The message gives no measured figure:
    a grade must read the same when the notebook is graded again.)"""
    mib = 2**20
    case.check(
        int(peak) <= ADDITIVE_MEMORY_BYTES,
        f"took more than the {ADDITIVE_MEMORY_BYTES / mib:.0f} MiB of working memory it may take. With "
        f"q = k = {_Q}, d = {_D} and h = {_H}, the (q, k, h) features take {_Q * _K * _H * 4 / mib:.0f} MiB and a "
        f"(q, k, d) broadcast {_Q * _K * _D * 4 / mib:.0f} MiB: project queries and keys to h features first, then "
        "broadcast",
    )


def _same_scores(case: Case, result, expected) -> None:
    case.expect_close("the scores", result, expected, atol=1e-4, rtol=1e-4)


#: Memory, measured from outside the answer's process at grading, on the judge's inputs; the scores must be right.
SMALL_MEMORY = Probe("memory", lambda: _wide_calls(0), lambda fn: lambda seed: fn(*wide_inputs(seed)),
                     _expect_small_memory, decides=True, hidden=_wide_calls, compare=_same_scores,
                     memory=ADDITIVE_MEMORY_BYTES)
ADDITIVE = Part("additive_scores", CHAPTER, arguments=("queries", "keys", "W_q", "W_k", "w_v"), probes=(SMALL_MEMORY,))


@checks(ADDITIVE)
def check_additive_scores(fn, hidden: bool = False) -> None:
    """Check ``w_vᵀ tanh(q W_q + k W_k)`` and that it needs only ``O(q·k·h)`` memory."""


def _bad_additive_arguments() -> list[tuple[str, tuple, dict]]:
    q, k = torch.zeros(2, 3), torch.zeros(4, 5)
    return [
        ("W_k", (q, k, torch.zeros(3, 6), torch.zeros(4, 6), torch.zeros(6)), {}),
        ("w_v", (q, k, torch.zeros(3, 6), torch.zeros(5, 6), torch.zeros(5)), {}),
    ]


@checks(ArgumentCheck("additive_scores", CHAPTER, _bad_additive_arguments))
def check_additive_scores_arguments(fn, hidden: bool = False) -> None:
    """A ``W_k`` or ``w_v`` that does not fit raises ``ValueError``."""


# --------------------------------------------------------------------------------------
# Attention
# --------------------------------------------------------------------------------------

ATTENTION = Part("attention", CHAPTER, arguments=("queries", "keys", "values"), outputs=("output", "weights"),
                 forbid_library=True)


@checks(ATTENTION)
def check_attention(fn, hidden: bool = False) -> None:
    """Check softmax attention with several scoring functions, always passed as ``score_fn``,
    so that a mistake in ``scaled_dot_product_scores`` costs only that part's points."""


@checks(ArgumentCheck("attention", CHAPTER, lambda: [
    ("values", (torch.zeros(2, 3), torch.zeros(4, 3), torch.zeros(5, 2)), {"score_fn": cosine_scores}),
]))
def check_attention_arguments(fn, hidden: bool = False) -> None:
    """Values without one row per key raise ``ValueError``."""


# --------------------------------------------------------------------------------------
# Variance
# --------------------------------------------------------------------------------------


def _seeded(fn):
    """``(d, num_samples, seed) -> fn(d, num_samples, a generator seeded with seed)``."""
    return lambda d, num_samples, seed: fn(d, num_samples, torch.Generator().manual_seed(seed))


def _as_floats(case: Case, result) -> tuple[float, float]:
    case.check(isinstance(result, tuple) and len(result) == 2, "should return a tuple (var_dot, var_scaled)")
    try:
        return float(result[0]), float(result[1])
    except (TypeError, ValueError, RuntimeError):
        case.fail(f"var_dot and var_scaled should be numbers, got {type(result[0]).__name__}")


def _expect_variances(case: Case, args, kwargs, result) -> None:
    """About ``d`` and ``1``: with 20000 samples the relative standard error is at most 2 %."""
    d = args[0]
    var_dot, var_scaled = _as_floats(case, result)
    case.check(abs(var_dot - d) <= 0.12 * d, f"var_dot = {var_dot:.3f}, expected about d = {d}")
    case.check(abs(var_scaled - 1) <= 0.12, f"var_scaled = {var_scaled:.3f}, expected about 1")


def _seeded_three_times(fn):
    """``(d, num_samples, seeds) -> [fn(d, num_samples, a generator seeded with s) for s in seeds]``."""
    return lambda d, num_samples, seeds: [fn(d, num_samples, torch.Generator().manual_seed(s)) for s in seeds]


def _expect_generator_used(case: Case, args, kwargs, results) -> None:
    """The same generator seed gives the same result, different seeds different ones."""
    first, again, other = (_as_floats(case, result) for result in results)
    case.check(first == again, "the same generator seed gives different results: draw all samples from `generator`")
    case.check(first != other, "different generator seeds give the same result: draw the samples from `generator`")


def _statistics_only(case: Case, result, expected) -> None:
    """Samples drawn in another order give other variances: ``_expect_variances`` judges them."""


def _generator_calls(seed: int) -> list[Call]:
    """Two generator seeds ``a`` and ``b`` drawn from ``seed``: the answer is run with ``a``, ``a`` and ``b``."""
    a, b = random.Random(seed).sample(range(2**31), 2)
    return [Call(f"d = 4, num_samples = 1000, generator seeds {a}, {a} and {b}", (4, 1000, (a, a, b)))]


#: ``generator`` used, from the results on seeds the judge draws: decides.
GENERATOR_USED = Probe("generator", lambda: [Call("d = 4, num_samples = 1000, generator seeds 5, 5 and 6",
                                                  (4, 1000, (5, 5, 6)))], _seeded_three_times, _expect_generator_used,
                       decides=True, hidden=_generator_calls)
VARIANCE = Part("dot_product_variance", CHAPTER, adapt=_seeded, compare=_statistics_only, extra=_expect_variances,
                probes=(GENERATOR_USED,), on_devices=False, meta=False, compare_with_reference=False)


@checks(VARIANCE)
def check_dot_product_variance(fn, hidden: bool = False) -> None:
    """Check the empirical variances (≈ d and ≈ 1) and that ``generator`` is used."""


@checks(ArgumentCheck("dot_product_variance", CHAPTER, lambda: [("d", (0,), {}), ("d", (-3, 100), {})]))
def check_dot_product_variance_arguments(fn, hidden: bool = False) -> None:
    """``d < 1`` raises ``ValueError``."""


PARTS = {part.name: part for part in (SCALED_DOT_PRODUCT, BILINEAR, ADDITIVE, ATTENTION, VARIANCE)}
