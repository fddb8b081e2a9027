"""How the add pipeline's sends become requests: one ADD, or one ADD_BATCH per bookie.

The pipeline (pipeline.py) leaves the adds each bookie gets in one loop turn (its
outbox); ``Sender.flush`` sends them, up to ``MAX_BATCH`` adds (and MAX_BATCH_BYTES)
per ADD_BATCH request, and routes each answer back to the writer (answers.py).
"""

from __future__ import annotations

from collections.abc import Callable

from embedlog.ledger.answers import AnswerFor, AnswerSink, BatchAnswerFor
from embedlog.ledger.context import ClientContext
from embedlog.ledger.pending import PendingAdd
from embedlog.wire.limits import MAX_BATCH_BYTES, split_batches
from embedlog.wire.messages import AddFlags

# Adds for one bookie that share a request at most (ADD_BATCH); their bytes are capped
# too (wire/limits.py MAX_BATCH_BYTES).
MAX_BATCH = 64


class Sender:
    def __init__(
        self,
        ctx: ClientContext,
        ledger_id: int,
        term: int,
        key: bytes,
        lafr: Callable[[], int],
        answers: AnswerSink,
    ) -> None:
        self.ctx = ctx
        self.ledger_id = ledger_id
        self.term = term
        self.key = key
        self.lafr = lafr  # the LAFR every add carries (the policy's, read at each send)
        self.answers = answers

    def flush(self, outbox: dict[tuple[str, int], list[PendingAdd]], resends: bool) -> None:
        """Send each bookie (as slot idx) its adds of this loop turn."""
        # Faults configured since these were queued: one request per entry after all.
        batching = self.ctx.bookies.can_batch()
        for (bookie, idx), queued in outbox.items():
            # An entry acknowledged since it was queued may have released its bytes (the
            # stream writer's do): it is not sent again.
            items = [p for p in queued if p.framed]
            if resends:
                # A resend may have joined the entry's first send in this iteration: the
                # bookie refuses a batch holding one entry twice, which would look like a
                # failed bookie.
                items = list(dict.fromkeys(items))
            sizes = [len(p.framed) for p in items]
            for start, stop in split_batches(sizes, MAX_BATCH, MAX_BATCH_BYTES):
                run = items[start:stop]
                flags = run[0].flags
                if (
                    len(run) == 1
                    or not batching
                    or flags & AddFlags.TRUNCATE  # alone: the bookie's cut needs the slow path
                    or any(p.flags != flags for p in run)
                ):
                    for p in run:
                        self.one(p, idx, bookie)
                else:
                    self.batch(bookie, idx, run, flags)

    def one(self, p: PendingAdd, idx: int, bookie: str) -> None:
        self.ctx.bookies.add_nowait(
            bookie,
            self.ledger_id,
            p.entry_id,
            flags=p.flags,
            term=self.term,
            master_key=self.key,
            body=p.packed,
            lafr=self.lafr(),
            then=AnswerFor(self.answers, p, idx, bookie),
        )

    def batch(self, bookie: str, idx: int, run: list[PendingAdd], flags: int) -> None:
        self.ctx.bookies.add_batch_nowait(
            bookie,
            self.ledger_id,
            run[0].entry_id,
            b"".join([p.framed for p in run]),
            flags=flags,
            term=self.term,
            master_key=self.key,
            lafr=self.lafr(),
            then=BatchAnswerFor(self.answers, run, idx, bookie),
        )
