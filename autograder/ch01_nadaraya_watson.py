"""Assignment 01_nadaraya_watson: attention pooling with Nadaraya–Watson kernel regression.

The first half of this module holds the course's reference implementations of the
graded parts (see ``shared/CONTRACT.md``, section 01); the book's chapter 1 demonstrates
with them. The second half holds the checks that the notebook's test cells call, one
``check_<part>`` per graded part. Each takes the student's function (or class) and
``hidden=False``; with ``hidden=True`` it draws fresh inputs from a seed chosen at
grading time and never reveals the reference answer.
"""

from __future__ import annotations

import math
import random

import torch
from torch import nn

from .core import Case, check_on_meta, devices, expect_own_code, new_seed, passed, shape_of, unchanged

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
    """Nadaraya–Watson attention pooling.

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
    """Keys and values for leave-one-out training.

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
    """Fit ``model.w`` by full-batch SGD on the summed squared leave-one-out loss.

    Args:
        model: an ``NWKernelRegression``.
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


def true_function(x: torch.Tensor) -> torch.Tensor:
    """The noiseless target of the chapter's data set: ``2 sin x + x^0.8``."""
    return 2 * torch.sin(x) + x**0.8


def make_data(n_train: int = 50, seed: int = 0, noise: float = 0.5, dtype=torch.float32):
    """The chapter's seeded synthetic regression data.

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
# Checks
# --------------------------------------------------------------------------------------

_KERNELS = {"gaussian_kernel": gaussian_kernel, "boxcar_kernel": boxcar_kernel, "epanechnikov_kernel": epanechnikov_kernel}


def check_gaussian_kernel(fn, hidden: bool = False) -> None:
    """Check ``gaussian_kernel(u) = exp(-u²/2)``."""
    _check_kernel("gaussian_kernel", fn, hidden)


def check_boxcar_kernel(fn, hidden: bool = False) -> None:
    """Check ``boxcar_kernel(u) = 1 if |u| ≤ 1 else 0`` (boundary included, input dtype kept)."""
    _check_kernel("boxcar_kernel", fn, hidden)


def check_epanechnikov_kernel(fn, hidden: bool = False) -> None:
    """Check ``epanechnikov_kernel(u) = max(0, 1 - u²)``."""
    _check_kernel("epanechnikov_kernel", fn, hidden)


def _kernel_inputs(hidden: bool):
    """Yield ``(seed, u)``: a visible vector with the boundary points ±1, or random hidden ones."""
    if not hidden:
        yield None, torch.tensor([-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 3.0])
        return
    for _ in range(3):
        seed = new_seed()
        g = torch.Generator().manual_seed(seed)
        shape = tuple(int(s) for s in torch.randint(1, 6, (int(torch.randint(1, 4, (1,), generator=g)),), generator=g))
        u = torch.randn(shape, generator=g) * 2
        u.view(-1)[0] = 1.0  # always include the boundary point
        yield seed, u


def _check_kernel(part: str, fn, hidden: bool) -> None:
    reference = _KERNELS[part]
    count = 0
    for seed, u in _kernel_inputs(hidden):
        for device in devices():
            for dtype in (torch.float32, torch.float64):
                case = Case(part, f"u of shape {shape_of(u)}, dtype {dtype}, on {device.type}", seed)
                expect_own_code(case, fn)
                x = u.to(device, dtype)
                with unchanged(case, u=x):
                    out = case.call(fn, x)
                case.expect_close("the output", out, reference(x), atol=1e-6)
                count += 1
        check_on_meta(Case(part, f"u of shape {shape_of(u)} on the meta device", seed), fn, u)
    passed(part, count, hidden)


def check_nadaraya_watson(fn, hidden: bool = False) -> None:
    """Check ``nadaraya_watson``: weights, predictions, kernels, bandwidth, empty rows, bad arguments."""
    cases = _pooling_cases_hidden() if hidden else _pooling_cases_visible()
    count = 0
    for seed, queries, keys, values, kernel_name, bandwidth in cases:
        kwargs = {} if kernel_name is None else {"kernel": _KERNELS[kernel_name]}
        kwargs |= {} if bandwidth is None else {"bandwidth": bandwidth}
        options = ", ".join(f"{k}={getattr(v, '__name__', v)}" for k, v in kwargs.items()) or "default kernel and bandwidth"
        inputs = f"queries {shape_of(queries)}, keys {shape_of(keys)}, values {shape_of(values)}, {options}"
        for device in devices():
            case = Case("nadaraya_watson", f"{inputs}, on {device.type}", seed)
            expect_own_code(case, fn)
            _check_one_pooling(case, fn, (queries.to(device), keys.to(device), values.to(device)), kwargs)
            count += 1
        check_on_meta(Case("nadaraya_watson", f"{inputs}, on the meta device", seed), fn, queries, keys, values, **kwargs)
    _check_pooling_errors(fn)
    passed("nadaraya_watson", count, hidden)


def _check_one_pooling(case: Case, fn, args, kwargs) -> None:
    queries, keys, values = args
    with unchanged(case, queries=queries, keys=keys, values=values):
        result = case.call(fn, *args, **kwargs)
    case.check(
        isinstance(result, tuple) and len(result) == 2,
        f"should return a tuple (predictions, weights), got {type(result).__name__}",
    )
    predictions, weights = result
    expected_predictions, expected_weights = nadaraya_watson(*args, **kwargs)
    case.expect_close("weights", weights, expected_weights)
    case.expect_close("predictions", predictions, expected_predictions)


def _pooling_cases_visible():
    """Small hand-sized cases: each kernel, two bandwidths, vector values, an empty row."""
    queries = torch.tensor([0.0, 1.0, 2.5])
    keys = torch.tensor([0.0, 0.5, 1.0, 2.0])
    values = torch.tensor([1.0, 2.0, 3.0, 4.0])
    yield None, queries, keys, values, None, None  # defaults: Gaussian, bandwidth 1
    yield None, queries, keys, values, "gaussian_kernel", 0.5
    yield None, queries, keys, values, "epanechnikov_kernel", 2.0
    yield None, queries, keys, torch.stack([values, -values], dim=1), "gaussian_kernel", 1.0
    # query 9.0 is farther than one bandwidth from every key: its boxcar row is empty
    yield None, torch.tensor([0.2, 9.0]), keys, values, "boxcar_kernel", 1.0


def _pooling_cases_hidden():
    """Random sizes, bandwidths and kernels, plus one case with an empty boxcar row."""
    for kernel_name in ("gaussian_kernel", "boxcar_kernel", "epanechnikov_kernel"):
        seed = new_seed()
        g = torch.Generator().manual_seed(seed)
        rng = random.Random(seed)
        q, k = rng.randint(2, 9), rng.randint(3, 12)
        queries, keys = torch.rand(q, generator=g) * 6 - 1, torch.rand(k, generator=g) * 5
        queries[-1] = 20.0  # far from every key: the boxcar and Epanechnikov rows are empty
        values = torch.randn((k, rng.randint(1, 3)) if rng.random() < 0.5 else (k,), generator=g)
        yield seed, queries, keys, values, kernel_name, round(rng.uniform(0.3, 2.5), 3)


def _check_pooling_errors(fn) -> None:
    """Bad arguments raise ``ValueError`` naming the argument."""
    q, k, v = torch.zeros(3), torch.zeros(4), torch.zeros(4)
    case = Case("nadaraya_watson", "bad arguments")
    case.expect_value_error(fn, "queries", torch.zeros(3, 1), k, v)
    case.expect_value_error(fn, "keys", q, torch.zeros(4, 1), v)
    case.expect_value_error(fn, "values", q, k, torch.zeros(5))
    case.expect_value_error(fn, "bandwidth", q, k, v, bandwidth=0.0)


def check_leave_one_out(fn, hidden: bool = False) -> None:
    """Check that row ``i`` of ``leave_one_out(x, y)`` holds every pair except pair ``i``."""
    count = 0
    for seed, x, y in _leave_one_out_cases(hidden):
        inputs = f"x and y of shape {shape_of(x)}"
        for device in devices():
            case = Case("leave_one_out", f"{inputs}, on {device.type}", seed)
            expect_own_code(case, fn)
            _check_one_leave_one_out(case, fn, x.to(device), y.to(device))
            count += 1
        check_on_meta(Case("leave_one_out", f"{inputs}, on the meta device", seed), fn, x, y)
    case = Case("leave_one_out", "bad arguments")
    case.expect_value_error(fn, "x", torch.zeros(3, 2), torch.zeros(3, 2))
    case.expect_value_error(fn, "y", torch.zeros(4), torch.zeros(5))
    passed("leave_one_out", count, hidden)


def _leave_one_out_cases(hidden: bool):
    """Yield ``(seed, x, y)``: a visible ``x = 0..4, y = 10x + 1``, or shuffled random hidden data."""
    if not hidden:
        x = torch.arange(5, dtype=torch.float32)
        yield None, x, 10 * x + 1
        return
    for _ in range(3):
        seed = new_seed()
        g = torch.Generator().manual_seed(seed)
        n = random.Random(seed).randint(3, 40)
        # distinct, unsorted keys so that the pairing of keys and values can be checked
        yield seed, torch.randperm(n, generator=g).float() * 0.5, torch.randn(n, generator=g)


def _check_one_leave_one_out(case: Case, fn, x, y) -> None:
    with unchanged(case, x=x, y=y):
        result = case.call(fn, x, y)
    case.check(isinstance(result, tuple) and len(result) == 2, "should return a tuple (keys, values)")
    keys, values = result
    expected_keys, expected_values = leave_one_out(x, y)
    case.expect_tensor("keys", keys, shape=expected_keys.shape, dtype=x.dtype, device=x.device)
    case.expect_tensor("values", values, shape=expected_values.shape, dtype=y.dtype, device=y.device)
    # The order within a row does not matter, the pairing does: sort each row by key.
    order = keys.argsort(dim=1)
    case.expect_close("keys (each row sorted)", keys.gather(1, order), expected_keys.sort(dim=1).values)
    expected_order = expected_keys.argsort(dim=1)
    case.expect_close(
        "values (each row in the order of its sorted keys)",
        values.gather(1, order),
        expected_values.gather(1, expected_order),
    )


def check_nw_kernel_regression(cls, hidden: bool = False) -> None:
    """Check the learnable model: one scalar parameter ``w``, forward, weights, gradient."""
    part = "NWKernelRegression"
    case = Case(part, "NWKernelRegression()")
    expect_own_code(case, cls)
    model = case.call(cls)
    case.check(isinstance(model, nn.Module), "should be a subclass of torch.nn.Module")
    params = dict(model.named_parameters())
    case.check(list(params) == ["w"], f"should have exactly one parameter named `w`, found {list(params) or 'none'}")
    case.check(params["w"].numel() == 1, f"`w` should be a scalar, got shape {tuple(params['w'].shape)}")
    count = 0
    for seed, queries, keys, values, w in _regression_cases(hidden):
        for device in devices():
            case = Case(part, f"queries {shape_of(queries)}, keys and values {shape_of(keys)}, w={w:.3f}, on {device.type}", seed)
            args = (queries.to(device), keys.to(device), values.to(device))
            _check_one_regression(case, case.call(cls).to(device), args, w)
            count += 1
    meta = Case(part, f"forward with queries {shape_of(queries)}, keys and values {shape_of(keys)} on the meta device")
    check_on_meta(meta, meta.call(cls).to("meta"), queries, keys, values)
    errors = Case(part, "bad arguments to forward")
    errors.expect_value_error(model, "values", torch.zeros(2), torch.zeros(2, 3), torch.zeros(2, 4))
    errors.expect_value_error(model, "keys", torch.zeros(2), torch.zeros(3, 3), torch.zeros(3, 3))
    passed(part, count, hidden)


def _regression_cases(hidden: bool):
    if not hidden:
        x, y, _, _ = make_data(n_train=6, seed=1)
        keys, values = leave_one_out(x, y)
        yield None, x, keys, values, 1.5
        return
    for _ in range(2):
        seed = new_seed()
        g = torch.Generator().manual_seed(seed)
        q, k = int(torch.randint(2, 9, (1,), generator=g)), int(torch.randint(2, 12, (1,), generator=g))
        w = float(torch.rand((), generator=g) * 3 + 0.2)
        yield seed, torch.randn(q, generator=g), torch.randn(q, k, generator=g), torch.randn(q, k, generator=g), w


def _check_one_regression(case: Case, model: nn.Module, args, w: float) -> None:
    reference = NWKernelRegression().to(args[0].device)
    with torch.no_grad():
        model.w.fill_(w)
        reference.w.fill_(w)
    with unchanged(case, queries=args[0], keys=args[1], values=args[2]):
        predictions = case.call(model, *args)
    expected = reference(*args)
    case.expect_close("predictions", predictions, expected.detach())
    case.expect_close("attention_weights", getattr(model, "attention_weights", None), reference.attention_weights.detach())
    case.check(predictions.requires_grad, "predictions do not depend on `w`: the gradient cannot reach it")
    (grad,) = torch.autograd.grad(predictions.sum(), model.w)
    (expected_grad,) = torch.autograd.grad(expected.sum(), reference.w)
    case.expect_close("the gradient of sum(predictions) with respect to w", grad.reshape(()), expected_grad.reshape(()))


def check_train_nw(fn, hidden: bool = False) -> None:
    """Check ``train_nw`` on the reference model: per-epoch losses and the fitted ``w``."""
    if hidden:
        rng = random.Random(new_seed())
        runs = [(rng.randrange(2**31), rng.randint(20, 60), rng.randint(2, 8), round(rng.uniform(0.5, 1.5), 2)) for _ in range(2)]
    else:
        runs = [(None, 50, 5, 0.5)]
    for seed, n, epochs, w0 in runs:
        x, y, _, _ = make_data(n_train=n, seed=0 if seed is None else seed)
        for device in devices():
            case = Case("train_nw", f"{n} training points, epochs={epochs}, lr=0.5, w starting at {w0}, on {device.type}", seed)
            expect_own_code(case, fn)
            _check_one_training(case, fn, x.to(device), y.to(device), epochs, w0)
    passed("train_nw", len(runs) * len(devices()), hidden)


def _check_one_training(case: Case, fn, x, y, epochs: int, w0: float) -> None:
    model, reference = NWKernelRegression().to(x.device), NWKernelRegression().to(x.device)
    with torch.no_grad():
        model.w.fill_(w0)
        reference.w.fill_(w0)
    with unchanged(case, x_train=x, y_train=y):
        losses = case.call(fn, model, x, y, epochs=epochs, lr=0.5)
    expected_before = train_nw(reference, x, y, epochs=epochs, lr=0.5)
    # Losses recorded after each step instead of before are accepted too.
    expected_after = expected_before[1:] + [summed_loo_loss(reference, x, y).item()]
    case.check(isinstance(losses, (list, tuple)), f"should return a list of losses, got {type(losses).__name__}")
    case.check(len(losses) == epochs, f"should return one loss per epoch ({epochs}), got {len(losses)}")
    values = [float(loss) for loss in losses]
    case.check(all(math.isfinite(v) for v in values), f"losses should be finite, got {values}")
    case.check(
        _all_close(values, expected_before) or _all_close(values, expected_after),
        "the losses are not the summed squared leave-one-out loss of each epoch "
        "(sum, not mean, of (model(x_train, keys, values) - y_train)² with leave-one-out keys and values)"
        + ("" if case.hidden else f"\n    expected: {_rounded(expected_before)}\n    got:      {_rounded(values)}"),
    )
    if expected_before[-1] < expected_before[0]:  # near w = 0 the loss can be flat: then no fall is owed
        case.check(values[-1] < values[0], f"the loss should fall during training, got {_rounded(values)}")
    case.expect_close("the trained w", model.w.detach().reshape(()), reference.w.detach().reshape(()), rtol=1e-3)


def _rounded(values: list[float]) -> list[float]:
    return [round(v, 4) for v in values]


def _all_close(actual: list[float], expected: list[float]) -> bool:
    return all(math.isclose(a, e, rel_tol=1e-3, abs_tol=1e-4) for a, e in zip(actual, expected))
