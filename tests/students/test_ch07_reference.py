"""Assignment 07's reference and hidden cases beyond the catalogue tests: top-p sampling, the
margins of the graded nucleus cases, and training for any positive number of steps."""

import math

import pytest
import torch

from autograder.parts import derived_seeds
from autograder.reference import ch07_decoding as ref07

#: probabilities 0.5, 0.3, 0.15, 0.05 as logits
LOGITS = torch.tensor([0.5, 0.3, 0.15, 0.05]).log()


def counts(top_p, top_k=None, draws=20_000):
    """How many of ``draws`` draws from ``LOGITS`` with ``top_p`` (and ``top_k``) give each of the 4 tokens."""
    generator = torch.Generator().manual_seed(0)
    tokens = ref07.sample_next(LOGITS.expand(draws, 4), 1.0, top_k, generator, top_p=top_p)  # (draws,)
    return torch.bincount(tokens, minlength=4)


@pytest.mark.parametrize("top_p, kept", [(0.45, [1.0]), (0.7, [0.5, 0.3]), (0.85, [0.5, 0.3, 0.15]),
                                         (1.0, [0.5, 0.3, 0.15, 0.05])])
def test_the_nucleus_keeps_the_token_that_crosses_top_p(top_p, kept):
    expected = torch.tensor(kept + [0.0] * (4 - len(kept)), dtype=torch.float64)
    assert torch.allclose(counts(top_p).double() / 20_000, expected / expected.sum(), atol=0.02)


def test_the_nucleus_is_taken_after_the_top_k_cut_renormalised():
    # over the top 2, token 0 holds 0.5 / 0.8 = 0.625 >= 0.6 alone (0.5 < 0.6 before renormalising)
    assert counts(0.6, top_k=2).tolist() == [20_000, 0, 0, 0]


def test_top_p_keeps_any_leading_dimensions():
    tokens = ref07.sample_next(torch.randn(5, 3, 2, 7), 0.8, 3, torch.Generator().manual_seed(1), top_p=0.9)
    assert tokens.shape == (5, 3, 2) and tokens.dtype == torch.int64


@pytest.mark.parametrize("top_p", [0.0, -0.2, 1.5])
def test_top_p_outside_zero_one_raises(top_p):
    with pytest.raises(ValueError, match="top_p"):
        ref07.sample_next(LOGITS, top_p=top_p)


def cumulative(logits, temperature, top_k):
    """Each row's cumulative probabilities in decreasing order, after the top-k cut: ``(rows, vocab)``."""
    scaled = logits.double() / temperature
    if top_k is not None:
        scaled = scaled.masked_fill(scaled < scaled.topk(top_k, dim=-1).values[..., -1:], -math.inf)
    return scaled.softmax(-1).sort(dim=-1, descending=True).values.cumsum(-1)


def test_graded_top_p_lies_clear_of_every_cumulative_probability():
    """So float rounding never moves a token in or out of a correct answer's nucleus, for any key."""
    for seed in [0, *derived_seeds(7, 40)]:
        for call in ref07._sampling_calls([seed]):
            top_p = call.kwargs.get("top_p")
            logits, temperature, top_k = call.args[:3]
            if top_p is None or top_p == 1.0 or temperature == 0:
                continue
            distance = (cumulative(logits, temperature, top_k) - top_p).abs().min().item()
            assert distance >= ref07.NUCLEUS_MARGIN, f"seed {seed}: {call.description}"


def test_every_seed_tells_each_nucleus_mistake_apart():
    for seed in [0, *derived_seeds(8, 40)]:
        cases = [(call.args[0], call.args[1], call.args[2], call.kwargs["top_p"]) for call in ref07._sampling_calls([seed])
                 if call.kwargs.get("top_p", 1.0) < 1.0 and call.args[1] > 0]
        assert len(cases) == 3
        for name, mistake in ref07.NUCLEUS_MISTAKES.items():
            assert any(ref07._tells(mistake, *case) for case in cases), f"seed {seed}: {name}"


@pytest.mark.parametrize("steps", [1, 5, 9, 10])
def test_training_runs_for_any_positive_number_of_steps(steps):
    model, accuracy = ref07.train_reversal_decoder(0, steps=steps, batch_size=4)
    assert 0.0 <= accuracy <= 1.0 and not model.training


@pytest.mark.parametrize("steps", [0, -1])
def test_training_without_steps_raises(steps):
    with pytest.raises(ValueError, match="steps"):
        ref07.train_reversal_decoder(0, steps=steps)


def test_the_schedule_warms_up_from_ten_steps_and_stays_constant_below():
    def rates(steps):
        optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=3e-3)
        schedule, seen = ref07._schedule(optimizer, steps), []
        for _ in range(steps):
            seen.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            schedule.step()
        return seen

    assert rates(5) == pytest.approx([3e-3] * 5)
    cycle = rates(10)
    assert cycle[0] < cycle[1] == pytest.approx(3e-3) and cycle[-1] < cycle[1]
