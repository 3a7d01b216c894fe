"""Answers to assignment 07, right and wrong, for the checks' tests (tests/students/test_catalogues.py)."""

import math

import torch
import torch.nn.functional as F

from autograder import ch07_decoding as ch07
from autograder.reference import ch07_decoding as ref07

# ---- correct answers, written differently from the reference ----


def loss(logits, tokens, pad_id=None, shift=1, ignore_padding=True):
    """Next-token cross-entropy by hand; the mistakes below are switched on by the arguments."""
    log_probs = logits[:, : logits.size(1) - shift].log_softmax(-1)  # (batch, n - shift, vocab)
    targets = tokens[:, shift:] if shift else tokens
    picked = -log_probs.gather(-1, targets[..., None]).squeeze(-1)  # (batch, n - shift)
    keep = torch.ones_like(picked, dtype=torch.bool) if pad_id is None or not ignore_padding else targets != pad_id
    return picked[keep].mean() if ignore_padding else (picked * keep).sum() / keep.numel()


def beam(log_prob_fn, bos_id, eos_id, beam_size, max_len, keep_finished=True):
    hyps = [((bos_id,), 0.0)]
    finished_apart = []
    while True:
        live = [h for h in hyps if h[0][-1] != eos_id and len(h[0]) < max_len]
        if not live:
            break
        lp = log_prob_fn(torch.tensor([h[0] for h in live]))
        grown = [(h[0] + (v,), h[1] + float(lp[i, v])) for i, h in enumerate(live) for v in range(lp.size(-1))]
        done = [h for h in hyps if h not in live] if keep_finished else []
        if not keep_finished:
            finished_apart += [h for h in hyps if h not in live]
        hyps = sorted(done + grown, key=lambda h: h[1], reverse=True)[:beam_size]
    best = max(hyps, key=lambda h: h[1])
    return torch.tensor(best[0]), best[1]


def nucleus_by_sorting(p, top_p, z=None):
    """Kept tokens (..., vocab) bool: sorted, a token goes once the tokens before it hold more than top_p."""
    sorted_p, order = p.sort(-1, descending=True)
    total = sorted_p.cumsum(-1)
    drop = torch.cat([torch.zeros_like(total[..., :1], dtype=torch.bool), total[..., :-1] > top_p], -1)
    return ~drop.gather(-1, order.argsort(-1))  # sorted order -> vocabulary order


def nucleus_without_sorting(p, top_p, z=None):
    """Kept tokens (..., vocab) bool: the mass of the tokens at least as probable, itself left out, below top_p."""
    at_least = (p[..., None, :] >= p[..., :, None]).to(p.dtype)  # (..., vocab, vocab): [i, j] = p_j >= p_i
    return torch.einsum("...ij,...j->...i", at_least, p) - p < top_p


def sample(logits, temperature=1.0, top_k=None, generator=None, top_p=None, use_top_k=True, divide=True, draw=True,
           keep=nucleus_by_sorting, check_top_p=True):
    if temperature < 0:
        raise ValueError("temperature must not be negative")
    if top_k is not None and top_k < 1:
        raise ValueError("top_k must be at least 1")
    if check_top_p and top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    if temperature == 0:
        return logits.argmax(-1)
    z = logits / temperature if divide else logits * temperature
    if top_k is not None and use_top_k:
        threshold = torch.topk(z, min(top_k, z.size(-1)), dim=-1).values[..., -1:]
        z = torch.where(z >= threshold, z, torch.full_like(z, -math.inf))
    p = z.softmax(-1)
    if top_p is not None:
        p = torch.where(keep(p, top_p, z), p, torch.zeros_like(p))
    if not draw:
        return p
    flat = p.reshape(-1, p.size(-1))
    return torch.multinomial(flat, 1, generator=generator).view(p.shape[:-1])


def sample_unsorted_nucleus(logits, temperature=1.0, top_k=None, generator=None, top_p=None):
    return sample(logits, temperature, top_k, generator, top_p, keep=nucleus_without_sorting)


def sample_by_inverse_cdf(logits, temperature=1.0, top_k=None, generator=None, top_p=None):
    """Correct, with other draws than torch.multinomial's: a uniform number against the cumulative sum."""
    if temperature < 0 or (top_k is not None and top_k < 1) or (top_p is not None and not 0 < top_p <= 1):
        raise ValueError(f"temperature {temperature} must be >= 0, top_k {top_k} >= 1 and top_p {top_p} in (0, 1]")
    if temperature == 0:
        return logits.argmax(-1)
    p = sample(logits, temperature, top_k, None, top_p, draw=False)  # (..., vocab)
    cumulative = p.cumsum(-1)  # (..., vocab); a token of probability 0 adds an empty interval
    u = torch.rand(p.shape[:-1] + (1,), generator=generator, device=p.device, dtype=p.dtype) * cumulative[..., -1:]
    return (cumulative <= u).sum(-1).clamp(max=p.size(-1) - 1)  # token j when c[j-1] <= u < c[j]


def train(seed=0, code_of=ch07.answer_code):
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    model = ch07.TinyDecoder(num_hiddens=48, num_heads=4, num_layers=2, max_len=ch07.SEQUENCE_LENGTH)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    code = code_of(seed)
    for _ in range(180):
        prompts, answers = ch07.make_reversal_batch(128, generator, code)
        tokens = torch.cat([prompts, answers], 1)
        logits, _ = model(tokens)
        objective = ref07.causal_lm_loss(logits, tokens)  # the whole sequence, digits included
        optimizer.zero_grad()
        objective.backward()
        optimizer.step()
    model.eval()
    return model, ch07.reversal_accuracy(model, *ch07.make_reversal_batch(500, generator, code))


TRAINING_CHECKS = [ch07.check_train_reversal_decoder]  # they train a model: slow

CORRECT = [  # (check, a correct answer, the autograder's reference, which must be refused)
    (ch07.check_causal_lm_loss, loss, ref07.causal_lm_loss),
    (ch07.check_beam_search, beam, ref07.beam_search),
    (ch07.check_sample_next, sample, ref07.sample_next),
    (ch07.check_sample_next, sample_by_inverse_cdf, ref07.sample_next),
    (ch07.check_sample_next, sample_unsorted_nucleus, ref07.sample_next),
    (ch07.check_sample_next_arguments, sample_by_inverse_cdf, ref07.sample_next),
    (ch07.check_sample_next_arguments, sample, ref07.sample_next),
    (ch07.check_train_reversal_decoder, train, ref07.train_reversal_decoder),
]

# ---- wrong answers ----


def _shift_the_wrong_way(logits, tokens, pad_id=None):
    return F.cross_entropy(logits[:, 1:].flatten(0, 1), tokens[:, :-1].flatten())  # position t "predicts" t - 1


def _no_shift(logits, tokens, pad_id=None):
    return loss(logits, tokens, pad_id, shift=0)  # each position predicts its own token


def _padding_counted(logits, tokens, pad_id=None):
    return loss(logits, tokens, pad_id, ignore_padding=False)  # padding zeroed but still in the mean's count


def _drops_finished(log_prob_fn, bos_id, eos_id, beam_size, max_len):
    return beam(log_prob_fn, bos_id, eos_id, beam_size, max_len, keep_finished=False)


def _finished_pooled_outside_the_beam(log_prob_fn, bos_id, eos_id, beam_size, max_len):
    """A common variant: finished hypotheses leave the beam for a pool, and the beam keeps
    ``beam_size`` unfinished ones (the contract's beam keeps the best of both)."""
    live, pool = [((bos_id,), 0.0)], []
    while live:
        lp = log_prob_fn(torch.tensor([h for h, _ in live]))
        grown = sorted(((h + (v,), s + float(lp[i, v])) for i, (h, s) in enumerate(live) for v in range(lp.size(-1))),
                       key=lambda c: c[1], reverse=True)
        pool += [c for c in grown if c[0][-1] == eos_id or len(c[0]) >= max_len]
        live = [c for c in grown if c[0][-1] != eos_id and len(c[0]) < max_len][:beam_size]
    best = max(pool, key=lambda c: c[1])
    return torch.tensor(best[0]), best[1]


def _pooled_as_libraries_do(log_prob_fn, bos_id, eos_id, beam_size, max_len):
    """Beam search as Hugging Face's BeamSearchScorer and fairseq run it, without a length penalty.

    The live hypotheses' extensions are ranked; one that ends in ``eos_id`` joins a pool of
    finished ones only if it ranks among the ``beam_size`` best of the step (further down it is
    dropped), and the ``beam_size`` best unfinished ones go on. The pool keeps its
    ``beam_size`` best; the live ones join it at ``max_len``; the search stops early once the
    pool is full and nothing live can beat its worst (scores only fall).
    """
    live, pool = [((bos_id,), 0.0)], []
    while live:
        lp = log_prob_fn(torch.tensor([h for h, _ in live]))  # (live, vocab)
        ranked = sorted(((h + (v,), s + float(lp[i, v])) for i, (h, s) in enumerate(live) for v in range(lp.size(-1))),
                        key=lambda c: c[1], reverse=True)
        for rank, candidate in enumerate(ranked):
            if candidate[0][-1] == eos_id and rank < beam_size:
                pool = _keep_best(pool + [candidate], beam_size)
        live = [c for c in ranked if c[0][-1] != eos_id][:beam_size]
        if len(pool) == beam_size and min(s for _, s in pool) >= ranked[0][1]:
            break  # a full pool that no live hypothesis can beat
        if live and len(live[0][0]) >= max_len:
            pool, live = _keep_best(pool + live, beam_size), []  # the live ones are finished at max_len
    best = max(pool, key=lambda c: c[1])
    return torch.tensor(best[0]), best[1]


def _keep_best(pool, size):
    return sorted(pool, key=lambda c: c[1], reverse=True)[:size]


def _stops_at_the_first_finished(log_prob_fn, bos_id, eos_id, beam_size, max_len):
    """Stops as soon as a hypothesis of the beam is finished, and returns it: the best of the finished ones."""
    hyps = [((bos_id,), 0.0)]
    while True:
        finished = [h for h in hyps if h[0][-1] == eos_id or len(h[0]) >= max_len]
        if finished:
            best = max(finished, key=lambda h: h[1])
            return torch.tensor(best[0]), best[1]
        lp = log_prob_fn(torch.tensor([h[0] for h in hyps]))
        grown = [(h[0] + (v,), h[1] + float(lp[i, v])) for i, h in enumerate(hyps) for v in range(lp.size(-1))]
        hyps = sorted(grown, key=lambda h: h[1], reverse=True)[:beam_size]


def _greedy_instead_of_beam(log_prob_fn, bos_id, eos_id, beam_size, max_len):
    return beam(log_prob_fn, bos_id, eos_id, 1, max_len)


def _mean_score(log_prob_fn, bos_id, eos_id, beam_size, max_len):
    tokens, score = beam(log_prob_fn, bos_id, eos_id, beam_size, max_len)
    return tokens, score / (len(tokens) - 1)  # a length-normalised score, not the contract's sum


def _ignores_top_k(logits, temperature=1.0, top_k=None, generator=None, top_p=None):
    return sample(logits, temperature, top_k, generator, top_p, use_top_k=False)


def _top_k_without_ties(logits, temperature=1.0, top_k=None, generator=None, top_p=None):
    """Keeps exactly top_k tokens, by index: a token tied with the top_k-th logit is dropped."""
    if top_k is None or temperature == 0:
        return sample(logits, temperature, top_k, generator, top_p)
    z = logits / temperature
    kept = torch.zeros_like(z, dtype=torch.bool).scatter(-1, z.topk(min(top_k, z.size(-1)), dim=-1).indices, True)
    return sample(z.masked_fill(~kept, -math.inf), 1.0, None, generator, top_p)


def _temperature_multiplies(logits, temperature=1.0, top_k=None, generator=None, top_p=None):
    return sample(logits, temperature, top_k, generator, top_p, divide=False)


def _global_generator(logits, temperature=1.0, top_k=None, generator=None, top_p=None):
    return sample(logits, temperature, top_k, None, top_p)  # the generator argument unused


def _ignores_top_p(logits, temperature=1.0, top_k=None, generator=None, top_p=None):
    return sample(logits, temperature, top_k, generator)


def _without_crossing_token(logits, temperature=1.0, top_k=None, generator=None, top_p=None):
    def keep(p, top_p, z):  # the tokens whose cumulative probability, their own included, stays within top_p
        sorted_p, order = p.sort(-1, descending=True)
        within = sorted_p.cumsum(-1) <= top_p
        within[..., 0] = True  # the most probable token at least
        return within.gather(-1, order.argsort(-1))
    return sample(logits, temperature, top_k, generator, top_p, keep=keep)


def _nucleus_before_the_cut(logits, temperature=1.0, top_k=None, generator=None, top_p=None):
    return sample(logits, temperature, top_k, generator, top_p,  # the whole vocabulary's probabilities
                  keep=lambda p, top_p, z: nucleus_by_sorting((logits / temperature).softmax(-1), top_p))


def _nucleus_before_the_temperature(logits, temperature=1.0, top_k=None, generator=None, top_p=None):
    return sample(logits, temperature, top_k, generator, top_p,
                  keep=lambda p, top_p, z: nucleus_by_sorting((z * temperature).softmax(-1), top_p))


def _top_p_of_the_logits(logits, temperature=1.0, top_k=None, generator=None, top_p=None):
    return sample(logits, temperature, top_k, generator, top_p, keep=lambda p, top_p, z: nucleus_by_sorting(z, top_p))


def _top_p_unchecked(logits, temperature=1.0, top_k=None, generator=None, top_p=None):
    return sample(logits, temperature, top_k, generator, top_p, check_top_p=False)


def _plain_whatever_the_seed(seed=0):
    return train(seed, code_of=lambda seed: None)  # the chapter's task, not the seed's


def _untrained(seed=0):
    torch.manual_seed(seed)
    return ch07.TinyDecoder(num_hiddens=8, num_heads=2, num_layers=1, max_len=ch07.SEQUENCE_LENGTH).eval(), 0.99


#: (name, check, answer, only the hidden cases catch it, a phrase of the message that says why)
WRONG_AND_WHY = [
    ("loss shifted the wrong way", ch07.check_causal_lm_loss, _shift_the_wrong_way, False, "the loss: wrong values"),
    ("loss not shifted", ch07.check_causal_lm_loss, _no_shift, False, "the loss: wrong values"),
    ("padding counted in the mean", ch07.check_causal_lm_loss, _padding_counted, False, "the loss: wrong values"),
    ("beam drops finished hypotheses", ch07.check_beam_search, _drops_finished, False,
     "not the best hypothesis the beam keeps"),
    ("greedy whatever the beam size", ch07.check_beam_search, _greedy_instead_of_beam, False,
     "not the best hypothesis the beam keeps"),
    ("finished hypotheses pooled outside the beam", ch07.check_beam_search, _finished_pooled_outside_the_beam, False,
     "not the best hypothesis the beam keeps"),
    ("finished hypotheses pooled as libraries do, no length penalty", ch07.check_beam_search, _pooled_as_libraries_do,
     False, "not the best hypothesis the beam keeps"),
    ("length-normalised score", ch07.check_beam_search, _mean_score, False,
     "the score should be the hypothesis' summed log-probability"),
    ("sampling ignores top-k", ch07.check_sample_next, _ignores_top_k, False, "draws a token outside the top_k"),
    ("top-k without its ties", ch07.check_sample_next, _top_k_without_ties, False,
     "in every row the logit after the top_k-th tied with it"),
    ("beam stopped at its first finished hypothesis", ch07.check_beam_search, _stops_at_the_first_finished, False,
     "beam_search: "),
    ("temperature multiplies the logits", ch07.check_sample_next, _temperature_multiplies, False,
     "softmax(logits / temperature)"),
    ("generator unused", ch07.check_sample_next, _global_generator, False,
     "the same generator seed gives different tokens"),
    ("top-p ignored", ch07.check_sample_next, _ignores_top_p, False, "outside the nucleus"),
    ("nucleus without the token that crosses top_p", ch07.check_sample_next, _without_crossing_token, False,
     "It is the token that crosses top_p"),
    ("nucleus before the top-k cut (not renormalised)", ch07.check_sample_next, _nucleus_before_the_cut, False,
     "outside the nucleus"),
    ("nucleus before the temperature", ch07.check_sample_next, _nucleus_before_the_temperature, False,
     "the nucleus of top_p"),
    ("top-p on the logits, not the probabilities", ch07.check_sample_next, _top_p_of_the_logits, False,
     "the nucleus of top_p"),
    ("top_p outside (0, 1] accepted", ch07.check_sample_next_arguments, _top_p_unchecked, False, "naming `top_p`"),
    ("an untrained model", ch07.check_train_reversal_decoder, _untrained, False, "in the code of seed"),
    ("digits as they are, whatever the seed", ch07.check_train_reversal_decoder, _plain_whatever_the_seed, False,
     "in the code of seed"),
]
#: the same without the phrase (as tests/students/test_one_bug.py reads them)
WRONG = [entry[:4] for entry in WRONG_AND_WHY]
#: the wrong answers above whose mistake the grading side knows (the reference's ``MISTAKES``), and how its
#: message names it (tests/students/test_mistakes.py)
KNOWN_MISTAKES = {
    "loss shifted the wrong way": "targets shifted the wrong way: position t scored against token t − 1",
    "loss not shifted": "no shift: position t scored against its own token",
    "padding counted in the mean": "padding not left out: its targets scored and counted in the mean",
    "finished hypotheses pooled outside the beam": "finished hypotheses set aside in a pool, the beam refilled with "
                                                   "beam_size unfinished ones",
    "finished hypotheses pooled as libraries do, no length penalty": "finished hypotheses pooled only when among the "
                                                                     "step's beam_size best, as Hugging Face and "
                                                                     "fairseq do (no length penalty)",
    "length-normalised score": "score averaged over the generated tokens instead of summed",
}
