"""What only the answer's own process can measure: runs where the answer lives.

In a student's notebook this is the notebook's own kernel; at grading it is the student's
sandboxed kernel, and what it measures reaches the judge as data in a reply (``serve.py``)
that the judge treats as the student's word, never as proof: the largest tensor and the
peak memory of a call, the calls of library attention (tripwires), the backward passes of
a training call, and a module's layers (:func:`describe_module`).
"""

from __future__ import annotations

import contextlib
import functools
import sys
import warnings
from typing import Any, Callable, Iterator

import torch

from .. import nested
from ..core import tensors_in


def describe_module(model: Any) -> dict:
    """What a probe reports of a module, as data: whether it is one, its parameters' shapes, its layers.

    Returns:
        ``{"is_module": bool, "parameters": {name: shape}, "trainable": [names], "layers":
        {name: {"type": class name, "in": in_features, "out": out_features, "bias": bool}}}``
        (``in``/``out``/``bias`` for layers that have them).
    """
    if not isinstance(model, torch.nn.Module):
        return {"is_module": False, "parameters": {}, "trainable": [], "layers": {}}
    layers = {}
    for name, layer in model.named_modules():
        if name:
            entry = {"type": type(layer).__name__}
            for attribute, key in (("in_features", "in"), ("out_features", "out"), ("num_embeddings", "in"),
                                   ("embedding_dim", "out")):
                if isinstance(getattr(layer, attribute, None), int):
                    entry[key] = getattr(layer, attribute)
            if hasattr(layer, "bias"):
                entry["bias"] = isinstance(layer.bias, torch.Tensor)
            layers[name] = entry
    parameters = dict(model.named_parameters())
    return {"is_module": True, "parameters": {n: list(p.shape) for n, p in parameters.items()},
            "trainable": [n for n, p in parameters.items() if p.requires_grad], "layers": layers}


# --------------------------------------------------------------------------------------
# Dropout, seen in outputs: evaluation and training mode under two states of the generator
# --------------------------------------------------------------------------------------


def in_both_modes(module: Any, run: Callable[[Any], Any], seeds: torch.Tensor) -> dict:
    """``{"evaluated": [output, output], "trained": [output, output]}``: ``run(module)`` in evaluation mode and
    in training mode, each once with the global generator seeded with each of ``seeds`` (``(2,)`` int64, a tensor
    so that a seed never counts as a size where the grader bounds what it computes; no gradients; the
    generator's state is restored after). Dropout shows in outputs: evaluation mode agrees across the seeds,
    training mode does not (``core.expect_dropout_in_training_only``)."""
    seen = {"evaluated": [], "trained": []}
    with torch.no_grad(), torch.random.fork_rng():
        for mode, training in (("evaluated", False), ("trained", True)):
            module.train(training)
            for seed in seeds.tolist():
                torch.manual_seed(seed)
                seen[mode].append(run(module))
    return seen


# --------------------------------------------------------------------------------------
# Parts that train a model: train once per answer, judge the model on the judge's inputs
# --------------------------------------------------------------------------------------


def trained_once(train: Callable, seed: int, trained: dict) -> tuple[Any, Any, int]:
    """``(model in evaluation mode, its reported accuracy, backward passes)`` of ``train(seed=seed)``, or
    ``(None, what it returned, backward passes)`` where that is not a tuple ``(nn.Module, accuracy)``.

    ``trained`` (the checks module's, one per process) keeps each answer's result per seed, so
    a part's cases share one training: the first call trains, and the judge times it from outside.
    The backward passes are those counted during that call (:func:`counting_backward_passes`).
    """
    if (train, seed) not in trained:
        with counting_backward_passes() as passes:
            result = train(seed=seed)
        trained[train, seed] = result, passes[0]
    result, passes = trained[train, seed]
    if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], torch.nn.Module)):
        return None, result, passes
    model, reported = result
    return model.eval(), reported, passes


@contextlib.contextmanager
def counting_backward_passes() -> Iterator[list[int]]:
    """Within the block, count the calls of ``torch.autograd.backward``, ``Tensor.backward`` and
    ``torch.autograd.grad``; yields ``[count]``, updated as they come.

    A training step makes one (``loss.backward()`` calls ``torch.autograd.backward`` too, so it
    counts twice): a cheap sign, observed inside the answer's process, that a model was trained
    during the call rather than before it.
    """
    count = [0]

    def counted(original: Callable) -> Callable:
        @functools.wraps(original)
        def call(*args, **kwargs):
            count[0] += 1
            return original(*args, **kwargs)

        return call

    targets = [(torch.autograd, "backward"), (torch.Tensor, "backward"), (torch.autograd, "grad")]
    with patched([(owner, name, counted(getattr(owner, name))) for owner, name in targets]):
        yield count


@contextlib.contextmanager
def patched(replacements: list[tuple[Any, str, Any]]) -> Iterator[None]:
    """Within the block, for each ``(owner, name, replacement)``, ``owner.name`` is ``replacement``
    (``owner[name]`` where ``owner`` is a dict, a module's namespace); each is restored on leaving,
    the last replaced first."""
    originals: list[tuple[Any, str, Any]] = []
    try:
        for owner, name, replacement in replacements:
            originals.append((owner, name, owner[name] if isinstance(owner, dict) else getattr(owner, name)))
            _assign(owner, name, replacement)
        yield
    finally:
        for owner, name, original in reversed(originals):
            _assign(owner, name, original)


def _assign(owner: Any, name: str, value: Any) -> None:
    """``owner[name] = value`` for a dict, else ``owner.name = value``."""
    if isinstance(owner, dict):
        owner[name] = value
    else:
        setattr(owner, name, value)


# --------------------------------------------------------------------------------------
# Memory: the largest tensor a call creates
# --------------------------------------------------------------------------------------


def largest_tensor_created(fn: Callable, *args, **kwargs) -> int:
    """The number of elements of the largest tensor any operation inside ``fn`` creates."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Watch(TorchDispatchMode):
        largest = 0

        def __torch_dispatch__(self, func, types, op_args=(), op_kwargs=None):
            out = func(*op_args, **(op_kwargs or {}))
            for t in tensors_in(out):
                Watch.largest = max(Watch.largest, t.numel())
            return out

    with warnings.catch_warnings(record=True), Watch():
        warnings.simplefilter("always")
        fn(*args, **kwargs)
    return Watch.largest


def peak_memory(fn: Callable, *args, **kwargs) -> int:
    """Peak bytes of the tensors that ``fn(*args)`` creates and holds at one time (:func:`tensor_peak`)."""
    with tensor_peak(args, kwargs) as peak:
        result = fn(*args, **kwargs)
    del result
    return peak[0]


@contextlib.contextmanager
def tensor_peak(*inputs: Any) -> Iterator[list[int]]:
    """Within the block, the peak bytes of the tensors created and held at one time; yields ``[peak]``, set on
    leaving.

    Every storage an operation creates is counted from its creation until its last tensor
    is freed, so the figure is the working memory of the computation, without its inputs
    (the tensors in ``inputs``, and views of them): on the CPU, where PyTorch keeps no
    allocation statistics, as on any device. It is what the answer's own process counts, for
    a student's visible check; at grading the kernel's cgroup measures a call from outside.
    """
    import weakref

    from torch.utils._python_dispatch import TorchDispatchMode

    live: dict[int, list[int]] = {}  # storage address -> [bytes, tensors alive]
    totals = {"now": 0, "peak": 0}
    given = {t.untyped_storage().data_ptr() for t in nested.leaves(inputs) if isinstance(t, torch.Tensor)}

    def released(address: int) -> None:
        entry = live.get(address)
        if entry is not None:
            entry[1] -= 1
            if entry[1] == 0:
                totals["now"] -= live.pop(address)[0]

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, op_args=(), op_kwargs=None):
            out = func(*op_args, **(op_kwargs or {}))
            for t in tensors_in(out):
                storage = t.untyped_storage()
                address = storage.data_ptr()
                if address in given or t.device.type == "meta":
                    continue
                if address not in live:
                    live[address] = [storage.nbytes(), 0]
                    totals["now"] += storage.nbytes()
                    totals["peak"] = max(totals["peak"], totals["now"])
                live[address][1] += 1
                weakref.finalize(t, released, address)
            return out

    peak = [0]
    try:
        with warnings.catch_warnings(record=True), Watch():
            warnings.simplefilter("always")
            yield peak
    finally:
        peak[0] = totals["peak"]


# --------------------------------------------------------------------------------------
# Delegation: a graded part must not call a library implementation of itself
# --------------------------------------------------------------------------------------


#: Library attention as PyTorch's operators and functions name it (an overload's ``.default`` aside):
#: the fused kernels of every backend, the math path, and the multi-head paths of ``nn.MultiheadAttention``
#: and ``nn.TransformerEncoderLayer``.
LIBRARY_ATTENTION = ("scaled_dot_product_attention", "multi_head_attention_forward", "_native_multi_head_attention",
                     "_transformer_encoder_layer_fwd")
#: Prefixes of the same: ``_scaled_dot_product_attention_math``, ``_scaled_dot_product_flash_attention_for_cpu``,
#: ``_flash_attention_forward``, ``_efficient_attention_forward``, ...
LIBRARY_ATTENTION_PREFIXES = ("_scaled_dot_product_", "_flash_attention_", "_efficient_attention_")
#: Those reached from Python as ``torch.nn.functional.<name>`` (whichever module defines them).
_FUNCTIONAL = ("scaled_dot_product_attention", "multi_head_attention_forward")


def library_attention_name(function: Any) -> str:
    """The public name of ``function`` if it is library attention, else ``""``.

    ``function`` is what a torch-function or torch-dispatch mode is handed: a function of
    ``torch`` or ``torch.nn.functional``, or an ATen operator (``torch.ops.aten.X`` or its
    overload ``X.default``), e.g. ``"torch.ops.aten._scaled_dot_product_attention_math"``.
    """
    base = str(getattr(function, "__name__", "")).split(".")[0]
    if base not in LIBRARY_ATTENTION and not base.startswith(LIBRARY_ATTENTION_PREFIXES):
        return ""
    if isinstance(function, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return f"torch.ops.{getattr(function, 'overloadpacket', function)}"
    return f"torch.nn.functional.{base}" if base in _FUNCTIONAL else f"torch.{base}"


def _d2l_attention() -> list[tuple[Any, str, str]]:
    """``(owner, attribute, public name)`` of d2l's attention (plain Python, which no torch mode sees as one call)."""
    d2l = sys.modules.get("d2l.torch")  # only if the student imported it: d2l is slow to import
    targets = []
    for name in ("masked_softmax", "DotProductAttention", "AdditiveAttention", "MultiHeadAttention",
                 "PositionalEncoding", "TransformerEncoderBlock"):
        if d2l is not None and hasattr(d2l, name):
            member = getattr(d2l, name)
            targets.append((member, "forward", f"d2l.{name}") if isinstance(member, type) else (d2l, name, f"d2l.{name}"))
    return targets


def functions_of(answer: Any) -> list[Callable]:
    """The Python functions of an answer: itself, or the methods of a class."""
    if isinstance(answer, type):
        return [f for f in vars(answer).values() if hasattr(f, "__globals__")]
    return [answer] if hasattr(answer, "__globals__") else []


@contextlib.contextmanager
def tripwires(answer: Any, exempt: tuple = ()) -> Iterator[list[str]]:
    """Within the block, calls of library attention are recorded (and still carried out).

    PyTorch's attention is seen where PyTorch dispatches it, whatever Python name reached it
    (``F.scaled_dot_product_attention``, ``torch.ops.aten._scaled_dot_product_attention_math``,
    a name the student bound): a torch-function mode sees every call of a ``torch`` function
    or operator made from Python, composite operators included (they decompose before a
    dispatch mode sees them), and a torch-dispatch mode sees the fused kernels reached from
    anywhere (TorchScript, PyTorch's own modules). d2l's attention, plain Python, is replaced
    where it lives and under any name the student's module bound it to. Calls made from
    inside ``exempt`` (the checks' own stand-ins for earlier parts, which may use library
    attention) are not recorded. Yields the list of public names called.
    """
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    called: list[str] = []
    exempt_code = {f.__code__ for owner in exempt for f in functions_of(owner)}

    def record(public: str) -> None:
        if public and not _called_from(exempt_code):
            called.append(public)

    class FunctionWatch(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            record(library_attention_name(func))
            return func(*args, **(kwargs or {}))

    class DispatchWatch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            record(library_attention_name(func))
            return func(*args, **(kwargs or {}))

    with _d2l_tripwires(answer, record), FunctionWatch(), DispatchWatch():
        yield called


@contextlib.contextmanager
def _d2l_tripwires(answer: Any, record: Callable[[str], None]) -> Iterator[None]:
    """Within the block, d2l's attention calls ``record(its public name)`` first, where d2l defines it and
    under any name the answer's modules bound it to."""

    def wire(original, public):
        def tripwire(*args, **kwargs):
            record(public)
            return original(*args, **kwargs)

        return tripwire

    namespaces = list({id(f.__globals__): f.__globals__ for f in functions_of(answer)}.values())
    replacements = []
    for owner, attribute, public in _d2l_attention():
        original = getattr(owner, attribute)
        tripwire = wire(original, public)
        replacements.append((owner, attribute, tripwire))
        replacements += [(namespace, name, tripwire) for namespace in namespaces
                         for name, value in namespace.items() if value is original]
    with patched(replacements):
        yield


def _called_from(codes: set) -> bool:
    """Whether a frame of one of ``codes`` is on the stack above the caller's caller."""
    frame = sys._getframe(2) if codes else None
    while frame is not None:
        if frame.f_code in codes:
            return True
        frame = frame.f_back
    return False
