"""The simulation's oracle: what was written, acknowledged and answered, and the invariants.

Invariant names follow the TLA+ specification of the protocol (Vanlightly/
bookkeeper-tlaplus) where it has them:

* ``AllAckedEntriesAreReadable`` (issue #14's 1): once a ledger is closed, every entry
  its writer acknowledged reads back at its id with its payload.
* ``NoDivergenceBetweenClientAndMetaData`` (2): a closed ledger's last entry is at
  least every id its writer acknowledged, whichever came first.
* ``NoOutOfOrderEntries`` (3): an entry id only ever carries the payload its writer
  gave it, in every add (recovery write-backs included) and in every read answer.
* ``NoNegativeForAckedEntry`` (5; the model has no name for it): a bookie never answers
  NoSuchEntry / NoSuchLedger for an entry it acknowledged (checked on every answer a
  bookie gives, delivered or not), while the metadata makes that bookie responsible for
  the entry: it is in the entry's write set, and the ledger is not closed below the
  entry; and a READ_BATCH never answers a negative at all. (An entry above a closed
  ledger's end is no part of the ledger, its writer never had it acknowledged; a
  bookie replaced by an ensemble change keeps no duty for the entries its replacement
  holds.)
* ``LedgerIsClosed`` (the model's liveness): once the network is healed and every
  bookie is back, recovery closes every ledger and its entries read back.
* ``OperationsReturn`` (liveness while the faults go on, judged in sim.py): every
  operation of the workload returns, done or failed, within its 120 virtual seconds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from attrs import frozen

from embedlog.wire.codes import StatusCode
from embedlog.wire.entry import HEADER
from embedlog.wire.messages import FrameError, OpCode, Request, Response, unpack_entries

if TYPE_CHECKING:
    from embedlog.testing.oracle_durable import DurableStateRule
    from embedlog.testing.oracle_fence import FenceRule
    from embedlog.testing.oracle_fence_term import FenceAndTermRule
    from embedlog.testing.oracle_quorum import AckQuorumRule

_NEGATIVE = (StatusCode.ENOENTRY, StatusCode.ENOLEDGER)


@frozen
class Violation:
    invariant: str
    detail: str

    def __str__(self) -> str:
        return f"{self.invariant}: {self.detail}"


class Oracle:
    def __init__(
        self,
        digest_len: int,
        trace: Callable[..., None],
        responsible: Callable[[int, int, str], bool] = lambda _lid, _eid, _bookie: True,
    ) -> None:
        """``responsible(ledger, entry, bookie)``: whether the metadata, as it is now, gives
        the entry to that bookie (see NoNegativeForAckedEntry)."""
        self._responsible = responsible
        self._skip = HEADER.size + digest_len  # an entry's bytes before its payload
        self._trace = trace
        self.written: dict[tuple[int, int], bytes] = {}  # (ledger, entry) -> payload sent
        self.acked: dict[int, dict[int, bytes]] = {}  # ledger -> entry -> payload
        self.closed: dict[int, int] = {}  # ledger -> last entry id, once closed
        self._bookie_acked: dict[tuple[str, int], set[int]] = {}  # (bookie, ledger) -> entries
        self.violations: list[Violation] = []
        # AckedByAckQuorum (oracle_quorum.py), fed every add answer; the workload asks it
        # at each acknowledgement.
        self.quorum: AckQuorumRule | None = None
        # FenceCoversEveryWriteSet (oracle_fence.py), bounded ledgers' recoveries.
        self.fence: FenceRule | None = None
        # StateDurableWhenAnswered and TruncatesOncePerTerm (oracle_durable.py), which
        # ask the simulated disks.
        self.durable: DurableStateRule | None = None
        # FenceAndTermHold (oracle_fence_term.py): what a bookie refused stays refused.
        self.fence_term: FenceAndTermRule | None = None

    def violate(self, invariant: str, detail: str) -> None:
        self.violations.append(Violation(invariant, detail))
        self._trace("VIOLATION", invariant, detail)

    def _payload(self, entry: bytes) -> bytes:
        return entry[self._skip :]

    def payload_of(self, entry: bytes) -> bytes:
        """The application's payload of an entry as sent or stored."""
        return self._payload(entry)

    # -- what the network shows ----------------------------------------------------------------

    def sent(self, src: str, bookie_id: str, req: Request) -> None:
        if self.fence is not None:
            self.fence.sent(src, bookie_id, req)
        if req.op == OpCode.ADD:
            self._written(src, req.ledger_id, req.entry_id, req.body)
        elif req.op == OpCode.ADD_BATCH:
            try:
                entries = unpack_entries(req.body)
            except FrameError:
                return
            for eid, entry in entries:
                self._written(src, req.ledger_id, eid, entry)

    def _written(self, src: str, lid: int, eid: int, entry: bytes) -> None:
        payload = self._payload(entry)
        before = self.written.setdefault((lid, eid), payload)
        if before != payload:
            self.violate(
                "NoOutOfOrderEntries",
                f"{src} sent entry {lid}:{eid} with payload {payload!r}, but {before!r} "
                "was written there before",
            )

    def arrived(self, src: str, bookie_id: str, req: Request) -> None:
        """``req`` reached ``bookie_id``, which serves it now."""
        if self.fence_term is not None:
            self.fence_term.arrived(bookie_id, req)
        if self.durable is not None:
            self.durable.arrived(bookie_id, req)

    def judge_answer(self, src: str, bookie_id: str, req: Request, resp: Response) -> None:
        """Hand an answer to the rules judged where they are decided (each installed by
        the workload that has them)."""
        if self.fence_term is not None:
            self.fence_term.answered(bookie_id, req, resp)
        if self.durable is not None:
            self.durable.answered(bookie_id, req, resp)
        if self.quorum is not None:
            self.quorum.answered(bookie_id, req, resp)
        if self.fence is not None:
            self.fence.answered(src, bookie_id, req, resp)

    def answered(self, src: str, bookie_id: str, req: Request, resp: Response) -> None:
        lid, eid = req.ledger_id, req.entry_id
        self.judge_answer(src, bookie_id, req, resp)
        if req.op == OpCode.ADD and resp.status == StatusCode.EOK:
            self._bookie_acked.setdefault((bookie_id, lid), set()).add(eid)
        elif req.op == OpCode.ADD_BATCH:
            self._batch_acked(bookie_id, req, resp)
        elif req.op in (OpCode.READ, OpCode.READ_LAC) and resp.status in _NEGATIVE:
            held = self._bookie_acked.get((bookie_id, lid), set())
            asked = held & {eid} if resp.status == StatusCode.ENOENTRY else held
            if any(self._responsible(lid, e, bookie_id) for e in sorted(asked)):
                self.violate(
                    "NoNegativeForAckedEntry",
                    f"{bookie_id} answered {StatusCode(resp.status).name} to {src}'s "
                    f"{req.op.name} of {lid}:{eid}, after acknowledging "
                    + (f"entry {eid}" if resp.status == StatusCode.ENOENTRY else "entries")
                    + " of that ledger",
                )
        else:
            for e, entry in self.served(src, bookie_id, req, resp):
                payload = self._payload(entry)
                written = self.written.get((lid, e))
                if written != payload:
                    self.violate(
                        "NoOutOfOrderEntries",
                        f"{bookie_id} returned {payload!r} for {lid}:{e}, whose writer sent "
                        f"{written!r}",
                    )

    def served(
        self, src: str, bookie_id: str, req: Request, resp: Response
    ) -> list[tuple[int, bytes]]:
        """The entries an answer to a normal read serves, (id, entry as stored). A
        READ_BATCH never answers a negative: it leaves out what it does not hold."""
        if req.op == OpCode.READ and req.entry_id >= 0 and resp.status == StatusCode.EOK:
            return [(req.entry_id, resp.body)]
        if req.op != OpCode.READ_BATCH:
            return []
        if resp.status in _NEGATIVE:
            self.violate(
                "NoNegativeForAckedEntry",
                f"{bookie_id} answered {StatusCode(resp.status).name} to {src}'s READ_BATCH "
                f"of {req.ledger_id}:{req.entry_id}: a batch read never answers a negative",
            )
        if resp.status != StatusCode.EOK:
            return []
        try:
            return [(e, bytes(entry)) for e, entry in unpack_entries(resp.body)]
        except FrameError:
            return []

    def _batch_acked(self, bookie_id: str, req: Request, resp: Response) -> None:
        from embedlog.wire.messages import unpack_results

        try:
            ids = [eid for eid, _ in unpack_entries(req.body)]
            results = unpack_results(resp.body)
        except FrameError:
            return
        for eid, (status, _term) in zip(ids, results, strict=False):
            if status == StatusCode.EOK:
                self._bookie_acked.setdefault((bookie_id, req.ledger_id), set()).add(eid)

    # -- what the clients see ------------------------------------------------------------------

    def acked_entries(self) -> dict[int, dict[int, bytes]]:
        """Every acknowledged entry, ledger -> entry -> payload (invariant 4 checks them)."""
        return self.acked

    def acknowledged(self, lid: int, eid: int, payload: bytes) -> None:
        self.acked.setdefault(lid, {})[eid] = payload
        last = self.closed.get(lid)
        if last is not None and eid > last:
            self.violate(
                "NoDivergenceBetweenClientAndMetaData",
                f"entry {lid}:{eid} acknowledged after the ledger was closed at {last}",
            )

    def ledger_closed(self, lid: int, last: int, by: str) -> None:
        before = self.closed.setdefault(lid, last)
        if before != last:
            self.violate(
                "NoDivergenceBetweenClientAndMetaData",
                f"ledger {lid} closed at {last} by {by}, but at {before} before",
            )
        above = sorted(e for e in self.acked.get(lid, {}) if e > last)
        if above:
            self.violate(
                "NoDivergenceBetweenClientAndMetaData",
                f"ledger {lid} closed at {last} by {by}, but entries {above} were acknowledged",
            )

    def read_back(self, lid: int, entries: dict[int, bytes], last: int, by: str) -> None:
        """``entries``: what a client read of the closed ledger (entry id -> payload)."""
        for eid, payload in sorted(self.acked.get(lid, {}).items()):
            if eid > last:
                continue  # NoDivergence... said so already
            got = entries.get(eid)
            if got is None:
                self.violate(
                    "AllAckedEntriesAreReadable",
                    f"{by} could not read acknowledged entry {lid}:{eid}",
                )
            elif got != payload:
                self.violate(
                    "AllAckedEntriesAreReadable",
                    f"{by} read {got!r} at acknowledged entry {lid}:{eid}, which was {payload!r}",
                )

    # -- lost disks and crashes without the journal -------------------------------------------

    def forget_lost(self, bookie_id: str, protected: Callable[[int], bool]) -> list[int]:
        """``bookie_id`` booted after losing data (wiped disks and the BP-46 cookie fix, or
        a crash without the journal): its boot put the ledgers ``protected`` names in
        limbo. For those, NoNegativeForAckedEntry still holds: limbo answers "unknown"
        until repair copies the entries back. Acknowledgements it gave before for any
        other ledger went with what it lost, and nothing on it can know of them: the
        metadata did not list it for that ledger when it booted (an ensemble change had
        replaced it, its acks no longer counting; or one adding it had not landed), nor
        was the ledger in recovery. They no longer forbid a negative; the ledger's
        safety rests on its other copies, which invariants 1, 2 and 4 still check.
        Returns those ledgers."""
        if self.durable is not None:
            self.durable.lost(bookie_id)
        gone = sorted(
            lid for (b, lid) in self._bookie_acked if b == bookie_id and not protected(lid)
        )
        for lid in gone:
            del self._bookie_acked[(bookie_id, lid)]
        return gone
