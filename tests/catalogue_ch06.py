"""Answers to assignment 06, right and wrong, for the checks' tests (tests/students/test_catalogues.py)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

from autograder import ch06_transformer as ch06
from autograder.reference import ch06_transformer as ref06
from catalogue_ch04 import MHA

# ---- correct answers, written differently from the reference ----


class Block(nn.Module):
    def __init__(self, num_hiddens, ffn_num_hiddens, num_heads, dropout, use_bias=False):
        super().__init__()
        self.attention = MHA(num_hiddens, num_heads, dropout, bias=use_bias)
        self.norm1, self.norm2 = nn.LayerNorm(num_hiddens), nn.LayerNorm(num_hiddens)
        self.ffn = nn.Sequential(nn.Linear(num_hiddens, ffn_num_hiddens), nn.ReLU(), nn.Linear(ffn_num_hiddens, num_hiddens))
        self.drop = nn.Dropout(dropout)

    def forward(self, X, valid_lens=None):
        mask = None
        if valid_lens is not None:
            mask = (torch.arange(X.size(1), device=X.device)[None, :] < valid_lens[:, None])[:, None, None, :]
        X = self.norm1(X + self.drop(self.attention(X, X, X, mask)))
        return self.norm2(X + self.drop(self.ffn(X)))


def chunked(queries, keys, values, chunk_size, mask=None, rescale=True, subtract_max=True, last_chunk=True,
            guard_empty=True):
    """Online softmax with the mistakes below switched on by the arguments."""
    if chunk_size < 1:
        raise ValueError("chunk_size must be at least 1")
    kind = torch.promote_types(queries.dtype, torch.float32)
    q = queries.to(kind) * queries.size(-1) ** -0.5
    m = torch.full(q.shape[:-1] + (1,), -math.inf, dtype=kind, device=q.device)
    total = torch.zeros_like(m)
    acc = torch.zeros(*q.shape[:-1], values.size(-1), dtype=kind, device=q.device)
    stop = keys.size(-2) if last_chunk else keys.size(-2) // chunk_size * chunk_size
    for start in range(0, stop, chunk_size):
        s = q @ keys[..., start : start + chunk_size, :].to(kind).mT
        if mask is not None:
            s = s.masked_fill(~mask[..., start : start + chunk_size], -math.inf)
        m_new = torch.maximum(m, s.amax(-1, keepdim=True)) if subtract_max else torch.zeros_like(m)
        shift = m_new.nan_to_num(0.0, neginf=0.0) if guard_empty else m_new
        p = (s - shift).exp()
        factor = (m - shift).exp() if rescale else torch.ones_like(m)
        total = total * factor + p.sum(-1, keepdim=True)
        acc = acc * factor + p @ values[..., start : start + chunk_size, :].to(kind)
        m = m_new
    out = acc / total.clamp(min=1e-30) if guard_empty else acc / total
    return out.to(queries.dtype)


def train(seed=0, order_of=ch06.sorting_order):
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)

    class Sorter(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(ch06.VOCABULARY, 48)
            self.where = nn.Parameter(torch.randn(ch06.SEQUENCE_LENGTH, 48) * 0.1)
            self.blocks = nn.Sequential(Block(48, 96, 4, 0.0), Block(48, 96, 4, 0.0))
            self.out = nn.Linear(48, ch06.VOCABULARY)

        def forward(self, digits):
            return self.out(self.blocks(self.embed(digits) + self.where))

    model = Sorter()
    optimizer = torch.optim.AdamW(model.parameters(), lr=4e-3)
    order = order_of(seed)
    for _ in range(450):
        digits, targets = ch06.make_sorting_batch(128, generator, order)
        loss = F.cross_entropy(model(digits).flatten(0, 1), targets.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    return model, ch06.per_token_accuracy(model, *ch06.make_sorting_batch(1000, generator, order))


TRAINING_CHECKS = [ch06.check_train_sorting_transformer]  # they train a model: slow

CORRECT = [  # (check, a correct answer, the autograder's reference, which must be refused)
    (ch06.check_transformer_encoder_block, Block, ref06.TransformerEncoderBlock),
    (ch06.check_chunked_attention, chunked, ref06.chunked_attention),
    (ch06.check_chunked_attention_arguments, chunked, ref06.chunked_attention),
    (ch06.check_train_sorting_transformer, train, ref06.train_sorting_transformer),
]

# ---- wrong answers ----


class _ResidualAfterNorm(Block):
    def forward(self, X, valid_lens=None):
        mask = None if valid_lens is None else (torch.arange(X.size(1)) < valid_lens[:, None])[:, None, None, :]
        X = X + self.norm1(self.drop(self.attention(X, X, X, mask)))  # norm, then add: not the post-norm block
        return X + self.norm2(self.drop(self.ffn(X)))


class _PreNorm(Block):
    def forward(self, X, valid_lens=None):
        mask = None if valid_lens is None else (torch.arange(X.size(1)) < valid_lens[:, None])[:, None, None, :]
        Y = self.norm1(X)
        X = X + self.drop(self.attention(Y, Y, Y, mask))  # pre-norm: another block than the contract's
        return X + self.drop(self.ffn(self.norm2(X)))


class _PaddingIgnored(Block):
    def forward(self, X, valid_lens=None):
        return super().forward(X, None)  # valid_lens unused: padding is attended to


class _NoFeedForwardResidual(Block):
    def forward(self, X, valid_lens=None):
        mask = None if valid_lens is None else (torch.arange(X.size(1)) < valid_lens[:, None])[:, None, None, :]
        Y = self.norm1(X + self.drop(self.attention(X, X, X, mask)))
        return self.norm2(self.drop(self.ffn(Y)))  # the second residual forgotten


class _AttentionOutputUnused(Block):
    def forward(self, X, valid_lens=None):
        mask = None if valid_lens is None else (torch.arange(X.size(1)) < valid_lens[:, None])[:, None, None, :]
        self.attention(X, X, X, mask)
        Y = self.norm1(X + self.drop(X))  # the attention's output computed, then X added instead
        return self.norm2(Y + self.drop(self.ffn(Y)))


def _forgets_to_rescale(queries, keys, values, chunk_size, mask=None):
    return chunked(queries, keys, values, chunk_size, mask, rescale=False)


def _max_not_subtracted(queries, keys, values, chunk_size, mask=None):
    return chunked(queries, keys, values, chunk_size, mask, subtract_max=False)


def _last_chunk_dropped(queries, keys, values, chunk_size, mask=None):
    return chunked(queries, keys, values, chunk_size, mask, last_chunk=False)


def _nan_on_empty_rows(queries, keys, values, chunk_size, mask=None):
    return chunked(queries, keys, values, chunk_size, mask, guard_empty=False)


def _whole_score_matrix(queries, keys, values, chunk_size, mask=None):
    if chunk_size < 1:
        raise ValueError("chunk_size must be at least 1")
    scores = queries.float() @ keys.float().mT / math.sqrt(queries.size(-1))  # (q, k) at once
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    return torch.nan_to_num(scores.softmax(-1), nan=0.0).to(values.dtype) @ values


def _delegates_to_pytorch(queries, keys, values, chunk_size, mask=None):
    outputs = [F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask).nan_to_num(0)]
    return outputs[0]


def _untrained(seed=0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Embedding(ch06.VOCABULARY, 16), nn.Linear(16, ch06.VOCABULARY))
    return model.eval(), 0.99  # claims an accuracy it does not have


def _ascending_whatever_the_seed(seed=0):
    return train(seed, order_of=lambda seed: None)  # the chapter's task, not the seed's


#: (name, check, answer, only the hidden cases catch it, a phrase of the message that says why)
WRONG_AND_WHY = [
    ("residual added after the norm", ch06.check_transformer_encoder_block, _ResidualAfterNorm, False,
     "the output: wrong values"),
    ("pre-norm instead of the contract's post-norm", ch06.check_transformer_encoder_block, _PreNorm, False,
     "the output: wrong values"),
    ("valid_lens ignored", ch06.check_transformer_encoder_block, _PaddingIgnored, False, "the output: wrong values"),
    ("feed-forward residual forgotten", ch06.check_transformer_encoder_block, _NoFeedForwardResidual, False,
     "the output: wrong values"),
    ("attention output computed but not used", ch06.check_transformer_encoder_block, _AttentionOutputUnused, False,
     "the output: wrong values"),
    ("running sum not rescaled", ch06.check_chunked_attention, _forgets_to_rescale, False, "the output: wrong values"),
    ("maximum not subtracted: overflow", ch06.check_chunked_attention, _max_not_subtracted, False,
     "the output: NaN where none is expected"),
    ("last partial chunk dropped", ch06.check_chunked_attention, _last_chunk_dropped, False,
     "the output: wrong values"),
    ("NaN on a fully masked row", ch06.check_chunked_attention, _nan_on_empty_rows, False,
     "the output: NaN where none is expected"),
    ("the whole score matrix at once", ch06.check_chunked_attention, _whole_score_matrix, False,
     "process the keys one chunk at a time"),
    ("delegates to F.scaled_dot_product_attention", ch06.check_chunked_attention, _delegates_to_pytorch, False,
     "calls torch.nn.functional.scaled_dot_product_attention"),
    ("an untrained model", ch06.check_train_sorting_transformer, _untrained, False,
     "correctly, in the order of seed"),
    ("ascending whatever the seed", ch06.check_train_sorting_transformer, _ascending_whatever_the_seed, False,
     "correctly, in the order of seed"),
]
#: the same without the phrase (as tests/students/test_one_bug.py reads them)
WRONG = [entry[:4] for entry in WRONG_AND_WHY]
#: the wrong answers above whose mistake the grading side knows (the reference's ``MISTAKES``), and how its
#: message names it (tests/students/test_mistakes.py)
KNOWN_MISTAKES = {
    "residual added after the norm": "each sublayer's output normalised before the residual is added "
                                     "(X + norm(sublayer(X)))",
    "pre-norm instead of the contract's post-norm": "a pre-norm block (X + sublayer(norm(X))) instead of the "
                                                    "post-norm norm(X + sublayer(X))",
    "valid_lens ignored": "valid_lens ignored: padding keys attended to",
    "feed-forward residual forgotten": "no residual around the feed-forward network (norm2(ffn(Y)) instead of "
                                       "norm2(Y + ffn(Y)))",
    "attention output computed but not used": "the attention's output not added: X added to itself in the first "
                                              "residual",
    "running sum not rescaled": "running sum and output not rescaled by exp(m_old − m_new) when the maximum grows",
    "last partial chunk dropped": "the last partial chunk of keys dropped (only k // chunk_size whole chunks read)",
}
