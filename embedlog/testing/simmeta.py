"""The simulated metadata store: slow operations, failing ones, expired bookie sessions.

A real ZooKeeper answers late, and sometimes not at all: the connection drops before the
operation reached the server (nothing happened), or after the server applied it (the
compare-and-swap happened, the caller only sees the error). Both reach the caller as the
same ``MetadataError`` (what ``ZooKeeperMetadataStore`` raises for a ConnectionLoss), so
the caller must treat it as unknown. And a bookie's session can expire while the bookie
serves: its registration vanishes under it.

``FaultyMetadataStore`` wraps the simulation's in-memory store and draws each
operation's fate from the seed. It says it does blocking I/O (as ZooKeeper's store
does), so the clients and bookies hand every asynchronous metadata call to the loop's
default executor, exactly as they do against ZooKeeper; ``SimMetadataExecutor`` is that
executor: it runs the call on the loop thread after a seeded delay, and hands its
outcome back after another (an operation applied at the server but not yet answered).
Calls the real code makes synchronously (a bookie's registration, its cookie check)
take no virtual time, but fail as any other.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import random
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from attrs import frozen

from embedlog.errors import MetadataError
from embedlog.metadata.recipe import Op, Recipe, Steps
from embedlog.metadata.store import ANY_VERSION, MetadataStore, SessionView
from embedlog.testing.decisions import always
from embedlog.testing.simraces import HOLD_POLL, Hold

T = TypeVar("T")

OK, LOST, APPLIED = "ok", "lost", "applied"


@frozen
class MetaProfile:
    """How unreliable the metadata store is in one history (drawn from the seed)."""

    slow: float = 0.0  # probability that an operation is held up (before or after it applies)
    slow_delay: tuple[float, float] = (0.05, 2.0)  # seconds, uniform
    delay: tuple[float, float] = (0.0002, 0.002)  # every operation's ordinary round trip
    error: float = 0.0  # probability that an operation fails with a ConnectionLoss
    applied: float = 0.5  # of the failing writes, the share the server applied first
    expiry_gap: float = 0.0  # mean seconds between expiries of live bookies' sessions (0: none)

    @classmethod
    def draw(cls, rng: random.Random) -> MetaProfile:
        # A quarter of the histories keep a reliable store: the other faults alone.
        if rng.random() < 0.25:
            return cls()
        return cls(
            slow=rng.choice((0.0, rng.uniform(0.0, 0.2))),
            error=rng.choice((0.0, rng.uniform(0.0, 0.08))),
            applied=0.5,
            expiry_gap=rng.choice((0.0, 0.0, rng.uniform(0.5, 5.0))),
        )


CALM_META = MetaProfile()


def fate(rng: random.Random, profile: MetaProfile, *, write: bool) -> str:
    """One operation's fate: it succeeds, is lost before it applied, or (writes only) is
    applied and then lost on the way back."""
    if profile.error <= 0 or rng.random() >= profile.error:
        return OK
    return APPLIED if write and rng.random() < profile.applied else LOST


class MetadataFaults:
    """The seed's decisions about metadata operations, and their counts."""

    def __init__(
        self,
        rng: random.Random,
        profile: MetaProfile,
        trace: Callable[..., None],
        counts: Counter[str],
        budget: int | None = None,
        decide: Callable[..., bool] = always,
    ) -> None:
        self.rng = rng
        self.decide_fault = decide  # numbered decisions (decisions.py): suppressible
        self.profile = profile
        self._trace = trace
        self.counts = counts
        # At most this many injected faults (slow operations, errors, expiries): shrinking.
        self.budget = budget
        self._suspended = 0

    def _spend(self) -> bool:
        if self.budget is None:
            return True
        if self.budget <= 0:
            return False
        self.budget -= 1
        return True

    @property
    def active(self) -> bool:
        return self._suspended == 0

    @contextlib.contextmanager
    def suspended(self) -> Iterator[None]:
        """The simulation's own bookkeeping (a crashed process's session ending at the
        server) is no operation a client made: it cannot fail."""
        self._suspended += 1
        try:
            yield
        finally:
            self._suspended -= 1

    def heal(self) -> None:
        self.profile = CALM_META

    def latency(self) -> tuple[float, float]:
        """Seconds before the operation reaches the store, and before its answer is back."""
        rng, p = self.rng, self.profile
        before, after = rng.uniform(*p.delay), rng.uniform(*p.delay)
        if p.slow > 0 and rng.random() < p.slow and self._spend():
            early = rng.random() < 0.5
            extra = rng.uniform(*p.slow_delay)
            if self.decide_fault("meta-slow", "before" if early else "after", f"{extra:.6f}"):
                self.counts["fault.meta_slow"] += 1
                if early:
                    before += extra
                else:
                    after += extra  # applied, the caller not told yet
        return before, after

    def decide(self, op: str, path: str, *, write: bool) -> str:
        if not self.active:
            return OK
        outcome = fate(self.rng, self.profile, write=write)
        if outcome == OK or not self._spend():
            return OK
        if not self.decide_fault("meta-error", op, path, outcome):
            return OK
        self.counts["fault.meta_applied_error" if outcome == APPLIED else "fault.meta_error"] += 1
        self._trace("meta-fault", op, path, outcome)
        return outcome

    def connection_loss(self, op: str, path: str, outcome: str) -> MetadataError:
        when = "after it was applied" if outcome == APPLIED else "before it was applied"
        return MetadataError(f"ZooKeeper ConnectionLoss on {op} {path} (simulated, {when})")

    # -- expired sessions ------------------------------------------------------------------

    async def expire_sessions(
        self,
        live: Callable[[], list[str]],
        over: Callable[[], bool],
        expire: Callable[[str], None],
    ) -> None:
        """Now and then, a live bookie's session expires (``expire(bookie)``): its
        registration vanishes while it serves (its process keeps running and keeps its
        session object, as a kazoo client that reconnects with a new session does).
        ``live()``: the bookies serving now; ``over()``: the workload has ended."""
        while True:
            gap = self.profile.expiry_gap
            if gap <= 0:
                return
            await asyncio.sleep(self.rng.expovariate(1 / gap))
            if over():
                return
            candidates = live()
            if not candidates:
                continue
            bid = self.rng.choice(candidates)
            if not self._spend():
                return
            if not self.decide_fault("session-expired", bid):
                continue
            self.counts["fault.session_expired"] += 1
            self._trace("session-expired", bid)
            expire(bid)


def _both(
    first: Callable[[str, str], None] | None, then: Callable[[str, str], None] | None
) -> Callable[[str, str], None] | None:
    if first is None or then is None:
        return first or then

    def both(op: str, path: str) -> None:
        first(op, path)
        then(op, path)

    return both


class FaultyMetadataStore(MetadataStore):
    """``inner`` (the simulation's store) behind a connection that fails as ZooKeeper's does."""

    # As ZooKeeper's store: asynchronous callers go through the loop's default executor.
    blocking_io = True

    def __init__(self, inner: MetadataStore, faults: MetadataFaults) -> None:
        self.inner = inner
        self.faults = faults
        # Told (operation, path) of every write the store applied, as it applies it (the
        # caller may learn later, or see an error): the oracle of the stream layer; and of
        # every read served (a workload aims at the moment a decision read its inputs).
        self.on_write: Callable[[str, str], None] | None = None
        self.on_read: Callable[[str, str], None] | None = None

    def watch(
        self, on_write: Callable[[str, str], None], on_read: Callable[[str, str], None] | None
    ) -> None:
        """Tell ``on_write`` (``on_read``) of every write (read) applied, after the watchers
        told before."""
        self.on_write = _both(self.on_write, on_write)
        self.on_read = _both(self.on_read, on_read)

    def _read(self, op: str, path: str, call: Callable[[], T]) -> T:
        outcome = self.faults.decide(op, path, write=False)
        if outcome != OK:
            raise self.faults.connection_loss(op, path, outcome)
        result = call()
        if self.on_read is not None:
            self.on_read(op, path)
        return result

    def _write(self, op: str, path: str, call: Callable[[], T]) -> T:
        outcome = self.faults.decide(op, path, write=True)
        if outcome == LOST:
            raise self.faults.connection_loss(op, path, outcome)
        result = call()
        if self.on_write is not None:
            self.on_write(op, path)
        if outcome == APPLIED:
            raise self.faults.connection_loss(op, path, outcome)
        return result

    def create(self, path: str, data: bytes, *, ephemeral: bool = False) -> int:
        return self._write(
            "create", path, lambda: self.inner.create(path, data, ephemeral=ephemeral)
        )

    def create_if(self, path: str, data: bytes, exists: str) -> int:
        return self._write("create", path, lambda: self.inner.create_if(path, data, exists))

    def get(self, path: str) -> tuple[bytes, int]:
        return self._read("get", path, lambda: self.inner.get(path))

    def set(self, path: str, data: bytes, version: int) -> int:
        return self._write("set", path, lambda: self.inner.set(path, data, version))

    def delete(self, path: str, version: int = ANY_VERSION) -> None:
        self._write("delete", path, lambda: self.inner.delete(path, version))

    def children(self, path: str) -> list[str]:
        return self._read("children", path, lambda: self.inner.children(path))

    def sync(self, path: str) -> None:
        self._read("sync", path, lambda: self.inner.sync(path))

    def held_by_another_session(self, path: str) -> bool:
        return self._read("owner", path, lambda: self.inner.held_by_another_session(path))

    def session(self) -> MetadataStore:
        return FaultySession(self)


class FaultySession(SessionView):
    """A bookie's session on the faulty store: its operations fail like any other, but its
    end (expiry, a crashed process) is the server's doing and always happens."""

    def __init__(self, store: FaultyMetadataStore) -> None:
        super().__init__(store)
        self._faults = store.faults

    def _end(self) -> None:
        with self._faults.suspended():
            super()._end()


class SimMetadataExecutor(concurrent.futures.ThreadPoolExecutor):
    """The loop's default executor in a simulation: the metadata calls the real code hands
    to a thread (``MetadataClient.call``, a bookie's ``call_metadata``) run on the loop
    thread instead, after a seeded delay, and their outcome comes back after another.

    A ThreadPoolExecutor only because asyncio accepts no other default executor; it never
    starts a thread (every ``submit`` is served here).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, faults: MetadataFaults) -> None:
        super().__init__(max_workers=1)
        self._loop = loop
        self._faults = faults
        # An aim (simraces.DisplacedWrites): given a call as it reaches the store, a Hold
        # it waits out there first, or None.
        self.hold: Callable[[Callable[..., Any], tuple[Any, ...]], Hold | None] | None = None

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Any:
        if kwargs:
            raise TypeError("SimMetadataExecutor.submit takes positional arguments only")
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        before, after = self._faults.latency()
        self._loop.call_later(before, self._run, fut, fn, args, after)
        return fut

    def _run(
        self,
        fut: concurrent.futures.Future[Any],
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        after: float,
    ) -> None:
        if not fut.set_running_or_notify_cancel():
            return  # the caller gave up before the operation left: it never happened

        def deliver(outcome: Any, failed: bool) -> None:
            if failed:
                fut.set_exception(outcome)
            else:
                fut.set_result(outcome)

        self._serve(fn, args, after, deliver)

    def submit_to_loop(self, fn: Callable[..., T], args: tuple[Any, ...]) -> asyncio.Future[T]:
        """``run_in_executor(None, ...)``: what ``submit`` and asyncio's chaining of its
        future to the loop's do, step for step (the same timers and callbacks, in the same
        batches), on the loop's own future alone. The concurrent future, its lock and the
        chain were a third of a metadata call's cost, 2% of a stream's history."""
        loop = self._loop
        dest: asyncio.Future[T] = loop.create_future()
        before, after = self._faults.latency()
        call = _Call()
        loop.call_later(before, self._run_for_loop, dest, call, fn, args, after)

        def check_cancel(fut: asyncio.Future[T]) -> None:
            # asyncio's _call_check_cancel: a caller that gave up cancels the call, which
            # then never leaves if it has not yet
            if fut.cancelled() and not call.started:
                call.cancelled = True

        dest.add_done_callback(check_cancel)
        return dest

    def _run_for_loop(
        self,
        dest: asyncio.Future[Any],
        call: _Call,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        after: float,
    ) -> None:
        if call.cancelled:
            return  # the caller gave up before the operation left: it never happened
        call.started = True
        self._serve(fn, args, after, functools.partial(self._came_back, dest))

    def _serve(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        after: float,
        deliver: Callable[[Any, bool], None],
    ) -> None:
        """The call reached the store: run it, and ``deliver`` its outcome (and whether it
        is an exception) ``after`` seconds later. A recipe (metadata/recipe.py) runs one
        store operation here; the rest follow one round trip apart (``_answered``)."""
        if self.hold is not None and (hold := self.hold(fn, args)) is not None:
            self._wait(hold, self._loop.time() + hold.longest, fn, args, after, deliver)
            return
        self._serve_now(fn, args, after, deliver)

    def _wait(
        self,
        hold: Hold,
        until: float,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        after: float,
        deliver: Callable[[Any, bool], None],
    ) -> None:
        if hold.done() or self._loop.time() >= until:
            self._serve_now(fn, args, after, deliver)
        else:
            self._loop.call_later(HOLD_POLL, self._wait, hold, until, fn, args, after, deliver)

    def _serve_now(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        after: float,
        deliver: Callable[[Any, bool], None],
    ) -> None:
        if isinstance(fn, Recipe):
            try:
                store, *rest = args
                steps = fn.steps(*rest)
            except BaseException as exc:  # called wrongly: the caller hears of it
                self._loop.call_later(after, deliver, exc, True)
                return
            op = _next_op(steps, None, False, deliver)
            if op is not None:
                self._apply(store, steps, op, after, deliver)
            return
        try:
            outcome = fn(*args)
        except BaseException as exc:
            self._loop.call_later(after, deliver, exc, True)
        else:
            self._loop.call_later(after, deliver, outcome, False)

    def _answered(
        self,
        store: MetadataStore,
        steps: Steps[Any],
        outcome: Any,
        failed: bool,
        deliver: Callable[[Any, bool], None],
    ) -> None:
        """The recipe's last operation was answered: it decides, and either ends (its
        outcome reaches the caller) or sends its next operation, which reaches the store,
        and is answered, after seeded delays of its own. Other clients' operations land
        in between, as against ZooKeeper, where each operation is a round trip: the
        compare-and-swaps a recipe relies on are put to the test."""
        op = _next_op(steps, outcome, failed, deliver)
        if op is None:
            return
        before, after = self._faults.latency()
        self._loop.call_later(before, self._apply, store, steps, op, after, deliver)

    def _apply(
        self,
        store: MetadataStore,
        steps: Steps[Any],
        op: Op,
        after: float,
        deliver: Callable[[Any, bool], None],
    ) -> None:
        try:
            outcome, failed = op.apply(store), False
        except Exception as exc:
            outcome, failed = exc, True
        self._loop.call_later(after, self._answered, store, steps, outcome, failed, deliver)

    def _came_back(self, dest: asyncio.Future[Any], outcome: Any, failed: bool) -> None:
        # Where the concurrent future's result reaches the loop's: a callback later
        # (call_soon_threadsafe in asyncio's chain), unless the caller gave up by then.
        self._loop.call_soon(_copy_outcome, dest, outcome, failed)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        pass  # no thread to stop


class _Call:
    """One metadata call served on the loop: whether it left, whether its caller gave up."""

    __slots__ = ("cancelled", "started")

    def __init__(self) -> None:
        self.started = False
        self.cancelled = False


def _next_op(
    steps: Steps[Any], outcome: Any, failed: bool, deliver: Callable[[Any, bool], None]
) -> Op | None:
    """The recipe's next operation, given the last one's outcome (None at its start); None
    once it ended, its outcome delivered."""
    try:
        return steps.throw(outcome) if failed else steps.send(outcome)
    except StopIteration as stop:
        deliver(stop.value, False)
    except BaseException as exc:
        deliver(exc, True)
    return None


def _copy_outcome(dest: asyncio.Future[Any], outcome: Any, failed: bool) -> None:
    """asyncio's _copy_future_state, from an outcome rather than a concurrent future."""
    if dest.cancelled():
        return
    if not failed:
        dest.set_result(outcome)
    elif isinstance(outcome, concurrent.futures.CancelledError):
        dest.set_exception(asyncio.CancelledError(*outcome.args))
    else:
        dest.set_exception(outcome)
