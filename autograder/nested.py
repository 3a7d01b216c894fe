"""Values nested in containers: tensors, numbers and strings inside tuples, lists, dicts and partials.

The checks walk such values in several places: a case's inputs moved to a device or copied,
a result's tensors found, its structure described, the elements an oracle call may compute
counted, a notebook's strings cleaned. Each is one call of :func:`fold`, :func:`map_leaves` or
:func:`leaves`, which alone know how a container is taken apart and put back together. The
caller says which containers to descend into (``into``: types among ``tuple``, ``list``,
``dict``, ``functools.partial``, subclasses included); anything else is a *leaf*.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

#: What a walk descends into unless told otherwise.
CONTAINERS = (tuple, list, dict)


def fold(value: Any, leaf: Callable[[Any], Any], join: Callable[[Any, Any], Any], into: tuple = CONTAINERS) -> Any:
    """``value`` folded bottom-up: ``leaf(value)`` for a leaf, ``join(container, items)`` for a container.

    ``items`` holds the container's items, each folded: a list for a tuple or a list, a dict
    (same keys) for a dict, and for a ``functools.partial`` the pair (its positional arguments
    as a tuple, its keyword arguments as a dict).
    """
    if not isinstance(value, into):
        return leaf(value)
    if isinstance(value, dict):
        items = {key: fold(item, leaf, join, into) for key, item in value.items()}
    elif isinstance(value, functools.partial):
        items = (tuple(fold(item, leaf, join, into) for item in value.args),
                 {key: fold(item, leaf, join, into) for key, item in value.keywords.items()})
    else:
        items = [fold(item, leaf, join, into) for item in value]
    return join(value, items)


def rebuild(container: Any, items: Any) -> Any:
    """A container like ``container`` holding ``items`` (as :func:`fold` passes them): of its type for a
    tuple or a list, a plain ``dict`` for a dict, a partial of the same function for a partial."""
    if isinstance(container, dict):
        return items
    if isinstance(container, functools.partial):
        args, keywords = items
        return functools.partial(container.func, *args, **keywords)
    return type(container)(items)


def map_leaves(value: Any, leaf: Callable[[Any], Any], into: tuple = CONTAINERS, keys: bool = False) -> Any:
    """``value`` with every leaf replaced by ``leaf(it)``, its containers rebuilt (:func:`rebuild`).

    With ``keys``, a dict's keys are mapped by ``leaf`` too.
    """
    def join(container: Any, items: Any) -> Any:
        if keys and isinstance(container, dict):
            items = {leaf(key): item for key, item in items.items()}
        return rebuild(container, items)

    return fold(value, leaf, join, into)


def leaves(value: Any, into: tuple = CONTAINERS) -> list:
    """Every leaf of ``value``, in order: a dict's items (not its keys), a partial's arguments."""
    return fold(value, _alone, _concatenated, into)


def _alone(leaf: Any) -> list:
    return [leaf]


def _concatenated(container: Any, items: Any) -> list:
    """The leaves of a container, from its items' lists of leaves."""
    if isinstance(container, dict):
        items = list(items.values())
    elif isinstance(container, functools.partial):
        args, keywords = items
        items = [*args, *keywords.values()]
    return [found for item in items for found in item]
