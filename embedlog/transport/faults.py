"""Network fault injection between named clients and bookies (``cluster.network``).

Faults act on messages, never on answers' meaning: a blocked or dropped
request, or a lost reply, surfaces to the client as a timeout. The metadata
delay (a slow ZooKeeper) is applied by the cluster's ``MetadataClient.call``.
"""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable

from embedlog.errors import BKTimeoutError, BookieUnavailableError
from embedlog.wire.messages import OpCode, Request, Response

REQUEST_KINDS = ("add", "read", "read_lac", "fence", "recovery_read", "recovery_add", "trim")


class NetworkFaults:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._blocked: set[tuple[str, str]] = set()
        self._delays: dict[tuple[str, str], float] = {}
        self._drops: defaultdict[tuple[str, str, str], int] = defaultdict(int)
        # Seconds each metadata operation waits first. Not part of ``active``: bookie
        # requests (and add batching) are untouched by a slow metadata store.
        self.metadata_delay = 0.0
        # True while any fault is configured. Read without the lock on the hot path: a
        # stale read only delays noticing a fault by one request, as a real network would.
        self.active = False

    def block(self, src: str, dst: str) -> None:
        """Lose every request from ``src`` to ``dst`` and every reply back, until unblocked."""
        with self._lock:
            self._blocked.add((src, dst))
            self.active = True

    def unblock(self, src: str, dst: str) -> None:
        with self._lock:
            self._blocked.discard((src, dst))

    def delay(self, src: str, dst: str, seconds: float) -> None:
        """Deliver requests from ``src`` to ``dst`` ``seconds`` late (0 removes the delay).

        A delayed request is still delivered after its sender gave up waiting: that
        late arrival is exactly what the model checker's counterexamples need.
        """
        if seconds < 0:
            raise ValueError(f"delay must be >= 0, got {seconds}")
        with self._lock:
            if seconds:
                self._delays[(src, dst)] = seconds
                self.active = True
            else:
                self._delays.pop((src, dst), None)

    def drop_next(self, src: str, dst: str, op: str, count: int = 1) -> None:
        """Lose the next ``count`` requests of kind ``op`` from ``src`` to ``dst``."""
        if op not in REQUEST_KINDS:
            raise ValueError(f"unknown request kind {op!r}; one of {', '.join(REQUEST_KINDS)}")
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")
        with self._lock:
            self._drops[(src, dst, op)] += count
            self.active = True

    def delay_metadata(self, seconds: float) -> None:
        """Every metadata operation of the cluster's clients takes ``seconds`` longer (a slow
        ZooKeeper); 0 removes the delay. Operations already waiting see the change."""
        if seconds < 0:
            raise ValueError(f"delay must be >= 0, got {seconds}")
        with self._lock:
            self.metadata_delay = float(seconds)

    def heal(self) -> None:
        """Remove every fault."""
        with self._lock:
            self._blocked.clear()
            self._delays.clear()
            self._drops.clear()
            self.metadata_delay = 0.0
            self.active = False

    # -- queried by transports -----------------------------------------------------------------

    def is_blocked(self, src: str, dst: str) -> bool:
        with self._lock:
            return (src, dst) in self._blocked

    def delay_for(self, src: str, dst: str) -> float:
        with self._lock:
            return self._delays.get((src, dst), 0.0)

    def take_drop(self, src: str, dst: str, kind: str) -> bool:
        """True (and consume one) if the next request of this kind must be lost."""
        with self._lock:
            key = (src, dst, kind)
            if self._drops.get(key, 0) > 0:
                self._drops[key] -= 1
                if not self._drops[key]:
                    del self._drops[key]
                return True
            return False


# -- the one implementation of fault semantics that every transport shares ----------------------

# ``send(bookie_id, req)`` puts ``req`` on its way to the bookie and returns a future of the
# bookie's answer. It raises BookieUnavailableError if the bookie cannot be reached at all.
# Cancelling the returned future only means "nobody waits for this answer any more": it must
# never cancel the bookie's work on the request (a bookie never sees a request cut in half).
Send = Callable[[str, Request], Awaitable["asyncio.Future[Response]"]]


class FaultInjector:
    """Applies ``NetworkFaults`` to requests, whatever carries them (in-process call or socket).

    A blocked or dropped request is never sent; its sender times out. A delayed request is
    sent late by a task of its own, even after its sender gave up. A reply that comes back
    while the pair is blocked is lost. Both transports go through here, so a fault means the
    same over TCP as in-process.
    """

    def __init__(self, faults: NetworkFaults) -> None:
        self.faults = faults
        self._inflight: set[asyncio.Task[None]] = set()
        self.deadlines = Deadlines()

    async def request(
        self, src: str, bookie_id: str, req: Request, timeout: float, send: Send
    ) -> Response:
        if not self.faults.active:
            return await self._direct(src, bookie_id, req, timeout, send)
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[Response] = loop.create_future()
        # An answer (or error) that arrives after the caller gave up is nobody's business.
        reply.add_done_callback(lambda f: f.cancelled() or f.exception())
        faults = self.faults
        if faults.is_blocked(src, bookie_id) or faults.take_drop(src, bookie_id, req.kind):
            pass  # lost on the way: nobody will ever answer
        else:
            # Delivery runs as its own task so that a delayed request still goes out after
            # its sender stopped waiting, and the caller's cancellation never interrupts it.
            task = loop.create_task(self._deliver(src, bookie_id, req, reply, send))
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)
        try:
            return await asyncio.wait_for(asyncio.shield(reply), timeout)
        except TimeoutError:
            raise BKTimeoutError(
                f"{req.kind} {req.ledger_id}:{req.entry_id} to {bookie_id}: no answer in {timeout}s"
            ) from None
        finally:
            if not reply.done():
                reply.cancel()  # tells the delivery task to stop waiting for the answer

    async def _direct(
        self, src: str, bookie_id: str, req: Request, timeout: float, send: Send
    ) -> Response:
        """The path with no fault configured: no delivery task, a deadline instead of wait_for."""
        answer = await send(bookie_id, req)
        # Expiring sets an error on our own future; the bookie's work goes on untouched.
        self.deadlines.add(answer, req, bookie_id, timeout)
        resp = await answer
        if self.faults.active and self.faults.is_blocked(src, bookie_id):
            await asyncio.sleep(timeout)  # blocked while the reply travelled: it is lost
            raise _timeout_error(req, bookie_id, timeout)
        return resp

    async def _deliver(
        self,
        src: str,
        bookie_id: str,
        req: Request,
        reply: asyncio.Future[Response],
        send: Send,
    ) -> None:
        delay = self.faults.delay_for(src, bookie_id)
        if delay:
            await asyncio.sleep(delay)
        try:
            answer = await send(bookie_id, req)
        except BookieUnavailableError as exc:
            _fail(reply, exc)
            return
        except Exception as exc:
            _fail(reply, BookieUnavailableError(f"bookie {bookie_id}: {exc}"))
            return
        try:
            await asyncio.wait({answer, reply}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not answer.done():
                answer.cancel()  # the caller gave up (or we are shutting down)
        if reply.done() or answer.cancelled():
            return
        failure = answer.exception()
        if failure is not None:
            _fail(reply, failure)
        elif not self.faults.is_blocked(src, bookie_id):  # else the reply is lost
            reply.set_result(answer.result())

    async def close(self) -> None:
        self.deadlines.close()
        tasks = list(self._inflight)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


# What Deadlines keeps per request, flat (one tracked object): deadline, the answer's
# future, bookie, and of the request only op, flags, ledger, entry and term.
_Slot = tuple[float, "asyncio.Future[Response]", str, OpCode, int, int, int, int]


class Deadlines:
    """Times out many answers with one timer instead of a timer per request.

    Requests of one timeout expire in the order they were sent, so a FIFO per timeout
    value holds them in deadline order; a sweep every ``tick`` pops the answered ones
    from the front and fails the expired ones. A timeout fires up to one tick late.
    Only what the error message needs is kept, not the request: its body may be large,
    and answered requests stay queued until the sweep reaches them.
    """

    def __init__(self, tick: float = 0.05) -> None:
        self.tick = tick
        self._queues: dict[float, deque[_Slot]] = {}
        self._timer: asyncio.TimerHandle | None = None

    def add(
        self, answer: asyncio.Future[Response], req: Request, bookie_id: str, timeout: float
    ) -> None:
        loop = asyncio.get_running_loop()
        queue = self._queues.get(timeout)
        if queue is None:
            queue = self._queues[timeout] = deque()
        queue.append(
            (
                loop.time() + timeout,
                answer,
                bookie_id,
                req.op,
                req.flags,
                req.ledger_id,
                req.entry_id,
                req.term,
            )
        )
        if self._timer is None:
            self._timer = loop.call_later(min(self.tick, timeout), self._sweep, loop)

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        now = loop.time()
        shortest = None
        for timeout, queue in self._queues.items():
            while queue and (queue[0][1].done() or queue[0][0] <= now):
                _deadline, answer, bookie_id, op, flags, ledger_id, entry_id, term = queue.popleft()
                if not answer.done():
                    req = Request(op, 0, ledger_id, entry_id, flags, term)
                    answer.set_exception(_timeout_error(req, bookie_id, timeout))
            if queue and (shortest is None or timeout < shortest):
                shortest = timeout
        self._timer = (
            None
            if shortest is None
            else loop.call_later(min(self.tick, shortest), self._sweep, loop)
        )

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def _timeout_error(req: Request, bookie_id: str, timeout: float) -> BKTimeoutError:
    return BKTimeoutError(
        f"{req.kind} {req.ledger_id}:{req.entry_id} to {bookie_id}: no answer in {timeout}s"
    )


def _fail(reply: asyncio.Future[Response], exc: BaseException) -> None:
    if not reply.done():
        reply.set_exception(exc)
