"""Checks of assignment 01_nadaraya_watson: attention pooling with Nadaraya–Watson regression.

One ``check_<part>(answer, hidden=False)`` per graded part of contract section 01, and
one ``check_<part>_arguments(answer)`` for the ``ValueError``s a part must raise, graded
apart. Each part is declared as data (``autograder.parts``) and judged by the course's
judge (``autograder.judge``); this module holds only what is special to each part, the
chapter's data set, and the helpers
that visible cases pass to an answer (kernels and a model that are not the answers, so
that a part is never graded through another part).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .core import Case
from .judge import checks
from .kernel.measure import describe_module
from .parts import ArgumentCheck, Call, Part, Probe

CHAPTER = "ch01_nadaraya_watson"

# --------------------------------------------------------------------------------------
# The chapter's data set
# --------------------------------------------------------------------------------------


def true_function(x: torch.Tensor) -> torch.Tensor:
    """The noiseless target of the chapter's data set: ``2 sin x + x^0.8``."""
    return 2 * torch.sin(x) + x**0.8


def make_data(n_train: int = 50, seed: int = 0, noise: float = 0.5, dtype=torch.float32):
    """The chapter's seeded synthetic regression data (book, chapter 1).

    Returns:
        ``(x_train, y_train, x_test, y_test)``: ``n_train`` sorted inputs drawn uniformly from
        ``[0, 5)`` with targets ``2 sin x + x^0.8 + ε``, ``ε ~ N(0, noise²)``, and 50 evenly spaced
        test inputs with their noiseless targets, each ``(n,)``.
    """
    generator = torch.Generator().manual_seed(seed)
    x_train, _ = torch.sort(torch.rand(n_train, generator=generator, dtype=dtype) * 5)
    y_train = true_function(x_train) + noise * torch.randn(n_train, generator=generator, dtype=dtype)
    x_test = torch.arange(0, 5, 0.1, dtype=dtype)
    return x_train, y_train, x_test, true_function(x_test)


# --------------------------------------------------------------------------------------
# Helpers the visible cases pass to answers (none of them is an answer)
# --------------------------------------------------------------------------------------


def cauchy_kernel(u: torch.Tensor) -> torch.Tensor:
    """``1 / (1 + u²)``: positive everywhere, so no row is ever empty."""
    return 1 / (1 + u**2)


def triangle_kernel(u: torch.Tensor) -> torch.Tensor:
    """``max(0, 1 - |u|)``: zero beyond one bandwidth, so far queries have empty rows."""
    return (1 - u.abs()).clamp(min=0)


def laplace_kernel(u: torch.Tensor) -> torch.Tensor:
    """``exp(-|u|)``: tiny but never zero far away (about 1e-11 at 25 bandwidths)."""
    return torch.exp(-u.abs())


class LaplaceKernelRegression(nn.Module):
    """A learnable model for checking ``train_nw`` without the student's ``NWKernelRegression``.

    ``forward(queries (q,), keys (q, k), values (q, k)) -> (q,)`` with weights
    ``softmax(-|query - key| · w)``, one scalar parameter ``w``.
    """

    def __init__(self, w: float = 1.0):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(float(w)))

    def forward(self, queries, keys, values):
        weights = torch.softmax(-(queries[:, None] - keys).abs() * self.w, dim=1)  # (q, k)
        return (weights * values).sum(dim=1)  # (q,)


HELPERS = {"cauchy_kernel": cauchy_kernel, "triangle_kernel": triangle_kernel, "laplace_kernel": laplace_kernel}

# --------------------------------------------------------------------------------------
# Kernels
# --------------------------------------------------------------------------------------


def _kernel(name: str) -> Part:
    return Part(name, CHAPTER, arguments=("u",), atol=1e-6)


GAUSSIAN, BOXCAR, EPANECHNIKOV = (_kernel(n) for n in ("gaussian_kernel", "boxcar_kernel", "epanechnikov_kernel"))


@checks(GAUSSIAN)
def check_gaussian_kernel(fn, hidden: bool = False) -> None:
    """Check ``gaussian_kernel(u) = exp(-u²/2)`` (float32 and float64, any shape)."""


@checks(BOXCAR)
def check_boxcar_kernel(fn, hidden: bool = False) -> None:
    """Check ``boxcar_kernel(u) = 1 if |u| ≤ 1 else 0`` (boundary included, input dtype kept)."""


@checks(EPANECHNIKOV)
def check_epanechnikov_kernel(fn, hidden: bool = False) -> None:
    """Check ``epanechnikov_kernel(u) = max(0, 1 - u²)``."""


# --------------------------------------------------------------------------------------
# Pooling
# --------------------------------------------------------------------------------------

POOLING = Part("nadaraya_watson", CHAPTER, arguments=("queries", "keys", "values"), outputs=("predictions", "weights"))


@checks(POOLING)
def check_nadaraya_watson(fn, hidden: bool = False) -> None:
    """Check weights and predictions: kernels, bandwidths, vector values, empty and tiny rows."""


def _bad_pooling_arguments() -> list[tuple[str, tuple, dict]]:
    q, k, v = torch.zeros(3), torch.zeros(4), torch.zeros(4)
    options = {"kernel": cauchy_kernel}
    return [
        ("queries", (torch.zeros(3, 1), k, v), options),
        ("keys", (q, torch.zeros(4, 1), v), options),
        ("values", (q, k, torch.zeros(5)), options),
        ("bandwidth", (q, k, v), {**options, "bandwidth": 0.0}),
    ]


@checks(ArgumentCheck("nadaraya_watson", CHAPTER, _bad_pooling_arguments))
def check_nadaraya_watson_arguments(fn, hidden: bool = False) -> None:
    """Bad arguments raise ``ValueError`` naming the argument."""


# --------------------------------------------------------------------------------------
# Leave-one-out
# --------------------------------------------------------------------------------------


def _compare_leave_one_out(case: Case, result, expected) -> None:
    """Row ``i`` must hold the pairs ``j ≠ i``; their order within the row is free."""
    case.check(isinstance(result, tuple) and len(result) == 2, "should return a tuple (keys, values)")
    (keys, values), (expected_keys, expected_values) = result, expected
    case.expect_tensor("keys", keys, shape=expected_keys.shape, dtype=expected_keys.dtype, device=expected_keys.device)
    case.expect_tensor("values", values, shape=expected_values.shape, dtype=expected_values.dtype,
                       device=expected_values.device)
    # Sort each row by key on both sides, then compare keys and the values that go with them.
    order, expected_order = keys.argsort(dim=1), expected_keys.argsort(dim=1)
    case.expect_close("keys (each row sorted)", keys.gather(1, order), expected_keys.gather(1, expected_order))
    case.expect_close("values (each row in the order of its sorted keys)", values.gather(1, order),
                      expected_values.gather(1, expected_order))


LEAVE_ONE_OUT = Part("leave_one_out", CHAPTER, arguments=("x", "y"), compare=_compare_leave_one_out)


@checks(LEAVE_ONE_OUT)
def check_leave_one_out(fn, hidden: bool = False) -> None:
    """Check that row ``i`` of ``leave_one_out(x, y)`` holds every pair except pair ``i``."""


@checks(ArgumentCheck("leave_one_out", CHAPTER, lambda: [
    ("x", (torch.zeros(3, 2), torch.zeros(3, 2)), {}),
    ("x", (torch.zeros(1), torch.zeros(1)), {}),
    ("y", (torch.zeros(4), torch.zeros(5)), {}),
]))
def check_leave_one_out_arguments(fn, hidden: bool = False) -> None:
    """``x`` not 1-D or shorter than 2, or ``y`` of another shape, raise ``ValueError``."""


# --------------------------------------------------------------------------------------
# The learnable model
# --------------------------------------------------------------------------------------


def _forward_with_w(cls):
    """A function ``(queries, keys, values, w) -> (predictions, weights, dw)`` of a model class.

    ``dw`` is the gradient of ``predictions.sum()`` with respect to ``w``, or ``None``
    when the predictions do not depend on ``w``.
    """

    def forward(queries, keys, values, w):
        model = cls().to(queries.device)
        with torch.no_grad():
            model.w.fill_(w)
        predictions = model(queries, keys, values)
        gradient = None
        if isinstance(predictions, torch.Tensor) and predictions.requires_grad:
            (gradient,) = torch.autograd.grad(predictions.sum(), model.w)
            gradient = gradient.reshape(())
        weights = getattr(model, "attention_weights", None)
        return predictions.detach(), weights.detach() if isinstance(weights, torch.Tensor) else weights, gradient

    return forward


def _compare_regression(case: Case, result, expected) -> None:
    predictions, weights, gradient = result
    case.expect_close("predictions", predictions, expected[0])
    case.expect_close("attention_weights", weights, expected[1])
    case.check(gradient is not None, "predictions do not depend on `w`: the gradient cannot reach it")
    case.expect_close("the gradient of sum(predictions) with respect to w", gradient, expected[2])


def _expect_one_scalar_parameter(case: Case, args, kwargs, model) -> None:
    case.check(model["is_module"], "should be a subclass of torch.nn.Module")
    params = model["parameters"]
    case.check(list(params) == ["w"], f"should have exactly one parameter named `w`, found {list(params) or 'none'}")
    case.check(math.prod(params["w"]) == 1, f"`w` should be a scalar, got shape {tuple(params['w'])}")


ONE_PARAMETER = Probe("parameters", lambda: [Call("NWKernelRegression()")], lambda cls: lambda: describe_module(cls()),
                      _expect_one_scalar_parameter)
REGRESSION = Part("NWKernelRegression", CHAPTER, arguments=("queries", "keys", "values"), adapt=_forward_with_w,
                  compare=_compare_regression, probes=(ONE_PARAMETER,))


@checks(REGRESSION)
def check_nw_kernel_regression(cls, hidden: bool = False) -> None:
    """Check the learnable model: one scalar parameter ``w``, predictions, weights, gradient."""


@checks(ArgumentCheck("NWKernelRegression", CHAPTER, lambda: [
    ("values", (torch.zeros(2), torch.zeros(2, 3), torch.zeros(2, 4)), {}),
    ("keys", (torch.zeros(2), torch.zeros(3, 3), torch.zeros(3, 3)), {}),
], construct=()))
def check_nw_kernel_regression_arguments(cls, hidden: bool = False) -> None:
    """``forward`` with keys or values of the wrong shape raises ``ValueError``."""


# --------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------


def _training_run(train):
    """A function ``(x, y, epochs, w0) -> (losses, trained w)`` of a training function.

    It trains the checks' own :class:`LaplaceKernelRegression`, so that ``train_nw`` is
    graded on its own, whatever the student's ``NWKernelRegression`` does.
    """

    def training(x_train, y_train, epochs, w0):
        model = LaplaceKernelRegression(w0).to(x_train.device)
        losses = train(model, x_train, y_train, epochs=epochs, lr=0.5)
        return losses, model.w.detach()

    return training


def _compare_training(case: Case, result, expected) -> None:
    losses, w = result
    expected_losses, expected_w = expected
    expected_before = [float(v) for v in expected_losses]
    case.check(isinstance(losses, (list, tuple)), f"should return a list of losses, got {type(losses).__name__}")
    case.check(len(losses) == len(expected_before), f"should return one loss per epoch ({len(expected_before)}), got {len(losses)}")
    values = [float(loss) for loss in losses]
    case.check(all(math.isfinite(v) for v in values), f"losses should be finite, got {values}")
    matches = _all_close(values, expected_before)
    if not matches and len(values) > 1:  # losses recorded after each step are accepted too
        matches = _all_close(values[:-1], expected_before[1:])
    case.check(
        matches,
        "the losses are not the summed squared leave-one-out loss of each epoch "
        "(sum, not mean, of (model(x_train, keys, values) - y_train)² with leave-one-out keys and values)"
        + ("" if case.hidden else f"\n    expected: {_rounded(expected_before)}\n    got:      {_rounded(values)}"),
    )
    if expected_before[-1] < expected_before[0]:  # near a flat loss no fall is owed
        case.check(values[-1] < values[0], f"the loss should fall during training, got {_rounded(values)}")
    case.expect_close("the trained w", w, expected_w, rtol=1e-3)


TRAINING = Part("train_nw", CHAPTER, arguments=("x_train", "y_train"), adapt=_training_run, compare=_compare_training,
                meta=False, depends_on={"leave_one_out": LEAVE_ONE_OUT})


@checks(TRAINING)
def check_train_nw(fn, hidden: bool = False) -> None:
    """Check ``train_nw`` on the checks' own model: per-epoch losses and the fitted ``w``."""


def _rounded(values: list[float]) -> list[float]:
    return [round(v, 4) for v in values]


def _all_close(actual: list[float], expected: list[float]) -> bool:
    return all(math.isclose(a, e, rel_tol=1e-3, abs_tol=1e-4) for a, e in zip(actual, expected, strict=True))


PARTS = {part.name: part for part in (GAUSSIAN, BOXCAR, EPANECHNIKOV, POOLING, LEAVE_ONE_OUT, REGRESSION, TRAINING)}
