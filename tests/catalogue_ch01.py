"""Answers to assignment 01, right and wrong, for the checks' tests (tests/students/test_catalogues.py).

Every wrong answer below is a mistake students make. Each must fail the check meant to
catch it, visibly or on the hidden cases.
"""

import torch
from torch import nn

from autograder import ch01_nadaraya_watson as ch01
from autograder.reference import ch01_nadaraya_watson as ref01

# ---- correct answers, written here so that they are not the autograder's own objects ----


def gaussian(u):
    return torch.exp(-(u**2) / 2)


def boxcar(u):
    return torch.where(u.abs() <= 1, torch.ones_like(u), torch.zeros_like(u))


def epanechnikov(u):
    return torch.clamp(1 - u * u, min=0.0)


def pooling(queries, keys, values, kernel=ref01.gaussian_kernel, bandwidth=1.0):
    _validate(queries, keys, values, bandwidth)
    scores = kernel((queries.unsqueeze(1) - keys.unsqueeze(0)) / bandwidth)  # (q, k)
    totals = scores.sum(1, keepdim=True)  # (q, 1)
    weights = torch.nan_to_num(scores / totals)  # 0/0 -> 0 on empty rows
    return weights @ values, weights


def _validate(queries, keys, values, bandwidth):
    if queries.dim() != 1:
        raise ValueError("queries must be 1-D")
    if keys.dim() != 1:
        raise ValueError("keys must be 1-D")
    if values.dim() not in (1, 2) or len(values) != len(keys):
        raise ValueError("values must have one row per key")
    if bandwidth <= 0:
        raise ValueError("bandwidth must be positive")


def leave_one_out(x, y):
    """Row i is x without x[i], built with torch.cat (a different route than a mask)."""
    if x.dim() != 1 or len(x) < 2:
        raise ValueError("x must be 1-D with 2 or more points")
    if y.shape != x.shape:
        raise ValueError("y must match x")
    rows = [(torch.cat([x[:i], x[i + 1 :]]), torch.cat([y[:i], y[i + 1 :]])) for i in range(len(x))]
    return torch.stack([k for k, _ in rows]), torch.stack([v for _, v in rows])


class Regression(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.rand(1))  # shape (1,) is as good as a 0-d scalar

    def forward(self, queries, keys, values):
        if keys.dim() != 2 or keys.shape[0] != queries.shape[0]:
            raise ValueError("keys must be (q, k)")
        if values.shape != keys.shape:
            raise ValueError("values must match keys")
        self.attention_weights = nn.functional.softmax(-(((queries.reshape(-1, 1) - keys) * self.w) ** 2) / 2, dim=-1)
        return torch.bmm(self.attention_weights.unsqueeze(1), values.unsqueeze(-1)).reshape(-1)


def train(model, x_train, y_train, epochs=5, lr=0.5):
    keys, values = leave_one_out(x_train, y_train)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for _ in range(epochs):
        loss = nn.functional.mse_loss(model(x_train, keys, values), y_train, reduction="sum")
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    return losses


CORRECT = [  # (check, a correct answer, the autograder's reference, which must be refused)
    (ch01.check_gaussian_kernel, gaussian, ref01.gaussian_kernel),
    (ch01.check_boxcar_kernel, boxcar, ref01.boxcar_kernel),
    (ch01.check_epanechnikov_kernel, epanechnikov, ref01.epanechnikov_kernel),
    (ch01.check_nadaraya_watson, pooling, ref01.nadaraya_watson),
    (ch01.check_leave_one_out, leave_one_out, ref01.leave_one_out),
    (ch01.check_nw_kernel_regression, Regression, ref01.NWKernelRegression),
    (ch01.check_train_nw, train, ref01.train_nw),
    (ch01.check_nadaraya_watson_arguments, pooling, ref01.nadaraya_watson),
    (ch01.check_leave_one_out_arguments, leave_one_out, ref01.leave_one_out),
    (ch01.check_nw_kernel_regression_arguments, Regression, ref01.NWKernelRegression),
]


# ---- wrong answers: (name, check, answer, hidden cases needed to catch it) ----


def _weights_over_queries(queries, keys, values, kernel=ref01.gaussian_kernel, bandwidth=1.0):
    _validate(queries, keys, values, bandwidth)
    scores = kernel((queries[:, None] - keys[None, :]) / bandwidth)
    weights = scores / scores.sum(0, keepdim=True)  # normalised over the wrong axis
    return weights @ values, weights


def _bandwidth_multiplies(queries, keys, values, kernel=ref01.gaussian_kernel, bandwidth=1.0):
    return pooling(queries * bandwidth**2, keys * bandwidth**2, values, kernel, bandwidth)  # (q-k)·h, not (q-k)/h


def _no_empty_row_guard(queries, keys, values, kernel=ref01.gaussian_kernel, bandwidth=1.0):
    _validate(queries, keys, values, bandwidth)
    scores = kernel((queries[:, None] - keys[None, :]) / bandwidth)
    weights = scores / scores.sum(1, keepdim=True)  # 0/0 = NaN on an empty row
    return weights @ values, weights


def _ignores_kernel(queries, keys, values, kernel=ref01.gaussian_kernel, bandwidth=1.0):
    return pooling(queries, keys, values, ref01.gaussian_kernel, bandwidth)


def _scalar_values_only(queries, keys, values, kernel=ref01.gaussian_kernel, bandwidth=1.0):
    predictions, weights = pooling(queries, keys, values, kernel, bandwidth)
    return (weights * values).sum(1), weights  # breaks for values (k, v)


def _scales_queries_in_place(queries, keys, values, kernel=ref01.gaussian_kernel, bandwidth=1.0):
    queries /= bandwidth
    return pooling(queries, keys / bandwidth, values, kernel, 1.0)


def _fallback_on_default_device(queries, keys, values, kernel=ref01.gaussian_kernel, bandwidth=1.0):
    _validate(queries, keys, values, bandwidth)
    scores = kernel((queries[:, None] - keys[None, :]) / bandwidth)
    totals = scores.sum(1, keepdim=True)
    weights = scores / torch.where(totals > 0, totals, torch.ones(totals.shape))  # ones on the CPU
    return weights @ values, weights


def _no_argument_checks(queries, keys, values, kernel=ref01.gaussian_kernel, bandwidth=1.0):
    scores = kernel((queries.reshape(-1, 1) - keys.reshape(1, -1)) / bandwidth)
    weights = torch.nan_to_num(scores / scores.sum(1, keepdim=True))
    return weights @ values[: len(keys)], weights


def _epsilon_in_denominator(queries, keys, values, kernel=ref01.gaussian_kernel, bandwidth=1.0):
    _validate(queries, keys, values, bandwidth)
    scores = kernel((queries[:, None] - keys[None, :]) / bandwidth)
    weights = scores / (scores.sum(1, keepdim=True) + 1e-12)  # "avoids" 0/0, biases tiny rows
    return weights @ values, weights


def _drops_the_next_pair(x, y):
    n = len(x)
    keep = ~torch.eye(n, dtype=torch.bool).roll(1, dims=1)  # drops pair i+1, keeps pair i
    return x.expand(n, n)[keep].reshape(n, n - 1), y.expand(n, n)[keep].reshape(n, n - 1)


def _keeps_every_pair(x, y):
    n = len(x)
    return x.expand(n, n).clone(), y.expand(n, n).clone()


def _pairs_shuffled(x, y):
    keys, values = leave_one_out(x, y)
    return keys, values.flip(1)  # keys and values no longer belong together


def _hard_coded_visible_case(x, y):
    keys, values = leave_one_out(x, y)  # right for the visible cases' sizes only (validation included)
    if len(x) in (2, 4, 5):
        return keys, values
    return keys.flip(0), values.flip(0)


def _strict_boxcar(u):
    return (u.abs() < 1).to(u.dtype)


def _boolean_boxcar(u):
    return u.abs() <= 1


def _unclamped_epanechnikov(u):
    return 1 - u**2


def _gaussian_without_half(u):
    return torch.exp(-(u**2))


def _gaussian_in_float32(u):
    return torch.exp(-(u.float() ** 2) / 2)


class _SoftmaxOverQueries(Regression):
    def forward(self, queries, keys, values):
        super().forward(queries, keys, values)
        self.attention_weights = torch.softmax(-(((queries[:, None] - keys) * self.w) ** 2) / 2, dim=0)
        return (self.attention_weights * values).sum(1)


class _DetachedW(Regression):
    def forward(self, queries, keys, values):
        w = self.w.item()  # the gradient can no longer reach w
        self.attention_weights = torch.softmax(-(((queries[:, None] - keys) * w) ** 2) / 2, dim=1)
        return (self.attention_weights * values).sum(1)


class _TwoParameters(Regression):
    def __init__(self):
        super().__init__()
        self.b = nn.Parameter(torch.zeros(()))


def _sgd(model, x_train, y_train, epochs, lr, keys, values, reduce=torch.sum, zero_grad=True):
    """Full-batch SGD with the mistakes below switched on by the arguments."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for _ in range(epochs):
        loss = reduce((model(x_train, keys, values) - y_train) ** 2)
        if zero_grad:
            optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def _mean_loss(model, x_train, y_train, epochs=5, lr=0.5):
    return _sgd(model, x_train, y_train, epochs, lr, *leave_one_out(x_train, y_train), reduce=torch.mean)


def _no_zero_grad(model, x_train, y_train, epochs=5, lr=0.5):
    # gradients accumulate across epochs
    return _sgd(model, x_train, y_train, epochs, lr, *leave_one_out(x_train, y_train), zero_grad=False)


def _trains_without_leave_one_out(model, x_train, y_train, epochs=5, lr=0.5):
    n = len(x_train)
    # each point sees itself among its keys: (n,) -> (n, n)
    return _sgd(model, x_train, y_train, epochs, lr, x_train.expand(n, n), y_train.expand(n, n))


#: (name, check, answer, only the hidden cases catch it, a phrase of the message that says why)
WRONG_AND_WHY = [
    ("weights normalised over queries", ch01.check_nadaraya_watson, _weights_over_queries, False,
     "predictions: wrong values"),
    ("bandwidth multiplies the distance", ch01.check_nadaraya_watson, _bandwidth_multiplies, False,
     "predictions: wrong values"),
    ("NaN on a row with no support", ch01.check_nadaraya_watson, _no_empty_row_guard, False,
     "predictions: NaN where none is expected"),
    ("kernel argument ignored", ch01.check_nadaraya_watson, _ignores_kernel, False, "predictions: wrong values"),
    ("values (k, v) not supported", ch01.check_nadaraya_watson, _scalar_values_only, False, "raised RuntimeError"),
    ("queries modified in place", ch01.check_nadaraya_watson, _scales_queries_in_place, False,
     "modifies its input `queries` in place"),
    ("tensor created on the default device", ch01.check_nadaraya_watson, _fallback_on_default_device, False,
     "is not device-agnostic"),
    ("no ValueError for bad arguments", ch01.check_nadaraya_watson_arguments, _no_argument_checks, False,
     "should raise ValueError naming `queries`, but returned normally"),
    ("+ 1e-12 in the denominator", ch01.check_nadaraya_watson, _epsilon_in_denominator, False,
     "predictions: wrong values"),
    ("leave-one-out drops the wrong pair", ch01.check_leave_one_out, _drops_the_next_pair, False,
     "keys (each row sorted): wrong values"),
    ("leave-one-out keeps every pair", ch01.check_leave_one_out, _keeps_every_pair, False, "keys: shape"),
    ("keys and values unpaired", ch01.check_leave_one_out, _pairs_shuffled, False,
     "values (each row in the order of its sorted keys): wrong values"),
    ("answer hard-coded to the visible case", ch01.check_leave_one_out, _hard_coded_visible_case, True,
     "keys (each row sorted): wrong values"),
    ("boxcar excludes |u| = 1", ch01.check_boxcar_kernel, _strict_boxcar, False, "the output: wrong values"),
    ("boxcar returns booleans", ch01.check_boxcar_kernel, _boolean_boxcar, False,
     "the output: dtype torch.bool, expected torch.float32"),
    ("Epanechnikov not clamped at 0", ch01.check_epanechnikov_kernel, _unclamped_epanechnikov, False,
     "the output: wrong values"),
    ("Gaussian without the 1/2", ch01.check_gaussian_kernel, _gaussian_without_half, False, "the output: wrong values"),
    ("Gaussian loses float64", ch01.check_gaussian_kernel, _gaussian_in_float32, False,
     "the output: dtype torch.float32, expected torch.float64"),
    ("softmax over queries", ch01.check_nw_kernel_regression, _SoftmaxOverQueries, False, "predictions: wrong values"),
    ("w detached from the graph", ch01.check_nw_kernel_regression, _DetachedW, False,
     "predictions do not depend on `w`"),
    ("an extra parameter", ch01.check_nw_kernel_regression, _TwoParameters, False,
     "should have exactly one parameter named `w`"),
    ("mean instead of summed loss", ch01.check_train_nw, _mean_loss, False,
     "the losses are not the summed squared leave-one-out loss"),
    ("gradients never zeroed", ch01.check_train_nw, _no_zero_grad, False,
     "the losses are not the summed squared leave-one-out loss"),
    ("training without leave-one-out", ch01.check_train_nw, _trains_without_leave_one_out, False,
     "the losses are not the summed squared leave-one-out loss"),
]
#: the same without the phrase (as tests/students/test_one_bug.py reads them)
#: the wrong answers above that grading tells as advice (what only the answer's process observes: an input changed in
#: place, a tensor made on a fixed device, seen in the ``meta`` replay), each with whether a grader with a GPU still
#: fails it on its results (a tensor on the CPU where the case's inputs are on CUDA); the visible checks in a
#: student's own process fail them all
ADVICE_AT_GRADING = {"queries modified in place": False, "tensor created on the default device": True}
WRONG = [entry[:4] for entry in WRONG_AND_WHY]
#: the wrong answers above whose mistake the grading side knows (the reference's ``MISTAKES``), and how its
#: message names it (tests/students/test_mistakes.py)
KNOWN_MISTAKES = {
    "weights normalised over queries": "weights normalised over the queries (dim 0) instead of over each query's keys",
    "bandwidth multiplies the distance": "distances multiplied by the bandwidth instead of divided by it",
    "kernel argument ignored": "the kernel argument ignored: always the gaussian kernel",
    "+ 1e-12 in the denominator": "+ 1e-12 in the denominator: rows of tiny kernel values no longer sum to 1",
    "leave-one-out drops the wrong pair": "row i leaves out pair i + 1 instead of pair i",
    "keys and values unpaired": "values reversed within each row: no longer paired with their keys",
    "boxcar excludes |u| = 1": "|u| < 1 instead of |u| ≤ 1: the boundary ±1 left out",
    "Epanechnikov not clamped at 0": "1 − u² not clamped at 0: negative beyond |u| = 1",
    "Gaussian without the 1/2": "exp(−u²) without the 1/2",
    "softmax over queries": "softmax over the queries' axis (dim 0) instead of the keys'",
    "mean instead of summed loss": "mean instead of summed squared loss",
    "gradients never zeroed": "gradients never zeroed: they accumulate across epochs",
    "training without leave-one-out": "no leave-one-out: each point is among its own keys",
}
