"""Answers to assignment 04, right and wrong, for the checks' tests (tests/students/test_catalogues.py)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

from autograder import ch04_multihead as ch04
from autograder.reference import ch04_multihead as ref04

# ---- correct answers, written differently from the reference ----


def attend(Q, K, V, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", Q, K) / math.sqrt(Q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    weights = torch.nan_to_num(scores.softmax(-1), nan=0.0)  # all-masked rows: NaN -> 0
    return weights @ V, weights


def self_attention(X, W_q, W_k, W_v, mask=None):
    if X.ndim < 2:
        raise ValueError("X needs a token axis: (..., n, d)")
    for name, W in (("W_q", W_q), ("W_k", W_k), ("W_v", W_v)):
        if W.ndim != 2 or W.size(0) != X.size(-1):
            raise ValueError(f"{name} does not fit the width of X")
    if W_k.size(1) != W_q.size(1):
        raise ValueError("W_k and W_q must project to one width")
    return attend(X @ W_q, X @ W_k, X @ W_v, mask)


def graph_mask(adjacency, self_loops=True):
    if adjacency.ndim != 2 or adjacency.size(0) != adjacency.size(1):
        raise ValueError("adjacency must be square")
    mask = adjacency.bool()
    return mask.logical_or(torch.eye(len(adjacency), dtype=torch.bool, device=adjacency.device)) if self_loops else mask


def split(X, num_heads):
    if X.ndim != 3:
        raise ValueError("X must be (batch, n, width)")
    if X.size(-1) % num_heads:
        raise ValueError("num_heads must divide the width")
    return X.view(X.size(0), X.size(1), num_heads, -1).permute(0, 2, 1, 3)


def merge(X):
    return X.permute(0, 2, 1, 3).flatten(2)


class MHA(nn.Module):
    def __init__(self, num_hiddens, num_heads, dropout=0.0, bias=False):
        super().__init__()
        if num_heads < 1 or num_hiddens % num_heads:
            raise ValueError("num_heads must divide num_hiddens")
        self.h = num_heads
        self.W_q, self.W_k, self.W_v, self.W_o = (nn.Linear(num_hiddens, num_hiddens, bias=bias) for _ in range(4))
        self.drop = nn.Dropout(dropout)

    def forward(self, queries, keys, values, mask=None):
        q, k, v = split(self.W_q(queries), self.h), split(self.W_k(keys), self.h), split(self.W_v(values), self.h)
        _, self.attention_weights = attend(q, k, v, mask)
        return self.W_o(merge(self.drop(self.attention_weights) @ v))


def count(num_hiddens, num_heads, head_dim=None, bias=False):
    inner = num_hiddens if head_dim is None else num_heads * head_dim
    return 4 * num_hiddens * inner + (3 * inner + num_hiddens if bias else 0)


CORRECT = [  # (check, a correct answer, the autograder's reference, which must be refused)
    (ch04.check_self_attention, self_attention, ref04.self_attention),
    (ch04.check_self_attention_arguments, self_attention, ref04.self_attention),
    (ch04.check_graph_attention_mask, graph_mask, ref04.graph_attention_mask),
    (ch04.check_graph_attention_mask_arguments, graph_mask, ref04.graph_attention_mask),
    (ch04.check_split_heads, split, ref04.split_heads),
    (ch04.check_split_heads_arguments, split, ref04.split_heads),
    (ch04.check_merge_heads, merge, ref04.merge_heads),
    (ch04.check_multi_head_attention, MHA, ref04.MultiHeadAttention),
    (ch04.check_multi_head_attention_arguments, MHA, ref04.MultiHeadAttention),
    (ch04.check_mha_parameter_count, count, ref04.mha_parameter_count),
]

# ---- wrong answers ----


def _scaled_by_input_width(X, W_q, W_k, W_v, mask=None):
    Q, K, V = X @ W_q, X @ W_k, X @ W_v
    return attend(Q * math.sqrt(Q.size(-1)) / math.sqrt(X.size(-1)), K, V, mask)  # √d of X, not of the keys


def _positions_added(X, W_q, W_k, W_v, mask=None):
    X = X + torch.arange(X.size(-2), device=X.device, dtype=X.dtype)[:, None] / 10  # no longer order-blind
    return self_attention(X, W_q, W_k, W_v, mask)


def _softmax_over_queries(X, W_q, W_k, W_v, mask=None):
    Q, K, V = X @ W_q, X @ W_k, X @ W_v
    scores = Q @ K.mT / math.sqrt(Q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    weights = torch.nan_to_num(scores.softmax(-2), nan=0.0)
    return weights @ V, weights


def _transposed_graph(adjacency, self_loops=True):
    return graph_mask(adjacency, self_loops).T  # j -> i instead of i -> j


def _graph_without_self_loops(adjacency, self_loops=True):
    return graph_mask(adjacency, False)


def _interleaved_heads(X, num_heads):
    # head i takes features i, i + h, i + 2h, ...: not contiguous blocks
    return X.reshape(X.size(0), X.size(1), -1, num_heads).permute(0, 3, 1, 2)


def _reshape_without_transpose(X, num_heads):
    return X.reshape(X.size(0), num_heads, X.size(1), -1)  # mixes tokens and features


def _merge_without_transpose(X):
    return X.reshape(X.size(0), X.size(2), -1)


class _NoOutputProjection(MHA):
    def forward(self, queries, keys, values, mask=None):
        q, k, v = split(self.W_q(queries), self.h), split(self.W_k(keys), self.h), split(self.W_v(values), self.h)
        _, self.attention_weights = attend(q, k, v, mask)
        return merge(self.drop(self.attention_weights) @ v)  # W_o forgotten


class _HeadsMergedWithoutTranspose(MHA):
    def forward(self, queries, keys, values, mask=None):
        q, k, v = split(self.W_q(queries), self.h), split(self.W_k(keys), self.h), split(self.W_v(values), self.h)
        _, self.attention_weights = attend(q, k, v, mask)
        heads = self.drop(self.attention_weights) @ v  # (batch, heads, q, d)
        # (batch, heads, q, d) -> (batch, q, heads·d) with no transpose: queries and heads mixed up
        return self.W_o(heads.reshape(heads.size(0), heads.size(2), -1))


class _MaskNotBroadcastOverHeads(MHA):
    def forward(self, queries, keys, values, mask=None):
        if mask is not None:
            mask = mask.reshape(-1, *mask.shape[-2:])[:1]  # one (q, k) mask for every sequence and head
        return super().forward(queries, keys, values, mask)


class _DropoutAlwaysOn(MHA):
    def forward(self, queries, keys, values, mask=None):
        q, k, v = split(self.W_q(queries), self.h), split(self.W_k(keys), self.h), split(self.W_v(values), self.h)
        _, self.attention_weights = attend(q, k, v, mask)
        dropped = F.dropout(self.attention_weights, p=self.drop.p, training=True)  # ignores eval()
        return self.W_o(merge(dropped @ v))


class _ScaledByFullWidth(MHA):
    def forward(self, queries, keys, values, mask=None):
        q, k, v = split(self.W_q(queries), self.h), split(self.W_k(keys), self.h), split(self.W_v(values), self.h)
        q = q * math.sqrt(q.size(-1)) / math.sqrt(queries.size(-1))  # √num_hiddens, not √head width
        _, self.attention_weights = attend(q, k, v, mask)
        return self.W_o(merge(self.drop(self.attention_weights) @ v))


class _OneLinearForAll(MHA):
    def __init__(self, num_hiddens, num_heads, dropout=0.0, bias=False):
        super().__init__(num_hiddens, num_heads, dropout, bias)
        self.W_k = self.W_v = self.W_q  # one projection shared by the three roles


class _DelegatesToPyTorch(MHA):
    def forward(self, queries, keys, values, mask=None):
        q, k, v = split(self.W_q(queries), self.h), split(self.W_k(keys), self.h), split(self.W_v(values), self.h)
        _, self.attention_weights = attend(q, k, v, mask)
        # dropout passed on, so that the delegation is the only mistake
        dropout = self.drop.p if self.training else 0.0
        heads = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout).nan_to_num(0)
        return self.W_o(merge(heads))


class _DropoutOnOutput(MHA):
    def forward(self, queries, keys, values, mask=None):
        q, k, v = split(self.W_q(queries), self.h), split(self.W_k(keys), self.h), split(self.W_v(values), self.h)
        _, self.attention_weights = attend(q, k, v, mask)
        return self.drop(self.W_o(merge(self.attention_weights @ v)))  # dropout after W_o, not on the weights


class _NoiseForDropout(MHA):
    def forward(self, queries, keys, values, mask=None):
        q, k, v = split(self.W_q(queries), self.h), split(self.W_k(keys), self.h), split(self.W_v(values), self.h)
        _, self.attention_weights = attend(q, k, v, mask)
        weights = self.attention_weights
        if self.training:  # each row scaled by noise: different outputs in training mode, nothing dropped
            weights = weights * 3.0 * torch.rand(weights.shape[:-1] + (1,), device=weights.device)
        return self.W_o(merge(weights @ v))


def _count_without_output(num_hiddens, num_heads, head_dim=None, bias=False):
    inner = num_hiddens if head_dim is None else num_heads * head_dim
    return 3 * num_hiddens * inner + (3 * inner if bias else 0)  # W_o forgotten


def _count_wide_as_narrow(num_hiddens, num_heads, head_dim=None, bias=False):
    return count(num_hiddens, num_heads, None, bias)  # the wide heads' larger projections ignored


def _count_without_bias(num_hiddens, num_heads, head_dim=None, bias=False):
    return count(num_hiddens, num_heads, head_dim, False)


#: (name, check, answer, only the hidden cases catch it, a phrase of the message that says why)
WRONG_AND_WHY = [
    ("scaled by the input width, not the key width", ch04.check_self_attention, _scaled_by_input_width, False,
     "output: wrong values"),
    ("positions added: not permutation-equivariant", ch04.check_self_attention, _positions_added, False,
     "self-attention is permutation-equivariant"),
    ("self-attention softmax over queries", ch04.check_self_attention, _softmax_over_queries, False,
     "output: wrong values"),
    ("graph mask transposed", ch04.check_graph_attention_mask, _transposed_graph, False, "the mask has wrong entries"),
    ("graph mask without self-loops", ch04.check_graph_attention_mask, _graph_without_self_loops, False,
     "the mask has wrong entries"),
    ("heads interleaved instead of contiguous", ch04.check_split_heads, _interleaved_heads, False,
     "the output: wrong values"),
    ("split by reshape without transpose", ch04.check_split_heads, _reshape_without_transpose, False,
     "the output: wrong values"),
    ("merge by reshape without transpose", ch04.check_merge_heads, _merge_without_transpose, False,
     "the output: wrong values"),
    ("output projection forgotten", ch04.check_multi_head_attention, _NoOutputProjection, False,
     "output: wrong values"),
    ("heads merged back without the transpose", ch04.check_multi_head_attention, _HeadsMergedWithoutTranspose, False,
     "output: wrong values"),
    ("mask not broadcast over heads", ch04.check_multi_head_attention, _MaskNotBroadcastOverHeads, False,
     "output: wrong values"),
    ("dropout left on in evaluation", ch04.check_multi_head_attention, _DropoutAlwaysOn, False,
     "(dropout must be off)"),
    ("scaled by the full width, not the head width", ch04.check_multi_head_attention, _ScaledByFullWidth, False,
     "output: wrong values"),
    ("one projection shared by queries, keys and values", ch04.check_multi_head_attention, _OneLinearForAll, False,
     "`W_k` should be nn.Linear(num_hiddens, num_hiddens)"),
    ("delegates to F.scaled_dot_product_attention", ch04.check_multi_head_attention, _DelegatesToPyTorch, False,
     "calls torch.nn.functional.scaled_dot_product_attention"),
    ("dropout on the output instead of the weights", ch04.check_multi_head_attention, _DropoutOnOutput, False,
     "dropout acts on the output, not on the attention weights"),
    ("noise for dropout", ch04.check_multi_head_attention, _NoiseForDropout, False,
     "dropped (0) or scaled by 1 / (1 - p) = 2"),
    ("parameter count forgets W_o", ch04.check_mha_parameter_count, _count_without_output, False,
     "parameters"),  # "counted N parameters" (a hidden case does not say what was expected)
    ("parameter count ignores the wide heads", ch04.check_mha_parameter_count, _count_wide_as_narrow, False,
     "parameters"),  # "counted N parameters" (a hidden case does not say what was expected)
    ("parameter count forgets the biases", ch04.check_mha_parameter_count, _count_without_bias, False,
     "parameters"),  # "counted N parameters" (a hidden case does not say what was expected)
]
#: the same without the phrase (as tests/students/test_one_bug.py reads them)
WRONG = [entry[:4] for entry in WRONG_AND_WHY]
#: the wrong answers above whose mistake the grading side knows (the reference's ``MISTAKES``), and how its
#: message names it (tests/students/test_mistakes.py)
KNOWN_MISTAKES = {
    "scaled by the input width, not the key width": "scores scaled by 1/√d of the tokens' width instead of the keys' "
                                                    "width",
    "self-attention softmax over queries": "softmax over the queries' axis instead of the keys'",
    "graph mask transposed": "edges read the wrong way: the mask transposed (j → i instead of i → j)",
    "graph mask without self-loops": "self-loops left out even when self_loops=True",
    "heads interleaved instead of contiguous": "heads take interleaved features (i, i + h, …) instead of contiguous "
                                               "blocks",
    "split by reshape without transpose": "reshaped straight to (batch, heads, n, d) without the transpose",
    "merge by reshape without transpose": "heads merged without moving the head axis back (reshape without the "
                                          "transpose)",
    "output projection forgotten": "the output projection W_o left out",
    "heads merged back without the transpose": "heads merged without moving the head axis back (reshape without the "
                                               "transpose)",
    "mask not broadcast over heads": "the mask not broadcast: the first sequence's first (q, k) mask used for every "
                                     "sequence and head",
    "scaled by the full width, not the head width": "scores scaled by 1/√num_hiddens instead of 1/√(head width)",
    "parameter count forgets W_o": "the output projection W_o left out of the count",
    "parameter count ignores the wide heads": "head_dim ignored: wide heads counted as narrow ones",
    "parameter count forgets the biases": "the biases left out of the count",
}
