"""Reference answers and cases of assignment 07_decoding (grading side only).

Contract section 07, its decoding half: the teacher-forcing loss, beam search, sampling with
a temperature, top-k and top-p, and a decoder that learns to reverse digits. The book's
chapter 7 demonstrates with these functions; the fast-inference half (the cache, windows,
greedy decoding, grouped-query attention) is ``reference.ch08_fast_inference``.
"""

from __future__ import annotations

import random

import torch
import torch.nn.functional as F

from ..ch07_decoding import (
    NUM_DIGITS,
    SEQUENCE_LENGTH,
    TinyDecoder,
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
# Beam search and sampling
# --------------------------------------------------------------------------------------


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
    "beam_search": beam_search,
    "sample_next": sample_next,
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
    "beam_search": (
        ("finished hypotheses set aside in a pool, the beam refilled with beam_size unfinished ones", _beam_pooled),
        ("finished hypotheses pooled only when among the step's beam_size best, as Hugging Face and fairseq do "
         "(no length penalty)", _beam_pooled_as_libraries),
        ("score averaged over the generated tokens instead of summed", _beam_mean_score),
    ),
}

# --------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------


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
    return _greedy_misses_the_best(table, bos, eos, max_len)


def _greedy_misses_the_best(table: torch.Tensor, bos: int, eos: int, max_len: int) -> bool:
    """Whether, on ``table``, greedy search (a beam of 1) finds another sequence than the exact search."""
    log_prob_fn = table_log_probs(table)
    greedy, _ = beam_search(log_prob_fn, bos, eos, 1, max_len)
    best, _ = beam_search(log_prob_fn, bos, eos, table.shape[-1] ** max_len, max_len)
    return not torch.equal(greedy, best)


def _stopping_told_from_pooling(table: torch.Tensor, bos: int, eos: int, max_len: int) -> bool:
    """Whether, on ``table``, a beam of 2 or 3 that stops at its first finished hypothesis (:func:`_stopped_beam`)
    finds another sequence than one that pools finished hypotheses as libraries do: where no table of a student
    tells them apart, the first would give the second's results on every case and be named as it."""
    log_prob_fn = table_log_probs(table)
    return any(not torch.equal(_stopped_beam(log_prob_fn, bos, eos, beam, max_len),
                               _pooled_beam(log_prob_fn, bos, eos, beam, max_len, True)) for beam in (2, 3))


def _stopped_beam(log_prob_fn, bos: int, eos: int, beam_size: int, max_len: int) -> torch.Tensor:
    """The best sequence of a beam search that stops as soon as a hypothesis of its beam is finished and returns
    the best finished one: not the contract's rule (for choosing cases)."""
    beam = [([bos], 0.0)]
    while not any(_done(tokens, eos, max_len) for tokens, _ in beam):
        log_probs = log_prob_fn(torch.tensor([tokens for tokens, _ in beam]))  # (beam, vocab)
        beam = sorted(((tokens + [token], score + log_probs[row, token].item())
                       for row, (tokens, score) in enumerate(beam) for token in range(log_probs.shape[-1])),
                      key=lambda hypothesis: -hypothesis[1])[:beam_size]
    tokens, _ = max((h for h in beam if _done(h[0], eos, max_len)), key=lambda hypothesis: hypothesis[1])
    return torch.tensor(tokens)


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
        calls += _table_calls(table, bos, eos, max_len, (1, 2, 3, vocab ** max_len))
    return calls + _stopping_calls(seeds[0])


def _table_calls(table: torch.Tensor, bos: int, eos: int, max_len: int, beam_sizes) -> list[Call]:
    return [Call(f"a table of log-probabilities {tuple(table.shape)} (step, last token, next token), bos_id={bos}, "
                 f"eos_id={eos}, beam_size={beam_size}, max_len={max_len}", (table, bos, eos, beam_size, max_len))
            for beam_size in beam_sizes]


def _stopping_calls(seed: int) -> list[Call]:
    """Beams of 2 and 3 on one more table, over 4 tokens and 5 long, on which greedy search is wrong and a beam
    that stops at its first finished hypothesis finds another sequence than the libraries' pooling
    (:func:`_stopping_told_from_pooling`; about one table in ten does both)."""
    g = torch.Generator().manual_seed(seed + 1)
    for _ in range(1000):
        table = torch.log_softmax(torch.randn(4, 4, 4, generator=g, dtype=torch.float64), -1)
        if _greedy_misses_the_best(table, 0, 3, 5) and _stopping_told_from_pooling(table, 0, 3, 5):
            return _table_calls(table, 0, 3, 5, (2, 3))
    raise RuntimeError(f"no table of seed {seed} tells a beam that stops early from the libraries' pooling")


def _sampling_calls(seeds) -> list[Call]:
    """Temperature 0, below 1, 1 and above; top_k None, 1 and a few, and one with a tie at the top_k-th logit
    (:func:`_tied_case`); top_p None, 1 and nuclei that tell common mistakes apart (:func:`_nucleus_cases`);
    10000 draws per row."""
    calls = []
    for seed in seeds:
        rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
        rows, vocab = rng.randint(1, 3), rng.randint(4, 8)
        logits = torch.randn(rows, vocab, generator=g) * 1.5
        settings = [(logits, temperature, top_k, None) for temperature, top_k in (
            (0.0, None), (1.0, None), (0.5, rng.randint(2, vocab - 1)), (2.0, None),
            (1.5, rng.randint(2, vocab - 1)), (1.0, 1))]
        tied = [(*_tied_case(rng, logits), ", in every row the logit after the top_k-th tied with it")]
        for case_logits, temperature, top_k, top_p, note in [(*setting, "") for setting in settings] + tied + [
                (*nucleus, "") for nucleus in _nucleus_cases(rng, g, rows, vocab)]:
            said, options = ("", {}) if top_p is None else (f", top_p={top_p}", {"top_p": top_p})
            calls.append(Call(f"logits {tuple(case_logits.shape)} repeated 10000 times, so logits (10000, {rows}, "
                              f"{vocab}) in one call, temperature={temperature}, top_k={top_k}{note}{said}, a "
                              f"generator seeded with {seed}", (case_logits, temperature, top_k, seed, 10_000), options))
    return calls


def _tied_case(rng: random.Random, logits: torch.Tensor) -> tuple:
    """``(logits (rows, vocab), 1.0, top_k, None)`` where every row's ``top_k + 1``-th largest logit equals its
    ``top_k``-th: the tokens tied with the ``top_k``-th logit are kept, so a sampler that keeps exactly ``top_k``
    tokens never draws one of them (each is drawn hundreds of times in 10000 draws, as ``top_k`` is chosen)."""
    descending = logits.sort(dim=-1, descending=True).values  # (rows, vocab)
    for top_k in rng.sample(range(1, logits.shape[-1] - 1), logits.shape[-1] - 2):
        kth = descending[:, top_k - 1:top_k]  # (rows, 1)
        tied = torch.where(logits == descending[:, top_k:top_k + 1], kth, logits)  # the next one raised to the k-th
        kept = torch.softmax(_cut(tied, 1.0, top_k), dim=-1)  # (rows, vocab), the tie kept
        if float(kept[kept > 0].min()) >= TELLING_PROBABILITY:
            return tied, 1.0, top_k, None
    raise RuntimeError("no top_k whose tied tokens are probable enough to be drawn")


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
                any(_tells(mistake, *case) for case in cases) for mistake in NUCLEUS_MISTAKES.values()) and all(
                _told_apart(_before_the_temperature, _without_crossing, *case) for case in cases
                if _tells(_before_the_temperature, *case)):
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


def _told_apart(mistake, other, logits, temperature: float, top_k: int | None, top_p: float) -> bool:
    """Whether two wrong nuclei differ on a token of probability ≥ :data:`TELLING_PROBABILITY`: where one fails a
    case, the other would fail it differently, so the message of one is not taken for the other's (a nucleus
    taken before a temperature above 1 can lose exactly the token that crosses ``top_p``)."""
    cut = _cut(logits, temperature, top_k)
    probabilities = torch.softmax(cut, dim=-1)  # (rows, vocab), renormalised over the top-k
    apart = mistake(logits, cut, temperature, top_p) != other(logits, cut, temperature, top_p)
    return bool((apart & (probabilities >= TELLING_PROBABILITY)).any())


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


def _reversal_calls(seeds, training_seed: int = 1) -> list[Call]:
    """Training with ``training_seed``, then the model's greedy answers to 500 prompts drawn here, with each of
    ``seeds``."""
    return [Call(f"train_reversal_decoder(seed={training_seed}), tested on 500 fresh prompts drawn with seed {s}, "
                 f"answered in the code of seed {training_seed}",
                 (training_seed, make_reversal_batch(500, torch.Generator().manual_seed(s))[0]))
            for s in seeds]


VISIBLE = {
    "causal_lm_loss": lambda: _loss_calls([0, 1]),
    "beam_search": lambda: _beam_calls([0, 1]),
    "sample_next": lambda: _sampling_calls([0]),
    "train_reversal_decoder": lambda: _reversal_calls([7]),
}
HIDDEN = {
    "causal_lm_loss": lambda seed: _loss_calls(derived_seeds(seed)),
    "beam_search": lambda seed: _beam_calls(derived_seeds(seed)),
    "sample_next": lambda seed: _sampling_calls(derived_seeds(seed, 2)),
    "train_reversal_decoder": lambda seed: hidden_training_calls(_reversal_calls, seed),
}
