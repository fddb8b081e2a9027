"""The connector's options, parsed once on the driver into picklable values.

Spark hands a data source its options as a case-insensitive dict of strings.
Everything here is checked when the query is planned, so that a typo fails the
query at once with a clear message rather than in every task.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SCHEMA = "ledger_id long, entry_id long, data binary"

DEFAULT_ENTRIES_PER_PARTITION = 10_000
DEFAULT_READ_BATCH = 500
DEFAULT_WRITE_WINDOW = 1_000

NO_URI_HINT = (
    "option 'metadataUri' is required: the zk://host:port/path of the cluster's "
    "ZooKeeper metadata, with bookies serving over TCP (LocalCluster(transport='tcp', "
    "metadata_uri='zk://...') or `embedlog sandbox`). Spark's Python workers are other "
    "processes, and the embedded LevelDB metadata store can be opened by one process only."
)


class OptionError(ValueError):
    """A connector option is missing or malformed."""


def _get(options: Mapping[str, str], name: str) -> str | None:
    # Spark passes a CaseInsensitiveDict; a plain dict (tests, direct use) may not be.
    value = options.get(name)
    if value is None:
        lowered = name.lower()
        for key, val in options.items():
            if key.lower() == lowered:
                return val
    return value


def _int(options: Mapping[str, str], name: str, default: int, *, minimum: int = 1) -> int:
    raw = _get(options, name)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise OptionError(f"option {name!r} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise OptionError(f"option {name!r} must be >= {minimum}, got {value}")
    return value


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _get(options, name)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise OptionError(f"option {name!r} must be true or false, got {raw!r}")


def parse_ledger_list(raw: str, name: str = "ledgers") -> list[int]:
    """ "3,4, 7" -> [3, 4, 7] (order kept, duplicates dropped)."""
    out: list[int] = []
    for part in str(raw).split(","):
        part = part.strip()
        if not part:
            continue
        try:
            lid = int(part)
        except ValueError:
            raise OptionError(
                f"option {name!r} must be ledger ids separated by commas, got {raw!r}"
            ) from None
        if lid < 0:
            raise OptionError(f"option {name!r}: ledger ids are >= 0, got {lid}")
        if lid not in out:
            out.append(lid)
    if not out:
        raise OptionError(f"option {name!r} names no ledger: {raw!r}")
    return out


@dataclass(frozen=True)
class ConnectionOptions:
    """How a task reaches the cluster: what `embedlog.connect` needs."""

    metadata_uri: str
    password: bytes = b""
    tls_ca: str | None = None
    tls_cert: str | None = None  # with tls_key: a client certificate, for mutual TLS
    tls_key: str | None = None
    request_timeout: float = 10.0

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ConnectionOptions:
        uri = _get(options, "metadataUri")
        if not uri:
            raise OptionError(NO_URI_HINT)
        uri = str(uri).strip()
        if not uri.startswith("zk://"):
            raise OptionError(
                f"metadataUri {uri!r} cannot be shared with Spark's worker processes; "
                + NO_URI_HINT
            )
        raw_timeout = _get(options, "requestTimeout")
        timeout = 10.0
        if raw_timeout is not None:
            try:
                timeout = float(raw_timeout)
            except ValueError:
                raise OptionError(
                    f"option 'requestTimeout' must be seconds, got {raw_timeout!r}"
                ) from None
            if timeout <= 0:
                raise OptionError(f"option 'requestTimeout' must be > 0, got {raw_timeout!r}")
        tls_cert = _get(options, "tlsCert") or None
        tls_key = _get(options, "tlsKey") or None
        if (tls_cert is None) != (tls_key is None):
            given, missing = ("tlsCert", "tlsKey") if tls_key is None else ("tlsKey", "tlsCert")
            raise OptionError(
                f"option {given!r} needs {missing!r}: a client certificate goes with its "
                "private key (give both, or neither)"
            )
        return cls(
            metadata_uri=uri,
            password=str(_get(options, "password") or "").encode("utf-8"),
            tls_ca=_get(options, "tlsCa") or None,
            tls_cert=tls_cert,
            tls_key=tls_key,
            request_timeout=timeout,
        )


@dataclass(frozen=True)
class ReadOptions:
    conn: ConnectionOptions
    ledgers: tuple[int, ...] | None  # None: every ledger the metadata lists
    entries_per_partition: int = DEFAULT_ENTRIES_PER_PARTITION
    read_batch: int = DEFAULT_READ_BATCH
    recover: bool = False

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        raw = _get(options, "ledgers")
        return cls(
            conn=ConnectionOptions.parse(options),
            ledgers=tuple(parse_ledger_list(raw)) if raw is not None else None,
            entries_per_partition=_int(
                options, "entriesPerPartition", DEFAULT_ENTRIES_PER_PARTITION
            ),
            read_batch=_int(options, "readBatchSize", DEFAULT_READ_BATCH),
            recover=_bool(options, "recover", False),
        )


@dataclass(frozen=True)
class StreamOptions:
    conn: ConnectionOptions
    ledgers: tuple[int, ...]
    starting: str | dict[str, int]  # "earliest" | "latest" | {ledger id: next entry id}
    entries_per_partition: int = DEFAULT_ENTRIES_PER_PARTITION
    read_batch: int = DEFAULT_READ_BATCH
    max_entries_per_trigger: int | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> StreamOptions:
        raw = _get(options, "ledger")
        if raw is None:
            raw = _get(options, "ledgers")
        if raw is None:
            raise OptionError("a stream needs option 'ledger' (a ledger id, or ids with commas)")
        ledgers = tuple(parse_ledger_list(raw, "ledger"))
        starting = parse_starting_offsets(_get(options, "startingOffsets") or "earliest", ledgers)
        raw_max = _get(options, "maxEntriesPerTrigger")
        return cls(
            conn=ConnectionOptions.parse(options),
            ledgers=ledgers,
            starting=starting,
            entries_per_partition=_int(
                options, "entriesPerPartition", DEFAULT_ENTRIES_PER_PARTITION
            ),
            read_batch=_int(options, "readBatchSize", DEFAULT_READ_BATCH),
            max_entries_per_trigger=(
                None if raw_max is None else _int(options, "maxEntriesPerTrigger", 0)
            ),
        )


def parse_starting_offsets(raw: str, ledgers: tuple[int, ...]) -> str | dict[str, int]:
    text = str(raw).strip()
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    try:
        value: Any = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise OptionError(
            "option 'startingOffsets' must be earliest, latest, or JSON "
            f'{{"<ledger id>": <next entry id>}}, got {raw!r}'
        )
    out: dict[str, int] = {}
    for key, nxt in value.items():
        try:
            lid = int(key)
        except ValueError:
            raise OptionError(f"startingOffsets: {key!r} is not a ledger id") from None
        if lid not in ledgers:
            raise OptionError(f"startingOffsets names ledger {lid}, which option 'ledger' does not")
        if isinstance(nxt, bool) or not isinstance(nxt, int) or nxt < 0:
            raise OptionError(
                f"startingOffsets: ledger {lid} needs a next entry id >= 0, got {nxt!r}"
            )
        out[str(lid)] = nxt
    missing = [lid for lid in ledgers if str(lid) not in out]
    if missing:
        raise OptionError(f"startingOffsets has no offset for ledger(s) {missing}")
    return out


DIGESTS = ("CRC32C", "MAC", "DUMMY")


@dataclass(frozen=True)
class WriteOptions:
    conn: ConnectionOptions
    ensemble_size: int = 3
    write_quorum: int = 3
    ack_quorum: int = 2
    digest: str = "CRC32C"
    window: int = DEFAULT_WRITE_WINDOW
    tag: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        e = _int(options, "ensembleSize", 3)
        wq = _int(options, "writeQuorum", min(3, e))
        aq = _int(options, "ackQuorum", min(2, wq))
        if not e >= wq >= aq >= 1:
            raise OptionError(
                f"need ensembleSize >= writeQuorum >= ackQuorum >= 1, got {e} >= {wq} >= {aq}"
            )
        digest = str(_get(options, "digest") or "CRC32C").strip().upper()
        if digest not in DIGESTS:
            raise OptionError(
                f"option 'digest' must be one of {', '.join(DIGESTS)}, got {digest!r}"
            )
        return cls(
            conn=ConnectionOptions.parse(options),
            ensemble_size=e,
            write_quorum=wq,
            ack_quorum=aq,
            digest=digest,
            window=_int(options, "maxOutstanding", DEFAULT_WRITE_WINDOW),
            tag=_get(options, "writeTag") or None,
        )
