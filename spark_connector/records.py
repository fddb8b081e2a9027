"""A row's record fields on their way into a stream: the ``key``, ``headers`` and
``timestamp`` columns, and how a temporary ledger keeps them until the commit appends.

A write into a stream goes through temporary (bounded) ledgers, whose entries are bare
bytes. When the DataFrame has any of the three columns, each temporary entry holds the
row's fields before its data, and the ledger is tagged ``spark.rowFormat`` = ``record-1``
so the commit knows to split them again (a ledger without the tag holds bare data)::

    has_time u8 (0 or 1) | record envelope (embedlog/wire/record.py) | data

The envelope always has a timestamp field; ``has_time`` 0 says it is a placeholder and
the stream's writer stamps the record with its own clock when it appends, as it does a
row without the columns.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from attrs import frozen
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    MapType,
    StringType,
    StructType,
    TimestampType,
)

from embedlog.wire import record
from spark_connector.options import OptionError

ROW_FORMAT = "spark.rowFormat"
RECORD_ROWS = b"record-1"
_NO_TIME = b"\x00"
_TIME = b"\x01"


@frozen
class Fields:
    """What a row gives its record besides its data (None/empty: not given)."""

    key: bytes | None = None
    headers: Mapping[str, bytes] = record.NO_HEADERS
    timestamp: float | None = None  # seconds since the epoch


NONE = Fields()


def _text_or_binary(t: DataType) -> bool:
    return isinstance(t, BinaryType | StringType)


def _headers_type(t: DataType) -> bool:
    """map<string, binary|string>, or Kafka's array<struct<key: string, value: binary|string>>."""
    if isinstance(t, MapType):
        return isinstance(t.keyType, StringType) and _text_or_binary(t.valueType)
    if isinstance(t, ArrayType) and isinstance(t.elementType, StructType):
        names = [f.name.lower() for f in t.elementType.fields]
        if names != ["key", "value"]:
            return False
        key, value = t.elementType.fields
        return isinstance(key.dataType, StringType) and _text_or_binary(value.dataType)
    return False


_WANTED = {
    "key": (_text_or_binary, "binary or string"),
    "headers": (
        _headers_type,
        "map<string, binary> (or string values), or array<struct<key: string, value: binary>> "
        "as Spark's Kafka source has it",
    ),
    "timestamp": (lambda t: isinstance(t, TimestampType), "timestamp"),
}


class RecordColumns:
    """Where a schema's ``key``, ``headers`` and ``timestamp`` columns are (any may be
    missing); checked when the write is planned, so a wrong type fails it at once."""

    def __init__(self, schema: StructType) -> None:
        names = [f.name.lower() for f in schema.fields]
        self.index: dict[str, int] = {}
        for name, (fits, wanted) in _WANTED.items():
            if name not in names:
                continue
            i = names.index(name)
            found = schema.fields[i].dataType
            if not fits(found):
                raise OptionError(
                    f"column {name!r} must be {wanted}, not {found.simpleString()} "
                    "(drop or rename it to write the rows without it)"
                )
            self.index[name] = i

    @property
    def any(self) -> bool:
        return bool(self.index)

    def fields(self, row: Any) -> Fields:
        """The row's key, headers and timestamp, checked as ``ul.append`` checks them (a
        bad one fails the task, before anything reaches the stream)."""
        key = self._get(row, "key")
        raw_headers = self._get(row, "headers")
        when = self._get(row, "timestamp")
        if key is None and not raw_headers and when is None:
            return NONE
        key_bytes, headers, _ = record.check_fields(
            _bytes(key) if key is not None else None, _headers(raw_headers), None
        )
        return Fields(key_bytes, headers, _seconds(when) if when is not None else None)

    def _get(self, row: Any, name: str) -> Any:
        i = self.index.get(name)
        return None if i is None else row[i]


def _bytes(value: Any) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def _headers(value: Any) -> dict[str, bytes]:
    """A headers column's value (a dict, or a list of (key, value) structs) as a dict."""
    if not value:
        return {}
    pairs = value.items() if isinstance(value, Mapping) else [(h[0], h[1]) for h in value]
    out: dict[str, bytes] = {}
    for name, raw in pairs:
        if name is None:
            raise ValueError("a header in column 'headers' has a null name")
        if raw is None:
            raise ValueError(f"header {name!r} in column 'headers' is null: a value needs bytes")
        if name in out:
            raise ValueError(
                f"header {name!r} appears twice in column 'headers': a record's headers "
                "map each name to one value"
            )
        out[name] = _bytes(raw)
    return out


def _seconds(when: datetime) -> float:
    # PySpark gives a timestamp column's values as naive local times (or aware ones);
    # .timestamp() reads a naive one as local time, which is how PySpark made it.
    return when.timestamp()


def pack(data: bytes, fields: Fields) -> bytes:
    """A temporary entry of a ``record-1`` ledger."""
    envelope = record.encode(
        fields.timestamp if fields.timestamp is not None else 0.0, fields.key, fields.headers
    )
    return (_NO_TIME if fields.timestamp is None else _TIME) + envelope + data


def unpack(raw: bytes) -> tuple[bytes, Fields]:
    """(data, fields) of a temporary entry of a ``record-1`` ledger."""
    found, data = record.decode(raw[1:])
    when = found.timestamp if raw[:1] == _TIME else None
    return data, Fields(found.key, found.headers, when)
