"""Network faults aimed at the window of an ensemble change: stalled adds, slow readying
and connection resets, as TCP and our transport have them (the network is simnet.py).

What our transport can and cannot deliver (embedlog/transport/tcp.py): a client keeps one
connection per bookie and matches each answer to its request by txn, a number unique in
the process, in the map of requests pending on the connection the request went out on; a
bookie writes each answer on the connection its request came in on. So no caller ever
gets the answer to another request (an earlier add of the same entry, say), and never a
second copy of one: the second finds its txn no longer pending and is dropped. A fault
that handed a request a stale or a duplicated answer would test a transport we do not
have. What the network and the transport do give, and these faults make:

* **stalls**: a connection stalls (a lost segment retransmitted after backoff, a paused
  bookie) and an add on it, with everything queued behind it, arrives a little after its
  timeout. The timeout starts an ensemble change; the adds queued behind it are answered
  after the change began, each under its own timeout: answers of a bookie the change
  replaced, of entries already resent to the replacement, and several answers of one
  entry from one bookie when the writer resent it there after a pause (two requests of
  one entry in flight, each answered once). Each add stalls with probability p / 5;
* **slow readying**: for a while after an add's timeout (probability p), the answers to
  the client's TRIM ABOVE for that ledger (a stream's change readies its replacement
  before the compare-and-swap) are held up, so the change is in flight longer and more
  of the old ensemble's answers land in it;
* **resets**: after an add's timeout (probability p / 10), within 50 ms, the client's
  connection to another bookie with requests for that ledger pending is reset (and the
  next request reconnects): every request pending on it fails at once with
  BookieUnavailableError (``_Connection._shutdown``), an unknown outcome though it looks
  like a refusal; the requests the bookie had read are carried out all the same and
  their answers, written to a dead socket, go nowhere; those still on their way are lost
  with the connection; and the new connection is not ordered behind the old one.

``p`` is drawn per seed. Each fault is a numbered decision (decisions.py); the draws come
from a stream of their own, so scenarios without these aims draw what they always drew.
"""

from __future__ import annotations

import asyncio
import functools
import random
from collections.abc import Callable

from embedlog.errors import BookieUnavailableError
from embedlog.wire.messages import OpCode, Request, Response, TrimFlags

RESET_WITHIN = 0.05  # seconds after the timeout that starts an ensemble change
RESET_SHARE = 0.1  # of the probability: how often an add timing out is followed by a reset
# An add stalled past its timeout by this much more (seconds), on a share of the
# probability per add: the adds behind it on the connection are answered after the change
# its timeout started began, each under its own timeout.
STALL_PAST = (0.002, 0.3)
STALL_SHARE = 0.2
SLOW_FOR = 0.5  # seconds after an add's timeout in which readying answers are held up
SLOW_READYING = (0.02, 0.3)  # seconds a replacement's readying answer is held up

Link = tuple[str, str]  # (client, bookie): one connection


class ChangeAims:
    def __init__(
        self,
        rng: random.Random,
        probability: float,
        decide: Callable[..., bool],
        count: Callable[[str], None],
        trace: Callable[..., None],
        forget_order: Callable[[Link], None],
    ) -> None:
        self._rng = rng
        self.probability = probability
        self._decide = decide
        self._count = count
        self._trace = trace
        # A reset ends its connection's FIFO order (and its answers'): the next connection
        # is not ordered behind it.
        self._forget_order = forget_order
        self._incarnation: dict[Link, int] = {}  # how often each connection was reset
        # Requests pending on each connection (answer -> request), in the order sent.
        self._pending: dict[Link, dict[asyncio.Future[Response], Request]] = {}
        # (client, ledger) -> until when readying answers to it are held up
        self._slow: dict[tuple[str, int], float] = {}

    # -- what the network tells ---------------------------------------------------------------

    def sent(self, src: str, bookie: str, req: Request, answer: asyncio.Future[Response]) -> int:
        """Keep ``req`` among its connection's pending requests until it is answered (or
        failed); the connection's incarnation, which ``arrives`` is given back."""
        pending = self._pending.setdefault((src, bookie), {})
        pending[answer] = req
        answer.add_done_callback(functools.partial(_forget, pending))
        return self._incarnation.get((src, bookie), 0)

    def arrives(self, src: str, bookie: str, incarnation: int) -> bool:
        """Whether a request sent on incarnation ``incarnation`` of its connection reaches
        the bookie now: not once that connection was reset (it was still on its way)."""
        if self._incarnation.get((src, bookie), 0) == incarnation:
            return True
        self._count("net.reset_lost")
        return False

    def stall(self, src: str, bookie: str, req: Request, timeout: float) -> float:
        """How much longer ``src``'s ``req`` to ``bookie`` is held up on its way (the adds
        behind it on the connection wait for it): now and then an add stalls a little past
        its timeout, so its writer starts replacing the bookie, and the answers to the adds
        queued behind it land after the change began, each under its own timeout."""
        if req.kind != "add" or self._rng.random() >= self.probability * STALL_SHARE:
            return 0.0
        extra = timeout + self._rng.uniform(*STALL_PAST)
        if not self._decide("stall", src, bookie, req.ledger_id, req.entry_id, f"{extra:.6f}"):
            return 0.0
        self._count("net.stall")
        self._trace("stall", src, bookie, req.ledger_id, req.entry_id, f"{extra:.6f}")
        return extra

    def answer_delay(self, src: str, req: Request, now: float) -> float:
        """How much longer the answer to ``src``'s ``req``, given now, is held up: a
        replacement's readying (TRIM ABOVE) while an aimed change is in flight, so that
        more of the old ensemble's answers land in it."""
        if not (req.op == OpCode.TRIM and req.flags & TrimFlags.ABOVE):
            return 0.0
        key = (src, req.ledger_id)
        until = self._slow.get(key)
        if until is None:
            return 0.0
        if now >= until:
            del self._slow[key]
            return 0.0
        self._count("net.slow_readying")
        return self._rng.uniform(*SLOW_READYING)

    def timed_out(self, src: str, bookie: str, req: Request, now: float) -> None:
        """``src``'s ``req`` to ``bookie`` got no answer in time: an add's writer replaces
        that bookie now. Maybe slow its readying down and reset another of its
        connections, while the change is in flight."""
        if req.kind != "add" or not self.probability:
            return
        rng, lid = self._rng, req.ledger_id
        if rng.random() < self.probability:
            until = now + SLOW_FOR
            if self._decide("slow-readying", src, lid, f"{until:.6f}"):
                self._count("aim.slow_readying")
                self._slow[(src, lid)] = until
        if rng.random() < self.probability * RESET_SHARE:
            after = rng.uniform(0.0, RESET_WITHIN)
            others = sorted(
                b
                for (s, b), pending in self._pending.items()
                if s == src and b != bookie and any(r.ledger_id == lid for r in pending.values())
            )
            if others:
                target = rng.choice(others)
                asyncio.get_running_loop().call_later(after, self.reset, src, target, lid)

    # -- the faults ---------------------------------------------------------------------------

    def reset(self, src: str, bookie: str, lid: int) -> None:
        """Reset ``src``'s connection to ``bookie`` (aimed at ledger ``lid``'s change)."""
        link = (src, bookie)
        pending = self._pending.get(link)
        if not pending or not self._decide("conn-reset", src, bookie, lid):
            return
        self._count("net.reset")
        self._trace("reset", src, bookie, lid, len(pending))
        self._incarnation[link] = self._incarnation.get(link, 0) + 1
        self._forget_order(link)
        for answer in list(pending):
            if not answer.done():
                self._count("net.reset_failed")
                answer.set_exception(
                    BookieUnavailableError(f"bookie {bookie}: connection reset by peer")
                )

    def heal(self) -> None:
        """No more aims (what was reset stays reset)."""
        self.probability = 0.0
        self._slow.clear()


def _forget(
    pending: dict[asyncio.Future[Response], Request], answer: asyncio.Future[Response]
) -> None:
    pending.pop(answer, None)
