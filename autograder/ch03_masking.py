"""Checks of assignment 03_masking: masked softmax and the masks of attention.

One ``check_<part>(answer, hidden=False)`` per graded part of contract section 03, and
``check_masked_attention_arguments`` for the ``ValueError``s, graded apart. Each part is
declared as data (``autograder.parts``) and judged by the course's judge
(``autograder.judge``); this module holds only the assertions special to each part. One mask convention throughout, that of
``torch.nn.functional.scaled_dot_product_attention``: a bool mask, ``True`` = may attend.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .core import Case, attention_rounding
from .judge import checks
from .parts import ArgumentCheck, Call, Part, Probe

CHAPTER = "ch03_masking"

# --------------------------------------------------------------------------------------
# Masked softmax
# --------------------------------------------------------------------------------------


def _expect_exact_zeros_past_lengths(case: Case, args, kwargs, weights) -> None:
    X, lens = args
    if lens is None:
        return
    lens = lens if lens.dim() == 2 else lens[:, None]
    beyond = torch.arange(X.shape[-1], device=X.device) >= lens[..., None]  # (batch, q or 1, k)
    case.check(bool((weights[beyond.expand_as(weights)] == 0).all()),
               "positions at or past a valid length must get weight exactly 0")


MASKED_SOFTMAX = Part("masked_softmax", CHAPTER, arguments=("X", "valid_lens"), outputs=("the weights",),
                      extra=_expect_exact_zeros_past_lengths, forbid_library=True)


@checks(MASKED_SOFTMAX)
def check_masked_softmax(fn, hidden: bool = False) -> None:
    """Check ``masked_softmax``: values, exact zeros past each valid length, scores of ±200, X unchanged."""


# --------------------------------------------------------------------------------------
# Masks
# --------------------------------------------------------------------------------------


def _compare_masks(case: Case, mask, expected) -> None:
    """A mask must be a bool tensor equal to ``expected``."""
    case.expect_tensor("the mask", mask, shape=expected.shape, dtype=torch.bool, device=expected.device)
    case.check(torch.equal(mask, expected), "the mask has wrong entries"
               + ("" if case.hidden else f"\n    expected: {expected.int().tolist()}\n    got:      {mask.int().tolist()}"))


def _default_device_probe(*sizes: int) -> Probe:
    """Called without a device, the mask is a bool ``(q, k)`` tensor on the CPU."""

    def expect(case: Case, args, kwargs, mask) -> None:
        case.expect_tensor("the mask", mask, shape=sizes[:2], dtype=torch.bool, device="cpu")

    call = Call(f"({', '.join(map(str, sizes))}) without a device", sizes)
    return Probe("default device", lambda: [call], lambda fn: fn, expect, decides=True)


CAUSAL = Part("causal_mask", CHAPTER, compare=_compare_masks, probes=(_default_device_probe(2, 3),))
BOTTOM_RIGHT = Part("causal_mask_bottom_right", CHAPTER, compare=_compare_masks, probes=(_default_device_probe(2, 3),))
PADDING = Part("padding_mask", CHAPTER, arguments=("valid_lens",), compare=_compare_masks)
WINDOW = Part("window_mask", CHAPTER, compare=_compare_masks, probes=(_default_device_probe(2, 3, 1),))


@checks(CAUSAL)
def check_causal_mask(fn, hidden: bool = False) -> None:
    """Check ``causal_mask``: bool, ``True`` where ``j ≤ i``, on the requested device."""


@checks(BOTTOM_RIGHT)
def check_causal_mask_bottom_right(fn, hidden: bool = False) -> None:
    """Check ``causal_mask_bottom_right``: bool, ``True`` where ``j ≤ i + (k - q)``, on the requested device."""


@checks(PADDING)
def check_padding_mask(fn, hidden: bool = False) -> None:
    """Check ``padding_mask``: bool ``(batch, 1, k)``, ``True`` where ``j < valid_lens[b]``."""


@checks(WINDOW)
def check_window_mask(fn, hidden: bool = False) -> None:
    """Check ``window_mask``: bool, ``True`` where ``|i - j| ≤ radius``, on the requested device."""


# --------------------------------------------------------------------------------------
# Masked attention
# --------------------------------------------------------------------------------------


def _expect_pytorchs_output_and_empty_rows(case: Case, args, kwargs, result) -> None:
    """Rows with an allowed key equal ``F.scaled_dot_product_attention`` (same mask convention);
    masked keys get exactly 0, and a query with no allowed key gets zeros, never NaN."""
    output, weights = result
    mask = kwargs.get("mask")
    with torch.no_grad():  # in float64: the expected output without float32's rounding
        expected = F.scaled_dot_product_attention(*(a.double() for a in args), attn_mask=mask).to(output.dtype)
    atol = 1e-5 + attention_rounding(*args)
    if mask is None:
        case.expect_close("output (compared with F.scaled_dot_product_attention)", output, expected, atol=atol)
        return
    allowed = mask.expand_as(weights)
    has_key = allowed.any(dim=-1, keepdim=True)  # PyTorch leaves rows without a key undefined
    case.expect_close("output (compared with F.scaled_dot_product_attention)", output * has_key,
                      expected.nan_to_num(0) * has_key, atol=atol)
    case.check(bool((weights[~allowed] == 0).all()), "masked keys must get weight exactly 0 (mask with -inf, not 0)")
    empty = ~has_key[..., 0]  # (..., q)
    case.check(not torch.isnan(output).any(), "the output contains NaN: a query with no allowed key must give zeros")
    case.check(bool((output[empty] == 0).all() and (weights[empty] == 0).all()),
               "a query with no allowed key must get all-zero weights and an all-zero output")


MASKED_ATTENTION = Part("masked_attention", CHAPTER, arguments=("queries", "keys", "values"),
                        outputs=("output", "weights"), extra=_expect_pytorchs_output_and_empty_rows, forbid_library=True,
                        rounding=lambda queries, keys, values, mask=None: attention_rounding(queries, keys, values))


@checks(MASKED_ATTENTION)
def check_masked_attention(fn, hidden: bool = False) -> None:
    """Check masked attention against the reference and PyTorch's own, with empty rows and large scores."""


def _bad_attention_arguments() -> list[tuple[str, tuple, dict]]:
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    float_mask = torch.ones(3, 5).tril()
    return [
        ("mask", (q, k, v), {"mask": float_mask}),
        ("keys", (q, torch.randn(2, 5, 3), v), {}),
        ("values", (q, k, torch.randn(2, 4, 6)), {}),
    ]


@checks(ArgumentCheck("masked_attention", CHAPTER, _bad_attention_arguments))
def check_masked_attention_arguments(fn, hidden: bool = False) -> None:
    """A float mask, keys of another width, or values without one row per key raise ``ValueError``."""


PARTS = {part.name: part for part in (MASKED_SOFTMAX, CAUSAL, BOTTOM_RIGHT, PADDING, WINDOW, MASKED_ATTENTION)}
