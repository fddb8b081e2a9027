"""embedlog/validate.py: every bad argument gets one error naming the parameter."""

from __future__ import annotations

import math
from typing import Any

import pytest

from embedlog import validate
from embedlog.errors import ClientClosedError
from embedlog.wire.entry import DigestType


class Index:
    """An integer of another library (numpy's, say): it has __index__."""

    def __index__(self) -> int:
        return 7


ACCEPTED: list[tuple[Any, tuple[Any, ...], Any]] = [
    (validate.ledger_id, (0,), 0),
    (validate.ledger_id, (2**63 - 1,), 2**63 - 1),
    (validate.ledger_id, (Index(),), 7),
    (validate.password, (b"pw",), b"pw"),
    (validate.password, (bytearray(b"pw"),), b"pw"),
    (validate.password, (memoryview(b"pw"),), b"pw"),
    (validate.password, (b"",), b""),
    (validate.quorums, (3, 3, 2), (3, 3, 2)),
    (validate.quorums, (5, 1, 1), (5, 1, 1)),
    (validate.digest, (DigestType.MAC,), DigestType.MAC),
    (validate.custom_metadata, (None,), {}),
    (validate.custom_metadata, ({"k": bytearray(b"v")},), {"k": b"v"}),
    (validate.flag, (False, "recover"), False),
    (validate.optional_count, (None, "fragment_max_entries"), None),
    (validate.optional_count, (1, "fragment_max_entries"), 1),
    (validate.optional_seconds, (None, "timeout"), None),
    (validate.optional_seconds, (0, "timeout"), 0.0),
    (validate.optional_seconds, (2.5, "timeout"), 2.5),
    (validate.entry_range, (0, 0), (0, 0)),
    (validate.entry_range, (3, 9), (3, 9)),
]


@pytest.mark.parametrize(("check", "args", "expected"), ACCEPTED)
def test_accepted(check: Any, args: tuple[Any, ...], expected: Any) -> None:
    result = check(*args)
    assert result == expected and type(result) is type(expected)


REFUSED: list[tuple[Any, tuple[Any, ...], type[Exception], str]] = [
    (validate.ledger_id, (3.0,), TypeError, "ledger_id must be a whole number, not float 3.0"),
    (validate.ledger_id, ("0",), TypeError, "ledger_id must be a whole number, not str '0'"),
    (validate.ledger_id, (True,), TypeError, "ledger_id must be a whole number, not bool"),
    (validate.ledger_id, (None,), TypeError, "ledger_id must be a whole number, not NoneType"),
    (validate.ledger_id, (-1,), ValueError, "ledger_id must be >= 0, got -1"),
    (validate.ledger_id, (2**63,), ValueError, f"ledger_id must be <= {2**63 - 1}, got {2**63}"),
    (
        validate.password,
        ("pw",),
        TypeError,
        "must be bytes, not str: pass password.encode",
    ),
    (validate.password, (None,), TypeError, "password must be bytes (b'' for none), not NoneType"),
    (validate.password, (7,), TypeError, "password must be bytes (b'' for none), not int 7"),
    (validate.quorums, (3.0, 3, 2), TypeError, "ensemble_size must be a whole number, not float"),
    (validate.quorums, (3, "3", 2), TypeError, "write_quorum must be a whole number, not str"),
    (validate.quorums, (3, 3, None), TypeError, "ack_quorum must be a whole number, not NoneType"),
    (validate.quorums, (True, 1, 1), TypeError, "ensemble_size must be a whole number, not bool"),
    (validate.quorums, (0, 0, 0), ValueError, "ensemble_size must be >= 1, got 0"),
    (validate.quorums, (3, 3, 0), ValueError, "ack_quorum must be >= 1, got 0"),
    (validate.quorums, (2, 3, 2), ValueError, "write_quorum (3) must not exceed ensemble_size (2)"),
    (validate.quorums, (3, 2, 3), ValueError, "ack_quorum (3) must not exceed write_quorum (2)"),
    (validate.digest, ("MAC",), TypeError, "digest must be one of DigestType.CRC32C"),
    (validate.digest, (None,), TypeError, "digest must be one of"),
    (validate.custom_metadata, ([1],), TypeError, "custom_metadata must be a dict of str to bytes"),
    (validate.custom_metadata, ({1: b"v"},), TypeError, "custom_metadata keys must be str"),
    (validate.custom_metadata, ({"k": "v"},), TypeError, "custom_metadata['k'] must be bytes"),
    (validate.flag, ("no", "recover"), TypeError, "recover must be True or False, not str 'no'"),
    (validate.flag, (1, "takeover"), TypeError, "takeover must be True or False, not int 1"),
    (
        validate.optional_count,
        (1.5, "fragment_max_entries"),
        TypeError,
        "fragment_max_entries must be a whole number, not float 1.5",
    ),
    (validate.optional_count, (0, "fragment_max_entries"), ValueError, "must be >= 1, got 0"),
    (validate.optional_seconds, ("5", "timeout"), TypeError, "timeout must be a number of sec"),
    (validate.optional_seconds, (-1, "timeout"), ValueError, "timeout must be >= 0 seconds"),
    (validate.optional_seconds, (math.nan, "timeout"), ValueError, "timeout must be >= 0"),
    (validate.entry_range, ("0", 1), TypeError, "first must be a whole number, not str '0'"),
    (validate.entry_range, (0, 1.0), TypeError, "last must be a whole number, not float 1.0"),
    (validate.entry_range, (-1, 3), ValueError, "first must be >= 0, got -1"),
    (validate.entry_range, (5, 3), ValueError, "bad entry range 5..3: need 0 <= first <= last"),
]


@pytest.mark.parametrize(("check", "args", "error", "message"), REFUSED)
def test_refused(check: Any, args: tuple[Any, ...], error: type[Exception], message: str) -> None:
    with pytest.raises(error) as info:
        check(*args)
    assert message in str(info.value)


def test_a_long_value_is_shortened_in_the_message() -> None:
    with pytest.raises(TypeError) as info:
        validate.ledger_id("9" * 1000)
    assert len(str(info.value)) < 150


class _Runtime:
    def __init__(self, reason: str | None) -> None:
        self.closed_reason = reason


class _Context:
    def __init__(self, reason: str | None) -> None:
        self.closed_reason = reason


@pytest.mark.parametrize(
    ("runtime", "client", "message"),
    [
        (None, None, None),
        ("the cluster is stopped", None, "the cluster is stopped"),
        (None, "client c1 is closed", "client c1 is closed"),
        # Both: the cluster's reason, the more fundamental one, is given.
        ("the cluster is stopped", "client c1 is closed", "the cluster is stopped"),
    ],
)
def test_check_open(runtime: str | None, client: str | None, message: str | None) -> None:
    args: Any = (_Runtime(runtime), _Context(client))
    if message is None:
        validate.check_open(*args)
        return
    with pytest.raises(ClientClosedError, match=message) as info:
        validate.check_open(*args)
    assert isinstance(info.value, RuntimeError) and info.value.code == -19
