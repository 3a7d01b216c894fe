"""Reference answers and cases of assignment 04_multihead (grading side only).

Contract section 04: self-attention with learned projections, the graph mask, splitting
and merging heads, the multi-head attention module and its parameter count. The book's
chapter 4 demonstrates with these functions.
"""

from __future__ import annotations

import math
import random

import torch
from torch import nn

from ..parts import Call, derived_seeds
from .ch03_masking import causal_mask, masked_attention, window_mask

# --------------------------------------------------------------------------------------
# Reference implementations
# --------------------------------------------------------------------------------------


def self_attention(X, W_q, W_k, W_v, mask=None):
    """Self-attention: queries, keys and values are projections of one sequence (book, chapter 4).

    Args:
        X: ``(..., n, d)`` the sequence.
        W_q, W_k: ``(d, d_k)``; W_v: ``(d, d_v)``.
        mask: bool, broadcastable to ``(..., n, n)`` (``True`` = may attend), or ``None``.

    Returns:
        ``(output, weights)``: ``(..., n, d_v)`` and ``(..., n, n)``; a query with no allowed
        key gets zeros.
    """
    if X.dim() < 2:
        raise ValueError(f"X must be (..., n, d), got shape {tuple(X.shape)}")
    d = X.shape[-1]
    for name, W in (("W_q", W_q), ("W_k", W_k), ("W_v", W_v)):
        if W.dim() != 2 or W.shape[0] != d:
            raise ValueError(f"{name} must be (d, ·) with d = {d}, got shape {tuple(W.shape)}")
    if W_k.shape[1] != W_q.shape[1]:
        raise ValueError(f"W_k must have the width of W_q ({W_q.shape[1]}), got {W_k.shape[1]}")
    # (..., n, d) @ (d, d_k or d_v): one projection of the same tokens per role
    return masked_attention(X @ W_q, X @ W_k, X @ W_v, mask)


def graph_attention_mask(adjacency: torch.Tensor, self_loops: bool = True) -> torch.Tensor:
    """Bool ``(n, n)`` mask of self-attention on a graph: node ``i`` attends to node ``j``
    where ``adjacency[i, j]`` is nonzero (an edge ``i → j``), and to itself when ``self_loops``.

    Args:
        adjacency: ``(n, n)``, any dtype.
    """
    if adjacency.dim() != 2 or adjacency.shape[0] != adjacency.shape[1]:
        raise ValueError(f"adjacency must be square (n, n), got shape {tuple(adjacency.shape)}")
    mask = adjacency != 0
    if self_loops:
        mask = mask | torch.eye(adjacency.shape[0], dtype=torch.bool, device=adjacency.device)
    return mask


def split_heads(X: torch.Tensor, num_heads: int) -> torch.Tensor:
    """``(batch, n, heads·d)`` -> ``(batch, heads, n, d)``: head ``i`` gets features ``i·d … (i+1)·d - 1``."""
    if X.dim() != 3:
        raise ValueError(f"X must be (batch, n, heads·d), got shape {tuple(X.shape)}")
    if num_heads < 1 or X.shape[-1] % num_heads:
        raise ValueError(f"num_heads must divide the width {X.shape[-1]}, got {num_heads}")
    batch, n, width = X.shape
    # (batch, n, heads·d) -> (batch, n, heads, d): the last axis cut into contiguous blocks
    X = X.reshape(batch, n, num_heads, width // num_heads)
    return X.transpose(1, 2)  # (batch, heads, n, d): heads become a batch axis


def merge_heads(X: torch.Tensor) -> torch.Tensor:
    """``(batch, heads, n, d)`` -> ``(batch, n, heads·d)``, the exact inverse of :func:`split_heads`."""
    if X.dim() != 4:
        raise ValueError(f"X must be (batch, heads, n, d), got shape {tuple(X.shape)}")
    batch, heads, n, d = X.shape
    # (batch, heads, n, d) -> (batch, n, heads, d) -> (batch, n, heads·d): head blocks side by side again
    return X.transpose(1, 2).reshape(batch, n, heads * d)


class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention with narrow heads (book, chapter 4).

    ``forward(queries (batch, q, num_hiddens), keys (batch, k, num_hiddens), values
    (batch, k, num_hiddens), mask=None) -> (batch, q, num_hiddens)``; ``mask`` is bool,
    broadcastable to ``(batch, heads, q, k)``. The weights of the last call are kept in
    ``.attention_weights`` ``(batch, heads, q, k)``, before dropout.
    """

    def __init__(self, num_hiddens: int, num_heads: int, dropout: float = 0.0, bias: bool = False):
        super().__init__()
        if num_heads < 1 or num_hiddens % num_heads:
            raise ValueError(f"num_heads must divide num_hiddens = {num_hiddens}, got {num_heads}")
        self.num_heads = num_heads
        self.W_q = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.W_k = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.W_v = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.W_o = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.attention_weights = None

    def forward(self, queries, keys, values, mask=None):
        # (batch, n, num_hiddens) -> (batch, heads, n, num_hiddens / heads)
        q, k, v = (split_heads(W(x), self.num_heads) for W, x in ((self.W_q, queries), (self.W_k, keys),
                                                                  (self.W_v, values)))
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (batch, heads, q, k)
        if mask is not None:
            has_key = mask.expand_as(scores).any(dim=-1, keepdim=True)  # (batch, heads, q, 1)
            scores = scores.masked_fill(~mask, float("-inf")).masked_fill(~has_key, 0.0)
        weights = torch.softmax(scores, dim=-1)
        if mask is not None:
            weights = weights * mask  # a query with no allowed key: zeros, not uniform
        self.attention_weights = weights
        heads = self.dropout(weights) @ v  # (batch, heads, q, d)
        return self.W_o(merge_heads(heads))  # (batch, q, num_hiddens)


def mha_parameter_count(num_hiddens: int, num_heads: int, head_dim: int | None = None, bias: bool = False) -> int:
    """Trainable parameters of multi-head attention with heads of width ``head_dim``.

    ``W_q, W_k, W_v`` map ``num_hiddens -> num_heads·head_dim`` and ``W_o`` maps back; the
    default ``head_dim = num_hiddens / num_heads`` is the narrow design, ``num_hiddens``
    the wide one.
    """
    if head_dim is None:
        if num_hiddens % num_heads:
            raise ValueError(f"num_heads must divide num_hiddens = {num_hiddens}, got {num_heads}")
        head_dim = num_hiddens // num_heads
    inner = num_heads * head_dim
    projections_in = 3 * (num_hiddens * inner + (inner if bias else 0))
    projection_out = inner * num_hiddens + (num_hiddens if bias else 0)
    return projections_in + projection_out


REFERENCES = {
    "self_attention": self_attention,
    "graph_attention_mask": graph_attention_mask,
    "split_heads": split_heads,
    "merge_heads": merge_heads,
    "MultiHeadAttention": MultiHeadAttention,
    "mha_parameter_count": mha_parameter_count,
}

# --------------------------------------------------------------------------------------
# Known mistakes: the judge names the one a wrong answer's values match (judge.py)
# --------------------------------------------------------------------------------------


def _self_attention_scaled_by_token_width(X, W_q, W_k, W_v, mask=None):
    """Scores divided by √d of the tokens ``X``, not of the keys ``XW_k``."""
    Q = X @ W_q
    return masked_attention(Q * math.sqrt(Q.shape[-1] / X.shape[-1]), X @ W_k, X @ W_v, mask)


def _self_attention_softmax_over_queries(X, W_q, W_k, W_v, mask=None):
    """The softmax normalises each key's column over the queries, not each query's row over the keys."""
    Q, K, V = X @ W_q, X @ W_k, X @ W_v
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-2).nan_to_num(0.0)
    return weights @ V, weights


def _graph_mask_transposed(adjacency, self_loops=True):
    """``mask[j, i]`` for an edge ``i → j``: the mask transposed."""
    return graph_attention_mask(adjacency, self_loops).T


def _graph_mask_without_self_loops(adjacency, self_loops=True):
    """The diagonal left out even when ``self_loops`` is ``True``."""
    return graph_attention_mask(adjacency, self_loops=False)


def _split_interleaved(X, num_heads):
    """Head ``i`` takes features ``i, i + h, i + 2h, …`` instead of a contiguous block."""
    batch, n, width = X.shape
    return X.reshape(batch, n, width // num_heads, num_heads).permute(0, 3, 1, 2)


def _split_without_transpose(X, num_heads):
    """``(batch, n, heads·d)`` reshaped straight to ``(batch, heads, n, d)``: tokens and features mixed."""
    batch, n, width = X.shape
    return X.reshape(batch, num_heads, n, width // num_heads)


def _merge_without_transpose(X):
    """``(batch, heads, n, d)`` reshaped straight to ``(batch, n, heads·d)``: tokens and heads mixed."""
    batch, heads, n, d = X.shape
    return X.reshape(batch, n, heads * d)


class _MistakenMultiHeadAttention(MultiHeadAttention):
    """The reference module, for mistakes that change one step of its ``forward``."""

    def heads(self, queries, keys, values, mask=None, scale=1.0):
        """``(batch, heads, q, d)`` of the heads, before merging; their weights kept as the reference keeps them."""
        q, k, v = (split_heads(W(x), self.num_heads) for W, x in ((self.W_q, queries), (self.W_k, keys),
                                                                  (self.W_v, values)))
        output, self.attention_weights = masked_attention(q * scale, k, v, mask)
        return output


class _MHAWithoutOutputProjection(_MistakenMultiHeadAttention):
    """The merged heads returned without the output projection ``W_o``."""

    def forward(self, queries, keys, values, mask=None):
        return merge_heads(self.heads(queries, keys, values, mask))


class _MHAMergedWithoutTranspose(_MistakenMultiHeadAttention):
    """The heads ``(batch, heads, q, d)`` reshaped straight to ``(batch, q, heads·d)``, then ``W_o``."""

    def forward(self, queries, keys, values, mask=None):
        heads = self.heads(queries, keys, values, mask)
        return self.W_o(heads.reshape(heads.shape[0], heads.shape[2], -1))


class _MHAOneMaskForAll(_MistakenMultiHeadAttention):
    """The mask's first ``(q, k)`` matrix (first sequence, first head) used for every sequence and head."""

    def forward(self, queries, keys, values, mask=None):
        mask = None if mask is None else mask.reshape(-1, *mask.shape[-2:])[:1]
        return self.W_o(merge_heads(self.heads(queries, keys, values, mask)))


class _MHAScaledByFullWidth(_MistakenMultiHeadAttention):
    """Scores divided by √num_hiddens instead of √(head width)."""

    def forward(self, queries, keys, values, mask=None):
        scale = math.sqrt(queries.shape[-1] // self.num_heads / queries.shape[-1])
        return self.W_o(merge_heads(self.heads(queries, keys, values, mask, scale)))


def _count_without_output_projection(num_hiddens, num_heads, head_dim=None, bias=False):
    """Only ``W_q``, ``W_k`` and ``W_v`` counted: ``W_o`` forgotten."""
    inner = num_heads * (num_hiddens // num_heads if head_dim is None else head_dim)
    return 3 * (num_hiddens * inner + (inner if bias else 0))


def _count_head_dim_ignored(num_hiddens, num_heads, head_dim=None, bias=False):
    """Every design counted as narrow heads: ``head_dim`` ignored."""
    return mha_parameter_count(num_hiddens, num_heads, None, bias)


def _count_without_biases(num_hiddens, num_heads, head_dim=None, bias=False):
    """The biases left out of the count."""
    return mha_parameter_count(num_hiddens, num_heads, head_dim, False)


#: ``{part: ((what the student did, in their words), the function that does it), ...}``: the one whose values a
#: wrong answer's match is named in its message (of several, the one matching it on most cases; then the first).
MISTAKES = {
    "self_attention": (
        ("scores scaled by 1/√d of the tokens' width instead of the keys' width", _self_attention_scaled_by_token_width),
        ("softmax over the queries' axis instead of the keys'", _self_attention_softmax_over_queries),
    ),
    "graph_attention_mask": (
        ("edges read the wrong way: the mask transposed (j → i instead of i → j)", _graph_mask_transposed),
        ("self-loops left out even when self_loops=True", _graph_mask_without_self_loops),
    ),
    "split_heads": (
        ("heads take interleaved features (i, i + h, …) instead of contiguous blocks", _split_interleaved),
        ("reshaped straight to (batch, heads, n, d) without the transpose", _split_without_transpose),
    ),
    "merge_heads": (
        ("heads merged without moving the head axis back (reshape without the transpose)", _merge_without_transpose),
    ),
    "MultiHeadAttention": (
        ("the output projection W_o left out", _MHAWithoutOutputProjection),
        ("heads merged without moving the head axis back (reshape without the transpose)", _MHAMergedWithoutTranspose),
        ("the mask not broadcast: the first sequence's first (q, k) mask used for every sequence and head",
         _MHAOneMaskForAll),
        ("scores scaled by 1/√num_hiddens instead of 1/√(head width)", _MHAScaledByFullWidth),
    ),
    "mha_parameter_count": (
        ("the output projection W_o left out of the count", _count_without_output_projection),
        ("head_dim ignored: wide heads counted as narrow ones", _count_head_dim_ignored),
        ("the biases left out of the count", _count_without_biases),
    ),
}

# --------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------


def _self_attention_calls(seeds) -> list[Call]:
    """Sequences with 0 to 2 batch dimensions, value widths unlike key widths, several masks.

    The first seed's keys are not as wide as the tokens: where they are, scaling by the tokens'
    width gives the right scores, so every student's cases must hold keys of another width.
    """
    calls = []
    for index, seed in enumerate(seeds):
        rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
        batch = tuple(rng.randint(1, 3) for _ in range(rng.randint(0, 2)))
        n, d, d_k, d_v = rng.randint(2, 7), rng.randint(2, 8), rng.randint(1, 6), rng.randint(1, 5)
        d_k = d - 1 if index == 0 and d_k == d else d_k  # the draws that follow stay those of the seed
        X = torch.randn(*batch, n, d, generator=g)
        W_q, W_k, W_v = (torch.randn(d, w, generator=g) / math.sqrt(d) for w in (d_k, d_k, d_v))
        empty_row = torch.rand(n, n, generator=g) < 0.5
        empty_row[0] = False  # the first token may attend to nothing
        for name, mask in {"None": None, "causal (n, n)": causal_mask(n, n), "random with an empty row": empty_row,
                           "window radius 1": window_mask(n, n, 1)}.items():
            described = (f"X {tuple(X.shape)}, W_q and W_k {tuple(W_q.shape)}, W_v {tuple(W_v.shape)}, mask {name}")
            calls.append(Call(described, (X, W_q, W_k, W_v), {"mask": mask}))
    return calls


def _graph_calls(seeds) -> list[Call]:
    """Directed graphs in float, int and bool; an isolated node; with and without self-loops."""
    calls = []
    for seed, dtype in zip(seeds, (torch.float32, torch.int64, torch.bool), strict=False):  # the first three seeds
        rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
        n = rng.randint(3, 8)
        adjacency = (torch.rand(n, n, generator=g) < 0.35).to(dtype)
        adjacency[-1] = 0  # a node with no outgoing edge
        adjacency[:, -1] = 0
        if dtype == torch.float32:
            adjacency = adjacency * torch.rand(n, n, generator=g)  # weighted edges: nonzero means an edge
        for loops in (True, False):
            calls.append(Call(f"adjacency ({n}, {n}) of {dtype}, self_loops={loops}", (adjacency,),
                              {"self_loops": loops}))
    return calls


def _graph_visible() -> list[Call]:
    path = torch.tensor([[0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1], [0, 0, 0, 0]])  # a directed path 0 → 1 → 2 → 3
    return [Call("adjacency of the directed path 0 → 1 → 2 → 3", (path,)),
            Call("the same path, self_loops=False", (path,), {"self_loops": False})] + _graph_calls([0, 1, 2])


def _numbered(batch: int, n: int, width: int) -> torch.Tensor:
    """``(batch, n, width)`` holding 0, 1, 2, …: every element can be followed through a reshape."""
    return torch.arange(batch * n * width, dtype=torch.float32).reshape(batch, n, width)


def _split_calls(shapes) -> list[Call]:
    return [Call(f"X = arange({b * n * h * d}).reshape({b}, {n}, {h * d}), num_heads={h}", (_numbered(b, n, h * d), h))
            for b, n, h, d in shapes]


def _merge_calls(shapes) -> list[Call]:
    return [Call(f"X = arange({b * h * n * d}).reshape({b}, {h}, {n}, {d})",
                 (torch.arange(b * h * n * d, dtype=torch.float32).reshape(b, h, n, d),)) for b, n, h, d in shapes]


def _head_shapes(seed: int | None) -> list[tuple[int, int, int, int]]:
    """``(batch, n, heads, head width)``; one head, and heads of width 1, always among them.

    Where there are several heads there are several tokens too: a split or merge by reshape
    without the transpose (tokens and heads swapped) is right only when one of them is 1, so
    every student's shapes defeat it.
    """
    if seed is None:
        return [(1, 2, 2, 3), (2, 3, 4, 2), (1, 4, 1, 5), (2, 2, 3, 1)]
    rng = random.Random(seed)
    return [(rng.randint(1, 3), max(rng.randint(1, 5), 2), rng.randint(2, 6), rng.randint(2, 4)),
            (rng.randint(1, 3), rng.randint(1, 5), 1, rng.randint(1, 6)),
            (rng.randint(1, 3), max(rng.randint(1, 5), 2), rng.randint(2, 6), 1)]


def _module_calls(seeds) -> list[Call]:
    """Self- and cross-attention, 1 to 4 heads, masks of every broadcast shape, with and without bias.

    With several heads there are always several queries: heads merged back without the
    transpose (``(batch, heads, q, d)`` reshaped straight to ``(batch, q, heads·d)``) are right
    only for one head or one query, so every student's cases defeat them.
    """
    calls = []
    for index, seed in enumerate(seeds):
        rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
        heads = (1, 2, 4)[index % 3]
        num_hiddens = heads * rng.randint(1, 4)
        batch, q, k = rng.randint(1, 3), rng.randint(1, 5), rng.randint(2, 6)
        q = q if heads == 1 else max(q, 2)  # the draws that follow stay those of the seed
        bias = index % 2 == 1
        queries, keys, values = (torch.randn(batch, n, num_hiddens, generator=g) for n in (q, k, k))
        weights = {name: torch.randn(num_hiddens, num_hiddens, generator=g) / math.sqrt(num_hiddens)
                   for name in ("W_q", "W_k", "W_v", "W_o")}
        if bias:
            weights |= {f"b_{name[2]}": torch.randn(num_hiddens, generator=g) * 0.1 for name in ("W_q", "W_k", "W_v", "W_o")}
        lengths = torch.randint(1, k + 1, (batch,), generator=g)
        lengths[0] = 0  # a sequence with no key: its queries get zeros
        per_head = torch.rand(batch, heads, q, k, generator=g) < 0.6
        masks = {"None": None, "causal (q, k)": causal_mask(q, k),
                 # (k,) against (batch, 1, 1, 1) -> (batch, 1, 1, k): one row of keys per sequence
                 "padding (batch, 1, 1, k) with a length 0": torch.arange(k) < lengths[:, None, None, None],
                 "one per head (batch, heads, q, k)": per_head}
        for name, mask in masks.items():
            described = (f"num_hiddens={num_hiddens}, num_heads={heads}, bias={bias}, queries ({batch}, {q}, "
                         f"{num_hiddens}), keys and values ({batch}, {k}, {num_hiddens}), mask {name}")
            calls.append(Call(described, (queries, keys, values, mask, heads, bias, weights)))
    return calls


def _count_calls(seed: int | None) -> list[Call]:
    if seed is None:
        sizes = [(8, 2), (64, 8), (12, 3)]
    else:
        rng = random.Random(seed)
        sizes = [(h * rng.randint(1, 16), h) for h in (rng.randint(1, 4), rng.randint(5, 12))]
    calls = []
    for num_hiddens, heads in sizes:
        for head_dim in (None, num_hiddens, 3):
            for bias in (False, True):
                calls.append(Call(f"num_hiddens={num_hiddens}, num_heads={heads}, head_dim={head_dim}, bias={bias}",
                                  (num_hiddens, heads), {"head_dim": head_dim, "bias": bias}))
    return calls


VISIBLE = {
    "self_attention": lambda: _self_attention_calls([0, 1]),
    "graph_attention_mask": _graph_visible,
    "split_heads": lambda: _split_calls(_head_shapes(None)),
    "merge_heads": lambda: _merge_calls(_head_shapes(None)),
    "MultiHeadAttention": lambda: _module_calls([0, 1, 2]),
    "mha_parameter_count": lambda: _count_calls(None),
}
HIDDEN = {
    "self_attention": lambda seed: _self_attention_calls(derived_seeds(seed, 2)),
    "graph_attention_mask": lambda seed: _graph_calls(derived_seeds(seed)),
    "split_heads": lambda seed: _split_calls(_head_shapes(seed)),
    "merge_heads": lambda seed: _merge_calls(_head_shapes(seed)),
    "MultiHeadAttention": lambda seed: _module_calls(derived_seeds(seed, 3)),
    "mha_parameter_count": _count_calls,
}
