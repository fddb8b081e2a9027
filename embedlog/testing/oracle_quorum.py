"""``AckedByAckQuorum`` (issue #31 item 2): the ack quorum checked where it is decided.

When a writer is told an entry is acknowledged, at least AQ distinct bookies of the
entry's write set, in the metadata as it is at that moment, have answered an add of
that entry with its payload (EOK): the oracle's own record of every add answer a bookie
gave (delivered or not, so it may count more than the writer did, never less). Invariant
4 (``AllCommittedEntriesReachAckQuorum``) sees the same rule only at the end of the
history, through what the bookies still store; this sees the moment the writer counted
an ack it should not have (a bookie replaced by an ensemble change, an ack of another
payload), whatever happens to the copies later.

An add answered by a bookie also counts when it was a recovery's write-back of the same
payload: a recovery that replaced a bookie in its write-back writes the entry to the
replacement before it closes the ledger under the new write set.

The rule is checked again at every committed change of a ledger's ensembles (the
model's ``BookiePinned``): every entry acknowledged so far whose write set the change
moved still has AQ bookies of its NEW write set that answered an add of it with its
payload (``metadata_written``). A writer that replaces a bookie whose ack counted for
an acknowledged entry the new fragment takes over leaves that entry with AQ - 1
confirmed copies on the bookies the metadata lists for it, until the replacement
confirms the resend: a loss waits only for the writer to stop in that window.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import Protocol

from embedlog.errors import BKError
from embedlog.metadata.client import LEDGERS, MetadataClient
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.metadata.striping import write_set_bookies
from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import (
    NO_TERM,
    AddFlags,
    FrameError,
    OpCode,
    Request,
    Response,
    unpack_entries,
    unpack_results,
)

RULE = "AckedByAckQuorum"
READ_RULE = "ReadersSeeOnlyCommitted"
CLOSE_RULE = "RecoveredOnWriteSet"


class AckQuorumRule:
    def __init__(
        self,
        payload_of: Callable[[bytes], bytes],
        violate: Callable[[str, str], None],
        counts: Counter[str],
    ) -> None:
        self._payload_of = payload_of  # an entry as sent -> the application's payload
        self._violate = violate
        self._counts = counts
        # (ledger, entry) -> {(bookie, payload)} of every EOK add answer
        self._acks: dict[tuple[int, int], set[tuple[str, bytes]]] = {}
        self._placed: dict[int, LedgerMetadata] = {}  # each ledger's metadata as last written

    def answered(self, bookie: str, req: Request, resp: Response) -> None:
        if req.op == OpCode.ADD:
            if resp.status == StatusCode.EOK:
                self._add(bookie, req.ledger_id, req.entry_id, req.body)
            return
        if req.op != OpCode.ADD_BATCH:
            return
        try:
            entries = unpack_entries(req.body)
            results = unpack_results(resp.body)
        except FrameError:
            return
        for (eid, entry), (status, _term) in zip(entries, results, strict=False):
            if status == StatusCode.EOK:
                self._add(bookie, req.ledger_id, eid, bytes(entry))

    def _add(self, bookie: str, lid: int, eid: int, entry: bytes) -> None:
        self._acks.setdefault((lid, eid), set()).add((bookie, self._payload_of(entry)))

    def answers(self, lid: int, eid: int) -> set[tuple[str, bytes]]:
        """(bookie, payload) of every EOK add answer for ``lid:eid`` so far."""
        return self._acks.get((lid, eid), set())

    def acknowledged(
        self, lid: int, eid: int, payload: bytes, md: LedgerMetadata, who: str
    ) -> None:
        """A writer was told ``eid`` holds ``payload``; ``md``: the metadata now (an entry
        below its first fragment, trimmed meanwhile, is not judged)."""
        if eid < md.fragments[0][0]:
            return
        self._counts["check.acked_by_ack_quorum"] += 1
        ws = write_set_bookies(eid, md.ensemble_for(eid), md.write_quorum)
        have = self._confirmed(lid, eid, payload, ws)
        if len(have) < md.ack_quorum:
            self._violate(
                RULE,
                f"{who} was acknowledged {lid}:{eid} with {len(have)} add answers "
                f"({', '.join(have) or 'none'}) from its write set {ws}, fewer than "
                f"AQ = {md.ack_quorum}",
            )

    def read(self, lid: int, eid: int, payload: bytes, ack_quorum: int, who: str) -> None:
        """``ReadersSeeOnlyCommitted``: a reader (a follower, the final reader) was handed
        ``payload`` at ``lid:eid``. By then AQ distinct bookies answered an add of that
        entry with that payload: a reader sees an entry only once it is committed, never
        an entry stored on fewer bookies (one past the LAC, a write still on its way) that
        a takeover may cut and replace later. Checked as the reader gets the entry, not
        only through what the stream holds at the end: an entry read early is mostly
        committed a moment later, and only the rare cut of that very entry would show."""
        self._counts["check.read_committed"] += 1
        got = self._acks.get((lid, eid), set())
        have = sorted({b for b, p in got if p == payload})
        if len(have) < ack_quorum:
            self._violate(
                READ_RULE,
                f"{who} read {lid}:{eid} when {len(have)} bookies "
                f"({', '.join(have) or 'none'}) had answered an add of it with that payload, "
                f"fewer than AQ = {ack_quorum}: it was not committed yet",
            )

    def _confirmed(self, lid: int, eid: int, payload: bytes, ws: list[str]) -> list[str]:
        """The bookies of the write set ``ws`` that confirmed ``payload`` at ``lid:eid``."""
        got = self._acks.get((lid, eid), set())
        return sorted(b for b in ws if (b, payload) in got)

    def metadata_written(self, lid: int, md: LedgerMetadata, acked: Mapping[int, bytes]) -> None:
        """The store applied a write of ``lid``'s metadata (now ``md``); ``acked``: every
        entry of it acknowledged so far (id -> payload). Each one whose write set the write
        moved must keep AQ confirmed copies on its new write set."""
        before, self._placed[lid] = self._placed.get(lid), md
        if before is None:
            return
        if md.is_closed and not before.is_closed and not md.unbounded:
            self._closed(lid, md, acked)
        if before.fragments == md.fragments:
            return
        self._counts["check.ensemble_changes"] += 1
        first, wq = md.fragments[0][0], md.write_quorum
        last = md.last_entry_id if md.is_closed else None
        for eid, payload in sorted(acked.items()):
            if eid < first or (last is not None and eid > last):
                continue  # trimmed, or no part of the closed ledger
            ws = write_set_bookies(eid, md.ensemble_for(eid), wq)
            if ws == write_set_bookies(eid, before.ensemble_for(eid), before.write_quorum):
                continue  # judged at its ack, with this write set
            self._counts["check.acked_by_ack_quorum.change"] += 1
            have = self._confirmed(lid, eid, payload, ws)
            if len(have) < md.ack_quorum:
                self._violate(
                    RULE,
                    f"the ensemble change of ledger {lid} to version {md.version} moved "
                    f"acknowledged entry {eid} to the write set {ws}, where {len(have)} "
                    f"({', '.join(have) or 'none'}) confirmed it, fewer than "
                    f"AQ = {md.ack_quorum}",
                )

    def _closed(self, lid: int, md: LedgerMetadata, acked: Mapping[int, bytes]) -> None:
        """``RecoveredOnWriteSet``: ``md`` closed bounded ledger ``lid``. Every entry up to
        its last that no writer was told is acknowledged was committed by the close,
        which only a recovery makes past the LAC: the recovery wrote it back, each
        write-back acknowledged by AQ bookies of its write set as for any add, and closes
        with the write sets it wrote to. So AQ bookies the closed metadata lists for it
        answered an add of it with one payload. A close that lists other bookies (the
        metadata the recovery started from, without the replacements its write-back
        made) commits the entry on bookies that may never have had it."""
        for eid in range(md.fragments[0][0], md.last_entry_id + 1):
            if eid in acked:
                continue  # judged when it was acknowledged (and at each ensemble change)
            self._counts["check.recovered_on_write_set"] += 1
            ws = write_set_bookies(eid, md.ensemble_for(eid), md.write_quorum)
            got = self._acks.get((lid, eid), set())
            payloads = {p for _b, p in got}
            if max((sum((b, p) in got for b in ws) for p in payloads), default=0) < md.ack_quorum:
                confirmed = sorted({b for b, _p in got if b in ws})
                self._violate(
                    CLOSE_RULE,
                    f"ledger {lid} was closed at {md.last_entry_id} with entry {eid} (no writer "
                    f"was told it is acknowledged) on the write set {ws}, of which only "
                    f"{', '.join(confirmed) or 'none'} answered an add of it, fewer than "
                    f"AQ = {md.ack_quorum}",
                )


class _Oracle(Protocol):
    quorum: AckQuorumRule | None

    def acked_entries(self) -> dict[int, dict[int, bytes]]: ...


def ledger_changes(truth: MetadataClient, oracle: _Oracle) -> Callable[[str, str], None]:
    """A watcher of the metadata store (``FaultyMetadataStore.watch``): at each write of a
    ledger's metadata the store applied, ``AckQuorumRule.metadata_written`` judges the
    acknowledged entries it moved."""

    def written(op: str, path: str) -> None:
        quorum = oracle.quorum
        if quorum is None or op not in ("create", "set") or not path.startswith(LEDGERS + "/"):
            return
        try:
            lid = int(path[len(LEDGERS) + 1 :])
            md = truth.read_ledger(lid)
        except (ValueError, BKError):
            return
        quorum.metadata_written(lid, md, oracle.acked_entries().get(lid, {}))

    return written


LAFR_RULE = "LafrIsFullyReplicated"


class LafrRule:
    """``LafrIsFullyReplicated`` (issue #31 item 2): a stream writer's adds carry its last
    add fully replicated (LAFR); every entry of the last fragment at or below it is on its
    whole write set. Checked as each add or WRITE_LAC leaves (a quiet writer's explicit
    LAC, a takeover's end once its term is OPEN; not a takeover's recovery writes, which
    carry the LAFR the takeover started from): every bookie of the write set (metadata
    as it is then) answered an add of that entry with a payload this client sent there.
    Entries below the last fragment are exempt (the LAFR passes them: they are committed,
    and a takeover starts at the last fragment), and so are trimmed ones."""

    def __init__(
        self,
        acks: AckQuorumRule,
        read_ledger: Callable[[int], LedgerMetadata | None],
        payload_of: Callable[[bytes], bytes],
        violate: Callable[[str, str], None],
        counts: Counter[str],
    ) -> None:
        self._acks = acks
        self._read_ledger = read_ledger
        self._payload_of = payload_of
        self._violate = violate
        self._counts = counts
        # (client, lid, term, eid) -> payloads: a client that takes the stream over again
        # inherits entries it wrote in an earlier term, which that term's takeover wrote
        # back (and whose acks answered the takeover, not this client)
        self._sent: dict[tuple[str, int, int, int], set[bytes]] = {}
        self._checked: dict[tuple[str, int, int], int] = {}  # (client, lid, term) -> LAFR judged

    def sent(self, src: str, req: Request) -> None:
        if req.op == OpCode.WRITE_LAC:
            # A quiet writer's explicit LAC, or a takeover's end once its term is OPEN
            # (takeover.announce_end): the LAFR it carries claims as much as an add's.
            if req.term != NO_TERM and req.lafr >= 0:
                self._lafr_sent(src, req)
            return
        if req.op not in (OpCode.ADD, OpCode.ADD_BATCH):
            return
        lid = req.ledger_id
        try:
            entries = (
                [(req.entry_id, req.body)] if req.op == OpCode.ADD else unpack_entries(req.body)
            )
        except FrameError:
            return
        for eid, entry in entries:
            key4 = (src, lid, req.term, eid)
            self._sent.setdefault(key4, set()).add(self._payload_of(bytes(entry)))
        if req.flags & AddFlags.RECOVERY or req.lafr < 0:
            return
        self._lafr_sent(src, req)

    def _lafr_sent(self, src: str, req: Request) -> None:
        lid = req.ledger_id
        key = (src, lid, req.term)
        before = self._checked.get(key, -1)
        if req.lafr <= before:
            return
        self._checked[key] = req.lafr
        md = self._read_ledger(lid)
        if md is None or md.term != req.term:
            # A displaced writer (another term took over) still sends adds, with the LAFR
            # of its own view of the fragments; the metadata now holds the new term's, so
            # its write sets are not the ones that writer used.
            return
        low = max(before + 1, md.fragments[0][0], md.last_fragment[0])
        for eid in range(low, req.lafr + 1):
            self._judge(src, lid, req.term, eid, req.lafr, md, req.op.name)

    def _judge(
        self, src: str, lid: int, term: int, eid: int, lafr: int, md: LedgerMetadata, via: str
    ) -> None:
        mine = self._sent.get((src, lid, term, eid))
        if not mine:
            return  # written by another client (an earlier term's, recovered by another)
        self._counts["check.lafr_entries"] += 1
        ws = write_set_bookies(eid, md.ensemble_for(eid), md.write_quorum)
        got = self._acks.answers(lid, eid)
        missing = [b for b in ws if not any((b, p) in got for p in mine)]
        if missing:
            self._violate(
                LAFR_RULE,
                f"{src} sent LAFR {lafr} ({via}) for ledger {lid}, but {missing} of the write "
                f"set {ws} of entry {eid} never acknowledged it",
            )
