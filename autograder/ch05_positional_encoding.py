"""Checks of assignment 05_positional_encoding: where am I in the sequence?

One ``check_<part>(answer, hidden=False)`` per graded part of contract section 05 (and
``rotary_attention``, which closes the rotary part), and ``check_<part>_arguments(answer)``
for the ``ValueError``s, graded apart. Each part is declared as data (``autograder.parts``)
and judged by the course's judge (``autograder.judge``); this module holds only what is
special to each part: the offset
property on every position, rotary's norms and relative positions, dropout in training
mode only, trainable tables.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .core import Case, expect_dropout_in_training_only, expect_evaluated_as_reference
from .judge import checks
from .kernel.measure import in_both_modes
from .parts import ArgumentCheck, Call, Part, Probe

CHAPTER = "ch05_positional_encoding"

# --------------------------------------------------------------------------------------
# The sinusoidal table and the module that adds it
# --------------------------------------------------------------------------------------

TABLE = Part("sinusoidal_encoding", CHAPTER, atol=5e-4, rtol=0, on_devices=False, meta=False)


@checks(TABLE)
def check_sinusoidal_encoding(fn, hidden: bool = False) -> None:
    """Check the table against ``sin``/``cos`` of ``t / 10000^(2i/d)`` for many sizes (float32, within 5e-4)."""


@checks(ArgumentCheck("sinusoidal_encoding", CHAPTER, lambda: [("num_hiddens", (10, 7), {}),
                                                               ("num_hiddens", (4, 1), {})]))
def check_sinusoidal_encoding_arguments(fn, hidden: bool = False) -> None:
    """An odd ``num_hiddens`` raises ``ValueError``."""


def _adding_module(cls):
    """``(X, max_len) -> output`` of a module class built with dropout 0 and run in evaluation mode."""

    def add(X, max_len):
        module = cls(X.shape[-1], 0.0, max_len=max_len).to(X.device).eval()
        return module(X)

    return add


def _dropout_inputs(seed: int) -> list[Call]:
    """Inputs ``(2, 20, 16)`` and two seeds of the generator, drawn from ``seed``."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(2, 20, 16, generator=g)
    seeds = torch.randint(0, 2**31, (2,), generator=g)  # (2,): a tensor, never counted as a size
    return [Call(f"PositionalEncoding(16, dropout=0.5, max_len=50) on X (2, 20, 16), generator seeds {seeds[0].item()} and "
                 f"{seeds[1].item()}", (X, seeds))]


def _dropout_of(cls):
    """``(X, seeds) -> {module?, outputs in evaluation and training mode under both seeds, with dropout 0}``:
    ``PositionalEncoding(16, 0.5, max_len=50)`` on ``X`` (``kernel.measure.in_both_modes``)."""

    def look(X, seeds):
        module = cls(16, 0.5, max_len=50)
        seen = in_both_modes(module, lambda m: m(X), seeds)
        with torch.no_grad():
            seen["plain"] = cls(16, 0.0, max_len=50).eval()(X)
        return seen

    return look


def _expect_dropout_in_training_only(case: Case, args, kwargs, seen) -> None:
    """Dropout after adding the table, in training mode only: each entry of ``X + P`` dropped or scaled by 2."""
    expect_dropout_in_training_only(case, seen, "apply nn.Dropout after adding the table")
    plain, trained = seen["plain"], seen["trained"][0]
    case.expect_close("the output in evaluation mode (dropout must be off)", seen["evaluated"][0], plain, atol=5e-4)
    kept = trained != 0
    case.expect_close("the kept entries in training mode (scaled by 1 / (1 - p))", trained[kept], 2 * plain[kept],
                      atol=1e-3)


DROPOUT = Probe("dropout", lambda: _dropout_inputs(3), _dropout_of, _expect_dropout_in_training_only, decides=True,
                hidden=_dropout_inputs, compare=lambda case, seen, expected: expect_evaluated_as_reference(
                    case, seen, expected, atol=5e-4))
MODULE = Part("PositionalEncoding", CHAPTER, arguments=("X",), adapt=_adding_module, atol=5e-4, probes=(DROPOUT,),
              forbid_library=True, depends_on={"sinusoidal_encoding": TABLE})


@checks(MODULE)
def check_positional_encoding(cls, hidden: bool = False) -> None:
    """Check the module: ``X`` plus the table in evaluation mode, dropout in training mode only."""


@checks(ArgumentCheck("PositionalEncoding", CHAPTER, lambda: [("max_len", (torch.zeros(2, 11, 8),), {})],
                      construct=(8, 0.0, 10)))
def check_positional_encoding_arguments(cls, hidden: bool = False) -> None:
    """A sequence longer than ``max_len`` raises ``ValueError``."""


# --------------------------------------------------------------------------------------
# Relative offsets
# --------------------------------------------------------------------------------------


def _table64(max_len: int, d: int) -> torch.Tensor:
    """The sinusoidal table in float64, written out from its definition."""
    t = torch.arange(max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    i = torch.arange(d, dtype=torch.float64)[None, :]  # (1, d)
    angle = t / 10000 ** ((i - i % 2) / d)  # pair (2i, 2i+1) shares 2i
    return torch.where(i % 2 == 0, torch.sin(angle), torch.cos(angle))


def _expect_offset_on_every_position(case: Case, args, kwargs, M) -> None:
    """``P[t + offset] = P[t] @ M`` for every ``t`` of a 300-position table."""
    offset, d = args
    table = _table64(300 + abs(offset), d)
    start = max(0, -offset)
    rows = torch.arange(start, start + 300 - abs(offset))  # every t with t and t + offset in the table
    moved = table[rows] @ M.detach().double().cpu()
    error = (moved - table[rows + offset]).abs().max().item()
    case.check(error < 1e-4, f"P[t] @ M differs from P[t + {offset}] by up to {error:.3g}: M must move every "
                             "position, not only one")


OFFSET = Part("relative_offset_matrix", CHAPTER, atol=1e-5, extra=_expect_offset_on_every_position,
              on_devices=False, meta=False)


@checks(OFFSET)
def check_relative_offset_matrix(fn, hidden: bool = False) -> None:
    """Check ``M`` against the rotation blocks, and ``P[t + offset] = P[t] @ M`` on every position."""


# --------------------------------------------------------------------------------------
# Rotary position embedding
# --------------------------------------------------------------------------------------


def _expect_norms_kept(case: Case, args, kwargs, result) -> None:
    X = args[0]
    case.expect_close("the norm of every rotated token (a rotation keeps lengths)", result.norm(dim=-1),
                      X.norm(dim=-1), atol=1e-4)


#: (t, t', Δ): the positions of q and k, then both moved by the offset Δ.
_SHIFTS = ((3, 7, 10), (0, 5, 250), (40, 2, -33))


def _relative_inputs() -> list[Call]:
    g = torch.Generator().manual_seed(6)
    q, k = torch.randn(1, 16, generator=g, dtype=torch.float64), torch.randn(1, 16, generator=g, dtype=torch.float64)
    return [Call("q and k (1, 16) in float64 at positions (t, t') and (t + Δ, t' + Δ)", (q, k))]


def _dot_products(fn):
    """``(q, k) -> [(<R(q, t), R(k, t')>, <R(q, t + Δ), R(k, t' + Δ)>) for each (t, t', Δ)]``."""

    def dots(q, k):
        at = lambda x, p: fn(x, torch.tensor([p]))  # noqa: E731
        return [((at(q, t) * at(k, t2)).sum(), (at(q, t + shift) * at(k, t2 + shift)).sum())
                for t, t2, shift in _SHIFTS]

    return dots


def _expect_relative_positions(case: Case, args, kwargs, pairs) -> None:
    """``<R(q, t), R(k, t')>`` is unchanged when both positions move by the same offset."""
    for (t, t2, shift), (here, there) in zip(_SHIFTS, pairs, strict=True):
        case.check(math.isclose(float(here), float(there), rel_tol=1e-6, abs_tol=1e-8),
                   f"the dot product at positions ({t}, {t2}) is {float(here):.6f} but at ({t + shift}, {t2 + shift}) "
                   f"it is {float(there):.6f}: it must depend on the offset t' - t only")


RELATIVE = Probe("relative positions", _relative_inputs, _dot_products, _expect_relative_positions)
ROTARY = Part("apply_rotary", CHAPTER, arguments=("X", "positions"), atol=1e-4, extra=_expect_norms_kept,
              probes=(RELATIVE,))


@checks(ROTARY)
def check_apply_rotary(fn, hidden: bool = False) -> None:
    """Check rotary embedding: the pairs turned, norms kept, dot products depending on relative positions."""


@checks(ArgumentCheck("apply_rotary", CHAPTER, lambda: [("X", (torch.zeros(4, 5), torch.arange(4)), {}),
                                                        ("positions", (torch.zeros(4, 6), torch.arange(3)), {})]))
def check_apply_rotary_arguments(fn, hidden: bool = False) -> None:
    """An odd width, or positions that are not ``(n,)``, raise ``ValueError``."""


def _expect_positions_in_scores_only(case: Case, args, kwargs, result) -> None:
    """Values are not rotated: with identical queries and keys everywhere the output is the plain average."""
    values = args[2]
    output, _ = result
    case.expect_close("the output (uniform weights average the values, which must not be rotated)", output,
                      values.mean(dim=1, keepdim=True).expand(1, 4, 2))


VALUES_UNROTATED = Probe("values", lambda: [Call("queries = keys = zeros (1, 4, 6), values (1, 4, 2), positions "
                                                 "[0, 1, 2, 3]", (torch.zeros(1, 4, 6), torch.zeros(1, 4, 6),
                                                                  torch.arange(8.0).reshape(1, 4, 2), torch.arange(4)))],
                         lambda fn: fn, _expect_positions_in_scores_only)
ROTARY_ATTENTION = Part("rotary_attention", CHAPTER, arguments=("queries", "keys", "values", "positions"),
                        outputs=("output", "weights"), atol=1e-4, probes=(VALUES_UNROTATED,),
                        forbid_library=True, depends_on={"apply_rotary": ROTARY})


@checks(ROTARY_ATTENTION)
def check_rotary_attention(fn, hidden: bool = False) -> None:
    """Check attention with rotary queries and keys (values unrotated) against the reference."""


# --------------------------------------------------------------------------------------
# Learned position embeddings
# --------------------------------------------------------------------------------------


def _embedding_of(module: nn.Module) -> nn.Embedding | None:
    return next((m for m in module.modules() if isinstance(m, nn.Embedding)), None)


def _with_table(cls):
    """``(X, table) -> output`` of a module class whose embedding holds ``table``."""

    def add(X, table):
        module = cls(table.shape[0], table.shape[1]).to(X.device)
        with torch.no_grad():
            _embedding_of(module).weight.copy_(table)
        return module(X)

    return add


def _trainable_table(cls):
    """``(X) -> {module?, the embedding's size, whether its table is a trainable parameter, its gradient}``:
    ``LearnedPositionalEmbedding(12, 4)`` on ``X (batch, n, 4)``, the gradient that ``output.sum()`` sends to the
    table."""

    def look(X):
        module = cls(12, 4)
        embedding = _embedding_of(module) if isinstance(module, nn.Module) else None
        seen = {"is_module": isinstance(module, nn.Module), "size": None, "trainable": False, "gradient": None}
        if embedding is not None:
            seen["size"] = (embedding.num_embeddings, embedding.embedding_dim)
            seen["trainable"] = any(p is embedding.weight for p in module.parameters()) and embedding.weight.requires_grad
            if embedding.weight.requires_grad:  # a frozen table has no gradient to ask for: it fails on "trainable"
                (seen["gradient"],) = torch.autograd.grad(module(X).sum(), embedding.weight)
        return seen

    return look


def _expect_trainable_embedding(case: Case, args, kwargs, seen) -> None:
    """The gradient of ``output.sum()`` reaches rows ``0 … n-1`` of a ``(12, 4)`` table, ``batch`` each."""
    batch, n, _ = args[0].shape
    case.check(seen["is_module"], "should be a subclass of torch.nn.Module")
    case.check(seen["size"] == (12, 4), "should hold an nn.Embedding(max_len, num_hiddens) = nn.Embedding(12, 4)")
    case.check(seen["trainable"], "the embedding's table should be a trainable parameter of the module")
    gradient = seen["gradient"]
    case.expect_tensor("the table's gradient", gradient, shape=(12, 4), dtype=torch.float32, device="cpu")
    case.check(bool((gradient[:n] == batch).all() and (gradient[n:] == 0).all()),
               "the gradient should reach rows 0 … n-1 of the table (once per sequence) and no other row")


def _embedding_inputs(seed: int) -> list[Call]:
    """Zeros ``(batch, n, 4)`` of a batch and a length drawn from ``seed``."""
    g = torch.Generator().manual_seed(seed)
    batch, n = (int(v) for v in (torch.randint(1, 5, (), generator=g), torch.randint(1, 13, (), generator=g)))
    return [Call(f"LearnedPositionalEmbedding(12, 4) on zeros ({batch}, {n}, 4)", (torch.zeros(batch, n, 4),))]


TRAINABLE = Probe("trainable table", lambda: [Call("LearnedPositionalEmbedding(12, 4) on zeros (2, 5, 4)",
                                                   (torch.zeros(2, 5, 4),))], _trainable_table,
                  _expect_trainable_embedding, decides=True, hidden=_embedding_inputs)
LEARNED = Part("LearnedPositionalEmbedding", CHAPTER, arguments=("X",), adapt=_with_table, probes=(TRAINABLE,))


@checks(LEARNED)
def check_learned_positional_embedding(cls, hidden: bool = False) -> None:
    """Check the learned table: ``X`` plus its first ``n`` rows, a trainable ``nn.Embedding``."""


@checks(ArgumentCheck("LearnedPositionalEmbedding", CHAPTER, lambda: [("max_len", (torch.zeros(1, 7, 3),), {})],
                      construct=(6, 3)))
def check_learned_positional_embedding_arguments(cls, hidden: bool = False) -> None:
    """A sequence longer than ``max_len`` raises ``ValueError``."""


PARTS = {part.name: part for part in (TABLE, MODULE, OFFSET, ROTARY, ROTARY_ATTENTION, LEARNED)}
