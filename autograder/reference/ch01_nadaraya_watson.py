"""Reference answers and cases of assignment 01_nadaraya_watson (grading side only).

Contract section 01: kernels, Nadaraya–Watson pooling, leave-one-out, the learnable
model and its training. The book's chapter 1 demonstrates with these functions.
"""

from __future__ import annotations

import random

import torch
from torch import nn

from ..ch01_nadaraya_watson import cauchy_kernel, laplace_kernel, make_data, triangle_kernel
from ..parts import Call

# --------------------------------------------------------------------------------------
# Reference implementations
# --------------------------------------------------------------------------------------


def gaussian_kernel(u: torch.Tensor) -> torch.Tensor:
    """Unnormalised Gaussian kernel ``exp(-u²/2)``, elementwise, any shape."""
    return torch.exp(-(u**2) / 2)


def boxcar_kernel(u: torch.Tensor) -> torch.Tensor:
    """Boxcar kernel: ``1`` where ``|u| ≤ 1``, else ``0``, in the dtype of ``u``."""
    return (u.abs() <= 1).to(u.dtype)


def epanechnikov_kernel(u: torch.Tensor) -> torch.Tensor:
    """Epanechnikov kernel ``max(0, 1 - u²)``, elementwise, any shape."""
    return (1 - u**2).clamp(min=0)


def nadaraya_watson(queries, keys, values, kernel=gaussian_kernel, bandwidth=1.0):
    """Nadaraya–Watson attention pooling (book, chapter 1).

    Args:
        queries: ``(q,)`` points at which to predict.
        keys: ``(k,)`` training inputs.
        values: ``(k,)`` or ``(k, v)`` training targets.
        kernel: elementwise kernel ``K``.
        bandwidth: positive width ``h``; the weights use ``K((query - key) / h)``.

    Returns:
        ``(predictions, weights)``: predictions ``(q,)`` or ``(q, v)``, weights ``(q, k)``
        whose rows sum to 1, or are all zero where the kernel vanishes on every key.
    """
    _validate_pooling(queries, keys, values, bandwidth)
    # (q, 1) - (1, k) -> (q, k): every query against every key
    scores = kernel((queries[:, None] - keys[None, :]) / bandwidth)
    totals = scores.sum(dim=1, keepdim=True)  # (q, 1)
    # A row with no support keeps its zeros: divide it by 1 instead of 0.
    weights = scores / torch.where(totals > 0, totals, torch.ones_like(totals))
    return weights @ values, weights  # (q, k) @ (k,) or (k, v)


def _validate_pooling(queries, keys, values, bandwidth) -> None:
    if queries.dim() != 1:
        raise ValueError(f"queries must be 1-D (q,), got shape {tuple(queries.shape)}")
    if keys.dim() != 1:
        raise ValueError(f"keys must be 1-D (k,), got shape {tuple(keys.shape)}")
    if values.dim() not in (1, 2) or values.shape[0] != keys.shape[0]:
        raise ValueError(f"values must be (k,) or (k, v) with k = {keys.shape[0]}, got shape {tuple(values.shape)}")
    if not bandwidth > 0:
        raise ValueError(f"bandwidth must be positive, got {bandwidth}")


def leave_one_out(x: torch.Tensor, y: torch.Tensor):
    """Keys and values for leave-one-out training (book, chapter 1).

    Args:
        x: ``(n,)`` training inputs, ``n ≥ 2``.
        y: ``(n,)`` training targets.

    Returns:
        ``(keys, values)``, both ``(n, n-1)``: row ``i`` holds every pair ``(x[j], y[j])``
        with ``j ≠ i``, in their original order.
    """
    if x.dim() != 1 or x.shape[0] < 2:
        raise ValueError(f"x must be 1-D with at least 2 points, got shape {tuple(x.shape)}")
    if y.shape != x.shape:
        raise ValueError(f"y must have the shape of x {tuple(x.shape)}, got {tuple(y.shape)}")
    n = x.shape[0]
    keep = ~torch.eye(n, dtype=torch.bool, device=x.device)  # (n, n), False on the diagonal
    # (n,) -> (n, n) -> the n·(n-1) kept entries, row by row -> (n, n-1)
    keys = x.expand(n, n)[keep].reshape(n, n - 1)
    values = y.expand(n, n)[keep].reshape(n, n - 1)
    return keys, values


class NWKernelRegression(nn.Module):
    """Nadaraya–Watson regression with a learnable scalar ``w`` scaling query–key distances.

    ``forward(queries, keys, values)`` takes queries ``(q,)`` and, per query, its own keys
    and values ``(q, k)``; it returns predictions ``(q,)`` and stores the attention weights
    ``softmax(-((query - key) · w)² / 2)`` as ``.attention_weights`` ``(q, k)``.
    """

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.rand(()))
        self.attention_weights = None

    def forward(self, queries, keys, values):
        if queries.dim() != 1:
            raise ValueError(f"queries must be 1-D (q,), got shape {tuple(queries.shape)}")
        if keys.dim() != 2 or keys.shape[0] != queries.shape[0]:
            raise ValueError(f"keys must be (q, k) with q = {queries.shape[0]}, got shape {tuple(keys.shape)}")
        if values.shape != keys.shape:
            raise ValueError(f"values must have the shape of keys {tuple(keys.shape)}, got {tuple(values.shape)}")
        # (q,) -> (q, 1) so that each query meets its own row of keys (q, k)
        scaled = (queries[:, None] - keys) * self.w
        self.attention_weights = torch.softmax(-(scaled**2) / 2, dim=1)  # (q, k)
        return (self.attention_weights * values).sum(dim=1)  # (q,)


def train_nw(model: nn.Module, x_train: torch.Tensor, y_train: torch.Tensor, epochs: int = 5, lr: float = 0.5):
    """Fit ``model`` by gradient descent on the summed squared leave-one-out loss.

    Every step uses the whole training set (plain gradient descent, with ``torch.optim.SGD``).

    Args:
        model: an ``NWKernelRegression`` (any module with ``forward(queries, keys, values)``).
        x_train, y_train: ``(n,)`` training data.

    Returns:
        The list of ``epochs`` losses (Python floats), each computed before that epoch's step.
    """
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for _ in range(epochs):
        optimizer.zero_grad()
        loss = summed_loo_loss(model, x_train, y_train)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def summed_loo_loss(model: nn.Module, x_train: torch.Tensor, y_train: torch.Tensor) -> torch.Tensor:
    """Summed squared error of ``model`` predicting each ``y_train[i]`` from the other pairs. Scalar."""
    keys, values = leave_one_out(x_train, y_train)  # (n, n-1) each
    return ((model(x_train, keys, values) - y_train) ** 2).sum()


REFERENCES = {
    "gaussian_kernel": gaussian_kernel,
    "boxcar_kernel": boxcar_kernel,
    "epanechnikov_kernel": epanechnikov_kernel,
    "nadaraya_watson": nadaraya_watson,
    "leave_one_out": leave_one_out,
    "NWKernelRegression": NWKernelRegression,
    "train_nw": train_nw,
}

# --------------------------------------------------------------------------------------
# Known mistakes: the judge names the one a wrong answer's values match (judge.py)
# --------------------------------------------------------------------------------------


def _gaussian_without_half(u):
    """``exp(-u²)``: the ``/2`` left out."""
    return torch.exp(-(u**2))


def _boxcar_strict(u):
    """``|u| < 1``: the boundary ``±1`` gets 0."""
    return (u.abs() < 1).to(u.dtype)


def _epanechnikov_unclamped(u):
    """``1 - u²`` without the clamp: negative beyond ``|u| = 1``."""
    return 1 - u**2


def _pooled(scores, totals, values):
    weights = scores / totals
    return weights @ values, weights


def _pooling_over_queries(queries, keys, values, kernel=gaussian_kernel, bandwidth=1.0):
    """Each key's column normalised (sum over the queries, dim 0) instead of each query's row."""
    scores = kernel((queries[:, None] - keys[None, :]) / bandwidth)
    return _pooled(scores, scores.sum(dim=0, keepdim=True), values)


def _pooling_bandwidth_multiplies(queries, keys, values, kernel=gaussian_kernel, bandwidth=1.0):
    """``K((query - key) · h)`` instead of ``K((query - key) / h)``."""
    return nadaraya_watson(queries, keys, values, kernel, 1.0 / bandwidth)


def _pooling_always_gaussian(queries, keys, values, kernel=gaussian_kernel, bandwidth=1.0):
    """The Gaussian kernel whatever ``kernel`` is passed."""
    return nadaraya_watson(queries, keys, values, gaussian_kernel, bandwidth)


def _pooling_epsilon(queries, keys, values, kernel=gaussian_kernel, bandwidth=1.0):
    """``1e-12`` added to each row's sum: rows of tiny kernel values no longer sum to 1."""
    scores = kernel((queries[:, None] - keys[None, :]) / bandwidth)
    return _pooled(scores, scores.sum(dim=1, keepdim=True) + 1e-12, values)


def _leave_one_out_next_pair(x, y):
    """Row ``i`` leaves out pair ``i + 1`` (cyclically) instead of pair ``i``."""
    n = x.shape[0]
    keep = ~torch.eye(n, dtype=torch.bool, device=x.device).roll(1, dims=1)
    return x.expand(n, n)[keep].reshape(n, n - 1), y.expand(n, n)[keep].reshape(n, n - 1)


def _leave_one_out_values_reversed(x, y):
    """The right keys, each row's values in reverse order: pairs broken."""
    keys, values = leave_one_out(x, y)
    return keys, values.flip(1)


class _RegressionSoftmaxOverQueries(NWKernelRegression):
    """The softmax taken down the queries' axis (dim 0) instead of along each query's keys."""

    def forward(self, queries, keys, values):
        self.attention_weights = torch.softmax(-(((queries[:, None] - keys) * self.w) ** 2) / 2, dim=0)
        return (self.attention_weights * values).sum(dim=1)


def _train_with(model, x_train, y_train, epochs, lr, keys, values, reduce=torch.sum, zero_grad=True):
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for _ in range(epochs):
        if zero_grad:
            optimizer.zero_grad()
        loss = reduce((model(x_train, keys, values) - y_train) ** 2)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def _train_mean_loss(model, x_train, y_train, epochs=5, lr=0.5):
    """The mean of the squared leave-one-out errors instead of their sum."""
    return _train_with(model, x_train, y_train, epochs, lr, *leave_one_out(x_train, y_train), reduce=torch.mean)


def _train_no_zero_grad(model, x_train, y_train, epochs=5, lr=0.5):
    """No ``zero_grad``: each step uses the gradients of every epoch so far."""
    return _train_with(model, x_train, y_train, epochs, lr, *leave_one_out(x_train, y_train), zero_grad=False)


def _train_without_leave_one_out(model, x_train, y_train, epochs=5, lr=0.5):
    """Every training pair among each point's keys, its own included."""
    n = x_train.shape[0]
    return _train_with(model, x_train, y_train, epochs, lr, x_train.expand(n, n), y_train.expand(n, n))


#: ``{part: ((what the student did, in their words), the function that does it), ...}``: the one whose values a
#: wrong answer's match is named in its message (of several, the one matching it on most cases; then the first).
MISTAKES = {
    "gaussian_kernel": (("exp(−u²) without the 1/2", _gaussian_without_half),),
    "boxcar_kernel": (("|u| < 1 instead of |u| ≤ 1: the boundary ±1 left out", _boxcar_strict),),
    "epanechnikov_kernel": (("1 − u² not clamped at 0: negative beyond |u| = 1", _epanechnikov_unclamped),),
    "nadaraya_watson": (
        ("weights normalised over the queries (dim 0) instead of over each query's keys", _pooling_over_queries),
        ("distances multiplied by the bandwidth instead of divided by it", _pooling_bandwidth_multiplies),
        ("the kernel argument ignored: always the gaussian kernel", _pooling_always_gaussian),
        ("+ 1e-12 in the denominator: rows of tiny kernel values no longer sum to 1", _pooling_epsilon),
    ),
    "leave_one_out": (
        ("row i leaves out pair i + 1 instead of pair i", _leave_one_out_next_pair),
        ("values reversed within each row: no longer paired with their keys", _leave_one_out_values_reversed),
    ),
    "NWKernelRegression": (("softmax over the queries' axis (dim 0) instead of the keys'",
                            _RegressionSoftmaxOverQueries),),
    "train_nw": (
        ("mean instead of summed squared loss", _train_mean_loss),
        ("gradients never zeroed: they accumulate across epochs", _train_no_zero_grad),
        ("no leave-one-out: each point is among its own keys", _train_without_leave_one_out),
    ),
}

# --------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------


def _kernel_visible() -> list[Call]:
    u = torch.tensor([-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 3.0])  # the boundary points ±1 included
    return [Call(f"u = {u.tolist()} in {dtype}", (u.to(dtype),)) for dtype in (torch.float32, torch.float64)]


def _kernel_hidden(seed: int) -> list[Call]:
    """Random shapes of 1 to 3 dimensions, both dtypes; the boundary ±1 and a point beyond it always in.

    The point beyond (|u| > 1, where compact kernels are 0) is there for every student, so that a
    kernel not clamped to its support is caught whatever the draw.
    """
    rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
    calls = []
    for dtype in (torch.float32, torch.float64):
        for _ in range(2):
            # 0 to 2 leading axes of 1 to 5, a last axis of 3 to 5: room for the three points below
            shape = (*(rng.randint(1, 5) for _ in range(rng.randint(0, 2))), rng.randint(3, 5))
            u = torch.randn(shape, generator=g, dtype=dtype) * 2
            u.view(-1)[0], u.view(-1)[-1] = 1.0, -1.0  # |u| = 1 is inside the boxcar
            u.view(-1)[1] = -round(rng.uniform(1.1, 3.0), 3)  # outside every compact kernel's support
            calls.append(Call(f"u of shape {tuple(u.shape)}, {dtype}", (u,)))
    return calls


def _pooling_call(queries, keys, values, kernel, bandwidth) -> Call:
    described = (f"queries {tuple(queries.shape)}, keys {tuple(keys.shape)}, values {tuple(values.shape)}, "
                 f"kernel={kernel.__name__}, bandwidth={bandwidth}, {queries.dtype}")
    return Call(described, (queries, keys, values), {"kernel": kernel, "bandwidth": bandwidth})


def _pooling_visible() -> list[Call]:
    """Hand-sized cases with the checks' own kernels (never the student's, graded apart)."""
    queries = torch.tensor([0.0, 1.0, 2.5])
    keys = torch.tensor([0.0, 0.5, 1.0, 2.0])
    values = torch.tensor([1.0, 2.0, 3.0, 4.0])
    return [
        _pooling_call(queries, keys, values, cauchy_kernel, 1.0),
        _pooling_call(queries, keys, values, cauchy_kernel, 0.5),
        _pooling_call(queries, keys, torch.stack([values, -values], dim=1), cauchy_kernel, 2.0),
        # query 9.0 is farther than one bandwidth from every key: its row is empty
        _pooling_call(torch.tensor([0.2, 9.0]), keys, values, triangle_kernel, 1.0),
        # query 25.0: every kernel value is about 1e-11, tiny but not zero; normalising
        # must still give weights that sum to 1 (no `+ eps` in the denominator)
        _pooling_call(torch.tensor([0.5, 25.0]), keys, values, laplace_kernel, 1.0),
        _pooling_call(queries.double(), keys.double(), values.double(), laplace_kernel, 0.7),
    ]


def _pooling_hidden(seed: int) -> list[Call]:
    """Each course kernel on random data, always with an empty row and a tiny-sum row; values
    ``(k,)`` for two kernels and ``(k, v)`` for the other two, for every student."""
    rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
    calls = []
    for index, kernel in enumerate((gaussian_kernel, boxcar_kernel, epanechnikov_kernel, laplace_kernel)):
        q, k = rng.randint(3, 9), rng.randint(3, 12)
        bandwidth = round(rng.uniform(0.3, 2.5), 3)
        dtype = rng.choice([torch.float32, torch.float64])
        keys = torch.rand(k, generator=g, dtype=dtype) * 5
        queries = torch.rand(q, generator=g, dtype=dtype) * 6 - 1
        queries[-1] = 40.0 * bandwidth  # far from every key: empty compact-support rows
        # 7 bandwidths beyond the last key: Gaussian kernel values of about 2e-11, not 0
        queries[-2] = keys.max() + 7.0 * bandwidth
        values = torch.randn((k, rng.randint(1, 3)) if index % 2 else (k,), generator=g, dtype=dtype)
        calls.append(_pooling_call(queries, keys, values, kernel, bandwidth))
    return calls


def _leave_one_out_visible() -> list[Call]:
    x = torch.arange(5, dtype=torch.float32)
    unsorted = torch.tensor([3.0, -1.0, 2.5, 0.0])
    return [Call("x = [0, 1, 2, 3, 4], y = 10x + 1", (x, 10 * x + 1)),
            Call(f"x = {unsorted.tolist()}, y = x²", (unsorted, unsorted**2)),
            Call("x = [1, 2], y = [5, 7] (two points)", (torch.tensor([1.0, 2.0]), torch.tensor([5.0, 7.0])))]


def _leave_one_out_hidden(seed: int) -> list[Call]:
    """Distinct, unsorted keys (so the pairing of keys and values shows), two points included."""
    rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
    calls = []
    for n in (2, rng.randint(3, 10), rng.randint(11, 40)):
        x, y = torch.randperm(n, generator=g).float() * 0.5, torch.randn(n, generator=g)
        calls.append(Call(f"x and y of shape ({n},)", (x, y)))
    return calls


def _regression_call(queries, keys, values, w) -> Call:
    return Call(f"queries {tuple(queries.shape)}, keys and values {tuple(keys.shape)}, w = {w}",
                (queries, keys, values, w))


def _regression_visible() -> list[Call]:
    x, y, _, _ = make_data(n_train=6, seed=1)
    keys, values = leave_one_out(x, y)
    return [_regression_call(x, keys, values, 1.5), _regression_call(x, keys, values, -0.5)]


def _regression_hidden(seed: int) -> list[Call]:
    rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
    calls = []
    for _ in range(2):
        q, k = rng.randint(2, 8), rng.randint(2, 11)
        w = round(rng.uniform(0.2, 3.2), 3)
        calls.append(_regression_call(torch.randn(q, generator=g), torch.randn(q, k, generator=g),
                                      torch.randn(q, k, generator=g), w))
    return calls


def _training_call(n: int, seed: int, epochs: int, w0: float) -> Call:
    x, y, _, _ = make_data(n_train=n, seed=seed)
    return Call(f"{n} training points, epochs={epochs}, lr=0.5, w starting at {w0}", (x, y, epochs, w0))


def _training_visible() -> list[Call]:
    return [_training_call(50, 0, 5, 0.5), _training_call(12, 3, 3, 1.2)]


def _training_hidden(seed: int) -> list[Call]:
    rng = random.Random(seed)
    return [_training_call(rng.randint(20, 60), rng.randrange(2**31), rng.randint(2, 8), round(rng.uniform(0.5, 1.5), 2))
            for _ in range(2)]


VISIBLE = {
    "gaussian_kernel": _kernel_visible,
    "boxcar_kernel": _kernel_visible,
    "epanechnikov_kernel": _kernel_visible,
    "nadaraya_watson": _pooling_visible,
    "leave_one_out": _leave_one_out_visible,
    "NWKernelRegression": _regression_visible,
    "train_nw": _training_visible,
}
HIDDEN = {
    "gaussian_kernel": _kernel_hidden,
    "boxcar_kernel": _kernel_hidden,
    "epanechnikov_kernel": _kernel_hidden,
    "nadaraya_watson": _pooling_hidden,
    "leave_one_out": _leave_one_out_hidden,
    "NWKernelRegression": _regression_hidden,
    "train_nw": _training_hidden,
}
