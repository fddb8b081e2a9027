"""LedgerMetadata: the immutable description of a ledger kept in the metadata store.

Serialized as JSON with a format version. Fields this version does not know
are kept in ``extra`` and written back unchanged, so an older client that
rewrites metadata never drops what a newer one added.
"""

from __future__ import annotations

import base64
import bisect
import enum
import json
from collections.abc import Mapping
from typing import Any

import attrs
from attrs import field, frozen

from embedlog.errors import MetadataError
from embedlog.wire.entry import DigestType

FORMAT_VERSION = 1


class LedgerState(enum.Enum):
    OPEN = "OPEN"
    IN_RECOVERY = "IN_RECOVERY"
    CLOSED = "CLOSED"


Fragment = tuple[int, tuple[str, ...]]  # (first entry id, ensemble)


def _fragments(value: Any) -> tuple[Fragment, ...]:
    if isinstance(value, Mapping):
        value = value.items()
    frags = tuple(sorted((int(k), tuple(v)) for k, v in value))
    return frags


@frozen
class LedgerMetadata:
    ledger_id: int
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    fragments: tuple[Fragment, ...] = field(converter=_fragments)
    state: LedgerState = LedgerState.OPEN
    last_entry_id: int = -1
    digest_type: DigestType = DigestType.CRC32C
    # Hex master key; lets open_ledger refuse a wrong password early. Never in a repr (nor
    # the password below): a repr ends up in logs and test reports.
    password_hash: str = field(default="", repr=False)
    # The ledger's password, as BookKeeper keeps it in ledger metadata: a bookie repairing
    # itself (BP-46) or the auditor must open and recover ledgers it did not create.
    # Protect the metadata store accordingly. None for ledgers written before it was kept.
    password: bytes | None = field(default=None, repr=False)
    custom_metadata: Mapping[str, bytes] = field(factory=dict)
    term: int = -1  # unbounded ledgers: the current writer's term; -1 for bounded ledgers
    unbounded: bool = False
    ctime: float = 0.0
    extra: Mapping[str, Any] = field(factory=dict)  # fields from newer formats, preserved
    version: int = field(default=-1, eq=False)  # the store's version, not serialized

    # -- derived views -------------------------------------------------------------------------

    @property
    def ensembles(self) -> dict[int, list[str]]:
        """First entry id -> bookie ids, as API.md describes it."""
        return {first: list(ens) for first, ens in self.fragments}

    @property
    def is_closed(self) -> bool:
        return self.state is LedgerState.CLOSED

    @property
    def last_fragment(self) -> Fragment:
        return self.fragments[-1]

    def fragment_for(self, entry_id: int) -> Fragment:
        """The fragment holding ``entry_id`` (the last one whose first entry is <= it; the
        first fragment for ids before it). Writers ask for every ack, mostly about the last
        fragment, and a long unbounded stream has many fragments: last first, then bisect."""
        frags = self.fragments
        if frags[-1][0] <= entry_id:
            return frags[-1]
        return frags[max(bisect.bisect_right(frags, entry_id, key=_first_entry) - 1, 0)]

    def ensemble_for(self, entry_id: int) -> tuple[str, ...]:
        return self.fragment_for(entry_id)[1]

    def bookies(self) -> set[str]:
        return {b for _, ens in self.fragments for b in ens}

    @property
    def master_key(self) -> bytes:
        """The key bookies require of every request that changes this ledger's state;
        b"" when the metadata holds none (or no hex): bookies then refuse every such
        request for the ledger."""
        try:
            return bytes.fromhex(self.password_hash)
        except ValueError:
            return b""

    def evolve(self, **changes: Any) -> LedgerMetadata:
        return attrs.evolve(self, **changes)

    def with_ensemble(self, first_entry: int, ensemble: tuple[str, ...]) -> LedgerMetadata:
        """Add a fragment at ``first_entry``, replacing the last one if it starts there."""
        frags = [f for f in self.fragments if f[0] < first_entry]
        frags.append((first_entry, tuple(ensemble)))
        return self.evolve(fragments=tuple(frags))

    # -- serialization -------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        doc: dict[str, Any] = dict(self.extra)
        doc.update(
            format_version=FORMAT_VERSION,
            ledger_id=self.ledger_id,
            ensemble_size=self.ensemble_size,
            write_quorum=self.write_quorum,
            ack_quorum=self.ack_quorum,
            fragments=[[first, list(ens)] for first, ens in self.fragments],
            state=self.state.value,
            last_entry_id=self.last_entry_id,
            digest_type=self.digest_type.value,
            password_hash=self.password_hash,
            custom_metadata={
                k: base64.b64encode(v).decode("ascii") for k, v in self.custom_metadata.items()
            },
            term=self.term,
            unbounded=self.unbounded,
            ctime=self.ctime,
        )
        if self.password is not None:
            doc["password"] = base64.b64encode(self.password).decode("ascii")
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes, version: int = -1) -> LedgerMetadata:
        try:
            doc = json.loads(data)
            fmt = doc.pop("format_version")
            if fmt > FORMAT_VERSION:
                # Newer minor formats only add fields; those land in ``extra``.
                pass
            known = {
                "ledger_id",
                "ensemble_size",
                "write_quorum",
                "ack_quorum",
                "fragments",
                "state",
                "last_entry_id",
                "digest_type",
                "password_hash",
                "password",
                "custom_metadata",
                "term",
                "unbounded",
                "ctime",
            }
            extra = {k: v for k, v in doc.items() if k not in known}
            return cls(
                ledger_id=doc["ledger_id"],
                ensemble_size=doc["ensemble_size"],
                write_quorum=doc["write_quorum"],
                ack_quorum=doc["ack_quorum"],
                fragments=[(f, ens) for f, ens in doc["fragments"]],
                state=LedgerState(doc["state"]),
                last_entry_id=doc["last_entry_id"],
                digest_type=DigestType(doc["digest_type"]),
                password_hash=doc.get("password_hash", ""),
                password=base64.b64decode(doc["password"]) if "password" in doc else None,
                custom_metadata={
                    k: base64.b64decode(v) for k, v in doc.get("custom_metadata", {}).items()
                },
                term=doc.get("term", -1),
                unbounded=doc.get("unbounded", False),
                ctime=doc.get("ctime", 0.0),
                extra=extra,
                version=version,
            )
        except (KeyError, ValueError, TypeError) as exc:
            raise MetadataError(f"cannot decode ledger metadata: {exc}") from exc


def _first_entry(fragment: Fragment) -> int:
    return fragment[0]
