"""Machinery shared by every assignment's checks, on both sides of a check.

A check calls the student's code on a series of *cases*. Each case knows how to describe
itself in a failure message. Visible cases (the ones students see in the notebook) may
show expected and actual values; hidden cases, drawn on the grading side, never reveal the
reference answer, only what went wrong (shape, dtype, device, size and position of the
error).

For the judge (``judge.py``): the assertions a case makes, the devices every check runs
on (the CPU, and CUDA where present), the rounding allowance of attention. What only the
answer's own process can measure is in ``kernel/measure.py``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch

from . import nested


def devices() -> list[torch.device]:
    """The real devices every check runs on: the CPU, plus CUDA when it is present."""
    found = [torch.device("cpu")]
    if torch.cuda.is_available():
        found.append(torch.device("cuda"))
    return found


class CheckFailed(AssertionError):
    """A case failed: the answer's fault, as a check found it (the only way a check fails a case).

    Any other exception raised while an answer is judged (a bare ``assert``, a ``TypeError`` in
    a check's own code) is a fault of the course, kept apart from a wrong answer: the grader
    reports the submission as not graded rather than give a student a zero for it.

    Attributes:
        returned: where a visible case failed on what the answer returned, a digest of that
            (``judge.returned_digest``; visible cases are the same for every student): two answers
            with the same digest returned the same values on the same case, so the class report
            groups their failures together, and apart from a different answer whose message reads
            the same once its numbers are set aside.
    """

    returned: str | None = None


@dataclass
class Case:
    """One call of a student's function, described for failure messages.

    Attributes:
        part: the graded name, e.g. ``"nadaraya_watson"``.
        inputs: a short description of the inputs, e.g. ``"queries (4,), keys (6,)"``.
        seed: the seed of a hidden case, ``None`` for a visible one.
    """

    part: str
    inputs: str
    seed: int | None = None
    #: how long the answer took to answer all the part's calls at once (the batch this case was asked in), as
    #: the judge measured it from outside the answer, and by which clock (at grading, the kernel's CPU time
    #: where its cgroup counts it)
    seconds: float = 0.0
    clock: str = "wall-clock time"

    @property
    def hidden(self) -> bool:
        return self.seed is not None

    def fail(self, problem: str) -> None:
        """Raise the :class:`CheckFailed` a student reads, naming part, case and problem."""
        where = f"hidden case (seed {self.seed})" if self.hidden else "case"
        raise CheckFailed(f"{self.part}: {problem}\n    {where}: {self.inputs}")

    def check(self, condition: bool, problem: str) -> None:
        """``fail(problem)`` unless ``condition`` holds."""
        if not condition:
            self.fail(problem)

    def expect_tensor(self, name: str, actual: Any, *, shape, dtype, device) -> None:
        """Check that ``actual`` is a tensor of the given shape, dtype and device."""
        # Exactly a tensor: a subclass could redefine comparisons to always succeed.
        self.check(type(actual) in (torch.Tensor, torch.nn.Parameter), f"{name}: expected a torch.Tensor, got {type(actual).__name__}")
        self.check(tuple(actual.shape) == tuple(shape), f"{name}: shape {tuple(actual.shape)}, expected {tuple(shape)}")
        self.check(actual.dtype == dtype, f"{name}: dtype {actual.dtype}, expected {dtype}")
        self.check(
            actual.device.type == torch.device(device).type,
            f"{name}: on device {actual.device.type}, expected {torch.device(device).type}",
        )

    def expect_close(self, name: str, actual: torch.Tensor, expected: torch.Tensor, *, atol=1e-5, rtol=1e-4) -> None:
        """Check tensor type, shape, dtype, device and values against ``expected``."""
        self.expect_tensor(name, actual, shape=expected.shape, dtype=expected.dtype, device=expected.device)
        expected_nan = torch.isnan(expected)
        self.check(
            torch.equal(torch.isnan(actual), expected_nan),
            f"{name}: NaN where none is expected" if torch.isnan(actual).any() else f"{name}: a NaN is missing",
        )
        # Compare with NaN positions (already known to agree) set to zero.
        actual_v, expected_v = actual.detach().nan_to_num(0.0), expected.detach().nan_to_num(0.0)
        if torch.allclose(actual_v, expected_v, atol=atol, rtol=rtol):
            return
        error = (actual_v - expected_v).abs()
        worst = tuple(int(i) for i in torch.unravel_index(error.argmax(), error.shape)) if error.dim() else ()
        problem = f"{name}: wrong values (largest error {error.max().item():.3g} at index {worst})"
        if not self.hidden:
            problem += _difference(expected.detach(), actual.detach(), worst)
        self.fail(problem)


#: The most values of a tensor a visible case's message shows (the answer's result is the student's data).
SHOWN_VALUES = 16


def _difference(expected: torch.Tensor, actual: torch.Tensor, worst: tuple[int, ...]) -> str:
    """The message lines that show a visible case's values: both tensors whole where they are small, else the row
    (the last axis) that holds the largest error, so that the values shown are the ones that differ."""
    if expected.numel() <= SHOWN_VALUES or len(worst) < 2:
        return f"\n    expected: {_short(expected)}\n    got:      {_short(actual)}"
    row = worst[:-1]  # the index of the row, every axis but the last
    return (f"\n    the row that differs, at index {row} of shape {tuple(expected.shape)}:"
            f"\n    expected: {_short(expected[row])}\n    got:      {_short(actual[row])}")


def _short(t: torch.Tensor) -> str:
    """A compact one-line rendering of a small tensor for visible-case messages: at most
    :data:`SHOWN_VALUES` values, else its first values and its shape."""
    with torch.no_grad():
        t = t.detach().cpu()
        if t.numel() > SHOWN_VALUES:
            return f"tensor of shape {tuple(t.shape)} beginning {t.flatten()[:SHOWN_VALUES // 2].tolist()} […]"
        text = repr(t).replace("\n", " ")
    return " ".join(text.split())[:400]


def to_device(args: Any, device: torch.device | str) -> Any:
    """A copy of ``args`` (tensors, devices, in tuples, lists, dicts and partials, such as a score function
    with its weights, as bilinear's ``W``) moved to ``device``."""
    move = functools.partial(_moved, device=device)
    return nested.map_leaves(args, move, into=(*nested.CONTAINERS, functools.partial))


def _moved(value: Any, device: torch.device | str) -> Any:
    """A tensor moved to ``device`` (an empty one on ``meta``), ``device`` for a device, anything else as is."""
    if isinstance(value, torch.device):
        return torch.device(device)  # an answer's `device=` argument follows the case
    if isinstance(value, torch.Tensor):
        if torch.device(device).type == "meta":
            return torch.empty_like(value, device="meta")
        return value.to(device)
    return value


def tensors_in(result: Any) -> list[torch.Tensor]:
    """Every tensor in a result, in its tuples and lists."""
    return [leaf for leaf in nested.leaves(result, into=(tuple, list)) if isinstance(leaf, torch.Tensor)]


def advice_lines(advice: tuple[str, ...]) -> str:
    """The advice on a passed part, one ``⚠`` line each after a newline (``""`` for none): what the answer's
    own process reported, shown to help, never counted."""
    return "".join(f"\n  ⚠ advice (no points depend on it): {text}" for text in advice)


# --------------------------------------------------------------------------------------
# Comparing results
# --------------------------------------------------------------------------------------


#: The unit roundoff of float32: the largest relative error of one rounding, 2⁻²⁴.
FLOAT32_ROUNDOFF = 2.0 ** -24


def attention_rounding(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, rescales: int = 0) -> float:
    """How far apart two correct float32 computations of scaled dot-product attention may be.

    A check must not take points for rounding. A score ``s = q·k / √d`` summed in float32
    is off by at most about ``(d + 1)·u·Σ|q_l k_l| / √d`` (``u`` = 2⁻²⁴), and subtracting
    the row maximum and exponentiating adds ``2u·|s|``; a softmax whose logits are each off
    by ``η`` has each weight off by a factor of at most ``e^{2η}``, so an output
    ``Σ_j w_j v_j`` is off by at most ``(2η + k·u)·max|v|`` (and a weight by at most
    ``2η``, covered by taking ``max|v|`` at least 1). Two correct implementations may each
    be off by that much, in opposite directions. The bound is tiny for scores of order 1
    (about 1e-5) and grows with the scores, where float32 exponents lose digits (scores in
    the thousands: about 1e-2). An online softmax (chapter 6's chunked attention) also
    rescales its running sums by ``exp(m_old - m_new)`` once per chunk, each time off by up
    to ``(2|s| + 1)·u`` more.

    Args:
        queries: ``(..., q, d)``; keys: ``(..., k, d)``; values: ``(..., k, v)``.
        rescales: how many times the running sums may be rescaled (the number of chunks).

    Returns:
        an absolute tolerance on the output ``(..., q, v)`` and the weights ``(..., q, k)``,
        0 for empty inputs.
    """
    if queries.numel() == 0 or keys.numel() == 0 or values.numel() == 0:
        return 0.0
    d, k = queries.shape[-1], keys.shape[-2]
    with torch.no_grad():
        q, kk, v = (t.detach().double().cpu() for t in (queries, keys, values))
        magnitudes = q.abs() @ kk.abs().transpose(-2, -1) / d ** 0.5  # (..., q, k): Σ_l |q_l k_l| / √d
        largest, values_largest = magnitudes.max().item(), max(1.0, v.abs().max().item())
    logit_error = (d + 3 + 2 * rescales) * FLOAT32_ROUNDOFF * largest + (2 + rescales) * FLOAT32_ROUNDOFF
    return 2 * (2 * logit_error + k * FLOAT32_ROUNDOFF) * values_largest


def expect_same_results(case: Case, result, expected, names, **tolerances) -> None:
    """Compare a tensor, or a tuple of tensors, with the reference's."""
    if len(names) == 1:
        case.expect_close(names[0], result, expected, **tolerances)
        return
    case.check(
        isinstance(result, tuple) and len(result) == len(names),
        f"should return a tuple ({', '.join(names)}), got {type(result).__name__}",
    )
    for name, got, want in zip(names, result, expected, strict=True):
        case.expect_close(name, got, want, **tolerances)



# --------------------------------------------------------------------------------------
# Dropout, from outputs
# --------------------------------------------------------------------------------------


def expect_dropout_in_training_only(case: Case, seen: dict, hint: str) -> None:
    """``seen`` (``kernel.measure.in_both_modes``): the outputs in evaluation mode agree under two states of the
    generator, and those in training mode differ from each other and from evaluation mode; ``hint`` says where
    dropout belongs."""
    (first, again), (trained, retrained) = seen["evaluated"], seen["trained"]
    case.expect_close("a second output in evaluation mode, the generator seeded otherwise (dropout must be off)",
                      again, first, atol=1e-5, rtol=1e-4)
    case.expect_tensor("the output in training mode", trained, shape=first.shape, dtype=first.dtype, device=first.device)
    case.expect_tensor("a second output in training mode", retrained, shape=first.shape, dtype=first.dtype,
                       device=first.device)
    case.check(not torch.allclose(trained, first), f"dropout=0.5 changes nothing in training mode: {hint}")
    case.check(not torch.equal(trained, retrained), "in training mode, two states of the generator give the same "
                                                    f"output: draw dropout's mask from PyTorch's generator ({hint})")


def expect_evaluated_as_reference(case: Case, seen: dict, expected: dict, atol: float = 1e-4) -> None:
    """The output in evaluation mode equals the reference's on the same call."""
    case.expect_close("the output in evaluation mode", seen["evaluated"][0], expected["evaluated"][0], atol=atol)


# --------------------------------------------------------------------------------------
# Parts that train a model
# --------------------------------------------------------------------------------------


def expect_trained_in_time(case: Case, outputs: Any, reported: Any, limit: float, contract: str = "") -> None:
    """A model came back (``outputs`` of it, not ``None``) within ``limit`` seconds of the judge's clock
    (``case.clock``: at grading the kernel's CPU time, measured from outside), with a reported accuracy that
    is a float in [0, 1]. That it learned in the call is established by the task: it depends on the seed
    the judge passes, and the judge measures the accuracy on data it draws."""
    case.check(outputs is not None, "should return a tuple (model, accuracy) whose model is an nn.Module")
    case.check(case.seconds <= limit, f"training took {case.seconds:.0f} s of {case.clock}; it must finish within "
                                      f"{limit:.0f} s of {case.clock} here{contract}")
    case.check(isinstance(reported, float) and 0 <= reported <= 1, f"accuracy should be a float in [0, 1], "
                                                                      f"got {reported!r}")


def expect_backward_passes(case: Case, args: tuple, kwargs: dict, result: Any) -> None:
    """A training part's ``advise`` (``Part.advise``): the answer's process saw a backward pass during the call (a
    sign that the model was trained there, on the seed it was given), the third item of ``result``."""
    backward_passes = result[2] if isinstance(result, tuple) and len(result) == 3 else None
    case.check(isinstance(backward_passes, int) and backward_passes > 0,
               f"no backward pass (loss.backward(), torch.autograd.grad) was seen during {case.part}: train the "
               "model in the function, on the task of the seed it is given")
