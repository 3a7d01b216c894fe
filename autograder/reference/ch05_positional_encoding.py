"""Reference answers and cases of assignment 05_positional_encoding (grading side only).

Contract section 05: the sinusoidal table, the module that adds it, the offset matrix
that moves an encoding by a fixed number of positions, rotary position embedding (and
attention with it) and learned position embeddings. The book's chapter 5 demonstrates
with these functions.
"""

from __future__ import annotations

import math
import random

import torch
from torch import nn

from ..parts import Call, derived_seeds
from .ch03_masking import masked_attention

BASE = 10000.0

# --------------------------------------------------------------------------------------
# Reference implementations
# --------------------------------------------------------------------------------------


def _frequencies(num_hiddens: int, dtype=torch.float64, device=None) -> torch.Tensor:
    """``(num_hiddens / 2,)``: the angle per position of pair ``i``, ``1 / 10000^(2i/d)``."""
    two_i = torch.arange(0, num_hiddens, 2, dtype=dtype, device=device)
    return BASE ** (-two_i / num_hiddens)


def sinusoidal_encoding(max_len: int, num_hiddens: int) -> torch.Tensor:
    """The sinusoidal table ``(max_len, num_hiddens)`` in float32 (book, chapter 5).

    ``P[t, 2i] = sin(t / 10000^(2i/d))`` and ``P[t, 2i+1] = cos(t / 10000^(2i/d))``,
    computed in float64 and rounded once.
    """
    if num_hiddens <= 0 or num_hiddens % 2:
        raise ValueError(f"num_hiddens must be a positive even number, got {num_hiddens}")
    if max_len < 0:
        raise ValueError(f"max_len must not be negative, got {max_len}")
    positions = torch.arange(max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    angles = positions * _frequencies(num_hiddens)  # (max_len, 1) * (d/2,) -> (max_len, d/2)
    table = torch.empty(max_len, num_hiddens, dtype=torch.float64)
    table[:, 0::2], table[:, 1::2] = torch.sin(angles), torch.cos(angles)
    return table.float()


class PositionalEncoding(nn.Module):
    """Adds the sinusoidal table to ``(batch, n, num_hiddens)``, then dropout (d2l-compatible).

    The table is kept as the buffer ``P`` ``(1, max_len, num_hiddens)``.
    """

    def __init__(self, num_hiddens: int, dropout: float, max_len: int = 1000):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("P", sinusoidal_encoding(max_len, num_hiddens)[None], persistent=False)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        n, max_len = X.shape[1], self.P.shape[1]
        if n > max_len:
            raise ValueError(f"X has {n} positions, more than max_len = {max_len}")
        # (batch, n, d) + (1, n, d): the same table for every sequence
        return self.dropout(X + self.P[:, :n].to(X.dtype))


def relative_offset_matrix(offset: int, num_hiddens: int) -> torch.Tensor:
    """``(d, d)`` float32 matrix ``M`` with ``P[t + offset] = P[t] @ M`` for every ``t``.

    Block diagonal: pair ``i`` turns by ``offset · ω_i``; as a row vector ``[sin, cos]``
    times ``[[cos, -sin], [sin, cos]]`` gives the sine and cosine of the sum.
    """
    if num_hiddens <= 0 or num_hiddens % 2:
        raise ValueError(f"num_hiddens must be a positive even number, got {num_hiddens}")
    angles = offset * _frequencies(num_hiddens)  # (d/2,)
    cos, sin = torch.cos(angles), torch.sin(angles)
    M = torch.zeros(num_hiddens, num_hiddens, dtype=torch.float64)
    M[0::2, 0::2] = torch.diag(cos)
    M[0::2, 1::2] = torch.diag(-sin)
    M[1::2, 0::2] = torch.diag(sin)
    M[1::2, 1::2] = torch.diag(cos)
    return M.float()


def apply_rotary(X: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding (book, chapter 5).

    Args:
        X: ``(..., n, d)``, ``d`` even.
        positions: ``(n,)`` the position of each token.

    Returns:
        ``(..., n, d)`` in the dtype of ``X``: pair ``(2i, 2i+1)`` of token ``t`` turned by
        the angle ``positions[t] / 10000^(2i/d)``.
    """
    if X.dim() < 2 or X.shape[-1] % 2:
        raise ValueError(f"X must be (..., n, d) with d even, got shape {tuple(X.shape)}")
    if positions.shape != (X.shape[-2],):
        raise ValueError(f"positions must be (n,) = ({X.shape[-2]},), got shape {tuple(positions.shape)}")
    wide = torch.float64 if X.dtype == torch.float64 else torch.float32
    # (n, 1) * (d/2,) -> (n, d/2): one angle per token and pair
    angles = positions.to(wide)[:, None] * _frequencies(X.shape[-1], wide, X.device)
    cos, sin = torch.cos(angles), torch.sin(angles)
    even, odd = X[..., 0::2].to(wide), X[..., 1::2].to(wide)  # (..., n, d/2) each
    turned = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)  # (..., n, d/2, 2)
    return turned.flatten(-2).to(X.dtype)  # pairs back side by side: (..., n, d)


def rotary_attention(queries, keys, values, positions, mask=None):
    """Scaled dot-product attention with rotary positions on queries and keys (not values).

    Args:
        queries, keys: ``(..., n, d)``; values: ``(..., n, v)``; positions: ``(n,)``.
        mask: bool broadcastable to ``(..., n, n)`` or ``None``.

    Returns:
        ``(output, weights)``: ``(..., n, v)`` and ``(..., n, n)``.
    """
    return masked_attention(apply_rotary(queries, positions), apply_rotary(keys, positions), values, mask)


class LearnedPositionalEmbedding(nn.Module):
    """A trainable table ``nn.Embedding(max_len, num_hiddens)`` added to ``(batch, n, num_hiddens)``."""

    def __init__(self, max_len: int, num_hiddens: int):
        super().__init__()
        self.embedding = nn.Embedding(max_len, num_hiddens)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        n, max_len = X.shape[1], self.embedding.num_embeddings
        if n > max_len:
            raise ValueError(f"X has {n} positions, more than max_len = {max_len}")
        positions = torch.arange(n, device=X.device)  # (n,)
        return X + self.embedding(positions)  # (batch, n, d) + (n, d)


REFERENCES = {
    "sinusoidal_encoding": sinusoidal_encoding,
    "PositionalEncoding": PositionalEncoding,
    "relative_offset_matrix": relative_offset_matrix,
    "apply_rotary": apply_rotary,
    "rotary_attention": rotary_attention,
    "LearnedPositionalEmbedding": LearnedPositionalEmbedding,
}

# --------------------------------------------------------------------------------------
# Known mistakes: the judge names the one a wrong answer's values match (judge.py)
# --------------------------------------------------------------------------------------


def _table_of_angles(angles: torch.Tensor, cos_first: bool = False) -> torch.Tensor:
    """``(max_len, d)``: the sine and cosine of ``angles`` ``(max_len, d/2)`` interleaved."""
    first, second = (torch.cos(angles), torch.sin(angles)) if cos_first else (torch.sin(angles), torch.cos(angles))
    return torch.stack([first, second], dim=-1).flatten(-2)


# The tables' mistakes are computed in float32, as a student's table is: at a thousand positions, float32 angles
# stray by up to 1e-4 from float64 ones, well within the part's 5e-4, not within
# the 1e-5 of tests/students/test_mistakes.py.


def _table_sin_cos_swapped(max_len, num_hiddens):
    """Cosine in the even columns and sine in the odd ones."""
    frequencies = torch.exp(-math.log(BASE) * torch.arange(0, num_hiddens, 2, dtype=torch.float32) / num_hiddens)
    return _table_of_angles(torch.arange(max_len, dtype=torch.float32)[:, None] * frequencies, cos_first=True)


def _table_exponent_i_over_d(max_len, num_hiddens):
    """Pair ``i`` turns by ``t / 10000^(i/d)``: the exponent ``i/d`` instead of ``2i/d``."""
    frequencies = BASE ** (-torch.arange(num_hiddens // 2, dtype=torch.float32) / num_hiddens)
    return _table_of_angles(torch.arange(max_len, dtype=torch.float32)[:, None] * frequencies)


def _table_positions_from_one(max_len, num_hiddens):
    """Rows for positions ``1 … max_len`` instead of ``0 … max_len - 1``."""
    frequencies = torch.exp(-math.log(BASE) * torch.arange(0, num_hiddens, 2, dtype=torch.float32) / num_hiddens)
    return _table_of_angles(torch.arange(1, max_len + 1, dtype=torch.float32)[:, None] * frequencies)


def _offset_fitted_at_zero(offset, num_hiddens):
    """A diagonal ``M`` with ``P[0] @ M = P[offset]``: right at position 0 only (the identity for offset < 0)."""
    scale = torch.ones(num_hiddens, dtype=torch.float64)
    if offset > 0:
        scale[1::2] = torch.cos(offset * _frequencies(num_hiddens))  # P[0] is (0, 1, 0, 1, …): only cos rows move
    return torch.diag(scale).float()


def _offset_turning_backwards(offset, num_hiddens):
    """The blocks turn by ``-offset · ω_i``: ``M`` moves ``P[t]`` to ``P[t - offset]``."""
    return relative_offset_matrix(-offset, num_hiddens)


def _rotary_of_pairs(X, positions, frequencies, halves: bool):
    """``X`` with pair ``i`` turned by ``positions · frequencies[i]``: neighbours, or ``(i, i + d/2)`` if ``halves``."""
    wide = torch.float64 if X.dtype == torch.float64 else torch.float32
    angles = positions.to(torch.float64)[:, None] * frequencies.to(torch.float64)
    cos, sin = torch.cos(angles).to(wide), torch.sin(angles).to(wide)
    d = X.shape[-1]
    first, second = (X[..., : d // 2], X[..., d // 2:]) if halves else (X[..., 0::2], X[..., 1::2])
    first, second = first.to(wide), second.to(wide)
    turned = (first * cos - second * sin, first * sin + second * cos)
    joined = torch.cat(turned, dim=-1) if halves else torch.stack(turned, dim=-1).flatten(-2)
    return joined.to(X.dtype)


def _rotary_halves(X, positions):
    """Pairs ``(i, i + d/2)`` turned (the halves convention) instead of neighbours ``(2i, 2i+1)``."""
    return _rotary_of_pairs(X, positions, _frequencies(X.shape[-1]), halves=True)


def _rotary_one_frequency(X, positions):
    """Every pair turned by the position itself: the ``1 / 10000^(2i/d)`` left out."""
    return _rotary_of_pairs(X, positions, torch.ones(X.shape[-1] // 2), halves=False)


def _rotary_attention_queries_only(queries, keys, values, positions, mask=None):
    """Rotary on the queries; the keys left unrotated."""
    return masked_attention(apply_rotary(queries, positions), keys, values, mask)


#: ``{part: ((what the student did, in their words), the function that does it), ...}``: the one whose values a
#: wrong answer's match is named in its message (of several, the one matching it on most cases; then the first).
MISTAKES = {
    "sinusoidal_encoding": (
        ("sin and cos swapped (cos in the even columns)", _table_sin_cos_swapped),
        ("exponent i/d instead of 2i/d in the frequencies", _table_exponent_i_over_d),
        ("positions counted from 1 instead of 0", _table_positions_from_one),
    ),
    "relative_offset_matrix": (
        ("a diagonal matrix fitted at position 0 only, not rotation blocks", _offset_fitted_at_zero),
        ("rotation blocks turning the wrong way (sin signs swapped)", _offset_turning_backwards),
    ),
    "apply_rotary": (
        ("pairs (i, i + d/2) rotated instead of neighbours (2i, 2i+1)", _rotary_halves),
        ("one frequency for every pair (the 1/10000^(2i/d) left out)", _rotary_one_frequency),
    ),
    "rotary_attention": (
        ("rotary applied to the queries only, not the keys", _rotary_attention_queries_only),
    ),
}

# --------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------


def _table_calls(sizes) -> list[Call]:
    return [Call(f"max_len={n}, num_hiddens={d}", (n, d)) for n, d in sizes]


def _table_hidden(seed: int) -> list[Call]:
    """One position of width 2, then random tables; the last is at least 4 wide for every student,
    since with a single frequency (width 2) an exponent of i/d gives what 2i/d gives."""
    rng = random.Random(seed)
    return _table_calls([(1, 2), (rng.randint(2, 60), 2 * rng.randint(1, 20)), (rng.randint(400, 1200), 2 * max(rng.randint(1, 64), 2))])


def _module_calls(seeds) -> list[Call]:
    calls = []
    for seed in seeds:
        rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
        d, max_len = 2 * rng.randint(1, 16), rng.randint(8, 60)
        n = rng.randint(1, max_len)
        X = torch.randn(rng.randint(1, 3), n, d, generator=g)
        calls.append(Call(f"X {tuple(X.shape)}, num_hiddens={d}, max_len={max_len}", (X, max_len)))
    X = torch.randn(2, 5, 6, generator=torch.Generator().manual_seed(seeds[0]))
    calls.append(Call("X (2, 5, 6) filling the table: max_len=5", (X, 5)))
    calls.append(Call("X (1, 7, 4) in float64, max_len=9", (X.new_ones(1, 7, 4).double() * 0.5, 9)))
    return calls


def _offset_calls(pairs) -> list[Call]:
    return [Call(f"offset={k}, num_hiddens={d}", (k, d)) for k, d in pairs]


def _offset_hidden(seed: int) -> list[Call]:
    rng = random.Random(seed)
    return _offset_calls([(0, 2 * rng.randint(1, 8)), (rng.randint(1, 50), 2 * rng.randint(1, 32)),
                          (-rng.randint(1, 20), 2 * rng.randint(1, 16))])


def _rotary_calls(seeds) -> list[Call]:
    """Batches of 0 to 2 dimensions; positions that start at 0, at an offset, and unordered."""
    calls = []
    for index, seed in enumerate(seeds):
        rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
        batch = tuple(rng.randint(1, 3) for _ in range(index % 3))
        n, d = rng.randint(1, 7), 2 * rng.randint(1, 8)
        X = torch.randn(*batch, n, d, generator=g)
        kinds = {"arange(n)": torch.arange(n), "arange(n) + 17": torch.arange(n) + 17,
                 "shuffled, in float": torch.randperm(n, generator=g).float() * 3}
        for name, positions in kinds.items():
            calls.append(Call(f"X {tuple(X.shape)}, positions {name}", (X, positions)))
    X = torch.randn(3, 8, generator=torch.Generator().manual_seed(seeds[0])).double()
    calls.append(Call("X (3, 8) in float64, positions [0, 500, 1000]", (X, torch.tensor([0, 500, 1000]))))
    return calls


def _rotary_attention_calls(seeds) -> list[Call]:
    calls = []
    for seed in seeds:
        rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
        n, d, v = rng.randint(2, 6), 2 * rng.randint(1, 4), rng.randint(1, 4)
        queries, keys, values = torch.randn(2, n, d, generator=g), torch.randn(2, n, d, generator=g), \
            torch.randn(2, n, v, generator=g)
        positions = torch.arange(n) + rng.randint(0, 30)
        calls.append(Call(f"queries and keys (2, {n}, {d}), values (2, {n}, {v}), positions {positions.tolist()}",
                          (queries, keys, values, positions)))
    return calls


def _learned_calls(seeds) -> list[Call]:
    calls = []
    for seed in seeds:
        rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
        max_len, d = rng.randint(4, 30), rng.randint(1, 12)
        n = rng.randint(1, max_len)
        X, table = torch.randn(rng.randint(1, 3), n, d, generator=g), torch.randn(max_len, d, generator=g)
        calls.append(Call(f"X {tuple(X.shape)}, max_len={max_len}, a table ({max_len}, {d})", (X, table)))
    return calls


VISIBLE = {
    "sinusoidal_encoding": lambda: _table_calls([(4, 2), (10, 8), (50, 6), (200, 16)]),
    "PositionalEncoding": lambda: _module_calls([0, 1]),
    "relative_offset_matrix": lambda: _offset_calls([(1, 4), (3, 8), (-2, 6), (0, 2)]),
    "apply_rotary": lambda: _rotary_calls([0, 1, 2]),
    "rotary_attention": lambda: _rotary_attention_calls([0, 1]),
    "LearnedPositionalEmbedding": lambda: _learned_calls([0, 1]),
}
HIDDEN = {
    "sinusoidal_encoding": _table_hidden,
    "PositionalEncoding": lambda seed: _module_calls(derived_seeds(seed, 2)),
    "relative_offset_matrix": _offset_hidden,
    "apply_rotary": lambda seed: _rotary_calls(derived_seeds(seed)),
    "rotary_attention": lambda seed: _rotary_attention_calls(derived_seeds(seed, 2)),
    "LearnedPositionalEmbedding": lambda seed: _learned_calls(derived_seeds(seed, 2)),
}
