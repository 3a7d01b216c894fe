"""Reference answers and cases of assignment 08_fast_inference (grading side only).

Contract section 07, its fast-inference half: attention one position at a time with a key–value
cache (whole, and a sliding window of it), greedy decoding with and without the cache,
grouped-query attention and the cache's size. The book's chapter 8 demonstrates with these
functions.
"""

from __future__ import annotations

import math
import random

import torch
from torch import nn

from ..ch08_fast_inference import _random_weights, _tiny_decoder
from ..parts import Call, derived_seeds


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


def _batch_shape(rng: random.Random, index: int) -> tuple[int, ...]:
    """No batch axis, one, or two (batch, heads): the leading axes ``...`` of a case."""
    return tuple(rng.randint(1, 3) for _ in range(index % 3))


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


REFERENCES = {
    "cached_attention_step": cached_attention_step,
    "sliding_window_step": sliding_window_step,
    "greedy_decode": greedy_decode,
    "GroupedQueryAttention": GroupedQueryAttention,
    "kv_cache_bytes": kv_cache_bytes,
}


#: ``{part: ((what the student did, in their words), the function that does it), ...}``: the one whose values a
#: wrong answer's match is named in its message (of several, the one matching it on most cases; then the first).
#: Sampling and training are judged by properties, not against the reference: no mistake of theirs is named. Nor
#: are a beam of 1 whatever beam_size and a beam that drops its finished hypotheses: on some students' cases they
#: find the same hypotheses on every case, and most often on the first they get wrong.
MISTAKES = {
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
    "GroupedQueryAttention": (
        ("query head g paired with key/value head g mod num_kv_heads (repeat instead of repeat_interleave)",
         _GroupsTiled),
    ),
    "kv_cache_bytes": (
        ("the keys only: the factor 2 for keys and values left out", _cache_bytes_keys_only),
        ("batch_size left out", _cache_bytes_one_sequence),
    ),
}


VISIBLE = {
    "cached_attention_step": lambda: _stepped_calls([0, 1, 2], windowed=False),
    "sliding_window_step": lambda: _stepped_calls([0, 1], windowed=True),
    "greedy_decode": lambda: _greedy_calls([0, 1]),
    "GroupedQueryAttention": lambda: _gqa_calls([0]),
    "kv_cache_bytes": lambda: _cache_bytes_calls([0, 1]),
}


HIDDEN = {
    "cached_attention_step": lambda seed: _stepped_calls(derived_seeds(seed), windowed=False),
    "sliding_window_step": lambda seed: _stepped_calls(derived_seeds(seed), windowed=True),
    "greedy_decode": lambda seed: _greedy_calls(derived_seeds(seed)),
    "GroupedQueryAttention": lambda seed: _gqa_calls(derived_seeds(seed, 2)),
    "kv_cache_bytes": lambda seed: _cache_bytes_calls(derived_seeds(seed)),
}
