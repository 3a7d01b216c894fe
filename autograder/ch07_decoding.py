"""Checks of assignment 07_decoding: decoding strategies.

One ``check_<part>(answer, hidden=False)`` per graded part of contract section 07, and
``check_<part>_arguments`` for the ``ValueError``\\ s, graded apart. Each part is declared
as data (``autograder.parts``) and judged by the course's judge (``autograder.judge``).
This module also gives what the exercise and the book share: the reversal task, and
:class:`TinyDecoder`, the small causal Transformer on which decoding is graded apart from
the student's own model.
"""

from __future__ import annotations

import random

import torch
import torch.nn.functional as F
from torch import nn

from .core import Case, expect_backward_passes, expect_trained_in_time
from .judge import checks
from .kernel.measure import trained_once
from .parts import ArgumentCheck, Call, Part, Probe

CHAPTER = "ch07_decoding"

# --------------------------------------------------------------------------------------
# The reversal task
# --------------------------------------------------------------------------------------

#: The reversal task: NUM_DIGITS digits (tokens 0-9), the separator, then the digits reversed.
NUM_DIGITS, SEPARATOR, VOCABULARY = 8, 10, 11
#: A whole training sequence: digits, separator, reversed digits.
SEQUENCE_LENGTH = 2 * NUM_DIGITS + 1
#: Seconds ``train_reversal_decoder`` may take in a test cell, measured on the machine that
#: runs the check; the contract asks for 90 s on 2 CPU cores.
TRAINING_SECONDS = 90.0
#: Per-token accuracy of greedy decoding that the reversal model must reach on fresh prompts.
REQUIRED_ACCURACY = 0.95


def answer_code(seed: int) -> torch.Tensor:
    """The code of the reversal task of ``seed``: ``(10,)`` int64, a permutation of the digits drawn from ``seed``;
    digit ``d`` is written ``code[d]`` in the answer.

    The exercise's ``train_reversal_decoder(seed)`` learns the task of its seed, so that what it
    must learn is known only when the grader calls it.
    """
    return torch.randperm(10, generator=torch.Generator().manual_seed(seed))


def reversed_answers(prompts: torch.Tensor, code: torch.Tensor | None = None) -> torch.Tensor:
    """The answers to reversal prompts ``(batch, NUM_DIGITS + 1)``: the digits reversed, each written in ``code``
    (:func:`answer_code`; ``None``: as they are), ``(batch, NUM_DIGITS)``."""
    answers = prompts[:, :NUM_DIGITS].flip(-1)
    return answers if code is None else code.to(prompts.device)[answers]


def make_reversal_batch(batch_size: int, generator: torch.Generator | None = None, code: torch.Tensor | None = None):
    """A batch of the reversal task (book, chapter 7).

    Args:
        code: how the answer writes each digit (:func:`answer_code`); ``None``: as it is.

    Returns:
        ``(prompts, answers)``: prompts ``(batch_size, NUM_DIGITS + 1)`` int64, random digits
        followed by ``SEPARATOR``; answers ``(batch_size, NUM_DIGITS)``, the digits reversed
        (and written in ``code``).
    """
    digits = torch.randint(0, 10, (batch_size, NUM_DIGITS), generator=generator)
    prompts = torch.cat([digits, torch.full((batch_size, 1), SEPARATOR)], dim=1)
    return prompts, reversed_answers(prompts, code)


@torch.no_grad()
def decode_answers(model: nn.Module, prompts: torch.Tensor) -> torch.Tensor:
    """The model's greedy answers to reversal prompts, recomputing the whole prefix at each step.

    ``model(tokens (batch, t))`` returns logits ``(batch, t, VOCABULARY)`` or a tuple whose
    first element they are (as :class:`TinyDecoder`'s). Returns ``(batch, NUM_DIGITS)``
    int64: the ``NUM_DIGITS`` tokens that follow each prompt.
    """
    tokens = prompts
    for _ in range(NUM_DIGITS):
        logits = model(tokens)
        logits = logits[0] if isinstance(logits, tuple) else logits  # (batch, t, vocab)
        tokens = torch.cat([tokens, logits[:, -1].argmax(dim=-1, keepdim=True)], dim=1)
    return tokens[:, prompts.shape[1]:]


def reversal_accuracy(model: nn.Module, prompts: torch.Tensor, answers: torch.Tensor) -> float:
    """The fraction of answer tokens that greedy decoding gets right."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    decoded = decode_answers(model, prompts.to(device))
    model.train(was_training)
    return (decoded == answers.to(device)).float().mean().item()


# --------------------------------------------------------------------------------------
# The model that decoding is graded on
# --------------------------------------------------------------------------------------


class TinyDecoder(nn.Module):
    """A small decoder-only Transformer with a key–value cache (book, chapter 7).

    Token and learned position embeddings, ``num_layers`` pre-norm blocks of causal
    self-attention (``num_kv_heads`` key/value heads shared by groups of the ``num_heads``
    query heads) and a feed-forward network, a final layer norm and a linear read-out.

    ``forward(tokens (batch, t), cache=None) -> (logits (batch, t, vocab_size), cache)``:
    ``cache`` is ``None`` or what an earlier call returned, one ``(keys, values)`` pair per
    layer, each ``(batch, num_kv_heads, past, head_dim)``; the ``t`` new tokens sit at
    positions ``past … past + t - 1`` and attend causally to everything before them.
    Feeding a sequence whole or piece by piece with the cache gives the same logits.

    It is given with the checks so that decoding (assignment 7) is graded on a model of the
    course's, apart from the student's own. It calls PyTorch's fused attention, which the
    assignment's attention parts refuse, so it answers none of them.
    """

    def __init__(self, vocab_size: int = VOCABULARY, num_hiddens: int = 64, num_heads: int = 4,
                 num_layers: int = 2, max_len: int = 64, num_kv_heads: int | None = None):
        super().__init__()
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if num_hiddens % num_heads or num_heads % num_kv_heads:
            raise ValueError(f"num_heads must divide num_hiddens and num_kv_heads must divide num_heads, got "
                             f"num_hiddens={num_hiddens}, num_heads={num_heads}, num_kv_heads={num_kv_heads}")
        self.num_heads, self.num_kv_heads, self.max_len = num_heads, num_kv_heads, max_len
        self.head_dim = num_hiddens // num_heads
        self.tokens = nn.Embedding(vocab_size, num_hiddens)
        self.positions = nn.Embedding(max_len, num_hiddens)
        self.layers = nn.ModuleList(_DecoderLayer(num_hiddens, num_heads, num_kv_heads) for _ in range(num_layers))
        self.norm = nn.LayerNorm(num_hiddens)
        self.readout = nn.Linear(num_hiddens, vocab_size)

    def forward(self, tokens: torch.Tensor, cache: list | None = None):
        past = 0 if cache is None else cache[0][0].shape[-2]
        if past + tokens.shape[1] > self.max_len:
            raise ValueError(f"tokens: {past} cached + {tokens.shape[1]} new positions exceed max_len={self.max_len}")
        where = torch.arange(past, past + tokens.shape[1], device=tokens.device)  # (t,) absolute positions
        X = self.tokens(tokens) + self.positions(where)  # (batch, t, d) + (t, d)
        new_cache = []
        for index, layer in enumerate(self.layers):
            X, layer_cache = layer(X, None if cache is None else cache[index])
            new_cache.append(layer_cache)
        return self.readout(self.norm(X)), new_cache


class _DecoderLayer(nn.Module):
    """Pre-norm causal self-attention and feed-forward, each added back: ``(batch, t, d) -> (batch, t, d)``."""

    def __init__(self, num_hiddens: int, num_heads: int, num_kv_heads: int):
        super().__init__()
        self.num_heads, self.num_kv_heads = num_heads, num_kv_heads
        head_dim = num_hiddens // num_heads
        self.norm1, self.norm2 = nn.LayerNorm(num_hiddens), nn.LayerNorm(num_hiddens)
        self.W_q = nn.Linear(num_hiddens, num_hiddens, bias=False)
        self.W_k = nn.Linear(num_hiddens, num_kv_heads * head_dim, bias=False)
        self.W_v = nn.Linear(num_hiddens, num_kv_heads * head_dim, bias=False)
        self.W_o = nn.Linear(num_hiddens, num_hiddens, bias=False)
        self.ffn = nn.Sequential(nn.Linear(num_hiddens, 2 * num_hiddens), nn.ReLU(),
                                 nn.Linear(2 * num_hiddens, num_hiddens))

    def forward(self, X: torch.Tensor, cache: tuple | None):
        Y = self.norm1(X)
        # (batch, t, heads·hd) -> (batch, t, heads, hd) -> (batch, heads, t, hd)
        q = self.W_q(Y).unflatten(-1, (self.num_heads, -1)).transpose(1, 2)
        k = self.W_k(Y).unflatten(-1, (self.num_kv_heads, -1)).transpose(1, 2)
        v = self.W_v(Y).unflatten(-1, (self.num_kv_heads, -1)).transpose(1, 2)
        if cache is not None:  # the earlier positions' keys and values, then the new ones
            k, v = torch.cat([cache[0], k], dim=-2), torch.cat([cache[1], v], dim=-2)
        past, t = k.shape[-2] - q.shape[-2], q.shape[-2]
        # query i sits at position past + i and may attend to keys 0 … past + i: (t, past + t)
        causal = torch.arange(past + t, device=X.device) <= torch.arange(past, past + t, device=X.device)[:, None]
        group = self.num_heads // self.num_kv_heads
        # (batch, kv_heads, T, hd) -> (batch, heads, T, hd): query head g reads key/value head g // group
        heads = F.scaled_dot_product_attention(q, k.repeat_interleave(group, dim=1),
                                               v.repeat_interleave(group, dim=1), attn_mask=causal)
        X = X + self.W_o(heads.transpose(1, 2).flatten(2))  # (batch, heads, t, hd) -> (batch, t, heads·hd)
        return X + self.ffn(self.norm2(X)), (k, v)


# --------------------------------------------------------------------------------------
# Teacher forcing: the loss
# --------------------------------------------------------------------------------------

LOSS = Part("causal_lm_loss", CHAPTER, arguments=("logits", "tokens"), outputs=("the loss",), atol=1e-5)


@checks(LOSS)
def check_causal_lm_loss(fn, hidden: bool = False) -> None:
    """Check the next-token loss against the reference: the shift, padding left out, the mean."""


# --------------------------------------------------------------------------------------
# Beam search, on a table of next-token log-probabilities
# --------------------------------------------------------------------------------------


def table_log_probs(table: torch.Tensor):
    """``log_prob_fn`` of a table ``(max_len - 1, vocab, vocab)``: the log-probabilities of the
    next token given the prefix's length and last token, ``(b, t) -> (b, vocab)``."""

    def log_prob_fn(prefixes: torch.Tensor) -> torch.Tensor:
        return table[prefixes.shape[1] - 1][prefixes[:, -1]]  # (b,) rows of the step's (vocab, vocab) table

    return log_prob_fn


def _on_table(search):
    """``(table, bos_id, eos_id, beam_size, max_len) -> search(table's log_prob_fn, ...)``."""
    return lambda table, *args: search(table_log_probs(table), *args)


def _same_hypothesis(case: Case, result, expected) -> None:
    """The same tokens, and the same score within rounding."""
    case.check(isinstance(result, tuple) and len(result) == 2, f"should return a tuple (tokens, score), got "
                                                               f"{type(result).__name__}")
    tokens, score = result
    want_tokens, want_score = expected
    case.check(type(tokens) is torch.Tensor and tokens.dim() == 1 and tokens.dtype == torch.int64,
               f"tokens should be a 1-D int64 tensor, got {tokens!r}"[:300])
    if not torch.equal(tokens, want_tokens):
        problem = "not the best hypothesis the beam keeps"
        if not case.hidden:
            problem += (f"\n    expected: {want_tokens.tolist()} (score {want_score:.4f})"
                        f"\n    got:      {tokens.tolist()}")
        case.fail(problem)
    wanted = "" if case.hidden else f", {want_score:.6f}"
    case.check(isinstance(score, (int, float)) and abs(score - want_score) <= 1e-6 * (1 + abs(want_score)),
               f"the score should be the hypothesis' summed log-probability{wanted}, got {score!r}")


BEAM = Part("beam_search", CHAPTER, arguments=("the log-probabilities log_prob_fn returns",), adapt=_on_table,
            compare=_same_hypothesis, on_devices=False, meta=False)


@checks(BEAM)
def check_beam_search(fn, hidden: bool = False) -> None:
    """Search tables of next-token probabilities with beams of size 1 (greedy), 2, 3 and one
    large enough to be exact, and compare the hypothesis and its score."""


# --------------------------------------------------------------------------------------
# Sampling with temperature, top-k and top-p
# --------------------------------------------------------------------------------------


def _sampled(sample):
    """``(logits (rows, vocab), temperature, top_k, seed, draws, top_p=...) -> tokens (draws, rows)``: one
    call on ``draws`` copies of the logits, with a generator seeded with ``seed`` (``top_p`` passed where given)."""

    def run(logits, temperature, top_k, seed, draws, **top_p):
        generator = torch.Generator(device=logits.device).manual_seed(seed)
        # (rows, vocab) -> (draws, rows, vocab): the same distributions, draws times
        return sample(logits.expand(draws, *logits.shape), temperature, top_k, generator, **top_p)

    return run


def _mass_above(p: torch.Tensor) -> torch.Tensor:
    """For each token, the probability of the tokens more probable than it: ``(rows, vocab) -> (rows, vocab)``."""
    # (rows, 1, vocab) against (rows, vocab, 1) -> (rows, vocab, vocab), summed over the other tokens
    return (p[..., None, :] * (p[..., None, :] > p[..., :, None])).sum(dim=-1)


def _expected_distributions(logits: torch.Tensor, temperature: float, top_k: int | None, top_p: float | None):
    """``(cut, p)``, both ``(rows, vocab)`` float64: ``softmax(logits / temperature)`` over the ``top_k``
    largest logits, and the same kept to the nucleus of ``top_p`` and renormalised (``top_p=None``: the same)."""
    scaled = logits.double() / temperature
    if top_k is not None:
        kth = scaled.topk(top_k, dim=-1).values[..., -1:]  # (rows, 1)
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    cut = torch.softmax(scaled, dim=-1)
    if top_p is None:
        return cut, cut
    nucleus = cut * (_mass_above(cut) < top_p)  # the crossing token has less than top_p above it: kept
    return cut, nucleus / nucleus.sum(dim=-1, keepdim=True)


def _first(where: torch.Tensor) -> tuple[int, int]:
    """``(row, token)`` of the first ``True`` of a ``(rows, vocab)`` mask."""
    row, token = where.nonzero()[0].tolist()
    return row, token


def _words(setting: dict) -> tuple[str, str]:
    """``(the arguments, the distribution)`` of a case in words, for messages."""
    said = ", ".join(f"{name}={value}" for name, value in setting.items() if name != "draws" and value is not None)
    nucleus = "" if setting["top_p"] is None else " and the nucleus of top_p"
    return said, f"softmax(logits / temperature) over the top_k{nucleus}"


def _expect_support(case: Case, frequencies, cut, p, setting: dict) -> None:
    """Nothing drawn outside the top k and the nucleus, and every token of probability ≥ 30 / draws
    drawn (a correct sampler misses one in e^30): messages that say which rule is broken."""
    draws, top_k, top_p = setting["draws"], setting["top_k"], setting["top_p"]
    said, source = _words(setting)
    above = _mass_above(cut)  # (rows, vocab): renormalised over the top k
    if ((frequencies > 0) & (cut == 0)).any():
        row, token = _first((frequencies > 0) & (cut == 0))
        case.fail(f"draws a token outside the top_k={top_k} largest logits (token {token} of row {row}; {said})")
    if ((frequencies > 0) & (p == 0)).any():
        row, token = _first((frequencies > 0) & (p == 0))
        renormalised = "" if top_k is None else ", renormalised over the top_k,"
        case.fail(f"draws token {token} of row {row}, outside the nucleus of top_p={top_p}: in softmax(logits / "
                  f"temperature){renormalised} the tokens more probable than it already hold {above[row, token]:.3f}"
                  f" ≥ top_p ({said})")
    missed = (frequencies == 0) & (p * draws >= 30)
    if missed.any():
        row, token = _first(missed)
        # the tokens that cross top_p (less than top_p above them, at least top_p with them) and are not the most
        # probable of their row, which every nucleus keeps: (rows, vocab)
        crossing_tokens = (p > 0) & (above + cut >= top_p) & (above > 0) if top_p is not None else \
            torch.zeros_like(missed)
        # named only where the tokens missed are exactly those, in every row: that is the mistake, and no other
        crossing = bool(crossing_tokens[row, token]) and torch.equal(missed, crossing_tokens & (p * draws >= 30))
        case.fail(f"token {token} of row {row} is never drawn; {source} gives it {p[row, token]:.3f} ({said})"
                  + (f". It is the token that crosses top_p: the tokens more probable than it hold "
                     f"{above[row, token]:.3f} < top_p, {above[row, token] + cut[row, token]:.3f} with it, and the "
                     f"nucleus includes it" if crossing else ""))


def _expect_distribution(case: Case, args, kwargs, tokens) -> None:
    """The argmax at temperature 0; otherwise nothing outside the top k and the nucleus of top p, and
    frequencies within 6 standard errors (plus two draws) of the probabilities: a correct sampler fails one
    comparison in about 500 million, a wrong temperature, top-k or top-p fails at once."""
    logits, temperature, top_k, _, draws = args
    top_p = kwargs.get("top_p")
    case.expect_tensor("the tokens", tokens, shape=(draws, logits.shape[0]), dtype=torch.int64, device="cpu")
    if temperature == 0:
        case.check(bool((tokens == logits.argmax(dim=-1)).all()), "at temperature 0 every token should be the argmax")
        return
    case.check(bool(((tokens >= 0) & (tokens < logits.shape[-1])).all()), "a token id outside the vocabulary")
    cut, p = _expected_distributions(logits, temperature, top_k, top_p)  # (rows, vocab) each
    frequencies = F.one_hot(tokens, logits.shape[-1]).double().mean(dim=0)  # (draws, rows, vocab) -> (rows, vocab)
    setting = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "draws": draws}
    _expect_support(case, frequencies, cut, p, setting)
    allowed = 6 * (p * (1 - p) / draws).sqrt() + 2 / draws
    error = (frequencies - p).abs()
    row, token = (int(i) for i in torch.unravel_index((error - allowed).argmax(), error.shape))
    said, source = _words(setting)
    case.check(bool((error <= allowed).all()), f"token {token} of row {row} is drawn {frequencies[row, token]:.3f} "
               f"of the time; {source} gives it {p[row, token]:.3f} ({said})")


def _seeds_used(sample):
    """``(logits, seeds) -> [tokens drawn with a generator seeded with s] for s in seeds``."""
    return lambda logits, seeds: [_sampled(sample)(logits, 1.0, None, s, 50) for s in seeds]


def _expect_generator_used(case: Case, args, kwargs, drawn) -> None:
    first, again, other = drawn
    case.check(torch.equal(first, again), "the same generator seed gives different tokens: draw with `generator`")
    case.check(not torch.equal(first, other), "different generator seeds give the same tokens: draw with `generator`")


def _no_reference(case: Case, result, expected) -> None:
    """Samples are judged as a distribution (``_expect_distribution``), not token by token."""


def _generator_calls(seeds: tuple[int, int, int]) -> list[Call]:
    return [Call(f"logits (2, 5) repeated 50 times, so logits (50, 2, 5), generator seeds {seeds[0]}, {seeds[1]} and "
                 f"{seeds[2]}", (torch.tensor([[0.0, 1, 2, 0, 1], [2.0, 0, 0, 1, 0]]), seeds))]


def _hidden_generator_calls(seed: int) -> list[Call]:
    """Two generator seeds ``a`` and ``b`` drawn from ``seed``: the answer draws with ``a``, ``a`` and ``b``."""
    a, b = random.Random(seed).sample(range(2**31), 2)
    return _generator_calls((a, a, b))


#: ``generator`` used, from the tokens drawn with seeds the judge draws: decides.
GENERATOR_USED = Probe("generator", lambda: _generator_calls((3, 3, 4)), _seeds_used, _expect_generator_used,
                       decides=True, hidden=_hidden_generator_calls)
SAMPLE = Part("sample_next", CHAPTER, arguments=("logits",), adapt=_sampled, compare=_no_reference,
              extra=_expect_distribution, compare_with_reference=False, on_devices=False, meta=False,
              probes=(GENERATOR_USED,))


@checks(SAMPLE)
def check_sample_next(fn, hidden: bool = False) -> None:
    """Draw thousands of tokens with a seeded generator: argmax at temperature 0, frequencies that
    match softmax(logits / temperature) over the top k and then the nucleus of top p, and the
    generator used."""


def _bad_sampling() -> list[tuple[str, tuple, dict]]:
    logits = torch.randn(2, 5)
    return [("temperature", (logits,), {"temperature": -1.0}), ("top_k", (logits,), {"top_k": 0}),
            ("top_p", (logits,), {"top_p": 0.0}), ("top_p", (logits,), {"top_p": 1.5})]


@checks(ArgumentCheck("sample_next", CHAPTER, _bad_sampling))
def check_sample_next_arguments(fn, hidden: bool = False) -> None:
    """A negative temperature, a ``top_k`` below 1 or a ``top_p`` outside (0, 1] raises ``ValueError``."""


# --------------------------------------------------------------------------------------
# The reversal decoder
# --------------------------------------------------------------------------------------

_TRAINED: dict = {}  # (answer, seed) -> what it returned: one training per process


def _answers_of(train):
    """``(seed, prompts) -> (reported accuracy, the model's greedy answers to prompts, backward passes of the
    training)``, training once per seed.

    The prompts are drawn by the judge, which computes the accuracy itself from the answers.
    """

    def answer(seed, prompts):
        model, reported, passes = trained_once(train, seed, _TRAINED)
        if model is None:
            return reported, None, passes
        device = next(model.parameters()).device
        return reported, decode_answers(model, prompts.to(device)).cpu(), passes

    return answer


def _expect_accurate_in_time(case: Case, args, kwargs, result) -> None:
    """Within the time limit (measured by the judge), and right on the judge's fresh prompts, in the code of the
    seed it passed."""
    seed, prompts = args
    reported, answers, _ = result
    expect_trained_in_time(case, answers, reported, TRAINING_SECONDS)
    case.expect_tensor("the answers", answers, shape=(prompts.shape[0], NUM_DIGITS), dtype=torch.int64, device="cpu")
    measured = (answers == reversed_answers(prompts, answer_code(seed))).float().mean().item()
    case.check(measured >= REQUIRED_ACCURACY, f"greedy decoding reverses {measured:.1%} of the digits of fresh "
                                              f"prompts correctly, in the code of seed {seed} "
                                              f"(checks.answer_code({seed})); it needs {REQUIRED_ACCURACY:.0%}")


TRAINING = Part("train_reversal_decoder", CHAPTER, adapt=_answers_of, extra=_expect_accurate_in_time,
                advise=expect_backward_passes, on_devices=False, meta=False, compare_with_reference=False,
                depends_on={"causal_lm_loss": LOSS})


@checks(TRAINING)
def check_train_reversal_decoder(fn, hidden: bool = False) -> None:
    """Train once (``seed=1``; the hidden case, a seed of its own) within the time limit; decode prompts drawn
    at check time greedily, and compare with the digits reversed in the code of that seed (``answer_code(seed)``)."""


PARTS = {part.name: part for part in (LOSS, BEAM, SAMPLE, TRAINING)}
#: The parts with a time limit of their own, in seconds of the kernel's CPU time (the class report shows
#: how close each submission came): {part: limit}.
TIME_LIMITS = {TRAINING.name: TRAINING_SECONDS}
