"""The simulated network between clients and bookies: seeded delays, losses, reordering.

Every request is encoded and decoded as on a real wire, and the bookie serves it with
its real handler (``serve_frame``). Each message draws its fate from the simulation's
seed: lost (the caller sees a timeout: an unknown outcome), or delivered after a
delay. Messages on one connection (one client to one bookie, or back) arrive in the
order they were sent, as over TCP; messages on different connections overtake each
other freely. A bookie that is down when a request arrives refuses the connection
(BookieUnavailableError, after the return trip).

An ``Observer`` sees every request as it leaves its client, as it reaches its bookie
(which serves it then) and every answer as its bookie gives it (delivered or not): the
simulation's oracle checks its invariants there.

Stalled adds, slow readying and connection resets (``NetProfile.change_aims``, the
``*-corrupt`` scenarios) are aimed at ensemble changes, and are what TCP and our
transport can do, no more (simchanges.py says what they can and cannot deliver).

Each loss, delay spike, held-up add, stall, slowed readying and reset is a numbered
decision (decisions.py): drawn as always, then carried out unless suppressed. A message
whose loss is suppressed is delivered with its delay drawn from a stream of its own, so
the network's stream draws for every other message what it drew without the suppression.
"""

from __future__ import annotations

import asyncio
import functools
import random
from collections.abc import Callable
from typing import Protocol

import attrs
from attrs import field, frozen

from embedlog.errors import BKTimeoutError, BookieUnavailableError
from embedlog.testing.decisions import always
from embedlog.testing.simchanges import ChangeAims, Link
from embedlog.testing.simraces import Gates, aimed_loss, fences
from embedlog.transport.base import Then, Transport
from embedlog.transport.server import RequestHandler, serve_frame
from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import AddFlags, FrameError, OpCode, ReadFlags, Request, Response

# The gap kept between two messages of one connection, so that their timers never tie.
_FIFO_GAP = 1e-7


@frozen
class NetProfile:
    """How hostile the network is: every message draws its fate from these."""

    delay: tuple[float, float] = (0.0001, 0.002)  # seconds, uniform
    spike_probability: float = 0.0  # a message held up far longer (a stall, a GC pause)
    spike: tuple[float, float] = (0.05, 3.0)  # seconds, uniform
    loss_probability: float = 0.0  # each request and each answer
    # The race scenarios' aimed faults (simraces.py): (request kind, loss probability) on
    # top of the everyday losses, and how often an add is held up for ``late`` seconds.
    # (Left out of the repr, which the trace shows: the race scenarios trace their own.)
    aimed_loss: tuple[tuple[str, float], ...] = field(default=(), repr=False)
    late_add: float = field(default=0.0, repr=False)
    late: tuple[float, float] = field(default=(0.01, 0.8), repr=False)
    # How often an add to a bookie that was sent a fence for its ledger is held up (late),
    # so that the bookie's refusal comes after the other bookies' answers.
    hold_fenced: float = field(default=0.0, repr=False)
    # How often an answer carrying entries (READ, READ_BATCH) has a bit flipped on its way
    # back: the corruption a TCP checksum lets through, which only the entries' digests
    # catch (on every read path: reads, recovery reads, BP-46 repair's reads).
    corrupt: float = field(default=0.0, repr=False)
    # The faults aimed at ensemble changes (simchanges.py): stalled adds, slowed readying
    # and connection resets, each at its share of this probability.
    change_aims: float = field(default=0.0, repr=False)


CALM = NetProfile()


class Observer(Protocol):
    def sent(self, src: str, bookie_id: str, req: Request) -> None: ...

    def arrived(self, src: str, bookie_id: str, req: Request) -> None: ...

    def answered(self, src: str, bookie_id: str, req: Request, resp: Response) -> None: ...


class Tracer(Protocol):
    def __call__(self, *event: object) -> None: ...


class SimNetwork(Transport):
    def __init__(
        self,
        lookup: Callable[[str], RequestHandler | None],
        rng: random.Random,
        observer: Observer,
        trace: Tracer,
        profile: NetProfile = CALM,
        watch: Callable[[str, Request, str], None] | None = None,
        decide: Callable[..., bool] = always,
        spare: random.Random | None = None,
        corrupting: random.Random | None = None,
        aiming: random.Random | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self._lookup = lookup
        # The loop it runs on, if known when it is made (a simulation's): asked of asyncio
        # otherwise, at each use. Each asking is a system call (asyncio checks the pid),
        # and every message asks three to five times.
        self._loop = loop
        self._rng = rng
        # Draws of the corruption fault, a stream of its own: a history without it draws
        # nothing from it.
        self._corrupting = corrupting if corrupting is not None else random.Random(0)
        self._decide = decide
        # Draws for messages delivered only because their loss was suppressed.
        self._spare = spare if spare is not None else random.Random(0)
        self._observer = observer
        self._trace = trace
        self.profile = profile
        # (bookie, request, fate: "lost", "late" or "sent"): every request as it leaves
        self._watch = watch
        self._late = False  # whether the last arrival drawn was a late add
        self._last: dict[tuple[str, str], float] = {}  # connection -> last arrival scheduled
        # The race scenarios' blind spots: (client, ledger) -> (bookie, what is lost: "fence"
        # once, then "spent", or "all"; until when).
        self._blind: dict[tuple[str, int], tuple[str, str, float]] = {}
        self._fenced: set[tuple[str, int]] = set()  # (bookie, ledger) a fence was sent to
        # A compound aim's lost adds: (client, bookie, ledger) -> until when (lose_adds)
        self._adds_lost: dict[tuple[str, str, int], float] = {}
        # (client, ledger) whose requests the aimed losses spare (a compound aim's own)
        self.spared: set[tuple[str, int]] = set()
        # (client, bookie, ledger) -> extra delay of the client's next add there (hold_next)
        self._holds: dict[tuple[str, str, int], float] = {}
        self.gates = Gates()
        # Faults aimed at ensemble changes (simchanges.py), with draws of their own.
        self._aims = (
            ChangeAims(
                aiming if aiming is not None else random.Random(0),
                profile.change_aims,
                decide,
                self._count,
                trace,
                self._forget_order,
            )
            if profile.change_aims
            else None
        )
        self._serving: set[asyncio.Task[Response]] = set()
        self.counts: dict[str, int] = {}

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        """The loop given when this was made, else asyncio's running one (asked each time:
        a system call, as the comment in ``__init__`` says)."""
        return self._loop or asyncio.get_running_loop()

    def _count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    def _forget_order(self, link: Link) -> None:
        """A connection was reset: the next one is not ordered behind it, either way."""
        self._last.pop(link, None)
        self._last.pop((link[1], link[0]), None)

    def heal(self) -> None:
        self.profile = CALM
        if self._aims is not None:
            self._aims.heal()
        self._blind.clear()
        self._adds_lost.clear()
        self._holds.clear()
        for deliver in self.gates.open_all():
            deliver()

    # -- fates -------------------------------------------------------------------------------

    def _lost(self) -> bool:
        p = self.profile.loss_probability
        return p > 0 and self._rng.random() < p

    def _aimed_loss(self, req: Request) -> bool:
        p = aimed_loss(self.profile.aimed_loss, req.kind) if self.profile.aimed_loss else 0.0
        return p > 0 and self._rng.random() < p

    def blind(self, src: str, bookie: str, ledger: int, what: str, until: float) -> None:
        """Until virtual time ``until``, lose ``src``'s requests for ``ledger`` to ``bookie``:
        its first fence (``what`` is "fence") or every one ("all"); or those to every other
        bookie ("others"). The aimed losses spare its other requests for ``ledger``
        meanwhile, so that only the bookies named are missed."""
        self._blind[(src, ledger)] = (bookie, what, until)

    def unblind(self, src: str, ledger: int) -> None:
        """End ``src``'s blind spot for ``ledger`` now."""
        self._blind.pop((src, ledger), None)

    def lose_adds(self, src: str, bookie: str, ledger: int, until: float) -> None:
        """Until virtual time ``until``, lose ``src``'s adds for ``ledger`` to ``bookie``
        (its other requests, fences and reads, go through); a time passed ends it now."""
        if until <= self._running_loop().time():
            self._adds_lost.pop((src, bookie, ledger), None)
        else:
            self._adds_lost[(src, bookie, ledger)] = until

    def _add_lost(self, src: str, bookie: str, req: Request) -> bool:
        until = self._adds_lost.get((src, bookie, req.ledger_id))
        if until is None or req.kind not in ("add", "recovery_add"):
            return False
        if self._running_loop().time() > until:
            del self._adds_lost[(src, bookie, req.ledger_id)]
            return False
        return True

    def hold_next(self, src: str, bookie: str, ledger: int, delay: float) -> None:
        """Hold ``src``'s next add for ``ledger`` to ``bookie`` up for ``delay`` more
        seconds (what follows it on that connection waits behind it)."""
        self._holds[(src, bookie, ledger)] = delay

    def gate(self, bookie: str, ledger: int, until: float) -> None:
        """Hold the writes for ``ledger`` that reach ``bookie`` until it answered a recovery
        read of ``ledger`` (or until virtual time ``until``)."""
        self.gates.close(bookie, ledger, until)
        self._running_loop().call_at(until, self._open_gate, bookie, ledger)

    def _open_gate(self, bookie: str, ledger: int) -> None:
        for deliver in self.gates.open(bookie, ledger):
            self._count("net.gate_passed")
            deliver()

    def _blind_spot(self, src: str, ledger: int) -> tuple[str, str] | None:
        """(bookie, what) of ``src``'s blind spot for ``ledger``, while it lasts."""
        spot = self._blind.get((src, ledger))
        if spot is None:
            return None
        bookie, what, until = spot
        if self._running_loop().time() > until:
            del self._blind[(src, ledger)]
            return None
        return bookie, what

    def _blinded(self, src: str, bookie: str, req: Request) -> bool:
        spot = self._blind_spot(src, req.ledger_id)
        if spot is not None and spot[1] == "others":
            return spot[0] != bookie  # cut off from every bookie but that one
        if spot is None or spot[0] != bookie or spot[1] == "spent":
            return False
        if spot[1] == "fence":
            if req.kind != "fence":
                return False
            self._blind[(src, req.ledger_id)] = (
                bookie,
                "spent",
                self._blind[(src, req.ledger_id)][2],
            )
        return True

    def _arrival(
        self,
        src: str,
        dst: str,
        req: Request | None = None,
        rng: random.Random | None = None,
        late: float = 0.0,
    ) -> float:
        loop = self._running_loop()
        prof = self.profile
        rng = rng or self._rng
        delay = rng.uniform(*prof.delay) + late
        if prof.spike_probability and rng.random() < prof.spike_probability:
            extra = rng.uniform(*prof.spike)
            if self._decide("delay-spike", src, dst, f"{extra:.6f}"):
                delay += extra
                self._count("net.delay_spike")
        self._late = False
        if prof.late_add and req is not None and req.kind == "add" and rng.random() < prof.late_add:
            extra = rng.uniform(*prof.late)
            if self._decide("late-add", src, dst, req.ledger_id, req.entry_id, f"{extra:.6f}"):
                delay += extra
                self._late = True
                self._count("net.late_add")
        elif (
            prof.hold_fenced
            and req is not None
            and req.kind == "add"
            and (dst, req.ledger_id) in self._fenced
            and rng.random() < prof.hold_fenced
        ):
            extra = rng.uniform(*prof.late)
            if self._decide("held-fenced", src, dst, req.ledger_id, req.entry_id, f"{extra:.6f}"):
                delay += extra
                self._count("net.held_fenced")
        if self._holds and req is not None and req.kind == "add":
            held = self._holds.pop((src, dst, req.ledger_id), None)
            if held is not None:
                delay += held
                self._count("net.held_add")
        link = (src, dst)
        at = max(loop.time() + delay, self._last.get(link, 0.0) + _FIFO_GAP)
        self._last[link] = at
        return at

    # -- Transport -----------------------------------------------------------------------------

    async def request(self, src: str, bookie_id: str, req: Request, timeout: float) -> Response:
        return await self.send_nowait(src, bookie_id, req, timeout)

    def send_nowait(
        self, src: str, bookie_id: str, req: Request, timeout: float, then: Then | None = None
    ) -> asyncio.Future[Response]:
        loop = self._running_loop()
        answer: asyncio.Future[Response] = loop.create_future()
        self._observer.sent(src, bookie_id, req)
        path = protocol_path(req)
        if path is not None:
            self._count(path)
        lost = spared = False
        if self._lost():
            lost = self._decide("request-lost", src, *_what(bookie_id, req))
            spared = not lost
            if lost:
                self._count("net.request_lost")
        elif self._blind and self._blinded(src, bookie_id, req):
            # The blind spot is the decision (Simulation.blind): its losses follow from it.
            lost = True
            self._count(f"net.blind.{req.kind}")
        elif self._adds_lost and self._add_lost(src, bookie_id, req):
            lost = True  # the compound aim's decision (lose_adds)
            self._count("net.add_lost_aimed")
        elif self._aimed_loss(req) and not (
            (self._blind and self._blind_spot(src, req.ledger_id) is not None)
            or (src, req.ledger_id) in self.spared
        ):
            lost = self._decide("aimed-loss", src, *_what(bookie_id, req))
            spared = not lost
            if lost:
                self._count(f"net.aimed_loss.{req.kind}")
        incarnation = 0 if self._aims is None else self._aims.sent(src, bookie_id, req, answer)
        if lost:
            self._trace("lost", src, *_what(bookie_id, req))
        else:
            if self.profile.hold_fenced and fences(req):
                self._fenced.add((bookie_id, req.ledger_id))
            stall = 0.0 if self._aims is None else self._aims.stall(src, bookie_id, req, timeout)
            at = self._arrival(src, bookie_id, req, self._spare if spared else None, stall)
            loop.call_at(at, self._deliver, src, bookie_id, req, answer, incarnation)
        if self._watch is not None:
            self._watch(bookie_id, req, "lost" if lost else "late" if self._late else "sent")
        timer = loop.call_later(timeout, self._time_out, answer, src, bookie_id, req, timeout)
        answer.add_done_callback(lambda _f: timer.cancel())
        if then is not None:  # always a loop turn later: delivery is the simulator's to order
            answer.add_done_callback(then)
        return answer

    def _deliver(
        self,
        src: str,
        bookie_id: str,
        req: Request,
        answer: asyncio.Future[Response],
        incarnation: int = 0,
    ) -> None:
        loop = self._running_loop()
        if self.gates and self.gates.holds(loop.time(), bookie_id, req):
            self._count("net.gate_held")
            self.gates.hold(
                bookie_id,
                req.ledger_id,
                functools.partial(self._deliver, src, bookie_id, req, answer, incarnation),
            )
            return
        if self._aims is not None and not self._aims.arrives(src, bookie_id, incarnation):
            return  # lost with its connection
        bookie = self._lookup(bookie_id)
        if bookie is None:
            self._count("net.refused")
            self._reply_later(
                src,
                bookie_id,
                answer,
                BookieUnavailableError(f"bookie {bookie_id} is not running"),
            )
            return

        def reply(frame: bytes | None, gone: BaseException | None) -> None:
            if gone is not None:
                self._reply_later(
                    src, bookie_id, answer, BookieUnavailableError(f"bookie {bookie_id} went away")
                )
                return
            if frame is None:
                return  # undecodable request: no answer, the caller times out
            try:
                resp = Response.decode(frame)
            except FrameError as exc:
                self._reply_later(src, bookie_id, answer, BookieUnavailableError(str(exc)))
                return
            self._observer.answered(src, bookie_id, req, resp)
            if self.gates and req.kind == "recovery_read":
                # The bookie served the recovery's read: what its gate held lands now.
                loop.call_soon(self._open_gate, bookie_id, req.ledger_id)
            self._trace(
                "answer", src, bookie_id, req.op.name, req.ledger_id, req.entry_id, resp.status
            )
            if self.profile.corrupt:
                resp = self._corrupted(src, bookie_id, req, resp)
            spared = False
            if self._lost():
                what = _what(bookie_id, req)
                if self._decide("answer-lost", src, *what):
                    self._count("net.answer_lost")
                    self._trace("lost-answer", src, *what)
                    return
                spared = True
            late = 0.0
            if self._aims is not None:
                late = self._aims.answer_delay(src, req, loop.time())
            self._reply_later(src, bookie_id, answer, resp, self._spare if spared else None, late)

        self._observer.arrived(src, bookie_id, req)
        task = serve_frame(bookie, req.encode(), reply)
        if task is not None:
            self._serving.add(task)
            task.add_done_callback(self._serving.discard)

    def _corrupted(self, src: str, bookie_id: str, req: Request, resp: Response) -> Response:
        """``resp``, or a copy with one bit flipped in its body (entries on their way back:
        the oracle judged the bookie's own answer, the client must reject this one)."""
        rng = self._corrupting
        if (
            req.op not in (OpCode.READ, OpCode.READ_BATCH)
            or resp.status != StatusCode.EOK
            or not resp.body
            or rng.random() >= self.profile.corrupt
        ):
            return resp
        pos, bit = rng.randrange(len(resp.body)), rng.randrange(8)
        what = (bookie_id, req.op.name, req.ledger_id, req.entry_id, pos, bit)
        if not self._decide("wire-corrupt", src, *what):
            return resp
        self._count("fault.wire_corrupt")
        # Which read path must catch it: reads, recovery reads, BP-46 repair's reads.
        self._count(f"fault.wire_corrupt.{'repair' if src.endswith('-repair') else req.kind}")
        self._trace("corrupt", src, *what)
        body = bytearray(resp.body)
        body[pos] ^= 1 << bit
        return attrs.evolve(resp, body=bytes(body))

    def _reply_later(
        self,
        src: str,
        bookie_id: str,
        answer: asyncio.Future[Response],
        outcome: Response | BaseException,
        rng: random.Random | None = None,
        late: float = 0.0,
    ) -> None:
        loop = self._running_loop()
        at = self._arrival(bookie_id, src, None, rng, late)
        loop.call_at(at, self._complete, answer, outcome)

    def _complete(
        self, answer: asyncio.Future[Response], outcome: Response | BaseException
    ) -> None:
        if answer.done():
            self._count("net.late_answer")
            return
        if isinstance(outcome, BaseException):
            answer.set_exception(outcome)
        else:
            answer.set_result(outcome)

    def _time_out(
        self,
        answer: asyncio.Future[Response],
        src: str,
        bookie_id: str,
        req: Request,
        timeout: float,
    ) -> None:
        if not answer.done():
            self._count("net.timeout")
            if self._aims is not None:
                loop = self._running_loop()
                self._aims.timed_out(src, bookie_id, req, loop.time())
            answer.set_exception(BKTimeoutError(f"bookie {bookie_id}: no answer in {timeout}s"))

    async def close(self) -> None:
        for task in list(self._serving):
            task.cancel()


def _what(bookie_id: str, req: Request) -> tuple[str, str, int, int]:
    """How a lost request or answer is named in its decision and the trace (only then:
    an opcode's name is a Python property)."""
    return (bookie_id, req.op.name, req.ledger_id, req.entry_id)


def protocol_path(req: Request) -> str | None:
    """The protocol path a request belongs to, for the chaos command's counts."""
    if req.op == OpCode.ADD_BATCH:
        return "path.add_batch"
    if req.op == OpCode.ADD and req.flags & AddFlags.RECOVERY:
        return "path.recovery_write_back"
    if req.op == OpCode.READ and req.flags & ReadFlags.RECOVERY:
        return "path.recovery_read"
    if req.op == OpCode.READ and req.flags & ReadFlags.FENCE:
        return "path.fence"
    if req.op == OpCode.WRITE_LAC:
        return "path.explicit_lac"
    return None
