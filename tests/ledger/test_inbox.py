"""add_async from the caller's threads: order, ids and cancellation (embedlog/ledger/inbox.py)."""

from __future__ import annotations

import threading
import time


def test_adds_from_many_threads_keep_each_threads_order(cluster):
    wh = cluster.client("c1").create_ledger(3, 3, 2)
    per_thread = 300
    results: dict[int, list[tuple[int, bytes]]] = {}

    def writer(t: int) -> None:
        payloads = [b"t%d-%d" % (t, i) for i in range(per_thread)]
        futures = [wh.add_async(p) for p in payloads]
        results[t] = [(f.result(), p) for f, p in zip(futures, payloads, strict=True)]

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = sorted(eid for rows in results.values() for eid, _ in rows)
    assert ids == list(range(4 * per_thread))  # every add got its own id, none skipped
    for rows in results.values():
        assert [eid for eid, _ in rows] == sorted(eid for eid, _ in rows)
    stored = {e.entry_id: e.data for e in wh.read(0, 4 * per_thread - 1)}
    for rows in results.values():
        for eid, payload in rows:
            assert stored[eid] == payload


def test_an_add_cancelled_before_the_loop_takes_it_is_not_written(cluster):
    wh = cluster.client("c1").create_ledger(3, 3, 2)
    loop_busy, release = threading.Event(), threading.Event()

    def hold_the_loop() -> None:
        loop_busy.set()
        release.wait(30)

    cluster.runtime.loop.call_soon_threadsafe(hold_the_loop)
    assert loop_busy.wait(30)
    first, second, third = (wh.add_async(b"%d" % i) for i in range(3))
    assert second.cancel()  # still queued: the caller may take it back
    release.set()
    assert first.result(30) == 0
    assert third.result(30) == 1  # ids stay contiguous: the cancelled add never got one
    assert second.cancelled()
    wh.close()
    assert [e.data for e in wh.read(0, 1)] == [b"0", b"2"]


def test_an_add_on_its_way_can_no_longer_be_cancelled(cluster):
    # Once the writer has it, the entry may already sit on bookies: cancelling must not
    # pretend otherwise, so the future refuses and still reports the entry's id.
    c = cluster.client("c1", request_timeout=30.0)
    wh = c.create_ledger(3, 3, 2)
    for bookie in cluster.bookie_ids:
        cluster.network.delay("c1", bookie, 0.5)
    fut = wh.add_async(b"x")
    while not fut.running():
        time.sleep(0.001)
    assert not fut.cancel()
    assert fut.result(30) == 0


def test_the_requests_of_adds_taken_leave_before_the_loop_turn_ends(cluster, monkeypatch):
    """The inbox hands over everything it had at once, so the writer sends right away
    instead of at the end of the loop turn: a blocking add's requests (one per bookie of a
    ledger and of a stream) go out while the inbox is still taking."""
    from embedlog.ledger.inbox import AddInbox
    from embedlog.wire.messages import OpCode

    taking = threading.local()
    sends: list[tuple[OpCode, bool]] = []
    real_take, real_send = AddInbox._take, cluster.transport.send_nowait

    def take(self: AddInbox) -> None:
        taking.on = True
        try:
            real_take(self)
        finally:
            taking.on = False

    def send_nowait(src, bookie_id, req, timeout, then=None):
        sends.append((req.op, getattr(taking, "on", False)))
        return real_send(src, bookie_id, req, timeout, then)

    monkeypatch.setattr(AddInbox, "_take", take)
    monkeypatch.setattr(cluster.transport, "send_nowait", send_nowait)
    client = cluster.client("c1")
    wh = client.create_ledger(3, 3, 2)
    stream = client.create_unbounded(3, 3, 2)
    sends.clear()
    for i in range(5):
        wh.add(b"entry %d" % i)
        stream.append(b"record %d" % i)
    adds = [inside for op, inside in sends if op in (OpCode.ADD, OpCode.ADD_BATCH)]
    assert len(adds) == 30 and all(adds)


def test_a_send_that_fails_leaves_no_add_behind_in_the_inbox(caplog):
    """The inbox empties its queue before it asks the writers to send: one writer's
    failing send does not keep the adds queued after it from their writers."""
    import asyncio

    from embedlog.ledger.admission import AddBudget
    from embedlog.ledger.inbox import AddInbox

    class Target:
        def __init__(self, fails: bool) -> None:
            self.fails = fails
            self.taken: list[bytes] = []
            self.budget = AddBudget(1000, 1 << 20, None, "test")

        def add_to(self, future, payload, *, cost=-1):  # type: ignore[no-untyped-def]
            self.taken.append(payload)

        def send_now(self) -> None:
            if self.fails:
                raise RuntimeError("a bug in a writer's send")

    async def main() -> tuple[Target, Target, int]:
        inbox = AddInbox(asyncio.get_running_loop())
        a, b = Target(fails=True), Target(fails=False)
        for i in range(3):
            inbox.submit(a, b"a%d" % i)
            inbox.submit(b, b"b%d" % i)
        for _ in range(3):
            await asyncio.sleep(0)
        return a, b, len(inbox._queue)

    a, b, left = asyncio.run(main())
    assert left == 0
    assert a.taken == [b"a0", b"a1", b"a2"] and b.taken == [b"b0", b"b1", b"b2"]
    assert "sending the adds just taken failed" in caplog.text
