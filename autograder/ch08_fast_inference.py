"""Checks of assignment 08_fast_inference: the key–value cache, sliding windows, greedy decoding
with and without the cache, grouped-query attention and the cache's size.

One ``check_<part>(answer, hidden=False)`` per graded part of contract section 07's fast-inference
half, and ``check_<part>_arguments`` for the ``ValueError``\\ s, graded apart. Each part is
declared as data (``autograder.parts``) and judged by the course's judge (``autograder.judge``).
:class:`TinyDecoder`, the model that decoding is graded on, comes from chapter 7's checks
(``autograder.ch07_decoding``) and is given here again, as ``checks.TinyDecoder``, for the notebook.
"""

from __future__ import annotations

import torch

from .ch07_decoding import TinyDecoder
from .core import Case, attention_rounding
from .judge import checks
from .kernel.measure import describe_module
from .parts import ArgumentCheck, Call, Part, Probe

CHAPTER = "ch08_fast_inference"


def _position_by_position(step):
    """``(queries (..., n, d), keys (..., n, d), values (..., n, v), *window) -> (outputs, keys, values, lengths)``.

    Feeds the sequence to ``step`` one position at a time, starting from no cache: the
    outputs ``(..., n, v)`` of every step, the cache the last step returned, and the number
    of positions the cache held after each step (``-1`` where it is not a pair of tensors).
    """

    def run(queries, keys, values, *window):
        cache, outputs, lengths = None, [], []
        for t in range(queries.shape[-2]):
            position = slice(t, t + 1)  # (..., 1, ·): one position, its axis kept
            output, cache = step(queries[..., position, :], keys[..., position, :], values[..., position, :],
                                 cache, *window)
            outputs.append(output)
            lengths.append(_cached_positions(cache))
        cached_keys, cached_values = cache
        return torch.cat(outputs, dim=-2), cached_keys, cached_values, tuple(lengths)

    return run


def _cached_positions(cache) -> int:
    """How many positions a cache ``(keys (..., t, d), values (..., t, v))`` holds: ``t``; ``-1`` for anything else."""
    try:
        keys, _ = cache
        return int(keys.shape[-2])
    except (TypeError, ValueError, IndexError, AttributeError):
        return -1


def _lengths_first(case: Case, result, expected) -> tuple:
    """A stepped part's results, the cache's length after each step checked first (the first step where it is
    wrong, in words); returns ``(outputs, keys, values)`` of both, left to compare as tensors."""
    *tensors, lengths = result
    *wanted, expected_lengths = expected
    for step, (held, want) in enumerate(zip(lengths, expected_lengths, strict=True), start=1):
        case.check(held == want, f"after step {step} the cache holds "
                   + ("no pair (keys, values)" if held < 0 else f"{held} position{'s' * (held != 1)}")
                   + f", expected {want}")
    return tuple(tensors), tuple(wanted)


def _stepped_part(name: str) -> Part:
    """A part whose answer is fed whole sequences one position at a time (:func:`_position_by_position`)."""
    return Part(name, CHAPTER, arguments=("query", "key", "value"),
                outputs=("the outputs of every step", "the cached keys", "the cached values"), first=_lengths_first,
                adapt=_position_by_position, atol=1e-5, rounding=lambda q, k, v, *window: attention_rounding(q, k, v),
                forbid_library=True)


STEP = _stepped_part("cached_attention_step")


@checks(STEP)
def check_cached_attention_step(fn, hidden: bool = False) -> None:
    """Feed sequences one position at a time, from no cache: every step's output equals causal
    attention over the whole sequence, and the cache ends holding every key and value."""


WINDOW = _stepped_part("sliding_window_step")


@checks(WINDOW)
def check_sliding_window_step(fn, hidden: bool = False) -> None:
    """Feed sequences one position at a time: every output equals causal attention over the
    last ``window`` positions, and the cache ends holding exactly those."""


def _bad_windows() -> list[tuple[str, tuple, dict]]:
    q, k, v = torch.randn(1, 4), torch.randn(1, 4), torch.randn(1, 2)
    return [("window", (q, k, v, None), {"window": 0}), ("window", (q, k, v, None), {"window": -3})]


@checks(ArgumentCheck("sliding_window_step", CHAPTER, _bad_windows))
def check_sliding_window_step_arguments(fn, hidden: bool = False) -> None:
    """A window below 1 raises ``ValueError``."""


def _random_weights(seed: int, config: dict) -> dict:
    """The weights PyTorch draws for a ``TinyDecoder(**config)`` from ``seed``, global generator untouched."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return TinyDecoder(**{key: value for key, value in config.items() if key != "marks"}).state_dict()


class MarkedDecoder(TinyDecoder):
    """A :class:`TinyDecoder` whose logits carry a mark of how it is called.

    Each call adds to every position's logits a vector drawn from ``marks`` and the call's
    pattern: whether a cache was given, how many tokens were fed, how many were cached. So the
    tokens greedy decoding produces with it show how the model was called: the judge compares
    them with those of the prompt fed once and then one token per step with the cache (or,
    without the cache, the whole prefix every step), from outside the answer's process. Built
    with ``TinyDecoder``'s arguments and ``marks`` (an int).
    """

    #: How far a mark moves the logits: as far as the read-out of the cases' decoders spreads them.
    SCALE = 8.0

    def __init__(self, marks: int, **config):
        super().__init__(**config)
        self.marks = marks

    def forward(self, tokens: torch.Tensor, cache: list | None = None):
        logits, new_cache = super().forward(tokens, cache)
        past = 0 if cache is None else cache[0][0].shape[-2]
        pattern = (self.marks * 1_000_003 + (cache is not None) * 10_007 + tokens.shape[1] * 101 + past) % 2**31
        mark = torch.randn(logits.shape[-1], generator=torch.Generator().manual_seed(pattern)) * self.SCALE
        return logits + mark.to(logits.device, logits.dtype), new_cache  # (batch, t, vocab) + (vocab,)


def _tiny_decoder(config: dict, state: dict, device: torch.device) -> TinyDecoder:
    """The decoder of a case: ``config``'s ``TinyDecoder`` (a :class:`MarkedDecoder` where it has ``marks``) with
    ``state`` loaded, in evaluation mode."""
    config = dict(config)
    marks = config.pop("marks", None)
    model = (TinyDecoder(**config) if marks is None else MarkedDecoder(marks, **config)).to(device)
    model.load_state_dict(state)
    return model.eval()


def _on_tiny_decoder(decode):
    """``(config, state, prompt, max_new_tokens, **options) -> decode(TinyDecoder(**config) with state, ...)``."""

    def run(config, state, prompt, max_new_tokens, **options):
        return decode(_tiny_decoder(config, state, prompt.device), prompt, max_new_tokens, **options)

    return run


class _CountingDecoder(TinyDecoder):
    """A TinyDecoder that records, for each call, how many tokens it was fed and whether with a cache."""

    def forward(self, tokens, cache=None):
        self.fed.append((tokens.shape[1], cache is not None))
        return super().forward(tokens, cache)


def _calls_made(decode):
    """``(config, state, prompt, max_new_tokens, use_cache) -> [(tokens fed, with a cache), ...]`` of one decoding."""

    def run(config, state, prompt, max_new_tokens, use_cache):
        model = _CountingDecoder(**config)
        model.load_state_dict(state)
        model.eval().fed = []
        decode(model, prompt, max_new_tokens, use_cache=use_cache)
        return [list(call) for call in model.fed]

    return run


def _expect_one_token_per_step(case: Case, args, kwargs, fed) -> None:
    """With the cache: the prompt once, then one token per step with the cache; without: the whole prefix each step."""
    prompt, max_new_tokens, use_cache = args[2], args[3], args[4]
    p = prompt.shape[1]
    if use_cache:
        wanted = [[p, False]] + [[1, True]] * (max_new_tokens - 1)
        how = "the prompt once (no cache), then each new token alone with the cache"
    else:
        wanted = [[p + step, False] for step in range(max_new_tokens)]
        how = "the whole prefix at every step, without a cache"
    case.check(fed == wanted, f"with use_cache={use_cache}, the model should be called {max_new_tokens} times with "
                              f"{how}; it was called with (tokens fed, cache given) = {[tuple(c) for c in fed]}")


def _counting_calls() -> list[Call]:
    g = torch.Generator().manual_seed(5)
    config = {"vocab_size": 7, "num_hiddens": 8, "num_heads": 2, "num_layers": 1, "max_len": 16}
    state = _random_weights(5, config)
    prompt = torch.randint(0, 7, (2, 3), generator=g)
    return [Call(f"a TinyDecoder, prompt (2, 3), max_new_tokens=4, use_cache={use}",
                 (config, state, prompt, 4, use)) for use in (True, False)]


def _same_tokens(case: Case, result, expected) -> None:
    case.expect_tensor("the tokens", result, shape=expected.shape, dtype=torch.int64, device=expected.device)
    wrong = (result != expected).nonzero()
    if len(wrong):
        place = tuple(wrong[0].tolist())
        problem = (f"the tokens differ from greedy decoding's, first at (sequence, position) {place} (the case's "
                   "model marks its logits by how it is called: with use_cache=True, feed the prompt once, then each "
                   "new token alone with the cache; with use_cache=False, the whole prefix at every step)")
        if not case.hidden:
            problem += f"\n    expected: {expected.tolist()}\n    got:      {result.tolist()}"
        case.fail(problem)


GREEDY = Part("greedy_decode", CHAPTER, arguments=("the model's configuration", "the model's weights", "prompt"),
              adapt=_on_tiny_decoder, compare=_same_tokens,
              probes=(Probe("calls of the model", _counting_calls, _calls_made, _expect_one_token_per_step),),
              meta=False)


@checks(GREEDY)
def check_greedy_decode(fn, hidden: bool = False) -> None:
    """Decode with random TinyDecoders, with and without the cache and an end token: the
    tokens equal greedy decoding's, and the cache is used one token per step."""


def _gqa_run(cls):
    """``(queries, keys, values, mask, num_heads, num_kv_heads, bias, state) -> output`` of the
    module built for the case, with the case's weights loaded by name."""

    def forward(queries, keys, values, mask, num_heads, num_kv_heads, bias, state):
        module = cls(queries.shape[-1], num_heads, num_kv_heads, bias=bias).to(queries.device)
        module.load_state_dict(state)
        return module(queries, keys, values, mask)

    return forward


def _gqa_layers(cls):
    return lambda: describe_module(cls(16, 8, 2))


def _expect_narrow_keys(case: Case, args, kwargs, seen) -> None:
    """``W_k`` and ``W_v`` map to ``num_kv_heads · head_dim`` features only."""
    layers = seen["layers"]
    for name, width in (("W_q", 16), ("W_k", 4), ("W_v", 4), ("W_o", 16)):
        layer = layers.get(name)
        case.check(layer is not None and layer["type"] == "Linear", f"should have a layer `{name}` (nn.Linear)")
        case.check(layer.get("out") == width, f"`{name}` of GroupedQueryAttention(16, 8, 2) should have "
                                                        f"{width} output features, has {layer.get('out')}")


GQA = Part("GroupedQueryAttention", CHAPTER, arguments=("queries", "keys", "values"), adapt=_gqa_run, atol=1e-4,
           forbid_library=True,
           probes=(Probe("layers", lambda: [Call("GroupedQueryAttention(16, num_heads=8, num_kv_heads=2)")],
                         _gqa_layers, _expect_narrow_keys),))


@checks(GQA)
def check_grouped_query_attention(cls, hidden: bool = False) -> None:
    """Check against the reference with the same weights: 1 (multi-query), several and as many
    key/value heads as query heads, masks with empty rows, bias."""


@checks(ArgumentCheck("GroupedQueryAttention", CHAPTER, lambda: [("num_kv_heads", (16, 8), {"num_kv_heads": 3}),
                                                                  ("num_kv_heads", (16, 4), {"num_kv_heads": 0})]))
def check_grouped_query_attention_arguments(cls, hidden: bool = False) -> None:
    """``num_kv_heads`` that is not a positive divisor of ``num_heads`` (3 of 8, or 0) raises ``ValueError``."""


def _same_number(case: Case, result, expected) -> None:
    case.check(isinstance(result, int) and not isinstance(result, bool), f"should return an int, got "
                                                                        f"{type(result).__name__}")
    case.check(result == expected, f"{result} bytes" + ("" if case.hidden else f", expected {expected}"))


CACHE_BYTES = Part("kv_cache_bytes", CHAPTER, compare=_same_number, on_devices=False, meta=False)


@checks(CACHE_BYTES)
def check_kv_cache_bytes(fn, hidden: bool = False) -> None:
    """Check the count of bytes for layers, key/value heads, head widths, lengths, batches and number formats."""


PARTS = {part.name: part for part in (STEP, WINDOW, GREEDY, GQA, CACHE_BYTES)}
