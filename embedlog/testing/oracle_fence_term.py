"""``FenceAndTermHold``: what a bookie refuses stays refused, whatever its disk lost.

A bookie that answered a fencing read of a ledger has told a recovery that the writer
of that ledger can no longer get an add acknowledged there; a bookie that answered a
read of a stream's term T (a takeover's term read, its recovery reads) has told the
takeover that no writer of an older term can. The recovery and the takeover count on
it from then on. So the bookie never again acknowledges an add the fence or the term
refuses: a plain add (not a recovery's write-back) of a ledger it fenced, an add of a
stream in a term below one it answered a read of. (Adds and trims of a term raise it
too; the rule records the reads, which is what recoveries and takeovers count.)

Cuts keep their order too: a bookie that answered a stream's cut (a takeover's truncating
no-op, its TRIM ABOVE) of term T as made has dropped what the older terms left above it,
once for T; it never afterwards answers a cut of an older term as made (one that waited
while T's came would drop what T's takeover may have recovered since), whichever came
first. Judged by the order of the answers.

Not after a crash without the journal, a wiped or replaced disk, a lost or rotted file
either: what the disk forgot, the boot must restore before the bookie serves (BP-46
phase one fences every ledger and raises every open stream's term to the metadata's,
whatever the bookie still holds). The rule is the oracle's own record of what each
bookie answered, kept across every loss; it never asks the bookie what it remembers,
so a boot that protects too little (a ledger left out of phase one, a stream left at
the term its empty disk has) is seen at the first add it should have refused, long
before that add could complete an entry the recovery or takeover already passed over.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from embedlog.unbounded import rules
from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import (
    NO_TERM,
    AddFlags,
    FrameError,
    OpCode,
    ReadFlags,
    Request,
    Response,
    TrimFlags,
    unpack_results,
)

RULE = "FenceAndTermHold"

# A fencing read fenced the ledger when it was answered with the entry or without it.
_FENCED = (StatusCode.EOK, StatusCode.ENOENTRY)
_WATCHED = (OpCode.ADD, OpCode.ADD_BATCH, OpCode.READ, OpCode.TRIM)


class FenceAndTermRule:
    """Judged by the order in which requests reached the bookie, which admits each as it
    arrives (a raise is in force for every request after it, though its answer waits
    for its state record; an add admitted before it may be answered after it), and by
    their answers: a refusal is in force once the request that made it was answered as
    made. Every add the bookie acknowledged that arrived after it is judged, whichever
    of the two answers came first."""

    def __init__(self, violate: Callable[[str, str], None], counts: Counter[str]) -> None:
        self._violate = violate
        self._counts = counts
        self._seq = 0
        # (bookie, id(request)) -> (arrival number, request), until it is answered
        self._arrivals: dict[tuple[str, int], tuple[int, Request]] = {}
        # (bookie, ledger) -> the earliest arrival of an answered fence / of each term raise
        self._fence: dict[tuple[str, int], int] = {}
        self._raises: dict[tuple[str, int], dict[int, int]] = {}
        # (bookie, ledger) -> the latest arrival of an acknowledged plain add (bounded) /
        # of an acknowledged add of each term
        self._plain: dict[tuple[str, int], tuple[int, Request]] = {}
        self._adds: dict[tuple[str, int], dict[int, tuple[int, Request]]] = {}
        # Streams a delete fenced somewhere: no longer judged (see answered).
        self._deleted: set[int] = set()
        # (bookie, ledger) -> the highest term of a cut it answered as made
        self._cuts: dict[tuple[str, int], int] = {}

    def arrived(self, bookie: str, req: Request) -> None:
        if req.op in _WATCHED:
            self._seq += 1
            self._arrivals[(bookie, id(req))] = (self._seq, req)

    def answered(self, bookie: str, req: Request, resp: Response) -> None:
        arrival = self._arrivals.pop((bookie, id(req)), None)
        if arrival is None or arrival[1] is not req:
            return
        seq, key = arrival[0], (bookie, req.ledger_id)
        if req.ledger_id in self._deleted:
            return
        if req.op == OpCode.TRIM:
            if req.flags & TrimFlags.ABOVE and resp.status == StatusCode.EOK:
                self._cut(bookie, key, req)
            return
        if req.op == OpCode.READ:
            if resp.status in _FENCED:
                if req.flags & ReadFlags.FENCE and req.term == NO_TERM:
                    self._fenced(bookie, key, seq)
                if rules.deleted_by_term(req.term):
                    # A delete fenced the stream: it is judged by the tombstone rules from
                    # here on (DeletedLedgerAcknowledgesNothing). Once it is gone from the
                    # metadata, a bookie that lost its disks knows nothing of it, and
                    # rightly takes a displaced writer's add, which no AQ of bookies that
                    # kept their tombstones will take.
                    self._forget(req.ledger_id)
                elif req.term != NO_TERM:
                    self._raised(bookie, key, seq, req.term)
            return
        if req.op == OpCode.ADD:
            ok = resp.status == StatusCode.EOK
        else:
            try:
                ok = any(status == StatusCode.EOK for status, _t in unpack_results(resp.body))
            except FrameError:
                return
        if ok:
            self._acked(bookie, key, seq, req)
            if req.op == OpCode.ADD and req.flags & AddFlags.TRUNCATE:
                self._cut(bookie, key, req)

    def _cut(self, bookie: str, key: tuple[str, int], req: Request) -> None:
        if req.term == NO_TERM:
            return
        self._counts["check.cut_order"] += 1
        newest = self._cuts.get(key, req.term)
        if req.term < newest:
            self._violate(
                RULE,
                f"{bookie} answered a cut of {req.ledger_id} above {req.entry_id} of term "
                f"{req.term} as made after it had answered one of term {newest}",
            )
            return
        self._cuts[key] = req.term

    def _forget(self, lid: int) -> None:
        self._deleted.add(lid)
        for records in (self._raises, self._adds, self._cuts):
            for key in [k for k in records if k[1] == lid]:
                del records[key]

    def _fenced(self, bookie: str, key: tuple[str, int], seq: int) -> None:
        if seq >= self._fence.get(key, seq + 1):
            return
        self._fence[key] = seq
        later = self._plain.get(key)
        if later is not None and later[0] > seq:
            self._broken(bookie, later[1], "after a fencing read of the ledger reached it")

    def _raised(self, bookie: str, key: tuple[str, int], seq: int, term: int) -> None:
        raises = self._raises.setdefault(key, {})
        if seq >= raises.get(term, seq + 1):
            return
        raises[term] = seq
        for t, (at, add) in self._adds.get(key, {}).items():
            if t < term and at > seq:
                self._broken(bookie, add, f"after a request of term {term} reached it")

    def _acked(self, bookie: str, key: tuple[str, int], seq: int, req: Request) -> None:
        self._counts["check.fence_and_term"] += 1
        term = req.term
        if term == NO_TERM:
            if req.flags & AddFlags.RECOVERY:
                return  # a recovery's write-back: the fence lets it through
            if seq > self._plain.get(key, (-1, req))[0]:
                self._plain[key] = (seq, req)
            fence = self._fence.get(key)
            if fence is not None and fence < seq:
                self._broken(bookie, req, "after a fencing read of the ledger reached it")
            return
        adds = self._adds.setdefault(key, {})
        if seq > adds.get(term, (-1, req))[0]:
            adds[term] = (seq, req)
        for t, at in self._raises.get(key, {}).items():
            if t > term and at < seq:
                self._broken(bookie, req, f"after a request of term {t} reached it")
                return

    def _broken(self, bookie: str, req: Request, when: str) -> None:
        term = "" if req.term == NO_TERM else f" of term {req.term}"
        self._violate(
            RULE,
            f"{bookie} acknowledged {req.op.name} {req.ledger_id}:{req.entry_id}{term}, which "
            f"reached it {when} that was answered as made",
        )
