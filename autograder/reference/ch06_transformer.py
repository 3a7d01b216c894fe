"""Reference answers and cases of assignment 06_transformer (grading side only).

Contract section 06: the post-norm Transformer encoder block, chunked attention with an
online softmax, and a small Transformer that learns to sort digits on a CPU. The book's
chapter 6 demonstrates with these functions.
"""

from __future__ import annotations

import math
import random
from typing import Callable

import torch
from torch import nn

from ..ch06_transformer import (
    SEQUENCE_LENGTH,
    VOCABULARY,
    block_state,
    make_sorting_batch,
    per_token_accuracy,
    sorting_order,
)
from ..parts import Call, derived_seeds
from .ch03_masking import causal_mask
from .ch04_multihead import MultiHeadAttention

# --------------------------------------------------------------------------------------
# The encoder block
# --------------------------------------------------------------------------------------


class TransformerEncoderBlock(nn.Module):
    """Post-norm encoder block (book, chapter 6): ``norm1(X + attention)``, then ``norm2(Y + ffn(Y))``.

    ``forward(X (batch, n, num_hiddens), valid_lens (batch,) or None) -> (batch, n, num_hiddens)``;
    keys at positions ``≥ valid_lens[b]`` are masked. Layers: ``attention`` (chapter 4's
    ``MultiHeadAttention``), ``norm1``, ``ffn`` (``Linear, ReLU, Linear``), ``norm2``.
    """

    def __init__(self, num_hiddens: int, ffn_num_hiddens: int, num_heads: int, dropout: float, use_bias: bool = False):
        super().__init__()
        self.attention = MultiHeadAttention(num_hiddens, num_heads, dropout, bias=use_bias)
        self.norm1 = nn.LayerNorm(num_hiddens)
        self.ffn = nn.Sequential(nn.Linear(num_hiddens, ffn_num_hiddens), nn.ReLU(),
                                 nn.Linear(ffn_num_hiddens, num_hiddens))
        self.norm2 = nn.LayerNorm(num_hiddens)
        self.dropout = nn.Dropout(dropout)

    def forward(self, X: torch.Tensor, valid_lens: torch.Tensor | None = None) -> torch.Tensor:
        mask = None
        if valid_lens is not None:
            # (n,) against (batch, 1, 1, 1) -> (batch, 1, 1, n): the same keys for every head and query
            mask = torch.arange(X.shape[1], device=X.device) < valid_lens[:, None, None, None]
        Y = self.norm1(X + self.dropout(self.attention(X, X, X, mask)))  # add, then normalise
        return self.norm2(Y + self.dropout(self.ffn(Y)))


# --------------------------------------------------------------------------------------
# Chunked attention with an online softmax
# --------------------------------------------------------------------------------------


def chunked_attention(queries, keys, values, chunk_size: int, mask=None):
    """Exact scaled dot-product attention, reading the keys ``chunk_size`` at a time (book, chapter 6).

    A running maximum ``m`` and a running sum ``l`` of ``exp(score - m)`` per query are
    rescaled by ``exp(m_old - m_new)`` whenever a chunk raises the maximum, so the full
    ``(q, k)`` score matrix never exists: the largest intermediate is one ``(..., q, chunk_size)``
    block, worked on in place.

    Args:
        queries: ``(..., q, d)``; keys: ``(..., k, d)``; values: ``(..., k, v)``.
        chunk_size: keys per chunk, ``≥ 1``.
        mask: bool broadcastable to ``(..., q, k)`` (``True`` = may attend), or ``None``.

    Returns:
        ``(..., q, v)`` in the dtype of ``queries``; a query with no allowed key gets zeros.
        float16 and bfloat16 inputs are accumulated in float32.
    """
    if not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
    if keys.shape[-1] != queries.shape[-1] or values.shape[-2] != keys.shape[-2]:
        raise ValueError(f"keys must be (..., k, d) and values (..., k, v): got keys {tuple(keys.shape)}, "
                         f"values {tuple(values.shape)} for queries {tuple(queries.shape)}")
    work = torch.float32 if queries.dtype in (torch.float16, torch.bfloat16) else queries.dtype
    q = queries.to(work) / math.sqrt(queries.shape[-1])  # (..., q, d), scaled once
    rows = q.shape[:-1] + (1,)  # (..., q, 1)
    running_max = q.new_full(rows, float("-inf"))
    running_sum = q.new_zeros(rows)
    output = None
    for start in range(0, keys.shape[-2], chunk_size):
        chunk = slice(start, start + chunk_size)
        scores = q @ keys[..., chunk, :].to(work).transpose(-2, -1)  # (..., q, c)
        if mask is not None:
            scores.masked_fill_(~mask[..., chunk], float("-inf"))
        # the shift cancels in the softmax, so it needs no gradient (and the block can be reused in place)
        new_max = torch.maximum(running_max, scores.detach().amax(dim=-1, keepdim=True))
        finite_max = torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max)  # no key allowed yet
        # in place: one (..., q, c) block alive at a time; masked keys get exactly 0
        weights = scores.sub_(finite_max).exp_()
        rescale = torch.exp(running_max - finite_max)  # shrinks what was summed under the old maximum
        running_sum = running_sum * rescale + weights.sum(dim=-1, keepdim=True)
        chunk_output = weights @ values[..., chunk, :].to(work)  # (..., q, v)
        output = chunk_output if output is None else output * rescale + chunk_output
        running_max = new_max
        del scores, weights  # free this block before the next one is made
    if output is None:  # no keys at all
        return queries.new_zeros(*queries.shape[:-1], values.shape[-1])
    safe_sum = torch.where(running_sum > 0, running_sum, torch.ones_like(running_sum))
    return (output / safe_sum).to(queries.dtype)


# --------------------------------------------------------------------------------------
# A Transformer that learns to sort
# --------------------------------------------------------------------------------------


class SortingTransformer(nn.Module):
    """Digits ``(batch, n)`` -> logits ``(batch, n, 10)``: token and position embeddings, encoder
    blocks, a linear read-out; position ``i`` predicts the ``i``-th smallest digit."""

    def __init__(self, num_hiddens: int = 64, num_heads: int = 4, num_blocks: int = 2, ffn_num_hiddens: int = 128):
        super().__init__()
        self.tokens = nn.Embedding(VOCABULARY, num_hiddens)
        self.positions = nn.Embedding(SEQUENCE_LENGTH, num_hiddens)
        self.blocks = nn.ModuleList(TransformerEncoderBlock(num_hiddens, ffn_num_hiddens, num_heads, 0.0)
                                    for _ in range(num_blocks))
        self.readout = nn.Linear(num_hiddens, VOCABULARY)

    def forward(self, digits: torch.Tensor) -> torch.Tensor:
        # (batch, n, d) + (n, d): what each token is, and where it is
        X = self.tokens(digits) + self.positions(torch.arange(digits.shape[1], device=digits.device))
        for block in self.blocks:
            X = block(X)
        return self.readout(X)  # (batch, n, 10)


def train_sorting_transformer(seed: int = 0, steps: int = 400, batch_size: int = 128, log=None, order=None):
    """Train :class:`SortingTransformer` with Adam on freshly drawn batches (book, chapter 6).

    Args:
        log: called as ``log(step, loss)`` every 50 steps (a progress bar, a list), or ``None``.
        order: the order to sort by, ``(VOCABULARY,)``; ``None``: the task of ``seed``
            (``sorting_order(seed)``, as the exercise's contract asks).

    Returns:
        ``(model, accuracy)``: the model in evaluation mode, and its per-token accuracy on
        2000 held-out sequences drawn from another generator.
    """
    order = sorting_order(seed) if order is None else order
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    model = SortingTransformer()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-3, total_steps=steps, pct_start=0.2)
    for step in range(steps):
        digits, targets = make_sorting_batch(batch_size, generator, order)
        logits = model(digits)  # (batch, n, 10)
        loss = nn.functional.cross_entropy(logits.reshape(-1, VOCABULARY), targets.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        if log is not None and step % 50 == 0:
            log(step, loss.item())
    model.eval()
    held_out = make_sorting_batch(2000, torch.Generator().manual_seed(seed + 10_000), order)
    return model, per_token_accuracy(model, *held_out)


REFERENCES = {
    "TransformerEncoderBlock": TransformerEncoderBlock,
    "chunked_attention": chunked_attention,
    "train_sorting_transformer": train_sorting_transformer,
}

# --------------------------------------------------------------------------------------
# Known mistakes: the judge names the one a wrong answer's values match (judge.py)
# --------------------------------------------------------------------------------------


def _key_mask(X: torch.Tensor, valid_lens: torch.Tensor | None) -> torch.Tensor | None:
    """Bool ``(batch, 1, 1, n)``, as the reference block's: ``True`` where the key is within its valid length."""
    return None if valid_lens is None else torch.arange(X.shape[1], device=X.device) < valid_lens[:, None, None, None]


class _NormBeforeResidual(TransformerEncoderBlock):
    """``X + norm(sublayer(X))``: each sublayer's output normalised, then added to its input."""

    def forward(self, X, valid_lens=None):
        Y = X + self.norm1(self.attention(X, X, X, _key_mask(X, valid_lens)))
        return Y + self.norm2(self.ffn(Y))


class _PreNormBlock(TransformerEncoderBlock):
    """``X + sublayer(norm(X))``: the pre-norm block."""

    def forward(self, X, valid_lens=None):
        normed = self.norm1(X)
        Y = X + self.attention(normed, normed, normed, _key_mask(X, valid_lens))
        return Y + self.ffn(self.norm2(Y))


class _PaddingAttended(TransformerEncoderBlock):
    """``valid_lens`` unused: every key attended to, padding included."""

    def forward(self, X, valid_lens=None):
        return super().forward(X, None)


class _NoFeedForwardResidual(TransformerEncoderBlock):
    """``norm2(ffn(Y))``: no residual around the feed-forward network."""

    def forward(self, X, valid_lens=None):
        Y = self.norm1(X + self.attention(X, X, X, _key_mask(X, valid_lens)))
        return self.norm2(self.ffn(Y))


class _AttentionOutputDropped(TransformerEncoderBlock):
    """``norm1(X + X)``: the attention's output left out of the first residual."""

    def forward(self, X, valid_lens=None):
        Y = self.norm1(X + X)
        return self.norm2(Y + self.ffn(Y))


def _chunks_not_rescaled(queries, keys, values, chunk_size, mask=None):
    """Running sum and output never multiplied by ``exp(m_old − m_new)`` when the maximum grows."""
    work = torch.float32 if queries.dtype in (torch.float16, torch.bfloat16) else queries.dtype
    q = queries.to(work) / math.sqrt(queries.shape[-1])
    running_max = q.new_full(q.shape[:-1] + (1,), float("-inf"))
    total, output = q.new_zeros(q.shape[:-1] + (1,)), q.new_zeros(*q.shape[:-1], values.shape[-1])
    for start in range(0, keys.shape[-2], chunk_size):
        chunk = slice(start, start + chunk_size)
        scores = q @ keys[..., chunk, :].to(work).transpose(-2, -1)
        if mask is not None:
            scores = scores.masked_fill(~mask[..., chunk], float("-inf"))
        running_max = torch.maximum(running_max, scores.amax(dim=-1, keepdim=True))
        weights = (scores - running_max.nan_to_num(0.0, neginf=0.0)).exp()  # under this chunk's maximum only
        total, output = total + weights.sum(dim=-1, keepdim=True), output + weights @ values[..., chunk, :].to(work)
    return (output / torch.where(total > 0, total, torch.ones_like(total))).to(queries.dtype)


def _last_partial_chunk_dropped(queries, keys, values, chunk_size, mask=None):
    """Only whole chunks read: the keys past ``k // chunk_size · chunk_size`` left out."""
    stop = keys.shape[-2] // chunk_size * chunk_size
    return chunked_attention(queries, keys[..., :stop, :], values[..., :stop, :], chunk_size,
                             None if mask is None else mask[..., :stop])


#: ``{part: ((what the student did, in their words), the function that does it), ...}``: the one whose values a
#: wrong answer's match is named in its message (of several, the one matching it on most cases; then the first).
MISTAKES = {
    "TransformerEncoderBlock": (
        ("each sublayer's output normalised before the residual is added (X + norm(sublayer(X)))",
         _NormBeforeResidual),
        ("a pre-norm block (X + sublayer(norm(X))) instead of the post-norm norm(X + sublayer(X))", _PreNormBlock),
        ("valid_lens ignored: padding keys attended to", _PaddingAttended),
        ("no residual around the feed-forward network (norm2(ffn(Y)) instead of norm2(Y + ffn(Y)))",
         _NoFeedForwardResidual),
        ("the attention's output not added: X added to itself in the first residual", _AttentionOutputDropped),
    ),
    "chunked_attention": (
        ("running sum and output not rescaled by exp(m_old − m_new) when the maximum grows", _chunks_not_rescaled),
        ("the last partial chunk of keys dropped (only k // chunk_size whole chunks read)",
         _last_partial_chunk_dropped),
    ),
}

# --------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------


def _block_calls(seeds) -> list[Call]:
    """1 to 4 heads, with and without bias; valid lengths None, full, partial and 0."""
    calls = []
    for index, seed in enumerate(seeds):
        rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
        heads = (1, 2, 4)[index % 3]
        num_hiddens, ffn = heads * rng.randint(2, 4), rng.randint(4, 16)
        batch, n = rng.randint(2, 3), rng.randint(2, 6)
        use_bias = index % 2 == 1
        X = torch.randn(batch, n, num_hiddens, generator=g)
        lengths = torch.randint(1, n + 1, (batch,), generator=g)
        lengths[0], lengths[-1] = n, 0  # one full sequence, one with no valid key
        state = block_state(g, num_hiddens, ffn, use_bias)
        for valid_lens in (None, lengths):
            described = (f"num_hiddens={num_hiddens}, ffn_num_hiddens={ffn}, num_heads={heads}, use_bias={use_bias}, "
                         f"X {tuple(X.shape)}, valid_lens {None if valid_lens is None else valid_lens.tolist()}")
            calls.append(Call(described, (X, valid_lens, ffn, heads, use_bias, state)))
    return calls


def _chunked_calls(seeds) -> list[Call]:
    """Chunk sizes that do not divide k, equal it, exceed it; masks with empty rows; large scores."""
    calls = []
    for index, seed in enumerate(seeds):
        rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
        batch = tuple(rng.randint(1, 3) for _ in range(index % 3))
        q, k, d, v = rng.randint(1, 6), rng.randint(5, 13), rng.randint(1, 8), rng.randint(1, 4)
        queries, keys, values = (torch.randn(*batch, n, w, generator=g) for n, w in ((q, d), (k, d), (k, v)))
        empty = torch.rand(*batch, q, k, generator=g) < 0.5
        empty[..., 0, :] = False  # the first query may attend to nothing
        masks = {"None": None, "causal (q, k)": causal_mask(q, k), "random with an empty row": empty}
        for chunk in (3, k, k + 4):
            for name, mask in masks.items():
                calls.append(Call(f"queries {tuple(queries.shape)}, keys {tuple(keys.shape)}, values "
                                  f"{tuple(values.shape)}, chunk_size={chunk}, mask {name}",
                                  (queries, keys, values, chunk), {"mask": mask}))
        big = 40.0  # scores in the thousands: exp overflows unless the maximum is subtracted
        calls.append(Call(f"queries and keys scaled by {big:g} (scores in the thousands), chunk_size=4",
                          (queries * big, keys * big, values, 4), {"mask": None}))
        for dtype in (torch.float16, torch.bfloat16):
            calls.append(Call(f"queries {tuple(queries.shape)}, keys {tuple(keys.shape)} in {dtype}, chunk_size=4, "
                              "mask causal", (queries.to(dtype), keys.to(dtype), values.to(dtype), 4),
                              {"mask": causal_mask(q, k)}))
    return calls


def _sorting_calls(seeds, training_seed: int = 1) -> list[Call]:
    """Training with ``training_seed``, then the model's predictions on 2000 sequences drawn here, with each of
    ``seeds``."""
    return [Call(f"train_sorting_transformer(seed={training_seed}), tested on 2000 fresh sequences drawn with "
                 f"seed {s}, sorted in the order of seed {training_seed}", (training_seed, make_sorting_batch(2000, torch.Generator().manual_seed(s))[0]))
            for s in seeds]


def hidden_training_calls(calls: Callable[..., list[Call]], seed: int) -> list[Call]:
    """A training part's hidden case: its test data and its training seed both drawn from the student's ``seed``
    at judging time, so that the training cannot be done before the call that the limit times."""
    test_seed, training_seed = derived_seeds(seed, 2)
    return calls([test_seed], training_seed)


VISIBLE = {
    "TransformerEncoderBlock": lambda: _block_calls([0, 1]),
    "chunked_attention": lambda: _chunked_calls([0, 1]),
    "train_sorting_transformer": lambda: _sorting_calls([7]),
}
HIDDEN = {
    "TransformerEncoderBlock": lambda seed: _block_calls(derived_seeds(seed)),
    "chunked_attention": lambda seed: _chunked_calls(derived_seeds(seed)),
    "train_sorting_transformer": lambda seed: hidden_training_calls(_sorting_calls, seed),
}
