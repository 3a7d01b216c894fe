"""Checks of assignment 04_multihead: self-attention and multi-head attention.

One ``check_<part>(answer, hidden=False)`` per graded part of contract section 04, and
``check_<part>_arguments(answer)`` for the ``ValueError``s, graded apart. Each part is
declared as data (``autograder.parts``) and judged by the course's judge
(``autograder.judge``); this module holds only what is special to each part: permutation equivariance, agreement with PyTorch's own attention
and ``nn.MultiheadAttention`` carrying the same weights, dropout in training mode only.
"""

from __future__ import annotations

import torch
from torch import nn

from .ch03_masking import _compare_masks, _expect_pytorchs_output_and_empty_rows
from .core import Case, expect_dropout_in_training_only, expect_evaluated_as_reference
from .judge import checks
from .kernel.measure import describe_module, in_both_modes
from .parts import ArgumentCheck, Call, Part, Probe

CHAPTER = "ch04_multihead"

# --------------------------------------------------------------------------------------
# Self-attention
# --------------------------------------------------------------------------------------


def _expect_course_mask_convention(case: Case, args, kwargs, result) -> None:
    """The same rows as PyTorch's attention on ``XW_q, XW_k, XW_v``; zeros where no key is allowed."""
    X, W_q, W_k, W_v = args
    _expect_pytorchs_output_and_empty_rows(case, (X @ W_q, X @ W_k, X @ W_v), kwargs, result)


def _permuted_inputs() -> list[Call]:
    """X and a random order of its tokens, without a mask and with one (permuted alike)."""
    g = torch.Generator().manual_seed(4)
    X = torch.randn(2, 6, 5, generator=g)
    W_q, W_k, W_v = torch.randn(5, 4, generator=g), torch.randn(5, 4, generator=g), torch.randn(5, 3, generator=g)
    order = torch.randperm(6, generator=g)
    mask = torch.rand(6, 6, generator=g) < 0.7
    described = f"X (2, 6, 5) and X with its tokens in the order {order.tolist()}, mask "
    return [Call(described + "None", (X, W_q, W_k, W_v, order, None)),
            Call(described + "random (6, 6), permuted alike", (X, W_q, W_k, W_v, order, mask))]


def _on_both_orders(fn):
    """``(X, W_q, W_k, W_v, order, mask) -> (result on X, result on X with its tokens in ``order``)``."""

    def both(X, W_q, W_k, W_v, order, mask):
        kwargs, permuted = ({}, {}) if mask is None else ({"mask": mask}, {"mask": mask[order][:, order]})
        return fn(X, W_q, W_k, W_v, **kwargs), fn(X[:, order], W_q, W_k, W_v, **permuted)

    return both


def _expect_permutation_equivariance(case: Case, args, kwargs, result) -> None:
    """Permuting the tokens (and the mask's rows and columns) permutes the output the same way."""
    order = args[4]
    (output, weights), (permuted_output, permuted_weights) = result
    case.expect_close("the output for the permuted tokens (self-attention is permutation-equivariant)",
                      permuted_output, output[:, order])
    case.expect_close("the weights for the permuted tokens", permuted_weights, weights[:, order][:, :, order])


PERMUTATION = Probe("permutation", _permuted_inputs, _on_both_orders, _expect_permutation_equivariance)
SELF_ATTENTION = Part("self_attention", CHAPTER, arguments=("X", "W_q", "W_k", "W_v"), outputs=("output", "weights"),
                      extra=_expect_course_mask_convention, probes=(PERMUTATION,), forbid_library=True)


@checks(SELF_ATTENTION)
def check_self_attention(fn, hidden: bool = False) -> None:
    """Check self-attention: masks, batch dimensions, permutation equivariance, PyTorch's rows."""


def _bad_self_attention_arguments() -> list[tuple[str, tuple, dict]]:
    X, W = torch.zeros(3, 4), torch.zeros(4, 2)
    return [
        ("X", (torch.zeros(4), W, W, W), {}),
        ("W_q", (X, torch.zeros(5, 2), W, W), {}),
        ("W_k", (X, W, torch.zeros(4, 3), W), {}),
        ("W_v", (X, W, W, torch.zeros(2, 2)), {}),
    ]


@checks(ArgumentCheck("self_attention", CHAPTER, _bad_self_attention_arguments))
def check_self_attention_arguments(fn, hidden: bool = False) -> None:
    """``X`` without a token axis, or projections that do not fit, raise ``ValueError``."""


# --------------------------------------------------------------------------------------
# The graph mask
# --------------------------------------------------------------------------------------

GRAPH_MASK = Part("graph_attention_mask", CHAPTER, arguments=("adjacency",), compare=_compare_masks)


@checks(GRAPH_MASK)
def check_graph_attention_mask(fn, hidden: bool = False) -> None:
    """Check the mask of self-attention on a graph: edges ``i → j``, self-loops, any dtype."""


@checks(ArgumentCheck("graph_attention_mask", CHAPTER, lambda: [("adjacency", (torch.ones(3, 4),), {}),
                                                                ("adjacency", (torch.ones(4),), {})]))
def check_graph_attention_mask_arguments(fn, hidden: bool = False) -> None:
    """A non-square adjacency raises ``ValueError``."""


# --------------------------------------------------------------------------------------
# Splitting and merging heads
# --------------------------------------------------------------------------------------

SPLIT = Part("split_heads", CHAPTER, arguments=("X",), atol=0, rtol=0)
MERGE = Part("merge_heads", CHAPTER, arguments=("X",), atol=0, rtol=0)


@checks(SPLIT)
def check_split_heads(fn, hidden: bool = False) -> None:
    """Check ``split_heads`` element by element on numbered tensors: head ``i`` holds features ``i·d … (i+1)·d - 1``."""


@checks(ArgumentCheck("split_heads", CHAPTER, lambda: [("num_heads", (torch.zeros(2, 3, 10), 4), {}),
                                                       ("X", (torch.zeros(3, 8), 2), {})]))
def check_split_heads_arguments(fn, hidden: bool = False) -> None:
    """A width that ``num_heads`` does not divide, or ``X`` not 3-D, raise ``ValueError``."""


@checks(MERGE)
def check_merge_heads(fn, hidden: bool = False) -> None:
    """Check ``merge_heads`` element by element on numbered tensors: the exact inverse of ``split_heads``."""


# --------------------------------------------------------------------------------------
# The module
# --------------------------------------------------------------------------------------

PROJECTIONS = ("W_q", "W_k", "W_v", "W_o")


def _load(model: nn.Module, weights: dict[str, torch.Tensor]) -> None:
    """Put the case's weights (and biases ``b_q``, ``b_k``, ``b_v``, ``b_o``) into the four projections."""
    with torch.no_grad():
        for name in PROJECTIONS:
            layer = getattr(model, name)
            layer.weight.copy_(weights[name])
            if f"b_{name[2]}" in weights:
                layer.bias.copy_(weights[f"b_{name[2]}"])


def _forward_with_weights(cls):
    """A function ``(queries, keys, values, mask, num_heads, bias, weights) -> (output, attention_weights)``
    of a module class: built for the case, its weights loaded, run in evaluation mode."""

    def forward(queries, keys, values, mask, num_heads, bias, weights):
        model = cls(queries.shape[-1], num_heads, dropout=0.0, bias=bias).to(queries.device)
        _load(model, weights)
        model.eval()
        output = model(queries, keys, values) if mask is None else model(queries, keys, values, mask=mask)
        stored = getattr(model, "attention_weights", None)
        return output.detach(), stored.detach() if isinstance(stored, torch.Tensor) else stored

    return forward


def _expect_pytorch_module_output(case: Case, args, kwargs, result) -> None:
    """``nn.MultiheadAttention(batch_first=True)`` with the same weights gives the same output
    (on the queries for which every head has an allowed key; PyTorch leaves the others NaN)."""
    queries, keys, values, mask, heads, bias, weights = args
    batch, q, width = queries.shape
    k = keys.shape[1]
    reference = nn.MultiheadAttention(width, heads, bias=bias, batch_first=True).to(queries.device).eval()
    with torch.no_grad():
        reference.in_proj_weight.copy_(torch.cat([weights["W_q"], weights["W_k"], weights["W_v"]]))
        reference.out_proj.weight.copy_(weights["W_o"])
        if bias:
            reference.in_proj_bias.copy_(torch.cat([weights["b_q"], weights["b_k"], weights["b_v"]]))
            reference.out_proj.bias.copy_(weights["b_o"])
        allowed = None if mask is None else mask.expand(batch, heads, q, k)
        # PyTorch's bool attn_mask means "may NOT attend", one (q, k) matrix per (sequence, head)
        attn_mask = None if allowed is None else ~allowed.reshape(batch * heads, q, k)
        expected, _ = reference(queries, keys, values, attn_mask=attn_mask, need_weights=False)
    defined = torch.ones(batch, q, 1, dtype=torch.bool, device=queries.device)
    if allowed is not None:
        defined = allowed.any(dim=-1).all(dim=1)[..., None]  # (batch, q, 1): every head has a key
    output = result[0]
    case.expect_close("output (compared with nn.MultiheadAttention carrying the same weights)",
                      output * defined, expected.nan_to_num(0) * defined)


def _layers_of(cls):
    """``() -> {bias: layers}`` of ``MultiHeadAttention(16, 4, dropout=0.5, bias=bias)`` for both biases."""
    return lambda: {f"bias={bias}": describe_module(cls(16, 4, dropout=0.5, bias=bias)) for bias in (False, True)}


def _expect_four_projections(case: Case, args, kwargs, layers) -> None:
    """Four ``nn.Linear(num_hiddens, num_hiddens)`` layers, bias as asked."""
    for bias in (False, True):
        model = layers[f"bias={bias}"]
        case.check(model["is_module"], "should be a subclass of torch.nn.Module")
        for name in PROJECTIONS:
            layer = model["layers"].get(name, {})
            case.check(layer.get("type") == "Linear" and (layer.get("in"), layer.get("out")) == (16, 16),
                       f"`{name}` should be nn.Linear(num_hiddens, num_hiddens), found {layer.get('type', 'nothing')}")
            case.check(layer.get("bias") == bias, f"`{name}` should {'' if bias else 'not '}have a bias when bias={bias}")


#: The module's layers, as its process describes them: advice (the cases load their weights by these names).
LAYERS = Probe("layers", lambda: [Call("MultiHeadAttention(16, 4, dropout=0.5), with and without bias")], _layers_of,
               _expect_four_projections)


def _dropout_inputs(seed: int) -> list[Call]:
    """Weights, inputs (and queries and keys ``x2`` of 4 positions, one per feature of a head), and two seeds of the
    generator, drawn from ``seed``."""
    g = torch.Generator().manual_seed(seed)
    weights = {name: torch.randn(16, 16, generator=g) / 4 for name in PROJECTIONS}
    x, x2 = torch.randn(2, 12, 16, generator=g), torch.randn(2, 4, 16, generator=g)
    seeds = torch.randint(0, 2**31, (2,), generator=g)  # (2,): a tensor, never counted as a size
    return [Call(f"MultiHeadAttention(16, 4, dropout=0.5), inputs (2, 12, 16), generator seeds {seeds[0].item()} and "
                 f"{seeds[1].item()}", (weights, x, x2, seeds))]


def _dropout_of(cls):
    """``(weights, x, x2, seeds) -> {outputs in evaluation and training mode under both seeds, one_hot}``.

    Built with dropout 0.5, the call's weights loaded, run as self-attention on ``x``
    (``kernel.measure.in_both_modes``); then, with identity projections, on queries and keys
    ``x2`` and one-hot values, one output in training mode (see
    :func:`_expect_dropout_on_the_weights`).
    """

    def look(weights, x, x2, seeds):
        model = cls(16, 4, dropout=0.5)
        _load(model, weights)
        seen = in_both_modes(model, lambda m: m(x, x, x), seeds)
        identity = cls(16, 4, dropout=0.5)
        _load(identity, {name: torch.eye(16) for name in PROJECTIONS})
        identity.train()
        with torch.no_grad(), torch.random.fork_rng():
            torch.manual_seed(seeds[0].item())
            seen["one_hot"] = identity(x2, x2, _ONE_HOT_VALUES)
            seen["ones"] = identity(x, x, torch.ones(2, 12, 16))
        return seen

    return look


def _expect_dropout(case: Case, args, kwargs, seen) -> None:
    """Dropout in training mode only, on the attention weights."""
    expect_dropout_in_training_only(case, seen, "drop attention weights with nn.Dropout (self.training decides)")
    _expect_dropout_on_the_weights(case, seen["ones"])
    _expect_weights_dropped_or_scaled(case, args[2], seen["one_hot"])


#: Values ``(2, 4, 16)`` whose key ``j`` is feature ``j`` of every head: a head's output is then its weights.
_ONE_HOT_VALUES = torch.eye(4).repeat(1, 4).expand(2, 4, 16)


def _expect_dropout_on_the_weights(case: Case, output: torch.Tensor) -> None:
    """Dropout acts on the attention weights, not on the output.

    With identity projections and every value row equal to ones, each head's output is
    the sum of its kept weights (times ``1 / (1 - p)``) in every one of its features: the
    features of one head are equal whatever dropout drops from the weights. Dropout on the
    output zeroes single features instead.
    """
    case.expect_tensor("the output in training mode", output, shape=(2, 12, 16), dtype=torch.float32, device="cpu")
    per_head = output.reshape(2, 12, 4, 4)  # (batch, q, heads·d) -> (batch, q, heads, d)
    case.check(torch.allclose(per_head, per_head[..., :1].expand_as(per_head)),
               "in training mode, dropout acts on the output, not on the attention weights: apply nn.Dropout to the "
               "weights before they multiply the values")


def _expect_weights_dropped_or_scaled(case: Case, x2: torch.Tensor, output: torch.Tensor) -> None:
    """Dropout drops each attention weight or scales it by ``1 / (1 - p)``.

    With identity projections and value ``j`` one-hot at feature ``j`` of every head, feature
    ``j`` of head ``h``'s output for query ``i`` is the weight ``w[h, i, j]`` after dropout:
    ``0`` or ``2 w`` with ``p = 0.5``. The weights are computed here from ``x2``; weights scaled
    otherwise show as other values.
    """
    case.expect_tensor("the output in training mode", output, shape=(2, 4, 16), dtype=torch.float32, device="cpu")
    heads = x2.reshape(2, 4, 4, 4).transpose(1, 2)  # (batch, n, heads·d) -> (batch, heads, n, d)
    weights = torch.softmax(heads @ heads.transpose(-2, -1) / 2, dim=-1)  # (batch, heads, q, k), d = 4
    got = output.reshape(2, 4, 4, 4).transpose(1, 2)  # (batch, q, heads·d) -> (batch, heads, q, d = k)
    dropped, kept = got.abs() <= 1e-6, (got - 2 * weights).abs() <= 1e-4 * (1 + weights)
    case.check(bool((dropped | kept).all()),
               "in training mode, each attention weight should be dropped (0) or scaled by 1 / (1 - p) = 2 before it "
               "multiplies the values, as nn.Dropout does; here some are neither")


#: Dropout, from outputs on the judge's weights and inputs: decides.
DROPOUT = Probe("dropout", lambda: _dropout_inputs(5), _dropout_of, _expect_dropout, decides=True,
                hidden=_dropout_inputs, compare=lambda case, seen, expected: expect_evaluated_as_reference(
                    case, seen, expected))
MODULE = Part("MultiHeadAttention", CHAPTER, arguments=("queries", "keys", "values", "mask"),
              outputs=("output", "attention_weights"), adapt=_forward_with_weights, extra=_expect_pytorch_module_output,
              probes=(LAYERS, DROPOUT), forbid_library=True, depends_on={"split_heads": SPLIT, "merge_heads": MERGE})


@checks(MODULE)
def check_multi_head_attention(cls, hidden: bool = False) -> None:
    """Check the module against the reference and ``nn.MultiheadAttention`` with the same weights:
    1 to 4 heads, self- and cross-attention, masks of every broadcast shape, bias, dropout."""


@checks(ArgumentCheck("MultiHeadAttention", CHAPTER, lambda: [("num_heads", (10, 3), {}), ("num_heads", (8, 0), {})]))
def check_multi_head_attention_arguments(cls, hidden: bool = False) -> None:
    """``num_heads`` that is not a positive divisor of ``num_hiddens`` raises ``ValueError``."""


# --------------------------------------------------------------------------------------
# Parameter count
# --------------------------------------------------------------------------------------


def _expect_same_count(case: Case, result, expected) -> None:
    case.check(isinstance(result, int) and not isinstance(result, bool),
               f"should return an int, got {type(result).__name__}")
    case.check(result == expected, f"counted {result} parameters"
               + ("" if case.hidden else f", expected {expected}"))


def _expect_pytorchs_count(case: Case, args, kwargs, result) -> None:
    """The narrow design has exactly the parameters of ``nn.MultiheadAttention``."""
    if kwargs.get("head_dim") is None:
        num_hiddens, heads = args
        module = nn.MultiheadAttention(num_hiddens, heads, bias=kwargs.get("bias", False))
        case.check(result == sum(p.numel() for p in module.parameters()),
                   f"counted {result}; nn.MultiheadAttention({num_hiddens}, {heads}) has a different number")


PARAMETERS = Part("mha_parameter_count", CHAPTER, compare=_expect_same_count, extra=_expect_pytorchs_count,
                  on_devices=False, meta=False)


@checks(PARAMETERS)
def check_mha_parameter_count(fn, hidden: bool = False) -> None:
    """Check the count for narrow and wide heads, with and without bias."""


PARTS = {part.name: part for part in (SELF_ATTENTION, GRAPH_MASK, SPLIT, MERGE, MODULE, PARAMETERS)}
