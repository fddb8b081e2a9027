"""The oracle of unbounded streams: acknowledged entries of every term, takeovers, trims,
what followers and the final reader saw.

Ids are reused between terms (an older term's unacknowledged entry at an id is replaced
by the next term's), so the bounded oracle's "one payload per id ever written" does not
hold; what must hold, named after ``ProtocolUnboundedLedgersAndGWQ.tla`` (Vanlightly/
bookkeeper-tlaplus) where it has a name:

* ``AllAckedValuesAreReadable`` (issue #14's 1): every entry acknowledged in any term is
  read back, at its id with its payload, by the final reader (after the last takeover),
  unless it was trimmed: then reading it must fail as trimmed.
* ``NoDivergenceBetweenClientAndMetaData`` (2): a takeover's recovered end is above
  every entry an older term acknowledged, whenever that acknowledgement arrives.
* ``NoLogDivergence`` (3): no two payloads are acknowledged at one id; a takeover writes
  back at an acknowledged id only its payload; a bookie the metadata gives an
  acknowledged id serves a normal read of it only with its payload; a reader never gets
  a payload that no writer appended (a no-op, or an older term's leftover), nor two
  payloads for one id.
* ``NoNegativeForAckedEntry`` (5): a bookie never answers NoSuchEntry/NoSuchLedger for
  an entry it acknowledged with the payload a writer had acknowledged, while the
  metadata makes it responsible for the entry (in its write set, not trimmed). What a
  bookie was told to drop (a truncate no-op above, TRIM ABOVE, a trim below) it no
  longer holds; a truncation of term T drops only older terms' entries
  (bookie/truncation.py), never T's own.
* ``FollowersSeePrefixes`` and ``StreamIsPrefixOfEachWriter`` (6): every follower's
  sequence is a prefix of the final stream (skipping only ids it was told were trimmed),
  and the entries of each writer (one term of one client) in the final stream are that
  writer's appends in order, without a hole (the aborted takeover's hole of issue #12).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

from attrs import define, field

from embedlog.testing.oracle import Oracle
from embedlog.wire.codes import StatusCode
from embedlog.wire.entry import FLAG_NOOP, HEADER, split_term
from embedlog.wire.messages import (
    AddFlags,
    FrameError,
    OpCode,
    ReadFlags,
    Request,
    Response,
    TrimFlags,
    unpack_entries,
    unpack_results,
)
from embedlog.wire.record import split_record

if TYPE_CHECKING:
    from embedlog.testing.oracle_quorum import LafrRule
    from embedlog.testing.oracle_streams import StreamRules

_NEGATIVE = (StatusCode.ENOENTRY, StatusCode.ENOLEDGER)


# A bookie's held copies of one ledger: id -> (payload, term made in, term added in).
_Held = dict[int, tuple[bytes, int | None, int]]


@define
class Follower:
    """What one follower read, in order, and the ids it was told were trimmed."""

    name: str
    lid: int
    read: list[tuple[int, bytes]] = field(factory=list)
    skipped: list[tuple[int, int]] = field(factory=list)  # [from, to) jumped over


class StreamOracle(Oracle):
    def __init__(
        self,
        digest_len: int,
        trace: Callable[..., None],
        responsible: Callable[[int, int, str], bool],
        counts: Counter[str],
    ) -> None:
        super().__init__(digest_len, trace, responsible)
        self._counts = counts
        self.appended: dict[bytes, tuple[str, int]] = {}  # payload -> (writer, seq)
        self.sequences: dict[str, list[bytes]] = {}  # writer -> payloads appended, in order
        # Payloads appended with a msg_id (workload_dedup.py), however many attempts each.
        # Their producers share the writers' terms: a writer's own acks then come in
        # order with gaps, not one after the other.
        self.msg_payloads: set[bytes] = set()
        self.stream_acked: dict[int, dict[int, tuple[bytes, int, str]]] = {}  # eid -> p, term, w
        self._last_ack: dict[str, int] = {}  # writer -> last id acknowledged
        self._kept_below: dict[int, list[tuple[int, int, str]]] = {}  # (term, end, by)
        self.trim_point: dict[int, int] = {}
        self._seen: dict[int, dict[int, bytes]] = {}  # what readers got, per id
        # A bookie's own acks: (bookie, ledger) -> {id: (payload, the term that made it,
        # the term of the add that stored it: a write-back's is the takeover's)}
        self._held: dict[tuple[str, int], _Held] = {}
        # Negatives for entries a bookie acknowledged with a payload no writer had
        # acknowledged yet: a violation if one does later. (lid, eid, payload) -> the
        # detail, the term of the request answered, the term of the add the bookie acked
        self._suspect: dict[tuple[int, int, bytes], tuple[str, int, int]] = {}
        # The stream layer's rules (oracle_streams.py), in the scenarios that have it; and
        # which streams were deleted (no end-of-history count of their copies).
        self.rules: StreamRules | None = None
        self.dropped: Callable[[int], bool] = lambda _lid: False
        self.lafr: LafrRule | None = None  # LafrIsFullyReplicated (oracle_quorum.py)
        self._parsed: dict[bytes, tuple[int, bytes]] = {}  # entry -> _parse's answer

    # -- entries on the wire -------------------------------------------------------------------

    def _parse(self, entry: bytes) -> tuple[int, bytes]:
        """(flags, the application's payload) of an entry as sent or stored, parsed once
        per distinct entry: one entry is sent to every bookie of its write set, answered,
        read back and judged by several rules, and a record's envelope is decoded in full
        (parsed each time: 4.8% more instructions per ``unbounded-dedup`` seed)."""
        parsed = self._parsed.get(entry)
        if parsed is None:
            flags = HEADER.unpack_from(entry)[3]
            parsed = self._parsed[entry] = (flags, split_record(flags, entry[self._skip :])[2])
        return parsed

    def payload_of(self, entry: bytes) -> bytes:
        return self._parse(entry)[1]

    def _term_of(self, entry: bytes) -> int | None:
        return split_term(HEADER.unpack_from(entry)[3], entry[self._skip :])[0]

    @staticmethod
    def _truncate(held: _Held, above: int, term: int) -> None:
        """A truncation of ``term`` above ``above``: the older terms' entries go."""
        for e in [e for e, (_p, t, _a) in held.items() if e > above and (t is None or t < term)]:
            del held[e]

    def _entries(self, req: Request) -> list[tuple[int, bytes]]:
        if req.op == OpCode.ADD:
            return [(req.entry_id, req.body)]
        try:
            return [(eid, bytes(e)) for eid, e in unpack_entries(req.body)]
        except FrameError:
            return []

    def sent(self, src: str, bookie_id: str, req: Request) -> None:
        if self.fence is not None:
            self.fence.sent(src, bookie_id, req)
        if self.rules is not None:
            self.rules.request_sent(bookie_id, req)
        if self.lafr is not None:
            self.lafr.sent(src, req)
        if req.op not in (OpCode.ADD, OpCode.ADD_BATCH):
            return
        lid = req.ledger_id
        for eid, entry in self._entries(req):
            flags, payload = self._parse(entry)
            if self.rules is not None:
                self.rules.sent(lid, eid, b"" if flags & FLAG_NOOP else payload)
            if req.flags & AddFlags.TRUNCATE:
                self._counts["path.truncate_noop"] += 1
            if not req.flags & AddFlags.RECOVERY:
                continue
            # A takeover's write-back (its no-op included) at an id an older term had
            # acknowledged must carry that payload: anything else replaces it.
            acked = self.stream_acked.get(lid, {}).get(eid)
            noop = flags & FLAG_NOOP
            if acked is not None and acked[1] < req.term and (noop or acked[0] != payload):
                what = "a no-op" if noop else repr(payload)
                self.violate(
                    "NoLogDivergence",
                    f"{src}'s takeover (term {req.term}) writes back {what} at {lid}:{eid}, "
                    f"acknowledged as {acked[0]!r} in term {acked[1]}",
                )

    def answered(self, src: str, bookie_id: str, req: Request, resp: Response) -> None:
        lid, eid = req.ledger_id, req.entry_id
        self.judge_answer(src, bookie_id, req, resp)
        if self.rules is not None:
            self.rules.answered(bookie_id, req, resp)
        held = self._held.setdefault((bookie_id, lid), {})
        if req.op in (OpCode.ADD, OpCode.ADD_BATCH):
            self._stored(held, req, resp)
        elif req.op == OpCode.TRIM and resp.status == StatusCode.EOK:
            if req.flags & TrimFlags.ABOVE:
                self._truncate(held, eid, req.term)
            else:
                for e in [e for e in held if e < eid]:
                    del held[e]
        elif req.op in (OpCode.READ, OpCode.READ_LAC) and resp.status in _NEGATIVE:
            asked = held if resp.status == StatusCode.ENOLEDGER else {}
            if resp.status == StatusCode.ENOENTRY and eid in held:
                asked = {eid: held[eid]}
            for e, (payload, _term, added_in) in sorted(asked.items()):
                if self._responsible(lid, e, bookie_id):
                    self._negative(src, bookie_id, req, resp, e, payload, added_in)
        elif not (req.op == OpCode.READ and req.flags & ReadFlags.RECOVERY):
            # (A takeover's recovery read may get an older term's leftover: it decides.)
            # Only a bookie the metadata now gives the entry to must serve its payload: a
            # read sent by older metadata (a follower's speculative read, kept only if the
            # metadata did not change) may reach a bookie a takeover has since replaced,
            # holding an older term's leftover. What a reader keeps is judged by
            # ``stream_read``.
            for e, entry in self.served(src, bookie_id, req, resp):
                if not self._responsible(lid, e, bookie_id):
                    continue
                _flags, payload = self._parse(entry)
                acked = self.stream_acked.get(lid, {}).get(e)
                if acked is not None and acked[0] != payload:
                    self.violate(
                        "NoLogDivergence",
                        f"{bookie_id} served {payload!r} to {src}'s read of {lid}:{e}, "
                        f"acknowledged as {acked[0]!r}",
                    )

    def _stored(self, held: _Held, req: Request, resp: Response) -> None:
        entries = self._entries(req)
        if req.op == OpCode.ADD:
            ok = [resp.status == StatusCode.EOK]
        else:
            try:
                ok = [status == StatusCode.EOK for status, _term in unpack_results(resp.body)]
            except FrameError:
                return
        for (eid, entry), good in zip(entries, ok, strict=False):
            if not good:
                continue
            _flags, payload = self._parse(entry)
            if req.flags & AddFlags.TRUNCATE:
                self._truncate(held, eid, req.term)
            if not req.flags & AddFlags.NOOP:
                held[eid] = (payload, self._term_of(entry), req.term)

    def _negative(
        self,
        src: str,
        bookie: str,
        req: Request,
        resp: Response,
        eid: int,
        payload: bytes,
        added_in: int,
    ) -> None:
        lid = req.ledger_id
        detail = (
            f"{bookie} answered {StatusCode(resp.status).name} to {src}'s {req.op.name} of "
            f"{lid}:{req.entry_id}, after acknowledging entry {eid} ({payload!r})"
        )
        acked = self.stream_acked.get(lid, {}).get(eid)
        if acked is not None and acked[0] == payload:
            self._negative_for_acked(detail, req.term, added_in, acked[1])
        else:
            self._suspect.setdefault((lid, eid, payload), (detail, req.term, added_in))

    def _negative_for_acked(self, detail: str, asked_in: int, added_in: int, acked_in: int) -> None:
        """A negative for an entry whose payload a writer acknowledged in ``acked_in``:
        a violation, unless the bookie's copy came with an earlier term's add and the
        negative answered the acknowledging term's own request (its takeover's recovery
        reads). That term then decided the entry from the other bookies and wrote it back;
        the bookie may have dropped its older copy by a truncation whose answer nobody
        got (a crash right after journaling a takeover's no-op that cut it): the
        oracle learns cuts from answers. Only a producer's retry by msg_id is
        acknowledged an id an earlier term wrote (workload_dedup.py)."""
        if asked_in == acked_in and added_in < acked_in:
            self._counts["check.negative_before_own_recovery"] += 1
            return
        self.violate("NoNegativeForAckedEntry", detail)

    # -- what the clients see ------------------------------------------------------------------

    def forget_lost(self, bookie_id: str, protected: Callable[[int], bool]) -> list[int]:
        """As ``Oracle.forget_lost``, for what this oracle holds of a bookie's own acks."""
        gone = super().forget_lost(bookie_id, protected)
        if self.rules is not None:
            self.rules.lost_disks(bookie_id)
        for b, lid in list(self._held):
            if b == bookie_id and not protected(lid):
                del self._held[(b, lid)]
                gone.append(lid)
        return sorted(set(gone))

    def acked_entries(self) -> dict[int, dict[int, bytes]]:
        """Every entry acknowledged in any term, for invariant 4 (ackquorum.py, which
        leaves out what lies below the trim point)."""
        return {
            lid: {e: a[0] for e, a in ids.items()}
            for lid, ids in self.stream_acked.items()
            if not self.dropped(lid)
        }

    def append(self, writer: str, payload: bytes) -> None:
        seq = self.sequences.setdefault(writer, [])
        self.appended[payload] = (writer, len(seq))
        seq.append(payload)

    def append_by_msg_id(self, writer: str, payload: bytes) -> None:
        """``append``, of a message appended with a msg_id and retried by it."""
        self.append(writer, payload)
        self.msg_payloads.add(payload)

    def stream_acknowledged(
        self, lid: int, eid: int, payload: bytes, term: int, writer: str
    ) -> None:
        ledger = self.stream_acked.setdefault(lid, {})
        before = ledger.setdefault(eid, (payload, term, writer))
        if before[0] != payload:
            self.violate(
                "NoLogDivergence",
                f"{writer} (term {term}) was acknowledged {payload!r} at {lid}:{eid}, which "
                f"{before[2]} (term {before[1]}) was acknowledged as {before[0]!r}",
            )
        last = self._last_ack.get(writer)
        if last is not None and (eid <= last if self.msg_payloads else eid != last + 1):
            self.violate(
                "NoOutOfOrderEntries",
                f"{writer} was acknowledged {lid}:{eid} after {lid}:{last}",
            )
        self._last_ack[writer] = eid
        for t, end, by in self._kept_below.get(lid, []):
            if t > term and eid >= end:
                self._lost_by_takeover(lid, eid, term, t, end, by)
        suspect = self._suspect.pop((lid, eid, payload), None)
        if suspect is not None:
            detail, asked_in, added_in = suspect
            self._negative_for_acked(detail, asked_in, added_in, term)

    def before_term(self, lid: int, term: int, eid: int) -> bool:
        """Whether ``eid`` lies below where ``term`` began writing (its takeover's end)."""
        return any(t == term and eid < end for t, end, _by in self._kept_below.get(lid, []))

    def took_over(self, lid: int, term: int, end: int, by: str) -> None:
        """A takeover to ``term`` completed; the new term writes from ``end`` on (the
        no-op's id: it and everything above belongs to the new term)."""
        self._kept_below.setdefault(lid, []).append((term, end, by))
        for eid, (_payload, t, _w) in sorted(self.stream_acked.get(lid, {}).items()):
            if t < term and eid >= end:
                self._lost_by_takeover(lid, eid, t, term, end, by)

    def _lost_by_takeover(self, lid: int, eid: int, t: int, term: int, end: int, by: str) -> None:
        self.violate(
            "NoDivergenceBetweenClientAndMetaData",
            f"{by}'s takeover to term {term} kept {lid} below {end}, but {lid}:{eid} was "
            f"acknowledged in term {t}",
        )

    def trimmed(self, lid: int, first_kept: int) -> None:
        self.trim_point[lid] = max(self.trim_point.get(lid, 0), first_kept)

    def stream_read(
        self, lid: int, entries: list[tuple[int, bytes]], by: str, ack_quorum: int
    ) -> None:
        """Entries a reader (a follower, the final reader) got, no-ops left out; the
        stream's ack quorum is ``ack_quorum``."""
        seen = self._seen.setdefault(lid, {})
        acked = self.stream_acked.get(lid, {})
        for eid, payload in entries:
            if self.quorum is not None:
                self.quorum.read(lid, eid, payload, ack_quorum, by)
            if payload not in self.appended:
                self.violate(
                    "NoLogDivergence",
                    f"{by} read {payload!r} at {lid}:{eid}, which no writer appended "
                    "(a no-op or a leftover)",
                )
                continue
            a = acked.get(eid)
            if a is not None and a[0] != payload:
                self.violate(
                    "NoLogDivergence",
                    f"{by} read {payload!r} at {lid}:{eid}, acknowledged as {a[0]!r}",
                )
            before = seen.setdefault(eid, payload)
            if before != payload:
                self.violate(
                    "NoLogDivergence", f"{by} read {payload!r} at {lid}:{eid}, read as {before!r}"
                )

    # -- the end -------------------------------------------------------------------------------

    def final_stream(
        self, lid: int, entries: list[tuple[int, bytes]], first: int, by: str, ack_quorum: int
    ) -> None:
        """The whole stream as the final reader read it (after its takeover), from the
        first id not trimmed."""
        self.stream_read(lid, entries, by, ack_quorum)
        got = dict(entries)
        for eid, (payload, term, w) in sorted(self.stream_acked.get(lid, {}).items()):
            if eid < first:
                continue  # trimmed by design
            if got.get(eid) != payload:
                self.violate(
                    "AllAckedValuesAreReadable",
                    f"{by} read {got.get(eid)!r} at {lid}:{eid}, acknowledged as {payload!r} "
                    f"to {w} (term {term})",
                )
        self._writers_prefix(lid, entries, first, by)
        self._once_per_msg_id(lid, entries, by)

    def _once_per_msg_id(self, lid: int, entries: list[tuple[int, bytes]], by: str) -> None:
        """AppendedOncePerMsgId: a message appended by its msg_id is in the stream at most
        once, however many attempts it took (docs/unbounded.md, "Idempotent appends")."""
        if not self.msg_payloads:
            return
        at: dict[bytes, list[int]] = {}
        for eid, payload in entries:
            if payload in self.msg_payloads:
                at.setdefault(payload, []).append(eid)
        self._counts["check.msg_id_once"] += len(at)
        for payload, eids in at.items():
            if len(eids) > 1:
                self.violate(
                    "AppendedOncePerMsgId",
                    f"{by} read {payload!r}, appended by its msg_id, at {lid}:{eids}",
                )

    def _writers_prefix(
        self, lid: int, entries: list[tuple[int, bytes]], first: int, by: str
    ) -> None:
        runs: dict[str, list[int]] = {}
        for _eid, payload in entries:
            # Messages appended by msg_id are each their own writer: _once_per_msg_id.
            if payload in self.appended and payload not in self.msg_payloads:
                w, seq = self.appended[payload]
                runs.setdefault(w, []).append(seq)
        for w, seqs in runs.items():
            start = seqs[0] if first > 0 else 0  # a trim may have taken the first ones
            if seqs != list(range(start, start + len(seqs))):
                self.violate(
                    "StreamIsPrefixOfEachWriter",
                    f"the stream {lid} holds {w}'s appends {seqs} (by {by}): not a prefix of "
                    "its sequence",
                )

    def followers_agree(self, follower: Follower, final: list[tuple[int, bytes]]) -> None:
        """A follower's sequence is a prefix of the final stream: the same payload at each
        id, and no visible id of the final stream between two it read that it was not
        told were trimmed."""
        visible = [eid for eid, _ in final]
        allowed = follower.skipped
        prev = -1
        for eid, _payload in follower.read:
            if eid <= prev:
                self.violate(
                    "FollowersSeePrefixes",
                    f"{follower.name} read {follower.lid}:{eid} after {follower.lid}:{prev}",
                )
            missed = [
                g for g in visible if prev < g < eid and not any(a <= g < b for a, b in allowed)
            ]
            if missed:
                self.violate(
                    "FollowersSeePrefixes",
                    f"{follower.name} read {follower.lid}:{eid} after {follower.lid}:{prev}, "
                    f"missing {missed[:5]} of the final stream",
                )
            prev = eid
