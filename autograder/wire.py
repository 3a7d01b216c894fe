"""The data that crosses between a student's answers and the judge: values encoded without code.

A check sends an answer inputs and gets its results back as *data*: tensors, numbers,
strings, tuples, lists and dicts of them, devices and dtypes, and named functions. The
same encoding serves the visible cases stored in ``autograder/cases/*.json`` (tensors
inline, as lists of numbers) and the messages between a grading kernel and the grading
process (tensors as raw bytes after a JSON header, see :func:`pack`).

Decoding runs no code of the sender's: JSON, then ``torch.frombuffer`` on bytes whose
dtype comes from a fixed list and whose length must match the declared shape. What a
grading kernel sends is untrusted, so :func:`unpack` also caps the message's size, its
nesting and its number of values before it builds anything, and its tensors' elements
(a ``meta`` tensor's too) before it builds them (:class:`Limits`). Whatever is wrong with a
message is a :class:`WireError`, never another exception.

Tags, each a JSON object with one of these keys:

* ``{"tensor": [...] | <buffer index> | null, "shape": [...], "dtype": "float32", "device": "cpu"}``
  (``null`` for a tensor on the ``meta`` device, which has no data; a buffer makes one tensor);
* ``{"tuple": [...]}``, ``{"dict": {...}}`` (string keys), ``{"float": "nan"}`` for a
  non-finite float, ``{"device": "cuda"}``, ``{"dtype": "float64"}``;
* ``{"helper": name}``: a function of the chapter's checks module (``HELPERS``);
* ``{"oracle": name, "bound": {...}}``: a function the receiver must not have (a
  reference, on the grading side), called back through the sender;
* ``{"opaque": type name}``: something of no other kind (a module, an object), named only.
"""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import dataclass
from typing import Any, Callable

import torch

#: The dtypes a tensor may have on the wire; anything else is refused.
DTYPES = {name: getattr(torch, name) for name in (
    "float16", "bfloat16", "float32", "float64", "complex64", "complex128",
    "int8", "int16", "int32", "int64", "uint8", "bool")}
_MAGIC = b"AGW1"


class WireError(ValueError):
    """Data that cannot be decoded: too large, malformed, or of a kind the wire does not carry."""


@dataclass(frozen=True)
class Opaque:
    """A value that the wire names but does not carry (an ``nn.Module``, an object)."""

    type_name: str

    def __repr__(self) -> str:
        return f"<{self.type_name}>"


@dataclass(frozen=True)
class Limits:
    """What a decoder accepts.

    Attributes:
        bytes: the whole message; checked before anything is parsed.
        depth: nesting of tuples, lists and dicts.
        values: values of any kind in all.
        string: characters of one string.
        elements: elements of all tensors together, a ``meta`` tensor's included (it comes
            without bytes, yet what is done with it may allocate them), and each tensor's
            extent: the product of its sizes, a 0 counted as 1 (what its strides span).
    """

    bytes: int = 256 * 2**20
    depth: int = 32
    values: int = 200_000
    string: int = 2**20
    elements: int = 2**28


@dataclass
class Codec:
    """How callables cross: functions the receiver has by name, functions it must call back for.

    Attributes:
        helpers: ``{name: function}`` both sides have (the chapter's ``HELPERS``).
        oracle_name: ``function -> name or None``, on the side that has the function.
        oracle: ``(name, bound kwargs) -> function`` on the side that does not (calls back).
    """

    helpers: dict[str, Callable] | None = None
    oracle_name: Callable[[Any], str | None] | None = None
    oracle: Callable[[str, dict], Callable] | None = None


# --------------------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------------------


def to_data(value: Any, codec: Codec | None = None, buffers: list[bytes] | None = None) -> Any:
    """``value`` as JSON-ready data; tensors inline, or as raw bytes appended to ``buffers``.

    Raises:
        WireError: a function that is neither a helper nor has an oracle name.
    """
    codec = codec or Codec()
    if isinstance(value, torch.Tensor):
        return _tensor_data(value, buffers)
    if isinstance(value, torch.device):
        return {"device": str(value)}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, tuple):
        return {"tuple": [to_data(v, codec, buffers) for v in value]}
    if isinstance(value, list):
        return [to_data(v, codec, buffers) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise WireError("only dicts with string keys can be sent")
        return {"dict": {k: to_data(v, codec, buffers) for k, v in value.items()}}
    if isinstance(value, Opaque):
        return {"opaque": value.type_name}
    if callable(value) and not isinstance(value, type):
        return _function_data(value, codec, buffers)
    raise WireError(f"a {type(value).__name__} cannot be sent as data")


def to_reply_data(value: Any, codec: Codec | None = None, buffers: list[bytes] | None = None) -> Any:
    """As :func:`to_data`, but anything that cannot be sent is named (:class:`Opaque`) instead."""
    try:
        return to_data(value, codec, buffers)
    except WireError:
        pass
    if isinstance(value, (tuple, list)):
        items = [to_reply_data(v, codec, buffers) for v in value]
        return {"tuple": items} if isinstance(value, tuple) else items
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"dict": {k: to_reply_data(v, codec, buffers) for k, v in value.items()}}
    return {"opaque": type(value).__name__}


def _tensor_data(tensor: torch.Tensor, buffers: list[bytes] | None) -> dict:
    dtype = str(tensor.dtype).removeprefix("torch.")
    if dtype not in DTYPES:
        raise WireError(f"tensors of dtype {dtype} cannot be sent")
    data = {"shape": list(tensor.shape), "dtype": dtype}
    if tensor.device.type != "cpu":
        data["device"] = tensor.device.type
    if tensor.device.type == "meta":
        return {"tensor": None, **data}
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    if buffers is None:  # a case file: numbers as JSON writes them (NaN and Infinity included)
        return {"tensor": flat.tolist(), **data}
    buffers.append(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
    return {"tensor": len(buffers) - 1, **data}


def _function_data(function: Callable, codec: Codec, buffers: list[bytes] | None) -> dict:
    for name, helper in (codec.helpers or {}).items():
        if helper is function:
            return {"helper": name}
    bound: dict = {}
    target = function
    if type(function).__name__ == "partial" and not function.args:  # functools.partial(f, W=...)
        target, bound = function.func, dict(function.keywords)
    name = codec.oracle_name(target) if codec.oracle_name else None
    if name is None:
        raise WireError(f"the function {getattr(function, '__name__', function)!r} cannot be sent")
    return {"oracle": name, "bound": to_data(bound, codec, buffers)["dict"]}


def pack(value: Any, codec: Codec | None = None, reply: bool = False) -> bytes:
    """``value`` as one message: ``AGW1``, the JSON header's length, the header, the tensors' bytes."""
    buffers: list[bytes] = []
    data = (to_reply_data if reply else to_data)(value, codec, buffers)
    header = json.dumps({"value": data, "buffers": [len(b) for b in buffers]}, allow_nan=False).encode()
    return b"".join([_MAGIC, struct.pack("<I", len(header)), header, *buffers])


# --------------------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------------------


def from_data(data: Any, codec: Codec | None = None, buffers: list[memoryview] | None = None,
              limits: Limits = Limits(), device: Callable[[str], torch.device] | None = None) -> Any:
    """The value that :func:`to_data` encoded.

    ``device`` maps a tensor's device type to where it is built (by default the CPU for
    ``cpu``, CUDA for ``cuda``, ``meta`` for ``meta``).

    Raises:
        WireError: malformed data, or data beyond ``limits``.
    """
    return _Decoder(codec or Codec(), buffers or [], limits, device or _device).decode(data, 0)


def unpack(message: bytes, codec: Codec | None = None, limits: Limits = Limits(),
           device: Callable[[str], torch.device] | None = None) -> Any:
    """The value of a :func:`pack` message, checked against ``limits`` before it is parsed.

    The header's bytes must pass :func:`_scan`, and be ASCII (``json.dumps`` writes them so:
    its text is then one byte a character), before it is copied or ``json.loads`` builds anything.

    Raises:
        WireError: a message too large, malformed, or holding data beyond ``limits``.
    """
    if len(message) > limits.bytes:
        raise WireError(f"a message of {len(message)} bytes, more than the {limits.bytes} allowed")
    if message[:4] != _MAGIC or len(message) < 8:
        raise WireError("not a message of the course's wire format")
    (length,) = struct.unpack("<I", message[4:8])
    if 8 + length > len(message):
        raise WireError("a message cut short")
    _scan(memoryview(message)[8:8 + length], limits)
    try:
        text = str(memoryview(message)[8:8 + length], "ascii")
    except UnicodeDecodeError:
        raise WireError("a message header that is not ASCII") from None
    try:
        header = json.loads(text)
    except (ValueError, RecursionError) as error:  # ValueError: not JSON, or an int of over 4300 digits
        raise WireError(f"a malformed message header ({type(error).__name__})") from None
    sizes = header.get("buffers") if isinstance(header, dict) else None
    if not isinstance(sizes, list) or not all(isinstance(s, int) and s >= 0 for s in sizes):
        raise WireError("a message header without its buffer sizes")
    view, offset, buffers = memoryview(message), 8 + length, []
    for size in sizes:
        if offset + size > len(message):
            raise WireError("a message cut short")
        buffers.append(view[offset:offset + size])
        offset += size
    if offset != len(message):
        raise WireError("bytes after the last buffer")
    return from_data(header.get("value"), codec, buffers, limits, device)


#: One token of a JSON text for :func:`_scan`: a string (group 1: the colon that makes it a key),
#: an opening bracket (group 2), a closing one (group 3), or a literal (a number, ``true``...).
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"(\s*:)?|([\[{])|([\]}])|[^\s,:\[\]{}"]+', re.DOTALL)


def _scan(header: bytes | memoryview, limits: Limits) -> None:
    """Refuse a JSON ``header`` that holds more values or is nested deeper than ``limits`` allow.

    One pass over the tokens, outside strings, that stops at the first value too many: what
    ``json.loads`` then builds is at most ``limits.values`` objects, however small each is in
    the text (``[{}, {}, ...]`` is 4 bytes a dict of some 64). Every JSON value counts (a
    tag's object and its list too, a dict's keys not), so this counts at least as many as
    :class:`_Decoder`. Depth: the header's object, two levels for each level of data (a
    tag's object and its list, ``{"tuple": [...]}``), and a tensor's object and its shape:
    ``2 * limits.depth + 3``. A bracket that closes nothing, or a key before its value, ends
    the pass too, so that it looks at no more than ``3 * limits.values`` tokens (whitespace,
    commas and the inside of strings are skipped by the regular expression, in C). Other
    bytes that are not JSON are left for ``json.loads`` to refuse.

    Raises:
        WireError: too many values, too deep, or brackets or keys out of place.
    """
    values, keys, depth, deepest = 0, 0, 0, 2 * limits.depth + 3
    for token in _TOKEN.finditer(header):
        key, opens, closes = token.groups()
        if closes:
            depth -= 1
            if depth < 0:
                raise WireError("a malformed message header (a bracket closes nothing)")
            continue
        if key:
            keys += 1
            if keys > values:  # in JSON, each key follows its object or the value of the key before
                raise WireError("a malformed message header (a key without a value)")
            continue
        values += 1
        if values > limits.values:
            raise WireError(f"more than {limits.values} values")
        if opens:
            depth += 1
            if depth > deepest:
                raise WireError(f"nested deeper than {limits.depth}")


def _device(kind: str) -> torch.device:
    if kind not in ("cpu", "cuda", "meta"):
        raise WireError(f"tensors on device {kind[:40]!r} are not carried")
    if kind == "cuda" and not torch.cuda.is_available():
        raise WireError("a tensor on CUDA, but there is no CUDA device here")
    return torch.device(kind)


class _Decoder:
    def __init__(self, codec: Codec, buffers: list, limits: Limits, device: Callable[[str], torch.device]):
        self.codec, self.buffers, self.limits, self.device = codec, buffers, limits, device
        self.count, self.elements, self.used = 0, 0, set()

    def decode(self, data: Any, depth: int) -> Any:
        self.count += 1
        if self.count > self.limits.values:
            raise WireError(f"more than {self.limits.values} values")
        if depth > self.limits.depth:
            raise WireError(f"nested deeper than {self.limits.depth}")
        if data is None or isinstance(data, (bool, int, float)):
            return data
        if isinstance(data, str):
            if len(data) > self.limits.string:
                raise WireError(f"a string of more than {self.limits.string} characters")
            return data
        if isinstance(data, list):
            return [self.decode(v, depth + 1) for v in data]
        if not isinstance(data, dict) or len(data) == 0:
            raise WireError(f"unexpected data of type {type(data).__name__}")
        if "tensor" in data:
            return self._tensor(data)
        tag, value = next(iter(data.items())) if len(data) == 1 else ("oracle" if "oracle" in data else "", None)
        if tag == "tuple" and isinstance(value, list):
            return tuple(self.decode(v, depth + 1) for v in value)
        if tag == "dict" and isinstance(value, dict):
            return {str(k): self.decode(v, depth + 1) for k, v in value.items()}
        if tag == "float" and value in ("nan", "inf", "-inf"):
            return float(value)
        if tag == "device" and isinstance(value, str):
            return torch.device(self.device(value.split(":")[0]))
        if tag == "dtype" and isinstance(value, str) and value in DTYPES:
            return DTYPES[value]
        if tag == "opaque" and isinstance(value, str):
            return Opaque(value[:200])
        if tag == "helper" and isinstance(value, str):
            helpers = self.codec.helpers or {}
            if value not in helpers:
                raise WireError(f"no helper named {value[:40]!r}")
            return helpers[value]
        if tag == "oracle" and isinstance(data.get("oracle"), str) and isinstance(data.get("bound", {}), dict):
            if self.codec.oracle is None:
                raise WireError("a function to call back, but no way to call back")
            bound = {str(k): self.decode(v, depth + 1) for k, v in data.get("bound", {}).items()}
            return self.codec.oracle(data["oracle"], bound)
        raise WireError(f"unknown data {[str(key)[:40] for key in sorted(data)[:3]]}")

    def _tensor(self, data: dict) -> torch.Tensor:
        """The tensor of a ``{"tensor": ..., "shape": ..., "dtype": ..., "device": ...}`` tag.

        Its values come inline (a list of numbers, from a case file), as the bytes of a
        buffer (its index), or not at all (``null``: a ``meta`` tensor).

        Raises:
            WireError: a dtype not in :data:`DTYPES`, a device that is not a string, a shape
                :meth:`_shape` refuses, or values that do not fit the shape and dtype.
        """
        name, where = data.get("dtype"), data.get("device", "cpu")
        dtype = DTYPES.get(name) if isinstance(name, str) else None
        if dtype is None:
            raise WireError(f"tensors of dtype {str(name)[:40]!r} are not carried")
        if not isinstance(where, str):
            raise WireError("a tensor whose device is not a name")
        shape = self._shape(data.get("shape"))
        payload = data["tensor"]
        if payload is None:  # a meta tensor: shape and dtype only
            return torch.empty(shape, dtype=dtype, device="meta")
        if isinstance(payload, list):  # inline, from a case file
            return self._inline(payload, shape, dtype).to(self.device(where))
        return self._from_buffer(payload, shape, dtype).to(self.device(where))

    def _shape(self, shape: Any) -> list[int]:
        """``shape``, checked: a list of at most 16 sizes, each an ``int`` (not a ``bool``) >= 0.

        Raises:
            WireError: a malformed shape; an extent (the product of the sizes, a 0 counted
                as 1) over ``limits.elements``; or, with the tensors decoded before, more
                than ``limits.elements`` elements in all.
        """
        if not isinstance(shape, list) or len(shape) > 16 or \
                not all(type(n) is int and n >= 0 for n in shape):
            raise WireError("a malformed tensor shape")
        extent = 1
        for n in shape:  # stops at the first size too many: no product of huge integers
            extent *= max(n, 1)
            if extent > self.limits.elements:
                raise WireError(f"a tensor of more than the {self.limits.elements} elements allowed")
        self.elements += math.prod(shape)
        if self.elements > self.limits.elements:
            raise WireError(f"tensors of more than {self.limits.elements} elements in all")
        return shape

    def _inline(self, payload: list, shape: list[int], dtype: torch.dtype) -> torch.Tensor:
        """A tensor of ``shape`` from its values listed flat.

        Raises:
            WireError: as many values as the shape has elements, not all numbers, or
                numbers that ``dtype`` cannot hold (300 as ``int8``, 2**70 as ``int64``).
        """
        if len(payload) != math.prod(shape):
            raise WireError("a tensor whose values do not fit its shape")
        if not all(isinstance(v, (int, float)) for v in payload):
            raise WireError("a tensor with values that are not numbers")
        try:
            return torch.tensor(payload, dtype=dtype).reshape(shape)
        except (RuntimeError, OverflowError, ValueError):  # how torch refuses a number out of dtype's range
            raise WireError(f"a tensor with values that {dtype} cannot hold") from None

    def _from_buffer(self, index: Any, shape: list[int], dtype: torch.dtype) -> torch.Tensor:
        """A tensor of ``shape`` on the bytes of buffer ``index`` (copied: the message stays read-only).

        Each buffer makes one tensor: a buffer named twice would make a small message
        decode to many copies of it. A ``bool`` tensor's bytes become ``True`` where not 0
        (torch takes any other byte than 0 or 1 for a ``bool`` that is neither).

        Raises:
            WireError: no such buffer, a buffer named before, or not ``numel * itemsize`` bytes.
        """
        if type(index) is not int or not 0 <= index < len(self.buffers):
            raise WireError("a tensor without its bytes")
        if index in self.used:
            raise WireError("a tensor on the bytes of another")
        self.used.add(index)
        raw, numel = self.buffers[index], math.prod(shape)
        itemsize = torch.empty((), dtype=dtype).element_size()
        if len(raw) != numel * itemsize:
            raise WireError(f"a tensor of shape {shape} and dtype {dtype} with {len(raw)} bytes")
        octets = torch.frombuffer(bytearray(raw), dtype=torch.uint8) if numel else torch.empty(0, dtype=torch.uint8)
        flat = octets != 0 if dtype is torch.bool else octets.view(dtype)
        return flat.reshape(shape)
