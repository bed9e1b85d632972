"""Nested run options (``Settings.written``, ``Settings.serial``, ``Settings.planning``) from
what users hand over: the object itself, nothing (the defaults), or a JSON object from Studio or
a config file, whose unknown keys are one clear error naming the known ones."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import TypeVar

T = TypeVar("T")


def option_object(cls: type[T], value: T | Mapping | None, name: str) -> T:
    """``value`` as a ``cls`` (a dataclass of options), or a ``ValueError`` naming setting ``name``."""
    if isinstance(value, cls):
        return value
    if value is None:
        return cls()
    known = [f.name for f in fields(cls)]
    if not isinstance(value, Mapping):
        raise ValueError(f"{name} must be an object with keys {', '.join(known)}; got {value!r}"[:200])
    unknown = set(value) - set(known)
    if unknown:
        raise ValueError(f"{name}: unknown key(s) {', '.join(sorted(map(str, unknown)))}; known: {', '.join(known)}")
    return cls(**value)
