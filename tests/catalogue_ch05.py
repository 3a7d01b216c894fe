"""Answers to assignment 05, right and wrong, for the checks' tests (tests/students/test_catalogues.py)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

from autograder import ch05_positional_encoding as ch05
from autograder.reference import ch05_positional_encoding as ref05

# ---- correct answers, written differently from the reference ----


def table(max_len, num_hiddens):
    if num_hiddens % 2:
        raise ValueError("num_hiddens must be even")
    positions = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    frequencies = torch.exp(-math.log(10000.0) * torch.arange(0, num_hiddens, 2, dtype=torch.float32) / num_hiddens)
    P = torch.zeros(max_len, num_hiddens)
    P[:, 0::2] = torch.sin(positions * frequencies)
    P[:, 1::2] = torch.cos(positions * frequencies)
    return P


class Encoding(nn.Module):
    def __init__(self, num_hiddens, dropout, max_len=1000):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.P = table(max_len, num_hiddens).unsqueeze(0)

    def forward(self, X):
        if X.size(1) > self.P.size(1):
            raise ValueError("the sequence is longer than max_len")
        return self.dropout(X + self.P[:, : X.size(1)].to(X.device))


def offsets(offset, num_hiddens):
    M = torch.zeros(num_hiddens, num_hiddens)
    for i in range(num_hiddens // 2):
        angle = offset / 10000 ** (2 * i / num_hiddens)
        c, s = math.cos(angle), math.sin(angle)
        M[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, -s], [s, c]])
    return M


def rotary(X, positions):
    if X.size(-1) % 2:
        raise ValueError("X needs an even width")
    if positions.shape != (X.size(-2),):
        raise ValueError("positions must hold one position per token")
    d = X.size(-1)
    frequencies = 10000.0 ** (-torch.arange(0, d, 2, device=X.device, dtype=torch.float64) / d)
    angles = positions.to(torch.float64).unsqueeze(-1) * frequencies  # (n, d/2)
    pairs = torch.view_as_complex(X.to(torch.float64).reshape(*X.shape[:-1], d // 2, 2).contiguous())
    turned = pairs * torch.polar(torch.ones_like(angles), angles)
    return torch.view_as_real(turned).reshape(X.shape).to(X.dtype)


def attend(Q, K, V, mask=None):
    scores = Q @ K.mT / math.sqrt(Q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    weights = torch.nan_to_num(scores.softmax(-1), nan=0.0)
    return weights @ V, weights


def rotary_attention(queries, keys, values, positions, mask=None):
    return attend(rotary(queries, positions), rotary(keys, positions), values, mask)


class Learned(nn.Module):
    def __init__(self, max_len, num_hiddens):
        super().__init__()
        self.table = nn.Embedding(max_len, num_hiddens)

    def forward(self, X):
        if X.size(1) > self.table.num_embeddings:
            raise ValueError(f"more positions than max_len = {self.table.num_embeddings}")
        return X + self.table.weight[: X.size(1)]


CORRECT = [  # (check, a correct answer, the autograder's reference, which must be refused)
    (ch05.check_sinusoidal_encoding, table, ref05.sinusoidal_encoding),
    (ch05.check_sinusoidal_encoding_arguments, table, ref05.sinusoidal_encoding),
    (ch05.check_positional_encoding, Encoding, ref05.PositionalEncoding),
    (ch05.check_positional_encoding_arguments, Encoding, ref05.PositionalEncoding),
    (ch05.check_relative_offset_matrix, offsets, ref05.relative_offset_matrix),
    (ch05.check_apply_rotary, rotary, ref05.apply_rotary),
    (ch05.check_apply_rotary_arguments, rotary, ref05.apply_rotary),
    (ch05.check_rotary_attention, rotary_attention, ref05.rotary_attention),
    (ch05.check_learned_positional_embedding, Learned, ref05.LearnedPositionalEmbedding),
    (ch05.check_learned_positional_embedding_arguments, Learned, ref05.LearnedPositionalEmbedding),
]

# ---- wrong answers ----


def _sin_cos_swapped(max_len, num_hiddens):
    return table(max_len, num_hiddens).reshape(max_len, -1, 2).flip(-1).reshape(max_len, num_hiddens)


def _exponent_i_over_d(max_len, num_hiddens):
    positions = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    frequencies = 10000.0 ** (-torch.arange(num_hiddens // 2, dtype=torch.float32) / num_hiddens)  # i/d, not 2i/d
    P = torch.zeros(max_len, num_hiddens)
    P[:, 0::2], P[:, 1::2] = torch.sin(positions * frequencies), torch.cos(positions * frequencies)
    return P


def _positions_from_one(max_len, num_hiddens):
    return table(max_len + 1, num_hiddens)[1:]


class _LongSequencesAccepted(Encoding):
    def forward(self, X):
        n = min(X.size(1), self.P.size(1))  # silently adds only the positions it has
        return self.dropout(torch.cat([X[:, :n] + self.P[:, :n], X[:, n:]], dim=1))


class _DropoutAlwaysOn(Encoding):
    def forward(self, X):
        return F.dropout(X + self.P[:, : X.size(1)], p=self.dropout.p, training=True)


def _offset_for_position_zero(offset, num_hiddens):
    # a diagonal M with P[offset] = P[0] @ M: right at t = 0 only
    target = table(abs(offset) + 1, num_hiddens)[offset] if offset >= 0 else table(1, num_hiddens)[0]
    start = table(1, num_hiddens)[0]
    ratio = torch.where(start != 0, target / torch.where(start != 0, start, torch.ones_like(start)), torch.ones_like(start))
    return torch.diag(ratio)


def _offset_rotating_the_wrong_way(offset, num_hiddens):
    return offsets(-offset, num_hiddens)


def _rotary_halves(X, positions):
    # pairs (i, i + d/2) instead of neighbours (2i, 2i+1): another convention, not the contract's
    d = X.size(-1)
    frequencies = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)
    angles = positions.float()[:, None] * frequencies
    first, second = X[..., : d // 2], X[..., d // 2 :]
    return torch.cat([first * angles.cos() - second * angles.sin(), first * angles.sin() + second * angles.cos()], -1)


def _rotary_one_frequency(X, positions):
    d = X.size(-1)
    angles = positions.float()[:, None].expand(-1, d // 2)  # every pair turns by the position itself
    even, odd = X[..., 0::2], X[..., 1::2]
    return torch.stack([even * angles.cos() - odd * angles.sin(), even * angles.sin() + odd * angles.cos()], -1).flatten(-2)


def _rotary_on_values(queries, keys, values, positions, mask=None):
    return attend(rotary(queries, positions), rotary(keys, positions), rotary(values, positions), mask)


def _rotary_on_queries_only(queries, keys, values, positions, mask=None):
    return attend(rotary(queries, positions), keys, values, mask)


class _DelegatesToD2L(nn.Module):
    def __init__(self, num_hiddens, dropout, max_len=1000):
        super().__init__()
        from d2l import torch as d2l

        self.inner = d2l.PositionalEncoding(num_hiddens, dropout, max_len)

    def forward(self, X):
        if X.size(1) > self.inner.P.size(1):
            raise ValueError("longer than max_len")
        return self.inner(X)


class _EmbeddingFrozen(Learned):
    def __init__(self, max_len, num_hiddens):
        super().__init__(max_len, num_hiddens)
        self.table.weight.requires_grad_(False)


class _LearnedWithoutLimit(Learned):
    def forward(self, X):
        positions = torch.arange(X.size(1)).clamp(max=self.table.num_embeddings - 1)  # reuses the last row
        return X + self.table(positions)


#: (name, check, answer, only the hidden cases catch it, a phrase of the message that says why)
WRONG_AND_WHY = [
    ("sin and cos swapped", ch05.check_sinusoidal_encoding, _sin_cos_swapped, False, "the output: wrong values"),
    ("exponent i/d instead of 2i/d", ch05.check_sinusoidal_encoding, _exponent_i_over_d, False,
     "the output: wrong values"),
    ("positions starting at 1", ch05.check_sinusoidal_encoding, _positions_from_one, False, "the output: wrong values"),
    ("module accepts sequences longer than max_len", ch05.check_positional_encoding_arguments,
     _LongSequencesAccepted, False, "should raise ValueError naming `max_len`"),
    ("dropout left on in evaluation", ch05.check_positional_encoding, _DropoutAlwaysOn, False,
     "(dropout must be off)"),
    ("delegates to d2l.PositionalEncoding", ch05.check_positional_encoding, _DelegatesToD2L, False,
     "calls d2l.PositionalEncoding"),
    ("offset matrix right for one position only", ch05.check_relative_offset_matrix, _offset_for_position_zero, False,
     "the output: wrong values"),
    ("offset matrix turning the wrong way", ch05.check_relative_offset_matrix, _offset_rotating_the_wrong_way, False,
     "the output: wrong values"),
    ("rotary rotates halves, not neighbours", ch05.check_apply_rotary, _rotary_halves, False,
     "the output: wrong values"),
    ("rotary with one frequency for every pair", ch05.check_apply_rotary, _rotary_one_frequency, False,
     "the output: wrong values"),
    ("rotary applied to the values", ch05.check_rotary_attention, _rotary_on_values, False,
     "values, which must not be rotated"),
    ("rotary on the queries only", ch05.check_rotary_attention, _rotary_on_queries_only, False, "output: wrong values"),
    ("learned table frozen", ch05.check_learned_positional_embedding, _EmbeddingFrozen, False,
     "the embedding's table should be a trainable parameter"),
    ("learned module accepts sequences longer than max_len", ch05.check_learned_positional_embedding_arguments,
     _LearnedWithoutLimit, False, "should raise ValueError naming `max_len`"),
]
#: the same without the phrase (as tests/students/test_one_bug.py reads them)
WRONG = [entry[:4] for entry in WRONG_AND_WHY]
#: the known mistake (``MISTAKES`` of the reference module) the judge names for each wrong answer that makes one
KNOWN_MISTAKES = {
    "sin and cos swapped": "sin and cos swapped (cos in the even columns)",
    "exponent i/d instead of 2i/d": "exponent i/d instead of 2i/d in the frequencies",
    "positions starting at 1": "positions counted from 1 instead of 0",
    "offset matrix right for one position only": "a diagonal matrix fitted at position 0 only, not rotation blocks",
    "offset matrix turning the wrong way": "rotation blocks turning the wrong way (sin signs swapped)",
    "rotary rotates halves, not neighbours": "pairs (i, i + d/2) rotated instead of neighbours (2i, 2i+1)",
    "rotary with one frequency for every pair": "one frequency for every pair (the 1/10000^(2i/d) left out)",
    "rotary on the queries only": "rotary applied to the queries only, not the keys",
}
