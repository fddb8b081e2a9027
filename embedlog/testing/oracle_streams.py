"""The stream layer's invariants (retention, cursors, deletes), judged from the history.

What decides what may be true is what the history asked and was told: the retention a
stream was created with, every cursor commit and cursor delete (invoked when, returned
how), every ``delete_ledger`` that returned, every entry sent to a bookie and every
acknowledgement. The metadata store is looked at only for what a rule is about: the
stream's first kept entry (its first fragment's first id) as each compare-and-swap
sets it, and, at the end, the nodes a delete must have removed. Nothing the code
decided (the cursors it read, the trim point it computed, the retention marks it
wrote) is taken as evidence.

* ``NoTrimPassesACommittedCursor`` (issue #27's 1): once ``commit(c, x)`` returned and
  no force commit or delete of ``c`` was in flight since, no trim moves the first kept
  entry above ``x + 1`` (streams created with ``retention_overrides_cursors=True`` are
  exempt; a manual ``trim`` may pass cursors, and no such stream is judged). A commit
  of ``y > x`` still in flight, or failed with an unknown outcome (a ConnectionLoss
  after it applied), may have moved ``c`` to ``y``: a trim up to ``y + 1`` passes
  nothing then. A force commit or a delete of ``c`` that returned settles ``c`` at the
  higher of its own position and the highest position an op of ``c`` that was in
  flight beside it may have written (the store may have applied that op after it);
  and a commit that ran beside a force commit or a delete protects nothing (that move
  back may have been applied after it, though it returned first).
* ``RetentionTrimsOnlyBeyondItsLimits`` (issue #27's 5-7): a trim of a stream that nobody
  trimmed by hand is retention's, and one limit alone justifies it: ``max_entries``, if
  at most the ids from the new first kept entry to the highest confirmed id, less the
  known no-ops, are at least the limit; ``max_bytes``, if the payload bytes at those ids
  (acknowledged payloads; elsewhere the longest payload sent there, an upper bound) are
  at least the limit; ``max_age``, if every entry acknowledged in the trimmed range was
  appended more than ``max_age`` before the trim.
* ``DeletedLedgerAcknowledgesNothing`` (issue #27's 2, 3): after ``delete_ledger(l)``
  returned (or raised NoSuchLedgerInMetadataError: an earlier attempt dropped the
  ledger's node, and this one finished its cleanup), no append invoked since succeeds,
  no cursor commit invoked since succeeds,
  and at the end of the history no cursor or sink record of ``l`` exists. (An append or
  a commit that overlapped the delete may go either way: its answer may have been on
  the wire when the delete returned.) And no bookie that answered the delete's
  DELETE_LEDGER accepts an add of ``l`` sent after the delete returned (it reached the
  bookie after the bookie dropped the ledger), unless the bookie lost its disks since.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from attrs import define

from embedlog.metadata import sinks, streams
from embedlog.metadata.store import MetadataStore
from embedlog.unbounded.retention import Retention
from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import (
    FrameError,
    OpCode,
    Request,
    Response,
    unpack_entries,
    unpack_results,
)

CURSOR_RULE = "NoTrimPassesACommittedCursor"
RETENTION_RULE = "RetentionTrimsOnlyBeyondItsLimits"
DELETE_RULE = "DeletedLedgerAcknowledgesNothing"


@define
class CursorOp:
    """A commit or cursor delete under way (what ``commit_started`` hands back)."""

    lid: int
    cursor: str
    position: int | None  # None: a delete of the cursor
    backward: bool  # a force commit or a delete: may move the cursor back
    invoked: int  # the history's step when it was invoked
    # Of the ops of its cursor in flight at some moment of its own flight (the store may
    # have applied them after it): the highest position + 1 one of them may write (0:
    # none), and whether one of them may move the cursor back.
    beside: int = 0
    beside_backward: bool = False

    def ran_beside(self, other: CursorOp) -> None:
        if other.position is not None:
            self.beside = max(self.beside, other.position + 1)
        self.beside_backward |= other.backward


class StreamRules:
    def __init__(
        self,
        clock: Callable[[], float],
        violate: Callable[[str, str], None],
        acked: dict[int, dict[int, tuple[bytes, int, str]]],
        counts: Counter[str],
    ) -> None:
        self._clock = clock
        self._violate = violate
        self._acked = acked  # StreamOracle.stream_acked: lid -> eid -> (payload, term, who)
        self._counts = counts
        self._step = 0  # orders the history's events at one virtual instant
        self._retention: dict[int, tuple[Retention | None, bool]] = {}
        self._manual: set[int] = set()  # streams somebody trimmed by hand
        self._first: dict[int, int] = {}  # the first kept entry, as last set
        self._confirmed: dict[int, int] = {}  # highest id acknowledged or a no-op of a term
        self._noops: dict[int, set[int]] = {}  # completed takeovers' no-op ids
        self._sent: dict[int, dict[int, int]] = {}  # lid -> eid -> longest payload sent
        self._appended: dict[bytes, tuple[float, int]] = {}  # payload -> (time, step)
        self._protects: dict[tuple[int, str], tuple[int, float]] = {}  # -> (x + 1, when)
        # The highest y + 1 a commit of the cursor may have written (in flight, returned, or
        # failed with an unknown outcome) since the last backward move that settled it.
        self._reach: dict[tuple[int, str], int] = {}
        # The ops of each cursor in flight, by their ``invoked`` steps.
        self._running: dict[tuple[int, str], dict[int, CursorOp]] = {}
        self._deleted: dict[int, tuple[float, int]] = {}  # delete returned: (time, step)
        self._dropped_by: set[tuple[str, int]] = set()  # (bookie, lid): DELETE_LEDGER done
        self._late_adds: dict[int, tuple[str, Request]] = {}  # id(request): sent after delete

    def _next(self) -> int:
        self._step += 1
        return self._step

    # -- what the workload tells ---------------------------------------------------------------

    def created(self, lid: int, retention: Retention | None, overrides: bool) -> None:
        self._retention[lid] = (retention, overrides)
        self._first[lid] = 0

    def trimmed_by_hand(self, lid: int) -> None:
        self._manual.add(lid)

    def appended(self, payload: bytes) -> None:
        self._appended[payload] = (self._clock(), self._next())

    def request_sent(self, bookie: str, req: Request) -> None:
        if req.op in (OpCode.ADD, OpCode.ADD_BATCH) and req.ledger_id in self._deleted:
            self._late_adds[id(req)] = (bookie, req)  # kept (alive) until answered

    def answered(self, bookie: str, req: Request, resp: Response) -> None:
        lid = req.ledger_id
        if req.op == OpCode.DELETE_LEDGER and resp.status == StatusCode.EOK:
            self._dropped_by.add((bookie, lid))
            return
        late = self._late_adds.pop(id(req), None)
        if late is None or (bookie, lid) not in self._dropped_by:
            return
        if req.op == OpCode.ADD:
            accepted = [req.entry_id] if resp.status == StatusCode.EOK else []
        else:
            try:
                results = unpack_results(resp.body)
                ids = [eid for eid, _entry in unpack_entries(req.body)]
            except FrameError:
                return
            accepted = [
                eid for eid, (st, _t) in zip(ids, results, strict=False) if st == StatusCode.EOK
            ]
        if accepted:
            self._violate(
                DELETE_RULE,
                f"{bookie} accepted an add of {lid}:{accepted[0]}, sent after "
                f"delete_ledger({lid}) returned, though it had answered its DELETE_LEDGER",
            )

    def lost_disks(self, bookie: str) -> None:
        """``bookie`` may have lost what it wrote (a wipe): its tombstones too."""
        self._dropped_by = {(b, lid) for b, lid in self._dropped_by if b != bookie}

    def sent(self, lid: int, eid: int, payload: bytes) -> None:
        ids = self._sent.setdefault(lid, {})
        ids[eid] = max(ids.get(eid, 0), len(payload))

    def acknowledged(self, lid: int, eid: int, payload: bytes, who: str) -> None:
        self._confirmed[lid] = max(self._confirmed.get(lid, -1), eid)
        deleted = self._deleted.get(lid)
        appended = self._appended.get(payload)
        if deleted is not None and appended is not None and appended[1] > deleted[1]:
            self._violate(
                DELETE_RULE,
                f"{who} was acknowledged {lid}:{eid}, appended at {appended[0]:.6f}, after "
                f"delete_ledger({lid}) returned at {deleted[0]:.6f}",
            )

    def took_over(self, lid: int, noop: int | None) -> None:
        if noop is not None and noop >= 0:
            self._noops.setdefault(lid, set()).add(noop)
            self._confirmed[lid] = max(self._confirmed.get(lid, -1), noop)

    def commit_started(self, lid: int, cursor: str, position: int | None, force: bool) -> CursorOp:
        backward = force or position is None
        op = CursorOp(lid, cursor, position, backward, self._next())
        key = (lid, cursor)
        running = self._running.setdefault(key, {})
        for other in running.values():
            other.ran_beside(op)
            op.ran_beside(other)
        running[op.invoked] = op
        if position is not None:
            self._reach[key] = max(self._reach.get(key, position + 1), position + 1)
        if backward:
            # The cursor may move back from now on: it protects nothing until a commit
            # returns that ran beside no such operation.
            self._protects.pop(key, None)
        return op

    def commit_returned(self, op: CursorOp, ok: bool) -> None:
        key = (op.lid, op.cursor)
        del self._running[key][op.invoked]
        if not ok:
            return
        if op.backward:
            # Settled where this move put it, or where an op that ran beside it put it
            # (the store may have applied that one after it): what commits before it
            # wrote is overwritten.
            reach = max(op.beside, 0 if op.position is None else op.position + 1)
            if op.beside:
                self._counts["streams.settled_beside"] += 1
            if reach:
                self._reach[key] = reach
            else:
                self._reach.pop(key, None)
        deleted = self._deleted.get(op.lid)
        if op.position is not None and deleted is not None and op.invoked > deleted[1]:
            self._violate(
                DELETE_RULE,
                f"commit({op.cursor!r}, {op.position}) of ledger {op.lid} succeeded; it was "
                f"invoked after delete_ledger({op.lid}) returned at {deleted[0]:.6f}",
            )
        if op.beside_backward and op.position is not None:
            self._counts["streams.commit_beside_backward"] += 1
        if op.position is None or op.beside_backward:
            # A move back that ran beside this commit (one still in flight did) may have
            # been applied after it, though it returned first: the cursor may be below
            # this position, or gone.
            return
        floor = op.position + 1
        before = self._protects.get(key)
        if before is None or before[0] < floor:
            self._protects[key] = (floor, self._clock())

    def delete_returned(self, lid: int) -> None:
        self._deleted.setdefault(lid, (self._clock(), self._next()))

    # -- what the metadata store shows ---------------------------------------------------------

    def first_kept(self, lid: int, first: int) -> None:
        """A compare-and-swap of ``lid``'s metadata applied; its first fragment starts at
        ``first``."""
        before = self._first.get(lid)
        if before is None or lid not in self._retention:
            self._first[lid] = max(first, before or 0)
            return
        if first <= before:
            return
        self._first[lid] = first
        self._counts["streams.trim_seen"] += 1
        if lid in self._manual:
            return
        retention, overrides = self._retention[lid]
        if not overrides:
            for (clid, cursor), (floor, when) in sorted(self._protects.items()):
                if clid == lid and first > max(floor, self._reach.get((clid, cursor), floor)):
                    self._violate(
                        CURSOR_RULE,
                        f"a trim moved {lid}'s first kept entry from {before} to {first}, "
                        f"past cursor {cursor!r}, committed at {floor - 1} (returned at "
                        f"{when:.6f})",
                    )
        why = self._unjustified(lid, retention, before, first)
        if why is not None:
            self._violate(
                RETENTION_RULE,
                f"a trim moved {lid}'s first kept entry from {before} to {first}: " + why,
            )

    def _unjustified(
        self, lid: int, retention: Retention | None, before: int, first: int
    ) -> str | None:
        """None when one limit alone justifies a trim from ``before`` to ``first``, else why
        none does."""
        if retention is None:
            return "the stream has no retention and nobody trimmed it"
        top = self._confirmed.get(lid, -1)
        acked = self._acked.get(lid, {})
        why: list[str] = []
        if retention.max_entries is not None:
            noops = sum(1 for n in self._noops.get(lid, ()) if first <= n <= top)
            kept = top - first + 1 - noops
            if kept >= retention.max_entries:
                return None
            why.append(f"at most {kept} entries kept (max_entries {retention.max_entries})")
        if retention.max_bytes is not None:
            sent = self._sent.get(lid, {})
            last = max([top, *sent])
            kept = sum(
                len(acked[e][0]) if e in acked else sent.get(e, 0) for e in range(first, last + 1)
            )
            if kept >= retention.max_bytes:
                return None
            why.append(f"at most {kept} payload bytes kept (max_bytes {retention.max_bytes})")
        if retention.max_age is not None:
            now = self._clock()
            young = [
                (e, self._appended[p][0])
                for e, (p, _t, _w) in sorted(acked.items())
                if before <= e < first and p in self._appended
                if self._appended[p][0] > now - retention.max_age
            ]
            if not young:
                return None
            e, at = young[0]
            why.append(
                f"entry {e} was appended at {at:.6f}, {now - at:.3f} s before "
                f"(max_age {retention.max_age})"
            )
        return "; ".join(why)

    # -- the end -------------------------------------------------------------------------------

    def check_end(self, store: MetadataStore) -> None:
        """After healing: a stream whose delete returned left no cursor or sink record."""
        for lid in sorted(self._deleted):
            left = [
                f"{base}/{lid:020d}/{name}"
                for base in (streams.CURSORS, sinks.SINKS)
                for name in store.children(f"{base}/{lid:020d}")
            ]
            if left:
                self._violate(
                    DELETE_RULE,
                    f"after delete_ledger({lid}) returned, the store still holds {left}",
                )

    def deleted(self, lid: int) -> bool:
        """Whether a ``delete_ledger`` of ``lid`` returned."""
        return lid in self._deleted
