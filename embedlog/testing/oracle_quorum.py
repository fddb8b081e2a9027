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
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from embedlog.ledger.quorum import write_set_bookies
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import (
    FrameError,
    OpCode,
    Request,
    Response,
    unpack_entries,
    unpack_results,
)

RULE = "AckedByAckQuorum"


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

    def acknowledged(
        self, lid: int, eid: int, payload: bytes, md: LedgerMetadata, who: str
    ) -> None:
        """A writer was told ``eid`` holds ``payload``; ``md``: the metadata now (an entry
        below its first fragment, trimmed meanwhile, is not judged)."""
        if eid < md.fragments[0][0]:
            return
        self._counts["check.acked_by_ack_quorum"] += 1
        ws = write_set_bookies(eid, md.ensemble_for(eid), md.write_quorum)
        got = self._acks.get((lid, eid), set())
        have = sorted(b for b in ws if (b, payload) in got)
        if len(have) < md.ack_quorum:
            self._violate(
                RULE,
                f"{who} was acknowledged {lid}:{eid} with {len(have)} add answers "
                f"({', '.join(have) or 'none'}) from its write set {ws}, fewer than "
                f"AQ = {md.ack_quorum}",
            )
