"""``FenceCoversEveryWriteSet`` (issue #31 item 2): a recovery reads forward only once
its fence covers every write set of the ensemble it fenced, E > WQ included.

The rule is checked where it is decided: when a recovery sends its first recovery read
of an entry, every write set of the ensemble it fenced (each run of WQ consecutive
bookies, wrapping) holds at least WQ - AQ + 1 bookies that answered one of its fence
reads EOK (the oracle's record of every answer a bookie gave, delivered or not, so it
counts at least what the recovery counted). The ensemble is the one the fence reads went
to, ordered as a fragment of the ledger's metadata lists it. Without that coverage an
ack quorum of some write set may still accept the old writer's adds while the recovery
decides where the ledger ends.

A fence read is a LAC read (entry -1) with the fence flag for a bounded ledger; a stream
takeover fences with its new term instead (a LAC read carrying the term,
``read_lafr_with_term``), and a bookie's EOK counts only when it carries that term (the
bookie took it; an answer of another term is discarded, as the takeover discards it).
Each term is a round of its own: a client that takes a stream over again starts anew.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from embedlog.errors import BKError
from embedlog.ledger.quorum import quorum_coverage
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.metadata.striping import write_set
from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import NO_TERM, OpCode, ReadFlags, Request, Response

RULE = "FenceCoversEveryWriteSet"


def _is_fence(req: Request) -> bool:
    """A bounded recovery's fence read, or a stream takeover's term-raising read."""
    return (
        req.op == OpCode.READ
        and req.entry_id == -1
        and (bool(req.flags & ReadFlags.FENCE) or req.term != NO_TERM)
    )


def _fenced_by(req: Request, resp: Response) -> bool:
    """Whether ``resp`` says its bookie took the fence (or the term) ``req`` sent."""
    return resp.status == StatusCode.EOK and (req.term == NO_TERM or resp.term == req.term)


class FenceRule:
    def __init__(
        self,
        read_ledger: Callable[[int], LedgerMetadata],
        violate: Callable[[str, str], None],
        counts: Counter[str],
    ) -> None:
        self._read_ledger = read_ledger  # the metadata as stored now
        self._violate = violate
        self._counts = counts
        self._asked: dict[tuple[str, int], set[str]] = {}  # (client, ledger) -> fenced to
        self._fenced: dict[tuple[str, int], set[str]] = {}  # -> answered EOK
        self._judged: set[tuple[str, int]] = set()  # its fence round was judged
        self._term: dict[tuple[str, int], int] = {}  # the term a takeover fences with

    def sent(self, src: str, bookie: str, req: Request) -> None:
        key = (src, req.ledger_id)
        if _is_fence(req):
            if self._term.get(key, req.term) != req.term:
                # A takeover in a new term: what the last one fenced counts for nothing.
                self._asked.pop(key, None)
                self._fenced.pop(key, None)
            self._term[key] = req.term
            self._asked.setdefault(key, set()).add(bookie)
            self._judged.discard(key)  # a new round (a retry): judged at its next read
        elif (
            req.op == OpCode.READ
            and req.flags & ReadFlags.RECOVERY
            and req.entry_id >= 0
            and key in self._asked
            and key not in self._judged
        ):
            self._judged.add(key)
            self._judge(src, req.ledger_id)

    def answered(self, src: str, bookie: str, req: Request, resp: Response) -> None:
        if _is_fence(req) and _fenced_by(req, resp):
            key = (src, req.ledger_id)
            if self._term.get(key) == req.term:  # not a straggler of an earlier term's
                self._fenced.setdefault(key, set()).add(bookie)

    def _judge(self, src: str, lid: int) -> None:
        try:
            md = self._read_ledger(lid)
        except BKError:
            return
        asked = self._asked[(src, lid)]
        ensembles = [ens for _first, ens in md.fragments if set(ens) == asked]
        if not ensembles:
            return  # fenced several ensembles over its retries: not judged
        ensemble = ensembles[-1]
        fenced = self._fenced.get((src, lid), set())
        need = quorum_coverage(md.write_quorum, md.ack_quorum)
        self._counts["check.fence_coverage"] += 1
        for first in range(len(ensemble)):
            ws = [ensemble[i] for i in write_set(first, len(ensemble), md.write_quorum)]
            have = sorted(b for b in ws if b in fenced)
            if len(have) < need:
                self._violate(
                    RULE,
                    f"{src} read ledger {lid} forward with write set {ws} fenced by "
                    f"{len(have)} ({', '.join(have) or 'none'}), fewer than WQ - AQ + 1 "
                    f"= {need}",
                )
                return
