"""Checks of what callers pass to the public API: one clear error naming the parameter.

Each check returns the value in the form the rest of the code uses (``bytes``, ``int``)
or raises TypeError (the wrong kind of value) or ValueError (the right kind, out of
range), saying which parameter, what it got and what it takes. They run before anything
is sent or stored, so a bad argument never turns into an internal error later.

``check_open`` is the other half: a call on a client whose cluster was stopped, or that
was closed, raises ClientClosedError saying so instead of failing inside the runtime.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from embedlog.errors import ClientClosedError
from embedlog.wire.entry import DigestType

if TYPE_CHECKING:
    from embedlog.ledger.context import ClientContext
    from embedlog.runtime import Runtime

MAX_ID = 2**63 - 1  # ledger and entry ids travel as signed 64-bit integers


def _got(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def whole_number(value: Any, name: str, *, minimum: int = 0, maximum: int = MAX_ID) -> int:
    """An int (or anything with ``__index__``, such as numpy integers), never a bool."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be a whole number, not bool {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        hint = "; convert it with int()" if isinstance(value, str | float) else ""
        raise TypeError(f"{name} must be a whole number, not {_got(value)}{hint}") from None
    if number < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {number}")
    if number > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {number}")
    return number


def ledger_id(value: Any, name: str = "ledger_id") -> int:
    return whole_number(value, name)


def password(value: Any) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        raise TypeError(
            "password must be bytes, not str: pass password.encode() (the same bytes every "
            "time the ledger is opened)"
        )
    raise TypeError(f"password must be bytes (b'' for none), not {_got(value)}")


def quorums(ensemble_size: Any, write_quorum: Any, ack_quorum: Any) -> tuple[int, int, int]:
    rule = "need ensemble_size >= write_quorum >= ack_quorum >= 1"
    sizes = {"ensemble_size": ensemble_size, "write_quorum": write_quorum, "ack_quorum": ack_quorum}
    for name, value in sizes.items():
        sizes[name] = size = whole_number(value, name, minimum=-MAX_ID)
        if size < 1:
            raise ValueError(f"{name} must be >= 1, got {size}: {rule}")
    e, wq, aq = sizes["ensemble_size"], sizes["write_quorum"], sizes["ack_quorum"]
    if wq > e:
        raise ValueError(f"write_quorum ({wq}) must not exceed ensemble_size ({e}): {rule}")
    if aq > wq:
        raise ValueError(f"ack_quorum ({aq}) must not exceed write_quorum ({wq}): {rule}")
    return e, wq, aq


def digest(value: Any) -> DigestType:
    if isinstance(value, DigestType):
        return value
    names = ", ".join(f"DigestType.{d.name}" for d in DigestType)
    raise TypeError(f"digest must be one of {names}, not {_got(value)}")


def custom_metadata(value: Any) -> dict[str, bytes]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"custom_metadata must be a dict of str to bytes, not {_got(value)}")
    out = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise TypeError(f"custom_metadata keys must be str, not {_got(key)}")
        if not isinstance(item, bytes | bytearray | memoryview):
            raise TypeError(f"custom_metadata[{key!r}] must be bytes, not {_got(item)}")
        out[key] = bytes(item)
    return out


def flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, not {_got(value)}")
    return value


def optional_count(value: Any, name: str) -> int | None:
    """None, or a whole number >= 1."""
    return None if value is None else whole_number(value, name, minimum=1)


def optional_seconds(value: Any, name: str) -> float | None:
    """None, or a number of seconds >= 0."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds or None, not {_got(value)}")
    if not value >= 0:  # NaN included
        raise ValueError(f"{name} must be >= 0 seconds, got {value}")
    return float(value)


def timestamp(value: Any, name: str) -> float:
    """A point in time: finite seconds since the epoch (before it too), as a float."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be seconds since the epoch (a number), not {_got(value)}")
    if not -9.2e12 < value < 9.2e12:  # NaN and infinities included; what i64 microseconds hold
        raise ValueError(f"{name} must be a finite number of seconds since the epoch, got {value}")
    return float(value)


def entry_range(first: Any, last: Any) -> tuple[int, int]:
    first = whole_number(first, "first")
    last = whole_number(last, "last")
    if last < first:
        raise ValueError(f"bad entry range {first}..{last}: need 0 <= first <= last")
    return first, last


def check_open(runtime: Runtime, ctx: ClientContext) -> None:
    """Raise ClientClosedError when the client's runtime (its cluster) or the client itself
    was closed."""
    why = runtime.closed_reason or ctx.closed_reason
    if why is not None:
        raise ClientClosedError(why)


__all__ = [
    "MAX_ID",
    "check_open",
    "custom_metadata",
    "digest",
    "entry_range",
    "flag",
    "ledger_id",
    "optional_count",
    "optional_seconds",
    "password",
    "quorums",
    "whole_number",
]
