"""Reference answers and cases of assignment 07_decoding (grading side only).

Contract section 07: the teacher-forcing loss, attention one position at a time with a
key–value cache (whole, and a sliding window of it), greedy decoding with and without the
cache, beam search, sampling with temperature and top-k, grouped-query attention, the
cache's size, and a decoder that learns to reverse digits. The book's chapter 7
demonstrates with these functions.
"""

from __future__ import annotations

import math
import random

import torch
import torch.nn.functional as F
from torch import nn

from ..ch07_decoding import (
    NUM_DIGITS,
    SEQUENCE_LENGTH,
    TinyDecoder,
    _random_weights,
    _tiny_decoder,
    answer_code,
    make_reversal_batch,
    reversal_accuracy,
    table_log_probs,
)
from ..parts import Call, derived_seeds
from .ch06_transformer import hidden_training_calls

# --------------------------------------------------------------------------------------
# Teacher forcing
# --------------------------------------------------------------------------------------


def causal_lm_loss(logits: torch.Tensor, tokens: torch.Tensor, pad_id: int | None = None) -> torch.Tensor:
    """The next-token cross-entropy of a whole sequence at once (book, chapter 7, teacher forcing).

    Position ``t`` predicts token ``t + 1``: the logits lose their last position and the
    tokens their first, so both are ``(batch, n - 1)`` long.

    Args:
        logits: ``(batch, n, vocab)``; tokens: ``(batch, n)`` int64.
        pad_id: targets equal to it are left out of the mean, or ``None``.

    Returns:
        a scalar: the mean cross-entropy over every target that is not padding.
    """
    if logits.dim() != 3 or tokens.shape != logits.shape[:2]:
        raise ValueError(f"logits must be (batch, n, vocab) and tokens (batch, n): got logits "
                         f"{tuple(logits.shape)}, tokens {tuple(tokens.shape)}")
    predictions = logits[:, :-1].flatten(0, 1)  # (batch, n - 1, vocab) -> (batch·(n - 1), vocab)
    targets = tokens[:, 1:].flatten()  # (batch, n - 1) -> (batch·(n - 1),)
    return F.cross_entropy(predictions, targets, ignore_index=-100 if pad_id is None else pad_id)


# --------------------------------------------------------------------------------------
# Attention one position at a time
# --------------------------------------------------------------------------------------


def _attend(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """Scaled dot-product attention of ``(..., 1, d)`` over ``(..., T, d)``, ``(..., T, v)`` -> ``(..., 1, v)``."""
    scores = query @ keys.transpose(-2, -1) / math.sqrt(query.shape[-1])  # (..., 1, T)
    return torch.softmax(scores, dim=-1) @ values


def _grown(cache, key, value):
    """The cache's keys and values with the new position's appended: ``(..., t + 1, d)``, ``(..., t + 1, v)``."""
    if cache is None:
        return key, value
    return torch.cat([cache[0], key], dim=-2), torch.cat([cache[1], value], dim=-2)


def cached_attention_step(query, key, value, cache=None):
    """Attention for one new position, reusing the earlier positions' keys and values (book, chapter 7).

    Args:
        query, key: ``(..., 1, d)``; value: ``(..., 1, v)``: the new position.
        cache: ``None`` or ``(keys (..., t, d), values (..., t, v))`` of the earlier positions.

    Returns:
        ``(output (..., 1, v), (keys (..., t + 1, d), values (..., t + 1, v)))``: the new
        position attends to every position so far, itself included, and the cache grows by it.
    """
    if query.shape[-2] != 1 or key.shape[-2] != 1 or value.shape[-2] != 1:
        raise ValueError(f"query, key and value must hold one position (..., 1, ·), got {tuple(query.shape)}, "
                         f"{tuple(key.shape)}, {tuple(value.shape)}")
    keys, values = _grown(cache, key, value)
    return _attend(query, keys, values), (keys, values)


def sliding_window_step(query, key, value, cache, window: int):
    """:func:`cached_attention_step` over the last ``window`` positions only (book, chapter 7).

    The cache is a rolling buffer: it never holds more than ``window`` positions, so memory per
    step stays constant however long the sequence grows.

    Returns:
        ``(output (..., 1, v), (keys (..., w, d), values (..., w, v)))`` with ``w = min(t + 1, window)``.
    """
    if not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be a positive int, got {window!r}")
    keys, values = _grown(cache, key, value)
    # (..., t + 1, ·) -> (..., min(t + 1, window), ·): the oldest position leaves the window
    keys, values = keys[..., -window:, :], values[..., -window:, :]
    return _attend(query, keys, values), (keys, values)


# --------------------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------------------


@torch.no_grad()
def greedy_decode(model, prompt: torch.Tensor, max_new_tokens: int, use_cache: bool = True, eos_id: int | None = None):
    """Generate ``max_new_tokens`` tokens, each the most likely next one (book, chapter 7).

    Args:
        model: ``model(tokens (batch, t), cache=None) -> (logits (batch, t, vocab), cache)``.
        prompt: ``(batch, p)`` int64.
        use_cache: feed the prompt once, then one token per step with the cache; otherwise
            the whole prefix every step. Both give the same tokens.
        eos_id: once a sequence has produced it, it repeats it.

    Returns:
        ``(batch, p + max_new_tokens)`` int64: the prompt, then the generated tokens.
    """
    tokens, cache, fed = prompt, None, prompt
    finished = torch.zeros(prompt.shape[0], dtype=torch.bool, device=prompt.device)  # (batch,)
    for _ in range(max_new_tokens):
        logits, new_cache = model(fed, cache) if use_cache else model(tokens)
        next_token = logits[:, -1].argmax(dim=-1)  # (batch, vocab) -> (batch,)
        if eos_id is not None:
            next_token = torch.where(finished, torch.full_like(next_token, eos_id), next_token)
            finished = finished | (next_token == eos_id)
        tokens = torch.cat([tokens, next_token[:, None]], dim=1)
        cache, fed = (new_cache, next_token[:, None]) if use_cache else (None, tokens)
    return tokens


def beam_search(log_prob_fn, bos_id: int, eos_id: int, beam_size: int, max_len: int):
    """The most likely sequence that a beam of ``beam_size`` hypotheses finds (book, chapter 7).

    Every hypothesis starts as ``[bos_id]`` with score 0. At each step every unfinished
    hypothesis is extended by every token, adding the token's log-probability to its
    score; finished ones (ending in ``eos_id``) are carried over unchanged; the
    ``beam_size`` best of all these are kept. It stops when every kept hypothesis is
    finished or ``max_len`` tokens long.

    Args:
        log_prob_fn: ``log_prob_fn(prefixes (b, t)) -> (b, vocab)`` log-probabilities of the next token.

    Returns:
        ``(tokens (length,) int64, score)``: the best hypothesis kept (bos included) and its
        summed log-probability, a float.
    """
    if beam_size < 1 or max_len < 2:
        raise ValueError(f"beam_size must be ≥ 1 and max_len ≥ 2, got beam_size={beam_size}, max_len={max_len}")
    beam = [([bos_id], 0.0)]
    while not all(_done(tokens, eos_id, max_len) for tokens, _ in beam):
        growing = [(tokens, score) for tokens, score in beam if not _done(tokens, eos_id, max_len)]
        log_probs = log_prob_fn(torch.tensor([tokens for tokens, _ in growing]))  # (b, vocab)
        candidates = [(tokens, score) for tokens, score in beam if _done(tokens, eos_id, max_len)]
        candidates += [(tokens + [token], score + log_probs[row, token].item())
                       for row, (tokens, score) in enumerate(growing) for token in range(log_probs.shape[-1])]
        beam = sorted(candidates, key=lambda hypothesis: -hypothesis[1])[:beam_size]
    tokens, score = beam[0]
    return torch.tensor(tokens), score


def _done(tokens: list[int], eos_id: int, max_len: int) -> bool:
    return tokens[-1] == eos_id or len(tokens) >= max_len


def sample_next(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                generator: torch.Generator | None = None, top_p: float | None = None) -> torch.Tensor:
    """Draw the next token from ``softmax(logits / temperature)``, cut to the ``top_k`` largest logits
    and then to the nucleus of ``top_p`` (book, chapter 7).

    Args:
        logits: ``(..., vocab)``, any number of leading axes.
        temperature: ``0`` gives the argmax; larger flattens the distribution.
        top_k: keep only the ``top_k`` largest logits, or ``None`` for all.
        generator: the source of randomness, for reproducible draws.
        top_p: in (0, 1]: then keep only the smallest set of most probable tokens whose probability,
            renormalised after the top-k cut, reaches ``top_p`` (the token that crosses it included);
            ``None`` for all.

    Returns:
        ``(...)`` int64 token ids.
    """
    if temperature < 0:
        raise ValueError(f"temperature must be ≥ 0, got {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be ≥ 1 or None, got {top_k}")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"top_p must lie in (0, 1] or be None, got {top_p}")
    if temperature == 0:
        return logits.argmax(dim=-1)
    scaled = logits / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = scaled.topk(top_k, dim=-1).values[..., -1:]  # (..., 1): the k-th largest
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probabilities = torch.softmax(scaled, dim=-1)  # (..., vocab), renormalised over the top-k
    if top_p is not None:
        probabilities = probabilities * _nucleus(probabilities, top_p)
    rows = probabilities.flatten(0, -2)  # (..., vocab) -> (rows, vocab): multinomial takes 2-D at most
    drawn = torch.multinomial(rows, 1, generator=generator)  # (rows, 1)
    return drawn.reshape(logits.shape[:-1])  # (rows, 1) -> (...)


def _nucleus(probabilities: torch.Tensor, top_p: float) -> torch.Tensor:
    """The nucleus of ``top_p``: ``(..., vocab)`` probabilities -> ``(..., vocab)`` bool, ``True`` = kept.

    In order of decreasing probability, a token is kept while the tokens before it hold less than
    ``top_p``: so the token that crosses ``top_p`` is kept, and the most probable one always is.
    """
    descending, order = probabilities.sort(dim=-1, descending=True)  # (..., vocab) each
    before = descending.cumsum(dim=-1) - descending  # (..., vocab): probability of the tokens ranked above
    kept = before < top_p  # (..., vocab), in sorted order
    return kept.scatter(-1, order, kept)  # back to vocabulary order: kept[..., order[j]] = kept[..., j]


# --------------------------------------------------------------------------------------
# Grouped-query attention and the cache's size
# --------------------------------------------------------------------------------------


class GroupedQueryAttention(nn.Module):
    """Multi-head attention whose ``num_heads`` query heads share ``num_kv_heads`` key/value heads (book, chapter 7).

    Query head ``g`` reads key/value head ``g // (num_heads // num_kv_heads)``: consecutive
    query heads form a group. ``num_kv_heads == num_heads`` is chapter 4's multi-head
    attention, ``num_kv_heads == 1`` multi-query attention.

    ``forward(queries (batch, q, num_hiddens), keys (batch, k, num_hiddens), values (batch, k,
    num_hiddens), mask=None) -> (batch, q, num_hiddens)``; ``mask`` is bool, broadcastable to
    ``(batch, heads, q, k)``, ``True`` = may attend; a query with no allowed key gets zeros.
    """

    def __init__(self, num_hiddens: int, num_heads: int, num_kv_heads: int, bias: bool = False):
        super().__init__()
        if num_heads < 1 or num_hiddens % num_heads:
            raise ValueError(f"num_heads must be a positive divisor of num_hiddens = {num_hiddens}, got {num_heads}")
        if num_kv_heads < 1 or num_heads % num_kv_heads:
            raise ValueError(f"num_kv_heads must be a positive divisor of num_heads = {num_heads}, got {num_kv_heads}")
        self.num_heads, self.num_kv_heads = num_heads, num_kv_heads
        kv_width = num_kv_heads * (num_hiddens // num_heads)
        self.W_q = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.W_k = nn.Linear(num_hiddens, kv_width, bias=bias)
        self.W_v = nn.Linear(num_hiddens, kv_width, bias=bias)
        self.W_o = nn.Linear(num_hiddens, num_hiddens, bias=bias)

    def forward(self, queries, keys, values, mask=None):
        group = self.num_heads // self.num_kv_heads
        q = _split(self.W_q(queries), self.num_heads)  # (batch, heads, q, hd)
        # (batch, kv_heads, k, hd) -> (batch, heads, k, hd): each key/value head repeated for its group
        k = _split(self.W_k(keys), self.num_kv_heads).repeat_interleave(group, dim=1)
        v = _split(self.W_v(values), self.num_kv_heads).repeat_interleave(group, dim=1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (batch, heads, q, k)
        if mask is not None:
            allowed = mask.expand_as(scores)
            scores = scores.masked_fill(~allowed, float("-inf"))
            # a query with no allowed key: uniform scores, zeroed below (no NaN)
            scores = scores.masked_fill(~allowed.any(dim=-1, keepdim=True), 0.0)
        weights = torch.softmax(scores, dim=-1)
        if mask is not None:
            weights = weights * allowed.any(dim=-1, keepdim=True)
        heads = weights @ v  # (batch, heads, q, hd)
        return self.W_o(heads.transpose(1, 2).flatten(2))  # -> (batch, q, heads, hd) -> (batch, q, num_hiddens)


def _split(X: torch.Tensor, heads: int) -> torch.Tensor:
    """``(batch, n, heads·hd) -> (batch, heads, n, hd)``."""
    return X.unflatten(-1, (heads, -1)).transpose(1, 2)


def kv_cache_bytes(num_layers: int, num_kv_heads: int, head_dim: int, seq_len: int, batch_size: int = 1,
                   bytes_per_value: int = 2) -> int:
    """Bytes of a key–value cache: a key and a value of ``head_dim`` numbers per layer, kv head,
    position and sequence (book, chapter 7)."""
    return 2 * num_layers * num_kv_heads * head_dim * seq_len * batch_size * bytes_per_value


# --------------------------------------------------------------------------------------
# A decoder that learns to reverse
# --------------------------------------------------------------------------------------


def train_reversal_decoder(seed: int = 0, steps: int = 150, batch_size: int = 128, num_kv_heads: int | None = None,
                           log=None, code=None):
    """Train a :class:`~autograder.ch07_decoding.TinyDecoder` to reverse digits, by teacher forcing (book, chapter 7).

    Each training sequence is ``digits, SEPARATOR, reversed digits``; the loss is
    :func:`causal_lm_loss` on the part that follows the last digit (the answer), all
    positions in one pass.

    Args:
        steps: at least 1; Adam at a rate of 3e-3 under :func:`_schedule`.
        num_kv_heads: key/value heads of the model (``None``: one per query head).
        log: called as ``log(step, loss)`` at every step, or ``None``.
        code: how the answers write each digit, ``(10,)``; ``None``: the code of ``seed``
            (``answer_code(seed)``, as the exercise's contract asks).

    Returns:
        ``(model, accuracy)``: the model in evaluation mode, and the per-token accuracy of
        its greedy answers to 1000 prompts drawn from another generator.
    """
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    code = answer_code(seed) if code is None else code
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    model = TinyDecoder(num_hiddens=32, num_heads=4, num_layers=2, max_len=SEQUENCE_LENGTH, num_kv_heads=num_kv_heads)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    schedule = _schedule(optimizer, steps)
    for step in range(steps):
        prompts, answers = make_reversal_batch(batch_size, generator, code)
        tokens = torch.cat([prompts, answers], dim=1)  # (batch, 2·NUM_DIGITS + 1)
        logits, _ = model(tokens)
        # from the separator on: position NUM_DIGITS (the separator) predicts the first answer digit, and so on
        loss = causal_lm_loss(logits[:, NUM_DIGITS:], tokens[:, NUM_DIGITS:])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        if log is not None:
            log(step, loss.item())
    model.eval()
    return model, reversal_accuracy(model, *make_reversal_batch(1000, torch.Generator().manual_seed(seed + 10_000), code))


def _schedule(optimizer, steps: int):
    """The learning rate over ``steps`` steps: from 10 steps on, one cycle (a fifth of the steps
    warming up to 3e-3, the rest annealing towards 0); with fewer, the warm-up would last under 2
    steps (``OneCycleLR`` divides by zero at 5), so the rate stays at 3e-3."""
    if steps < 10:
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    return torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-3, total_steps=steps, pct_start=0.2)


REFERENCES = {
    "causal_lm_loss": causal_lm_loss,
    "cached_attention_step": cached_attention_step,
    "sliding_window_step": sliding_window_step,
    "greedy_decode": greedy_decode,
    "beam_search": beam_search,
    "sample_next": sample_next,
    "GroupedQueryAttention": GroupedQueryAttention,
    "kv_cache_bytes": kv_cache_bytes,
    "train_reversal_decoder": train_reversal_decoder,
}

# --------------------------------------------------------------------------------------
# Known mistakes: the judge names the one a wrong answer's values match (judge.py)
# --------------------------------------------------------------------------------------


def _loss_shifted_backwards(logits, tokens, pad_id=None):
    """Position ``t`` scored against token ``t - 1``, padding not left out."""
    return F.cross_entropy(logits[:, 1:].flatten(0, 1), tokens[:, :-1].flatten())


def _loss_not_shifted(logits, tokens, pad_id=None):
    """Position ``t`` scored against its own token ``t``."""
    return F.cross_entropy(logits.flatten(0, 1), tokens.flatten(), ignore_index=-100 if pad_id is None else pad_id)


def _loss_padding_counted(logits, tokens, pad_id=None):
    """``pad_id`` ignored: padding targets scored and counted in the mean like any other."""
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())


def _step_without_the_newest(query, key, value, cache=None):
    """The new key and value are cached, but attended to only from the next step on."""
    keys, values = _grown(cache, key, value)
    return _attend(query, *((key, value) if cache is None else cache)), (keys, values)


def _window_too_wide(query, key, value, cache, window):
    """``window + 1`` positions kept."""
    return sliding_window_step(query, key, value, cache, window + 1)


def _window_too_narrow(query, key, value, cache, window):
    """``window - 1`` positions kept (a window of 1 left as it is)."""
    return sliding_window_step(query, key, value, cache, max(window - 1, 1))


def _greedy_end_not_repeated(model, prompt, max_new_tokens, use_cache=True, eos_id=None):
    """``eos_id`` ignored: a finished sequence goes on decoding."""
    return greedy_decode(model, prompt, max_new_tokens, use_cache)


def _greedy_without_the_cache(model, prompt, max_new_tokens, use_cache=True, eos_id=None):
    """``use_cache`` ignored: the whole prefix fed at every step."""
    return greedy_decode(model, prompt, max_new_tokens, False, eos_id)


def _beam_pooled(log_prob_fn, bos_id, eos_id, beam_size, max_len, as_libraries=False):
    """Finished hypotheses go to a pool (as libraries do: if among the step's best); the beam keeps unfinished."""
    live, pool = [([bos_id], 0.0)], []
    while live:
        log_probs = log_prob_fn(torch.tensor([tokens for tokens, _ in live]))  # (live, vocab)
        ranked = sorted(((tokens + [token], score + log_probs[row, token].item())
                         for row, (tokens, score) in enumerate(live) for token in range(log_probs.shape[-1])),
                        key=lambda hypothesis: -hypothesis[1])
        if as_libraries:  # an end token pooled only among the beam_size best; live ones pooled at max_len
            pool += [hypothesis for hypothesis in ranked[:beam_size] if hypothesis[0][-1] == eos_id]
            live = [hypothesis for hypothesis in ranked if hypothesis[0][-1] != eos_id][:beam_size]
            if live and len(live[0][0]) >= max_len:
                pool, live = pool + live, []
        else:
            pool += [hypothesis for hypothesis in ranked if _done(hypothesis[0], eos_id, max_len)]
            live = [hypothesis for hypothesis in ranked if not _done(hypothesis[0], eos_id, max_len)][:beam_size]
    tokens, score = max(pool, key=lambda hypothesis: hypothesis[1])
    return torch.tensor(tokens), score


def _beam_pooled_as_libraries(log_prob_fn, bos_id, eos_id, beam_size, max_len):
    """:func:`_beam_pooled` as Hugging Face and fairseq pool, without a length penalty."""
    return _beam_pooled(log_prob_fn, bos_id, eos_id, beam_size, max_len, as_libraries=True)


def _beam_mean_score(log_prob_fn, bos_id, eos_id, beam_size, max_len):
    """The right hypothesis, its score divided by the number of tokens after ``bos_id``."""
    tokens, score = beam_search(log_prob_fn, bos_id, eos_id, beam_size, max_len)
    return tokens, score / (len(tokens) - 1)


class _GroupsTiled(GroupedQueryAttention):
    """Query head ``g`` reads key/value head ``g % num_kv_heads`` (``repeat``, not ``repeat_interleave``)."""

    def forward(self, queries, keys, values, mask=None):
        group = self.num_heads // self.num_kv_heads
        q = _split(self.W_q(queries), self.num_heads)  # (batch, heads, q, hd)
        k = _split(self.W_k(keys), self.num_kv_heads).repeat(1, group, 1, 1)  # (batch, heads, k, hd), tiled
        v = _split(self.W_v(values), self.num_kv_heads).repeat(1, group, 1, 1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (batch, heads, q, k)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # a query with no allowed key: zeros
        return self.W_o((weights @ v).transpose(1, 2).flatten(2))


def _cache_bytes_keys_only(num_layers, num_kv_heads, head_dim, seq_len, batch_size=1, bytes_per_value=2):
    """The keys' bytes only: the factor 2 for keys and values left out."""
    return kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch_size, bytes_per_value) // 2


def _cache_bytes_one_sequence(num_layers, num_kv_heads, head_dim, seq_len, batch_size=1, bytes_per_value=2):
    """``batch_size`` left out of the product."""
    return kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, 1, bytes_per_value)


#: ``{part: ((what the student did, in their words), the function that does it), ...}``: the one whose values a
#: wrong answer's match is named in its message (of several, the one matching it on most cases; then the first).
#: Sampling and training are judged by properties, not against the reference: no mistake of theirs is named. Nor
#: are a beam of 1 whatever beam_size and a beam that drops its finished hypotheses: on some students' cases they
#: find the same hypotheses on every case, and most often on the first they get wrong.
MISTAKES = {
    "causal_lm_loss": (
        ("targets shifted the wrong way: position t scored against token t − 1", _loss_shifted_backwards),
        ("no shift: position t scored against its own token", _loss_not_shifted),
        ("padding not left out: its targets scored and counted in the mean", _loss_padding_counted),
    ),
    "cached_attention_step": (
        ("the new key and value cached but not attended to in their own step", _step_without_the_newest),
    ),
    "sliding_window_step": (
        ("window one position too wide (window + 1 positions kept)", _window_too_wide),
        ("window one position too narrow (window − 1 positions kept)", _window_too_narrow),
    ),
    "greedy_decode": (
        ("a sequence that produced eos_id goes on decoding instead of repeating it", _greedy_end_not_repeated),
        ("the cache never used: the whole prefix fed at every step, also with use_cache=True",
         _greedy_without_the_cache),
    ),
    "beam_search": (
        ("finished hypotheses set aside in a pool, the beam refilled with beam_size unfinished ones", _beam_pooled),
        ("finished hypotheses pooled only when among the step's beam_size best, as Hugging Face and fairseq do "
         "(no length penalty)", _beam_pooled_as_libraries),
        ("score averaged over the generated tokens instead of summed", _beam_mean_score),
    ),
    "GroupedQueryAttention": (
        ("query head g paired with key/value head g mod num_kv_heads (repeat instead of repeat_interleave)",
         _GroupsTiled),
    ),
    "kv_cache_bytes": (
        ("the keys only: the factor 2 for keys and values left out", _cache_bytes_keys_only),
        ("batch_size left out", _cache_bytes_one_sequence),
    ),
}

# --------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------


def _batch_shape(rng: random.Random, index: int) -> tuple[int, ...]:
    """No batch axis, one, or two (batch, heads): the leading axes ``...`` of a case."""
    return tuple(rng.randint(1, 3) for _ in range(index % 3))


def _loss_calls(seeds) -> list[Call]:
    """Random logits and tokens; padding at the end of some sequences, with and without pad_id.

    The first seed's sequences are at least 3 long and the last of them ends in padding, so
    that every key's cases hold a padded target (a loss that counts padding is caught)."""
    calls = []
    for index, seed in enumerate(seeds):
        rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
        batch, n, vocab = rng.randint(1, 4), rng.randint(2, 7), rng.randint(3, 9)
        n = max(n, 3) if index == 0 else n
        logits = torch.randn(batch, n, vocab, generator=g) * 2
        tokens = torch.randint(0, vocab, (batch, n), generator=g)
        pad = vocab - 1
        padded = tokens.masked_fill(torch.arange(n) >= torch.randint(2, n + 1, (batch, 1), generator=g), pad)
        padded[0, 1] = 0  # at least one target that is not padding
        if index == 0:
            padded[-1, -1] = pad  # and at least one that is
        calls.append(Call(f"logits {tuple(logits.shape)}, tokens {tuple(tokens.shape)}", (logits, tokens)))
        calls.append(Call(f"logits {tuple(logits.shape)}, tokens {tuple(tokens.shape)} padded at the end with "
                          f"pad_id={pad}", (logits, padded), {"pad_id": pad}))
    return calls


def _sequence(g: torch.Generator, batch: tuple, n: int, d: int, v: int):
    return tuple(torch.randn(*batch, n, width, generator=g) for width in (d, d, v))


def _stepped_calls(seeds, windowed: bool) -> list[Call]:
    """Sequences of 1 to 7 positions (4 to 9 with windows of 1, of less than the sequence and of
    more), with 0 to 2 leading axes, to be fed one position at a time. The first seed's sequence
    has at least 2 positions, so that every key's cases use the cache."""
    calls = []
    for index, seed in enumerate(seeds):
        rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
        batch = _batch_shape(rng, index)
        n, d, v = rng.randint(4, 9) if windowed else rng.randint(1, 7), rng.randint(1, 8), rng.randint(1, 5)
        n = max(n, 2) if index == 0 else n
        queries, keys, values = _sequence(g, batch, n, d, v)
        for window in (1, rng.randint(2, n - 1), n + 2) if windowed else (None,):
            extra = () if window is None else (window,)
            said = "" if window is None else f", window={window}"
            calls.append(Call(f"queries, keys {tuple(queries.shape)}, values {tuple(values.shape)}{said}, fed one "
                              "position at a time from cache=None", (queries, keys, values, *extra)))
    return calls


def _decoder_weights(g: torch.Generator, config: dict) -> dict:
    """Random weights for a TinyDecoder of ``config``, its read-out scaled so that logits are far apart."""
    state = _random_weights(g.initial_seed(), config)
    state["readout.weight"] = state["readout.weight"] * 8
    return state


def _path_margin(model, prompt: torch.Tensor, max_new_tokens: int, use_cache: bool) -> tuple[torch.Tensor, float]:
    """``(tokens, margin)``: greedy decoding's tokens with ``model`` called as ``use_cache`` asks, and the smallest
    gap between the two largest logits that picked them."""
    gaps = []

    def recorded(tokens, cache=None):
        logits, new_cache = model(tokens, cache)
        top2 = logits[:, -1].topk(2, dim=-1).values  # (batch, 2)
        gaps.append((top2[:, 0] - top2[:, 1]).min().item())
        return logits, new_cache

    with torch.no_grad():
        tokens = greedy_decode(recorded, prompt, max_new_tokens, use_cache=use_cache)
    return tokens, min(gaps)


def _greedy_calls(seeds) -> list[Call]:
    """Random marked TinyDecoders (1-2 layers, 1-4 heads, grouped or not), with and without the cache and an end token.

    Each decoder marks its logits by how it is called (``MarkedDecoder``), so that decoding
    without the cache where it is asked for, or with it the wrong way, gives other tokens: models
    whose cached and uncached tokens agree are redrawn, and so are those whose greedy paths have
    two logits within 0.01 of each other, so that rounding cannot change a token.
    """
    calls = []
    for seed in seeds:
        rng = random.Random(seed)
        heads = rng.choice((1, 2, 4))
        config = {"vocab_size": rng.randint(5, 12), "num_hiddens": 4 * heads, "num_heads": heads,
                  "num_layers": rng.randint(1, 2), "max_len": 24, "num_kv_heads": rng.choice([1, heads]),
                  "marks": rng.randrange(2**31)}
        batch, p, new = rng.randint(1, 3), rng.randint(1, 5), rng.randint(3, 8)
        for attempt in range(100):
            g = torch.Generator().manual_seed(seed * 100 + attempt)
            config["marks"] = rng.randrange(2**31)
            state = _decoder_weights(g, config)
            prompt = torch.randint(0, config["vocab_size"], (batch, p), generator=g)
            model = _tiny_decoder(config, state, prompt.device)
            (cached, cached_margin), (full, full_margin) = (_path_margin(model, prompt, new, use) for use in (True, False))
            if min(cached_margin, full_margin) > 0.01 and not torch.equal(cached, full):
                break
        eos = int(cached[0, p + 1])  # a token the first sequence produces
        described = (f"a marked TinyDecoder({', '.join(f'{k}={v}' for k, v in config.items() if k != 'marks')}), "
                     f"prompt {tuple(prompt.shape)}, max_new_tokens={new}")
        for use_cache in (True, False):
            calls.append(Call(f"{described}, use_cache={use_cache}", (config, state, prompt, new),
                              {"use_cache": use_cache, "eos_id": None}))
        calls.append(Call(f"{described}, use_cache=True, eos_id={eos}", (config, state, prompt, new),
                          {"use_cache": True, "eos_id": eos}))
    return calls


def _telling(table: torch.Tensor, bos: int, eos: int, max_len: int) -> bool:
    """Whether, on ``table``, greedy search misses the best sequence, and a beam of 2 or 3 finds
    another hypothesis than each known variant of the contract's rule that sets finished
    hypotheses aside outside the beam (:func:`_pooled_beam`, both ways). Every table of a
    student's cases is drawn so, so each variant is wrong for every student, not for some.
    (A search that stops once its best hypothesis is finished needs no case: scores only
    fall as hypotheses grow, so it returns what the contract's rule returns.)"""
    log_prob_fn = table_log_probs(table)
    found = {beam: beam_search(log_prob_fn, bos, eos, beam, max_len)[0] for beam in (2, 3)}
    if not all(any(not torch.equal(_pooled_beam(log_prob_fn, bos, eos, beam, max_len, as_libraries), tokens)
                   for beam, tokens in found.items())
               for as_libraries in (True, False)):  # the libraries' variant first: it is the rarer to tell apart
        return False
    greedy, _ = beam_search(log_prob_fn, bos, eos, 1, max_len)
    best, _ = beam_search(log_prob_fn, bos, eos, table.shape[-1] ** max_len, max_len)
    return not torch.equal(greedy, best)


def _pooled_beam(log_prob_fn, bos: int, eos: int, beam_size: int, max_len: int,
                 as_libraries: bool = False) -> torch.Tensor:
    """The best sequence of a beam search whose finished hypotheses leave the beam for a pool,
    the ``beam_size`` best unfinished ones going on: not the contract's rule (for choosing cases).

    ``as_libraries``: as Hugging Face's ``BeamSearchScorer`` and fairseq do (without a length
    penalty), a finished hypothesis is pooled only if it ranks among the ``beam_size`` best
    candidates of its step, and dropped further down; otherwise every finished one is pooled.
    The libraries' pool of ``beam_size`` best and their early stop (once the full pool's worst
    beats every live hypothesis) change nothing of which hypothesis is best, so they are left out.
    """
    beam, pool = [([bos], 0.0)], []
    while beam:
        log_probs = log_prob_fn(torch.tensor([tokens for tokens, _ in beam]))  # (beam, vocab)
        candidates = sorted(((tokens + [token], score + log_probs[row, token].item())
                             for row, (tokens, score) in enumerate(beam) for token in range(log_probs.shape[-1])),
                            key=lambda hypothesis: -hypothesis[1])
        pool += [h for rank, h in enumerate(candidates)
                 if _done(h[0], eos, max_len) and (rank < beam_size or not as_libraries)]
        beam = [h for h in candidates if not _done(h[0], eos, max_len)][:beam_size]
    return torch.tensor(max(pool, key=lambda hypothesis: hypothesis[1])[0])


def _beam_calls(seeds) -> list[Call]:
    """Random next-token tables over 3-4 tokens on which greedy search is wrong and common variants
    of the rule go astray (:func:`_telling`); beams of 1, 2, 3 and one large enough to be exact.

    Hypotheses are 4 or 5 tokens long: at 3, pooling finished hypotheses as libraries do finds
    what the contract's rule finds on every table (the one more live hypothesis it keeps is
    already worse than the finished one it makes room for, and has one step left); about one
    table in 125 tells it apart at 4, one in 50 at 5, so a few hundred are drawn per table kept.
    """
    calls = []
    for seed in seeds:
        rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
        vocab, max_len = rng.randint(3, 4), rng.randint(4, 5)
        bos, eos = 0, vocab - 1
        for _ in range(10_000):  # tables are redrawn until they tell the rules of the search apart
            # (step, last token, next token): log-probabilities of the next token
            table = torch.log_softmax(torch.randn(max_len - 1, vocab, vocab, generator=g, dtype=torch.float64), -1)
            if _telling(table, bos, eos, max_len):
                break
        else:
            raise RuntimeError(f"no table of seed {seed} tells the rules of beam search apart")
        for beam_size in (1, 2, 3, vocab ** max_len):
            calls.append(Call(f"a table of log-probabilities {tuple(table.shape)} (step, last token, next token), "
                              f"bos_id={bos}, eos_id={eos}, beam_size={beam_size}, max_len={max_len}",
                              (table, bos, eos, beam_size, max_len)))
    return calls


def _sampling_calls(seeds) -> list[Call]:
    """Temperature 0, below 1, 1 and above; top_k None, 1 and a few; top_p None, 1 and nuclei that
    tell common mistakes apart (:func:`_nucleus_cases`); 10000 draws per row."""
    calls = []
    for seed in seeds:
        rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
        rows, vocab = rng.randint(1, 3), rng.randint(4, 8)
        logits = torch.randn(rows, vocab, generator=g) * 1.5
        settings = [(logits, temperature, top_k, None) for temperature, top_k in (
            (0.0, None), (1.0, None), (0.5, rng.randint(2, vocab - 1)), (2.0, None),
            (1.5, rng.randint(2, vocab - 1)), (1.0, 1))]
        for logits, temperature, top_k, top_p in settings + _nucleus_cases(rng, g, rows, vocab):
            said, options = ("", {}) if top_p is None else (f", top_p={top_p}", {"top_p": top_p})
            calls.append(Call(f"logits {tuple(logits.shape)} repeated 10000 times, so logits (10000, {rows}, {vocab}) "
                              f"in one call, temperature={temperature}, top_k={top_k}{said}, a generator seeded with "
                              f"{seed}", (logits, temperature, top_k, seed, 10_000), options))
    return calls


#: How far every cumulative probability lies from a graded ``top_p``, and the crossing token's
#: probability from the next one's: far above float rounding, so a correct nucleus never differs.
NUCLEUS_MARGIN = 0.01
#: A mistake is told apart when its nucleus gains or loses a token this probable: drawn or
#: missed hundreds of times in 10000 draws.
TELLING_PROBABILITY = 0.02


def _nucleus_cases(rng: random.Random, g: torch.Generator, rows: int, vocab: int) -> list[tuple]:
    """``(logits (rows, vocab), temperature, top_k, top_p)`` of the nucleus cases: three with a
    ``top_p`` below 1 (temperatures 0.6, 1 and 2; the last two after a top-k cut), ``top_p = 1``
    with and without top_k, and temperature 0. Logits are redrawn until every ``top_p`` lies
    clear of the cumulative probabilities (:data:`NUCLEUS_MARGIN`) and the cases tell each of
    :data:`NUCLEUS_MISTAKES` from the contract's nucleus."""
    settings = ((0.6, None), (1.0, rng.randint(2, vocab // 2 + 1)), (2.0, rng.randint(2, vocab - 1)))
    for _ in range(1000):
        logits = torch.randn(rows, vocab, generator=g) * 1.5
        cases = [(logits, temperature, top_k, _clear_top_p(rng, logits, temperature, top_k))
                 for temperature, top_k in settings]
        if all(case[-1] is not None for case in cases) and all(
                any(_tells(mistake, *case) for case in cases) for mistake in NUCLEUS_MISTAKES.values()):
            return cases + [(logits, 1.3, None, 1.0), (logits, 0.8, settings[1][1], 1.0), (logits, 0.0, None, 0.5)]
    raise RuntimeError("no logits found whose nuclei tell the mistakes apart")


def _cut(logits: torch.Tensor, temperature: float, top_k: int | None) -> torch.Tensor:
    """``logits / temperature`` in float64, ``-inf`` outside the ``top_k`` largest: ``(rows, vocab)``."""
    scaled = logits.double() / temperature
    if top_k is None:
        return scaled
    return scaled.masked_fill(scaled < scaled.topk(top_k, dim=-1).values[..., -1:], float("-inf"))


def _clear_top_p(rng: random.Random, logits, temperature: float, top_k: int | None) -> float | None:
    """A ``top_p`` of 0.300, 0.301, ..., 0.950 at least :data:`NUCLEUS_MARGIN` from every row's
    cumulative probabilities, whose crossing token is at least that much more probable than the
    next one, drawn with ``rng``; ``None`` if there is none."""
    descending = torch.softmax(_cut(logits, temperature, top_k), dim=-1).sort(dim=-1, descending=True).values
    cumulative = descending.cumsum(dim=-1)  # (rows, vocab)
    candidates = torch.arange(300, 951, dtype=torch.float64) / 1000  # (c,)
    distance = (cumulative[..., None] - candidates).abs()  # (rows, vocab, c)
    crossing = (cumulative[..., None] < candidates).sum(dim=1)  # (rows, c): rank of the crossing token
    lead = descending - F.pad(descending, (0, 1))[..., 1:]  # (rows, vocab): over the next token
    far = (distance >= NUCLEUS_MARGIN).flatten(0, 1).all(dim=0)  # (rows, vocab, c) -> (rows·vocab, c) -> (c,)
    admissible = candidates[far & (lead.gather(-1, crossing) >= NUCLEUS_MARGIN).all(dim=0)].tolist()
    return round(rng.choice(admissible), 3) if admissible else None


def _tells(mistake, logits, temperature: float, top_k: int | None, top_p: float) -> bool:
    """Whether ``mistake``'s nucleus gains or loses a token of probability ≥ :data:`TELLING_PROBABILITY`,
    however rounding moves ``top_p`` (by 0.001)."""
    cut = _cut(logits, temperature, top_k)
    probabilities = torch.softmax(cut, dim=-1)  # (rows, vocab), renormalised over the top-k
    right = _nucleus(probabilities, top_p)
    return all(((mistake(logits, cut, temperature, top_p + shift) != right) & (probabilities >= TELLING_PROBABILITY))
               .any() for shift in (-1e-3, 1e-3))


def _before(values: torch.Tensor) -> torch.Tensor:
    """For each token, the sum of ``values`` over the tokens ranked above it by ``values``: ``(rows, vocab)``."""
    descending, order = values.sort(dim=-1, descending=True)
    above = descending.cumsum(dim=-1) - descending
    return above.scatter(-1, order, above)  # back to vocabulary order


def _without_crossing(logits, cut, temperature, top_p):
    probabilities = cut.softmax(-1)  # the most probable token kept, the token that crosses top_p not
    return (_before(probabilities) + probabilities < top_p) | (_before(probabilities) == 0)


def _before_the_cut(logits, cut, temperature, top_p):
    return (cut > float("-inf")) & _nucleus(torch.softmax(logits.double() / temperature, dim=-1), top_p)


def _before_the_temperature(logits, cut, temperature, top_p):
    return _nucleus(torch.softmax(cut * temperature, dim=-1), top_p)


def _of_the_logits(logits, cut, temperature, top_p):
    return (cut > float("-inf")) & (_before(cut.nan_to_num(neginf=0.0)) < top_p)


#: Wrong nuclei, for choosing cases: ``mistake(logits, cut, temperature, top_p) -> kept (rows, vocab)
#: bool``, where ``cut`` is ``logits / temperature`` cut to the top k, float64 ``(rows, vocab)``.
NUCLEUS_MISTAKES = {
    "top_p ignored": lambda logits, cut, temperature, top_p: cut > float("-inf"),
    "the token that crosses top_p left out": _without_crossing,
    "the nucleus of the probabilities before the top-k cut (not renormalised)": _before_the_cut,
    "the nucleus of the probabilities before the temperature": _before_the_temperature,
    "top_p compared with cumulative logits": _of_the_logits,
}


def _gqa_state(g: torch.Generator, num_hiddens: int, kv_width: int, bias: bool) -> dict:
    widths = {"W_q": num_hiddens, "W_k": kv_width, "W_v": kv_width, "W_o": num_hiddens}
    state = {f"{name}.weight": torch.randn(width, num_hiddens, generator=g) * num_hiddens**-0.5
             for name, width in widths.items()}
    if bias:
        state |= {f"{name}.bias": torch.randn(width, generator=g) * 0.1 for name, width in widths.items()}
    return state


def _gqa_calls(seeds) -> list[Call]:
    """Multi-query, grouped and full multi-head attention; self- and cross-attention; masks with an empty row."""
    calls = []
    for index, seed in enumerate(seeds):
        rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
        heads, head_dim = rng.choice((4, 6, 8)), rng.randint(1, 3)
        num_hiddens, batch, q, k = heads * head_dim, rng.randint(1, 3), rng.randint(1, 5), rng.randint(2, 6)
        queries = torch.randn(batch, q, num_hiddens, generator=g)
        keys, values = torch.randn(batch, k, num_hiddens, generator=g), torch.randn(batch, k, num_hiddens, generator=g)
        mask = torch.rand(batch, 1, q, k, generator=g) < 0.6
        mask[0, 0, 0] = False  # the first query of the first sequence may attend to nothing
        for kv_heads in (1, 2, heads):
            bias = (index + kv_heads) % 2 == 0
            state = _gqa_state(g, num_hiddens, kv_heads * head_dim, bias)
            for name, m in (("None", None), ("random (batch, 1, q, k) with an empty row", mask)):
                calls.append(Call(f"num_hiddens={num_hiddens}, num_heads={heads}, num_kv_heads={kv_heads}, bias={bias}, "
                                  f"queries {tuple(queries.shape)}, keys and values {tuple(keys.shape)}, mask {name}",
                                  (queries, keys, values, m, heads, kv_heads, bias, state)))
    return calls


def _cache_bytes_calls(seeds) -> list[Call]:
    """Sizes of small and of real models, with default and explicit batch and number format; the
    first seed's batch holds at least 2 sequences, so that every key's cases count the batch."""
    calls = [Call("num_layers=32, num_kv_heads=8, head_dim=128, seq_len=4096 (defaults)", (32, 8, 128, 4096))]
    for index, seed in enumerate(seeds):
        rng = random.Random(seed)
        args = (rng.randint(1, 80), rng.choice((1, 2, 4, 8, 32)), rng.choice((32, 64, 80, 128)), rng.randint(1, 9000))
        batch, width = rng.randint(1, 16), rng.choice((1, 2, 4))
        batch = max(batch, 2) if index == 0 else batch
        calls.append(Call(f"num_layers={args[0]}, num_kv_heads={args[1]}, head_dim={args[2]}, seq_len={args[3]}, "
                          f"batch_size={batch}, bytes_per_value={width}", args,
                          {"batch_size": batch, "bytes_per_value": width}))
    return calls


def _reversal_calls(seeds, training_seed: int = 1) -> list[Call]:
    """Training with ``training_seed``, then the model's greedy answers to 500 prompts drawn here, with each of
    ``seeds``."""
    return [Call(f"train_reversal_decoder(seed={training_seed}), tested on 500 fresh prompts drawn with seed {s}, "
                 f"answered in the code of seed {training_seed}",
                 (training_seed, make_reversal_batch(500, torch.Generator().manual_seed(s))[0]))
            for s in seeds]


VISIBLE = {
    "causal_lm_loss": lambda: _loss_calls([0, 1]),
    "cached_attention_step": lambda: _stepped_calls([0, 1, 2], windowed=False),
    "sliding_window_step": lambda: _stepped_calls([0, 1], windowed=True),
    "greedy_decode": lambda: _greedy_calls([0, 1]),
    "beam_search": lambda: _beam_calls([0, 1]),
    "sample_next": lambda: _sampling_calls([0]),
    "GroupedQueryAttention": lambda: _gqa_calls([0]),
    "kv_cache_bytes": lambda: _cache_bytes_calls([0, 1]),
    "train_reversal_decoder": lambda: _reversal_calls([7]),
}
HIDDEN = {
    "causal_lm_loss": lambda seed: _loss_calls(derived_seeds(seed)),
    "cached_attention_step": lambda seed: _stepped_calls(derived_seeds(seed), windowed=False),
    "sliding_window_step": lambda seed: _stepped_calls(derived_seeds(seed), windowed=True),
    "greedy_decode": lambda seed: _greedy_calls(derived_seeds(seed)),
    "beam_search": lambda seed: _beam_calls(derived_seeds(seed)),
    "sample_next": lambda seed: _sampling_calls(derived_seeds(seed, 2)),
    "GroupedQueryAttention": lambda seed: _gqa_calls(derived_seeds(seed, 2)),
    "kv_cache_bytes": lambda seed: _cache_bytes_calls(derived_seeds(seed)),
    "train_reversal_decoder": lambda seed: hidden_training_calls(_reversal_calls, seed),
}
