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

# The first three columns are those of before records; a Kafka user finds timestamp, key
# and headers as the Kafka source names them (docs/spark.md, "Columns").
SCHEMA = (
    "ledger_id long, entry_id long, data binary, "
    "timestamp timestamp, key binary, headers map<string, binary>"
)

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


LedgerRef = int | str  # a ledger id, or a stream's name (resolved when the query is planned)


def parse_ref(text: str, name: str) -> LedgerRef:
    """ "7" -> 7, "orders" -> "orders" (a stream name); a negative id is refused."""
    text = text.strip()
    try:
        lid = int(text)
    except ValueError:
        from embedlog.metadata.streams import check_name

        try:
            return check_name(text, f"option {name!r}: stream name")
        except ValueError as exc:
            raise OptionError(str(exc)) from None
    if lid < 0:
        raise OptionError(f"option {name!r}: ledger ids are >= 0, got {lid}")
    return lid


def parse_ledger_list(raw: str, name: str = "ledgers") -> list[LedgerRef]:
    """ "3,4, orders" -> [3, 4, "orders"] (order kept, duplicates dropped): ledger ids and
    stream names separated by commas."""
    out: list[LedgerRef] = []
    for part in str(raw).split(","):
        if not part.strip():
            continue
        ref = parse_ref(part, name)
        if ref not in out:
            out.append(ref)
    if not out:
        raise OptionError(f"option {name!r} names no ledger: {raw!r}")
    return out


def _ledger_refs(options: Mapping[str, str], names: tuple[str, ...]) -> list[LedgerRef] | None:
    """The ledgers named by whichever of ``names`` is given (at most one of them)."""
    given = [(n, _get(options, n)) for n in names]
    given = [(n, v) for n, v in given if v is not None]
    if len(given) > 1:
        raise OptionError(
            f"options {' and '.join(repr(n) for n, _ in given)} both name ledgers: give one"
        )
    if not given:
        return None
    name, raw = given[0]
    return parse_ledger_list(str(raw), name)


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


def _offsets(options: Mapping[str, str], name: str, words: tuple[str, ...]) -> Offsets:
    raw = _get(options, name)
    return parse_offsets(raw if raw is not None else words[0], name, words)


Offsets = str | dict[LedgerRef, int]  # a word ("earliest", "latest") or {ledger: entry id}


def _timestamp_ms(options: Mapping[str, str], name: str, offsets: str) -> int | None:
    """Option ``name``: milliseconds since the epoch, as Kafka's source takes it; None when
    not given. Giving ``offsets`` too (the other way to say the same end) is refused."""
    raw = _get(options, name)
    if raw is None:
        return None
    if _get(options, offsets) is not None:
        raise OptionError(
            f"options {offsets!r} and {name!r} both say where the read "
            f"{'starts' if name.startswith('starting') else 'ends'}: give one of them"
        )
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise OptionError(
            f"option {name!r} must be milliseconds since the epoch (as Kafka's source "
            f"takes it), e.g. 1767225600000 for 2026-01-01 UTC, got {raw!r}"
        ) from None
    if value < 0:
        raise OptionError(f"option {name!r} must be >= 0 (milliseconds since the epoch)")
    return value


def _by_time_needs_ledgers(refs: list[LedgerRef] | None, by_time: bool) -> None:
    if refs is None and by_time:
        raise OptionError(
            "startingTimestamp/endingTimestamp need the streams named (option 'stream' or "
            "'ledgers'): bounded ledgers' entries have no timestamps"
        )


def parse_offsets(raw: str, name: str, words: tuple[str, ...]) -> Offsets:
    """``words[i]`` or JSON ``{"<ledger id or stream name>": <entry id>}``.

    The JSON's ledgers are checked against the query's once names are resolved
    (``resolve_offsets``): a name needs the cluster.
    """
    text = str(raw).strip()
    if text.lower() in words:
        return text.lower()
    try:
        value: Any = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise OptionError(
            f"option {name!r} must be {' or '.join(words)}, or JSON "
            f'{{"<ledger id or stream name>": <entry id>}}, got {raw!r}'
        )
    out: dict[LedgerRef, int] = {}
    for key, nxt in value.items():
        ref = parse_ref(str(key), name)
        if isinstance(nxt, bool) or not isinstance(nxt, int) or nxt < 0:
            raise OptionError(f"{name}: ledger {key} needs an entry id >= 0, got {nxt!r}")
        out[ref] = nxt
    return out


def resolve_offsets(
    offsets: dict[LedgerRef, int], ids: dict[LedgerRef, int], name: str
) -> dict[str, int]:
    """JSON offsets with their ledgers resolved: {"<ledger id>": entry id}, one per ledger.

    ``ids`` maps each of the query's ledger refs (ids and names) to its ledger id.
    """
    wanted = set(ids.values())
    out: dict[str, int] = {}
    for ref, nxt in offsets.items():
        lid = ids.get(ref, ref if isinstance(ref, int) else None)
        if lid is None or lid not in wanted:
            raise OptionError(f"{name} names ledger {ref!r}, which the query does not read")
        out[str(lid)] = nxt
    missing = sorted(lid for lid in wanted if str(lid) not in out)
    if missing:
        raise OptionError(f"{name} has no offset for ledger(s) {missing}")
    return out


@dataclass(frozen=True)
class ReadOptions:
    conn: ConnectionOptions
    ledgers: tuple[LedgerRef, ...] | None  # None: every ledger the metadata lists
    entries_per_partition: int = DEFAULT_ENTRIES_PER_PARTITION
    read_batch: int = DEFAULT_READ_BATCH
    recover: bool = False
    starting: Offsets = "earliest"  # earliest: entry 0, or a stream's trim point
    ending: Offsets = "latest"  # latest: the last entry (closed) or the LAC (open)
    fail_on_data_loss: bool = True
    # Milliseconds since the epoch: from the first entry at or after starting_ms, up to
    # the last before ending_ms (in place of starting/ending)
    starting_ms: int | None = None
    ending_ms: int | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        check_known(options, "read")
        refs = _ledger_refs(options, ("ledgers", "ledger", "stream"))
        starting = _offsets(options, "startingOffsets", ("earliest",))
        ending = _offsets(options, "endingOffsets", ("latest",))
        if refs is None and (isinstance(starting, dict) or isinstance(ending, dict)):
            raise OptionError(
                "startingOffsets/endingOffsets as JSON need the ledgers named "
                "(option 'ledgers' or 'stream')"
            )
        starting_ms = _timestamp_ms(options, "startingTimestamp", "startingOffsets")
        ending_ms = _timestamp_ms(options, "endingTimestamp", "endingOffsets")
        _by_time_needs_ledgers(refs, starting_ms is not None or ending_ms is not None)
        if starting_ms is not None and ending_ms is not None and ending_ms < starting_ms:
            raise OptionError(
                f"endingTimestamp {ending_ms} is before startingTimestamp {starting_ms}"
            )
        return cls(
            conn=ConnectionOptions.parse(options),
            ledgers=tuple(refs) if refs is not None else None,
            entries_per_partition=_int(
                options, "entriesPerPartition", DEFAULT_ENTRIES_PER_PARTITION
            ),
            read_batch=_int(options, "readBatchSize", DEFAULT_READ_BATCH),
            recover=_bool(options, "recover", False),
            starting=starting,
            ending=ending,
            fail_on_data_loss=_bool(options, "failOnDataLoss", True),
            starting_ms=starting_ms,
            ending_ms=ending_ms,
        )


@dataclass(frozen=True)
class StreamOptions:
    conn: ConnectionOptions
    ledgers: tuple[LedgerRef, ...]
    starting: Offsets  # "earliest" | "latest" | {ledger: next entry id}
    entries_per_partition: int = DEFAULT_ENTRIES_PER_PARTITION
    read_batch: int = DEFAULT_READ_BATCH
    max_entries_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    starting_ms: int | None = None  # in place of starting: the first entry at or after it

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> StreamOptions:
        check_known(options, "readStream")
        refs = _ledger_refs(options, ("ledger", "ledgers", "stream"))
        if refs is None:
            raise OptionError(
                "a stream needs option 'stream' (a stream name) or 'ledger' (a ledger id, "
                "or ids and names with commas)"
            )
        raw_max = _get(options, "maxEntriesPerTrigger")
        return cls(
            conn=ConnectionOptions.parse(options),
            ledgers=tuple(refs),
            starting=_offsets(options, "startingOffsets", ("earliest", "latest")),
            entries_per_partition=_int(
                options, "entriesPerPartition", DEFAULT_ENTRIES_PER_PARTITION
            ),
            read_batch=_int(options, "readBatchSize", DEFAULT_READ_BATCH),
            max_entries_per_trigger=(
                None if raw_max is None else _int(options, "maxEntriesPerTrigger", 0)
            ),
            fail_on_data_loss=_bool(options, "failOnDataLoss", True),
            starting_ms=_timestamp_ms(options, "startingTimestamp", "startingOffsets"),
        )


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
    # The stream to append to (a name or an unbounded ledger's id); None: new ledgers.
    # With a target the ledgers above are the tasks' temporary ones.
    target: LedgerRef | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str], direction: str = "write") -> WriteOptions:
        check_known(options, direction)
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
        refs = _ledger_refs(options, ("stream", "ledger"))
        if refs is not None and len(refs) != 1:
            raise OptionError(f"a write goes into one stream, got {refs}")
        if refs is None and direction == "writeStream":
            raise OptionError(
                "writeStream needs option 'stream' (a stream name) or 'ledger' (an "
                "unbounded ledger's id): the stream the query appends to"
            )
        return cls(
            conn=ConnectionOptions.parse(options),
            ensemble_size=e,
            write_quorum=wq,
            ack_quorum=aq,
            digest=digest,
            window=_int(options, "maxOutstanding", DEFAULT_WRITE_WINDOW),
            tag=_get(options, "writeTag") or None,
            target=refs[0] if refs is not None else None,
        )


# -- which options each direction knows ------------------------------------------------------

_CONNECTION = ("metadataUri", "password", "tlsCa", "tlsCert", "tlsKey", "requestTimeout")
_WRITING = (
    "stream",
    "ledger",
    "ensembleSize",
    "writeQuorum",
    "ackQuorum",
    "digest",
    "maxOutstanding",
    "writeTag",
)
KNOWN: dict[str, tuple[str, ...]] = {
    "read": (
        *_CONNECTION,
        "ledgers",
        "ledger",
        "stream",
        "startingOffsets",
        "endingOffsets",
        "startingTimestamp",
        "endingTimestamp",
        "failOnDataLoss",
        "entriesPerPartition",
        "readBatchSize",
        "recover",
    ),
    "readStream": (
        *_CONNECTION,
        "stream",
        "ledger",
        "ledgers",
        "startingOffsets",
        "startingTimestamp",
        "failOnDataLoss",
        "maxEntriesPerTrigger",
        "entriesPerPartition",
        "readBatchSize",
    ),
    "write": (*_CONNECTION, *_WRITING),
    "writeStream": (*_CONNECTION, *_WRITING),
}
# Options Spark itself puts among a data source's, found in a PySpark 4 session
# (tests/spark/test_spark_sink.py checks the writer's): load(path) / load([paths]) and
# save(path) / writeStream.start(path) pass "path" / "paths"; writeStream passes
# "checkpointLocation" and queryName(...)'s "queryName". Spark keeps the others it has
# (trigger, outputMode, partitionBy) out of the options.
SPARK_OWN = ("path", "paths", "checkpointLocation", "queryName")


def unknown_options(options: Mapping[str, str], direction: str) -> list[str]:
    """The option names ``direction`` does not know (case-insensitively), as given."""
    known = {n.lower() for n in (*KNOWN[direction], *SPARK_OWN)}
    return sorted(k for k in options if k.lower() not in known)


def close_match(name: str, direction: str) -> str | None:
    """The option of ``direction`` (or Spark's) that ``name`` is most likely a typo of."""
    import difflib

    names = {n.lower(): n for n in (*KNOWN[direction], *SPARK_OWN)}
    found = difflib.get_close_matches(name.lower(), names, n=1, cutoff=0.75)
    return names[found[0]] if found else None


def check_known(options: Mapping[str, str], direction: str) -> None:
    unknown = unknown_options(options, direction)
    if unknown:
        hints = [(u, close_match(u, direction)) for u in unknown]
        guess = "; ".join(f"{u!r}: did you mean {m!r}?" for u, m in hints if m)
        raise OptionError(
            f"unknown option(s) {', '.join(map(repr, unknown))} for {direction}"
            + (f" ({guess})" if guess else "")
            + f"; {direction} knows: {', '.join(KNOWN[direction])} "
            f"(and Spark's own: {', '.join(SPARK_OWN)})"
        )
