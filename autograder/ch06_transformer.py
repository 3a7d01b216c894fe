"""Checks of assignment 06_transformer: the Transformer block and memory-efficient attention.

One ``check_<part>(answer, hidden=False)`` per graded part of contract section 06, and
``check_chunked_attention_arguments`` for the ``ValueError``s, graded apart. Each part is
declared as data (``autograder.parts``) and judged by the course's judge
(``autograder.judge``); this module holds what is special to each part (the block's padding and dropout, chunked attention's memory, the
sorting model's accuracy on freshly drawn sequences within a time limit) and the sorting
task's data, which the exercise and the book share.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .core import (
    Case,
    attention_rounding,
    expect_backward_passes,
    expect_dropout_in_training_only,
    expect_evaluated_as_reference,
    expect_trained_in_time,
)
from .judge import checks
from .kernel.measure import describe_module, in_both_modes, trained_once
from .parts import ArgumentCheck, Call, Part, Probe

CHAPTER = "ch06_transformer"

#: The sorting task: sequences of SEQUENCE_LENGTH digits below VOCABULARY.
SEQUENCE_LENGTH, VOCABULARY = 8, 10
#: Seconds ``train_sorting_transformer`` may take in a test cell, measured on the machine that
#: runs the check (the grading machine, when graded). The contract asks for 60 s on 2 cores;
#: the reference takes about 6 s there, and a grading kernel may have one core only.
TRAINING_SECONDS = 90.0
#: Per-token accuracy the sorting model must reach on sequences it has never seen.
REQUIRED_ACCURACY = 0.95

# --------------------------------------------------------------------------------------
# The sorting task
# --------------------------------------------------------------------------------------


def sorting_order(seed: int) -> torch.Tensor:
    """The order of the digits in the sorting task of ``seed``: ``(VOCABULARY,)`` int64, the digits from the one
    that sorts first to the one that sorts last, drawn from ``seed``.

    The exercise's ``train_sorting_transformer(seed)`` learns the task of its seed, so that what
    it must learn is known only when the grader calls it.
    """
    return torch.randperm(VOCABULARY, generator=torch.Generator().manual_seed(seed))


def sort_digits(digits: torch.Tensor, order: torch.Tensor | None = None) -> torch.Tensor:
    """``digits (..., n)`` sorted by ``order`` (:func:`sorting_order`; ``None``: ascending), same shape."""
    if order is None:
        return digits.sort(dim=-1).values
    order = order.to(digits.device)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(len(order), device=digits.device)  # rank[d]: where digit d comes in the order
    return order[rank[digits].sort(dim=-1).values]  # sort the ranks, then read each rank's digit


def make_sorting_batch(batch_size: int, generator: torch.Generator | None = None, order: torch.Tensor | None = None):
    """A batch of the sorting task (book, chapter 6).

    Args:
        order: the order to sort by (:func:`sorting_order`); ``None``: ascending.

    Returns:
        ``(digits, targets)``, both ``(batch_size, SEQUENCE_LENGTH)`` int64: random digits,
        and the same digits sorted.
    """
    digits = torch.randint(0, VOCABULARY, (batch_size, SEQUENCE_LENGTH), generator=generator)
    return digits, sort_digits(digits, order)


@torch.no_grad()
def per_token_accuracy(model: nn.Module, digits: torch.Tensor, targets: torch.Tensor) -> float:
    """The fraction of positions where ``model(digits).argmax(-1)`` equals ``targets``."""
    device = next(model.parameters()).device
    predictions = model(digits.to(device)).argmax(dim=-1)  # (batch, n, 10) -> (batch, n)
    return (predictions == targets.to(device)).float().mean().item()


# --------------------------------------------------------------------------------------
# Multi-head attention to build on, whatever became of assignment 4's
# --------------------------------------------------------------------------------------


class FallbackMultiHeadAttention(nn.Module):
    """Multi-head attention around PyTorch's fused attention, with the contract's layers (book, chapter 4).

    ``forward(queries (batch, q, num_hiddens), keys (batch, k, num_hiddens), values (batch,
    k, num_hiddens), mask=None) -> (batch, q, num_hiddens)``; ``mask`` is bool, broadcastable
    to ``(batch, heads, q, k)``, ``True`` = may attend, and a query with no allowed key gets
    zeros. Its layers ``W_q, W_k, W_v, W_o`` (``nn.Linear(num_hiddens, num_hiddens)``) are
    those of assignment 4's ``MultiHeadAttention``, so a block built on it loads the same
    weights. Assignment 6 builds on it where a student's own module is not right yet
    (``MultiHeadAttention = checks.FallbackMultiHeadAttention``), and its checks build the
    block and train the sorting model with it, so that a mistake in assignment 4's module
    costs nothing here. It calls ``torch.nn.functional.scaled_dot_product_attention``, which
    assignment 4's checks refuse, so it answers nothing there. It keeps no attention weights.
    """

    def __init__(self, num_hiddens: int, num_heads: int, dropout: float = 0.0, bias: bool = False):
        super().__init__()
        if num_heads < 1 or num_hiddens % num_heads:
            raise ValueError(f"num_heads must be a positive divisor of num_hiddens = {num_hiddens}, got {num_heads}")
        self.num_heads, self.dropout = num_heads, dropout
        self.W_q, self.W_k, self.W_v, self.W_o = (nn.Linear(num_hiddens, num_hiddens, bias=bias) for _ in range(4))
        self.attention_weights = None

    def _heads(self, X: torch.Tensor) -> torch.Tensor:
        # (batch, n, heads·d) -> (batch, n, heads, d) -> (batch, heads, n, d)
        return X.unflatten(-1, (self.num_heads, -1)).transpose(1, 2)

    def forward(self, queries, keys, values, mask=None):
        q, k, v = self._heads(self.W_q(queries)), self._heads(self.W_k(keys)), self._heads(self.W_v(values))
        has_key = None
        if mask is not None:
            mask = mask.expand(q.shape[0], self.num_heads, q.shape[2], k.shape[2])  # (batch, heads, q, k)
            has_key = mask.any(dim=-1, keepdim=True)  # (batch, heads, q, 1)
            mask = mask | ~has_key  # a query with no key attends everywhere (no NaN), then gets zeros below
        heads = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                               dropout_p=self.dropout if self.training else 0.0)  # (batch, heads, q, d)
        if has_key is not None:
            heads = heads * has_key
        return self.W_o(heads.transpose(1, 2).flatten(2))  # (batch, heads, q, d) -> (batch, q, heads·d)


class FallbackEncoderBlock(nn.Module):
    """The post-norm encoder block as PyTorch builds it, for training apart from a student's block.

    ``FallbackEncoderBlock(num_hiddens, ffn_num_hiddens, num_heads, dropout, use_bias=False)``
    and ``forward(X (batch, n, num_hiddens), valid_lens=None) -> (batch, n, num_hiddens)``, as
    the contract's ``TransformerEncoderBlock``, around ``nn.TransformerEncoderLayer``
    (post-norm, ReLU; ``use_bias`` is accepted for the signature's sake, PyTorch's layer keeps
    its biases). The check of ``train_sorting_transformer`` trains with it in place of the
    student's block, so a mistake in the block costs the block's points only. Its layers
    carry PyTorch's names, not the contract's, and it calls library attention: it answers
    nothing of the block's part.
    """

    def __init__(self, num_hiddens: int, ffn_num_hiddens: int, num_heads: int, dropout: float, use_bias: bool = False):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(num_hiddens, num_heads, ffn_num_hiddens, dropout, batch_first=True)

    def forward(self, X, valid_lens=None):
        padding = None
        if valid_lens is not None:  # PyTorch's key padding mask: True = padding, (batch, n)
            padding = torch.arange(X.shape[1], device=X.device) >= valid_lens[:, None]
        return self.layer(X, src_key_padding_mask=padding)


# --------------------------------------------------------------------------------------
# The encoder block
# --------------------------------------------------------------------------------------


def _block_run(cls):
    """``(X, valid_lens, ffn_num_hiddens, num_heads, use_bias, state) -> output`` of a block class:
    built for the case, the case's weights loaded by name, run in evaluation mode."""

    def forward(X, valid_lens, ffn_num_hiddens, num_heads, use_bias, state):
        block = cls(X.shape[-1], ffn_num_hiddens, num_heads, 0.0, use_bias=use_bias).to(X.device)
        block.load_state_dict(state)
        block.eval()
        return block(X, valid_lens)

    return forward


def block_state(g: torch.Generator, num_hiddens: int, ffn: int, use_bias: bool) -> dict[str, torch.Tensor]:
    """Random weights for every parameter of the block, by the names of its state dict, drawn with ``g``."""
    def draw(*shape, scale=1.0):
        return torch.randn(*shape, generator=g) * scale

    state = {f"attention.{name}.weight": draw(num_hiddens, num_hiddens, scale=num_hiddens**-0.5)
             for name in ("W_q", "W_k", "W_v", "W_o")}
    if use_bias:
        state |= {f"attention.{name}.bias": draw(num_hiddens, scale=0.1) for name in ("W_q", "W_k", "W_v", "W_o")}
    state |= {"norm1.weight": 1 + draw(num_hiddens, scale=0.1), "norm1.bias": draw(num_hiddens, scale=0.1),
              "ffn.0.weight": draw(ffn, num_hiddens, scale=num_hiddens**-0.5), "ffn.0.bias": draw(ffn, scale=0.1),
              "ffn.2.weight": draw(num_hiddens, ffn, scale=ffn**-0.5), "ffn.2.bias": draw(num_hiddens, scale=0.1),
              "norm2.weight": 1 + draw(num_hiddens, scale=0.1), "norm2.bias": draw(num_hiddens, scale=0.1)}
    return state


def _expect_named_layers(case: Case, args, kwargs, block) -> None:
    """``attention``, ``norm1``, ``ffn``, ``norm2`` as named."""
    case.check(block["is_module"], "should be a subclass of torch.nn.Module")
    for name, kind in (("attention", None), ("norm1", "LayerNorm"), ("ffn", None), ("norm2", "LayerNorm")):
        layer = block["layers"].get(name)
        case.check(layer is not None and (kind is None or layer["type"] == kind),
                   f"should have a layer `{name}` ({kind or 'nn.Module'})")


#: The block's layers, as its process describes them: advice (the cases load their weights by these names).
BLOCK_LAYERS = Probe("layers", lambda: [Call("TransformerEncoderBlock(16, 32, 4, dropout=0.5)")],
                     lambda cls: lambda: describe_module(cls(16, 32, 4, 0.5)), _expect_named_layers)


def _dropout_inputs(seed: int) -> list[Call]:
    """Weights, an input ``(2, 6, 16)`` and two seeds of the generator, drawn from ``seed``."""
    g = torch.Generator().manual_seed(seed)
    state, X = block_state(g, 16, 32, use_bias=False), torch.randn(2, 6, 16, generator=g)
    seeds = torch.randint(0, 2**31, (2,), generator=g)  # (2,): a tensor, never counted as a size
    return [Call(f"TransformerEncoderBlock(16, 32, 4, dropout=0.5) on X (2, 6, 16), generator seeds {seeds[0].item()} and "
                 f"{seeds[1].item()}", (state, X, seeds))]


def _dropout_of(cls):
    """``(state, X, seeds) -> {outputs in evaluation and training mode under both seeds}`` of
    ``TransformerEncoderBlock(16, 32, 4, dropout=0.5)`` with ``state`` loaded (``kernel.measure.in_both_modes``)."""

    def look(state, X, seeds):
        block = cls(16, 32, 4, 0.5)
        block.load_state_dict(state)
        return in_both_modes(block, lambda b: b(X, None), seeds)

    return look


#: Dropout, from outputs on the judge's weights and inputs: decides.
BLOCK_DROPOUT = Probe("dropout", lambda: _dropout_inputs(3), _dropout_of,
                      lambda case, args, kwargs, seen: expect_dropout_in_training_only(
                          case, seen, "pass dropout to the attention and apply it after each sublayer"),
                      decides=True, hidden=_dropout_inputs,
                      compare=lambda case, seen, expected: expect_evaluated_as_reference(case, seen, expected))
BLOCK = Part("TransformerEncoderBlock", CHAPTER, arguments=("X", "valid_lens"), adapt=_block_run, atol=1e-4,
             probes=(BLOCK_LAYERS, BLOCK_DROPOUT), forbid_library=True,
             depends_on={"MultiHeadAttention": FallbackMultiHeadAttention})


@checks(BLOCK)
def check_transformer_encoder_block(cls, hidden: bool = False) -> None:
    """Check the post-norm block against the reference with the same weights: valid lengths
    (a length 0 included), 1 to 4 heads, bias, dropout in training mode only."""


# --------------------------------------------------------------------------------------
# Chunked attention
# --------------------------------------------------------------------------------------

#: Half-precision inputs are compared within these, relative to the values' scale.
_HALF_TOLERANCE = {torch.float16: 5e-3, torch.bfloat16: 3e-2}


def _chunked_rounding(queries, keys, values, chunk_size, mask=None) -> float:
    """How far rounding alone may move a correct chunked output from the reference's.

    In float32, :func:`~autograder.core.attention_rounding` with one rescale of the running
    sums per chunk; in half precision, the dtype's tolerance times ``1 + max|v|`` (an
    output is an average of values, so ``max|v|`` bounds it).
    """
    if queries.dtype in _HALF_TOLERANCE:
        return _HALF_TOLERANCE[queries.dtype] * (1 + values.abs().max().item())
    return attention_rounding(queries, keys, values, rescales=math.ceil(keys.shape[-2] / max(chunk_size, 1)))


#: The memory probe: 1024 queries, 65536 keys of width 8, values of width 4, chunks of 256. The whole score
#: matrix alone takes 256 MiB; a chunk's block of scores 1 MiB.
_Q, _K, _D, _V, _CHUNK = 1024, 65536, 8, 4, 256
#: The working memory the probe's call may take above what the process held before it: eight times less than the
#: score matrix, and room for a few blocks, the inputs' copies and the request itself (measured at grading from
#: outside the kernel, by its cgroup).
CHUNK_MEMORY_BYTES = 32 * 2**20


def long_inputs(seed: int) -> tuple:
    """The memory probe's inputs, drawn from ``seed``: queries ``(1024, 8)``, keys ``(65536, 8)``, values
    ``(65536, 4)`` and ``chunk_size=256``. They are drawn where the answer runs, so that the request carries a seed,
    not 3 MiB of inputs, and the call's memory is the answer's own."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(_Q, _D, generator=g), torch.randn(_K, _D, generator=g), torch.randn(_K, _V, generator=g), _CHUNK


def _long_calls(seed: int) -> list[Call]:
    return [Call(f"queries ({_Q}, {_D}), keys ({_K}, {_D}), values ({_K}, {_V}), chunk_size={_CHUNK}, drawn from "
                 f"seed {seed}", (seed,))]


def _expect_chunk_sized_memory(case: Case, args, kwargs, peak) -> None:
    """The call's working memory stays far below the ``(1024, 65536)`` score matrix. (The message gives no measured
    figure: a grade must read the same when the notebook is graded again.)"""
    mib = 2**20
    case.check(int(peak) <= CHUNK_MEMORY_BYTES,
               f"took more than the {CHUNK_MEMORY_BYTES / mib:.0f} MiB of working memory it may take. A "
               f"(q, chunk_size) block of scores takes {_Q * _CHUNK * 4 / mib:.0f} MiB and the whole (q, k) score "
               f"matrix {_Q * _K * 4 / mib:.0f} MiB: process the keys one chunk at a time, keeping only running sums")


def _same_output(case: Case, result, expected) -> None:
    case.expect_close("the output", result, expected, atol=1e-4, rtol=1e-4)


#: Memory, measured from outside the answer's process at grading, on the judge's inputs; the output must be right.
CHUNK_MEMORY = Probe("memory", lambda: _long_calls(0), lambda fn: lambda seed: fn(*long_inputs(seed)),
                     _expect_chunk_sized_memory, decides=True, hidden=_long_calls, compare=_same_output,
                     memory=CHUNK_MEMORY_BYTES)
CHUNKED = Part("chunked_attention", CHAPTER, arguments=("queries", "keys", "values"), rounding=_chunked_rounding,
               probes=(CHUNK_MEMORY,), forbid_library=True)


@checks(CHUNKED)
def check_chunked_attention(fn, hidden: bool = False) -> None:
    """Check chunked attention against full attention: chunk sizes that do not divide the keys,
    masks with empty rows, scores in the thousands, float16 and bfloat16, and its memory."""


def _bad_chunks() -> list[tuple[str, tuple, dict]]:
    q, k, v = torch.randn(3, 4), torch.randn(5, 4), torch.randn(5, 2)
    return [("chunk_size", (q, k, v, 0), {}), ("chunk_size", (q, k, v, -2), {})]


@checks(ArgumentCheck("chunked_attention", CHAPTER, _bad_chunks))
def check_chunked_attention_arguments(fn, hidden: bool = False) -> None:
    """A chunk size below 1 raises ``ValueError``."""


# --------------------------------------------------------------------------------------
# The sorting Transformer
# --------------------------------------------------------------------------------------

_TRAINED: dict = {}  # (answer, seed) -> what it returned: one training per process


def _predictions_on(train):
    """``(seed, digits) -> (reported accuracy, the model's predictions on digits, backward passes of the
    training)``, training once per seed.

    The held-out ``digits`` are drawn by the judge, which computes the accuracy itself from the
    predictions, against the order of ``seed``.
    """

    def predict(seed, digits):
        model, reported, passes = trained_once(train, seed, _TRAINED)
        if model is None:
            return reported, None, passes
        device = next(model.parameters()).device
        with torch.no_grad():
            return reported, model(digits.to(device)).argmax(dim=-1).cpu(), passes  # (batch, n, 10) -> (batch, n)

    return predict


def _expect_accurate_in_time(case: Case, args, kwargs, result) -> None:
    """Within the time limit (measured by the judge), and right on the judge's fresh sequences sorted by the order
    of the seed it passed."""
    seed, digits = args
    reported, predictions, _ = result
    expect_trained_in_time(case, predictions, reported, TRAINING_SECONDS, " (the contract: 60 s on 2 CPU cores)")
    case.expect_tensor("the predictions", predictions, shape=digits.shape, dtype=torch.int64, device="cpu")
    measured = (predictions == sort_digits(digits, sorting_order(seed))).float().mean().item()
    case.check(measured >= REQUIRED_ACCURACY, f"the model sorts {measured:.1%} of the digits of fresh sequences "
                                              f"correctly, in the order of seed {seed} "
                                              f"(checks.sorting_order({seed})); it needs {REQUIRED_ACCURACY:.0%}")


SORTING = Part("train_sorting_transformer", CHAPTER, adapt=_predictions_on, extra=_expect_accurate_in_time,
               advise=expect_backward_passes, on_devices=False, meta=False, compare_with_reference=False,
               depends_on={"TransformerEncoderBlock": FallbackEncoderBlock,
                           "MultiHeadAttention": FallbackMultiHeadAttention})


@checks(SORTING)
def check_train_sorting_transformer(fn, hidden: bool = False) -> None:
    """Train once (``seed=1``; the hidden case, a seed of its own) within the time limit; test the model on
    sequences drawn at check time, sorted in the order of that seed (``sorting_order(seed)``)."""


PARTS = {part.name: part for part in (BLOCK, CHUNKED, SORTING)}
#: The parts with a time limit of their own, in seconds of the kernel's CPU time (the class report shows
#: how close each submission came): {part: limit}.
TIME_LIMITS = {SORTING.name: TRAINING_SECONDS}
