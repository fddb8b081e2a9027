"""A writer of a deleted ledger (or stream) is never told an add is acknowledged once the
delete returned (issue #27 item 2): the bookies keep a tombstone of the ledger and refuse
its writes (embedlog/bookie/tombstones.py), and the writer fails with LedgerDeletedError,
every later add of the handle too.

E = WQ = AQ = 3: an add needs every bookie, so one refusal fails it. The delete fences
the ledger's writer first (unbounded/deletion.py), which stops a writer adding while it
runs; a writer that was idle meanwhile is stopped only by the tombstones. The UNSAFE
bookie switch ``unsafe_forget_deletions`` shows what they prevent: the old handle's add
after the delete returned is "acknowledged", and nobody can ever read it."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable

import pytest

from embedlog import LocalCluster
from embedlog.errors import LedgerDeletedError, LedgerFencedError, NoSuchLedgerError

AFTER = 5  # adds the old handle makes once the delete returned

Add = Callable[[bytes], "concurrent.futures.Future[int]"]


def write_through_a_delete(
    add_async: Add, delete: Callable[[], None]
) -> tuple[list[object], list[object]]:
    """Adds without pause from a thread while ``delete`` runs here; the outcomes (entry id
    or exception) of the adds made before the delete returned and of those made after,
    each list in the order they were made."""
    before: list[concurrent.futures.Future[int]] = []
    after: list[concurrent.futures.Future[int]] = []
    deleted = threading.Event()
    started = threading.Event()

    def writer() -> None:
        n = 0
        while len(after) < AFTER:
            late = deleted.is_set()
            (after if late else before).append(add_async(b"entry %d" % n))
            n += 1
            if n == 20:
                started.set()
            time.sleep(0.001)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert started.wait(60)  # a hang guard only
        delete()
        deleted.set()
    finally:
        deleted.set()
        thread.join()

    def outcome(f: concurrent.futures.Future[int]) -> object:
        exc = f.exception(timeout=120)  # a hang guard only
        return exc if exc is not None else f.result()

    return [outcome(f) for f in before], [outcome(f) for f in after]


def check(before: list[object], after: list[object], *, refused: tuple[type, ...]) -> None:
    """Acknowledged adds, then refused ones: none succeeds once one was refused, and every
    add made after the delete returned was refused."""
    for o in after:
        assert isinstance(o, refused), o
    outcomes = before + after
    first_refused = next(i for i, o in enumerate(outcomes) if isinstance(o, BaseException))
    assert all(isinstance(o, int) for o in outcomes[:first_refused])
    assert all(isinstance(o, refused) for o in outcomes[first_refused:]), outcomes


def test_a_bounded_writer_of_a_deleted_ledger_is_refused(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    """A writer adding while the delete runs: the delete fences the ledger first
    (unbounded/deletion.py), so its adds fail as fenced (or, once the bookies dropped the
    ledger, as deleted), and every later add of the handle fails too."""
    cluster = make_cluster(3)
    wh = cluster.client("writer").create_ledger(3, 3, 3)
    lid = wh.ledger_id
    admin = cluster.client("admin")
    before, after = write_through_a_delete(wh.add_async, lambda: admin.delete_ledger(lid))
    check(before, after, refused=(LedgerFencedError, LedgerDeletedError))
    with pytest.raises((LedgerFencedError, LedgerDeletedError)):
        wh.add(b"one more")
    for b in cluster.running_bookies():
        assert cluster.bookie(b).ledger_info(lid) is None  # nothing brought it back


@pytest.mark.parametrize("tombstones", [True, False], ids=["tombstones", "unsafe-forget"])
def test_an_idle_bounded_writer_learns_of_the_delete_from_the_tombstones(
    make_cluster: Callable[..., LocalCluster], tombstones: bool
) -> None:
    """The delete's fence lives in the bookies' state of the ledger, which the drop
    removes: a writer that sent nothing meanwhile is kept out only by the tombstones."""
    cluster = make_cluster(3, unsafe_forget_deletions=not tombstones)
    wh = cluster.client("writer").create_ledger(3, 3, 3)
    lid = wh.ledger_id
    assert [wh.add(b"%d" % i) for i in range(3)] == [0, 1, 2]
    admin = cluster.client("admin")
    admin.delete_ledger(lid)
    if not tombstones:
        assert wh.add(b"late") == 3  # the bug: "acknowledged", readable by nobody
        with pytest.raises(NoSuchLedgerError):
            admin.open_ledger(lid)
        return
    with pytest.raises(LedgerDeletedError, match=f"ledger {lid} was deleted") as raised:
        wh.add(b"late")
    assert "create a new ledger" in str(raised.value)
    with pytest.raises(LedgerDeletedError):
        wh.add(b"later")
    for b in cluster.running_bookies():
        assert cluster.bookie(b).ledger_info(lid) is None


def test_a_stream_writer_of_a_deleted_stream_is_refused(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    cluster = make_cluster(3)
    ul = cluster.client("writer").create_unbounded(3, 3, 3, name="doomed")
    lid = ul.ledger_id
    admin = cluster.client("admin")
    before, after = write_through_a_delete(ul.append_async, lambda: admin.delete_ledger(lid))
    check(before, after, refused=(LedgerDeletedError,))
    with pytest.raises(LedgerDeletedError):
        ul.append(b"one more")


@pytest.mark.parametrize("tombstones", [True, False], ids=["tombstones", "unsafe-forget"])
def test_an_idle_stream_writer_learns_of_the_delete_from_the_tombstones(
    make_cluster: Callable[..., LocalCluster], tombstones: bool
) -> None:
    """The delete fences the stream's writer with a term first (unbounded/deletion.py),
    but a writer that sent nothing meanwhile never saw it, and that term lives in the
    bookies' state of the ledger, which the drop removes: only the tombstone keeps the
    old writer out afterwards."""
    cluster = make_cluster(3, unsafe_forget_deletions=not tombstones)
    ul = cluster.client("writer").create_unbounded(3, 3, 3, name="doomed")
    lid = ul.ledger_id
    assert [ul.append(b"%d" % i) for i in range(3)] == [0, 1, 2]
    cluster.client("admin").delete_ledger(lid)
    if not tombstones:
        assert ul.append(b"late") == 3  # the bug: "acknowledged", readable by nobody
        return
    with pytest.raises(LedgerDeletedError, match=f"ledger {lid} was deleted"):
        ul.append(b"late")
    with pytest.raises(LedgerDeletedError):
        ul.append(b"later")
    for b in cluster.running_bookies():
        assert cluster.bookie(b).ledger_info(lid) is None


def test_a_recovery_of_a_deleted_ledger_raises_ledger_deleted(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    """A fence meeting the tombstones (the bookies dropped the ledger, whose metadata a
    recovery read just before) says the ledger was deleted, not that recovery failed."""
    from embedlog.ledger.recovery import recover_ledger

    cluster = make_cluster(3)
    writer = cluster.client("writer")
    wh = writer.create_ledger(3, 3, 3)
    for i in range(3):
        wh.add(b"%d" % i)
    lid = wh.ledger_id
    for b in cluster.running_bookies():  # the bookies' half of a delete
        bookie = cluster.bookie(b)
        cluster.runtime.run(bookie.drop_ledgers([lid]))
    recovering = cluster.client("recovering")
    with pytest.raises(LedgerDeletedError, match=f"ledger {lid} was deleted"):
        recovering.runtime.run(recover_ledger(recovering.ctx, lid, b""))


def test_a_stream_rollover_meeting_the_tombstones_raises_ledger_deleted(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    """A writer whose next append starts a new fragment (metadata still there: a delete
    under way) fails with LedgerDeletedError, not with a wait for replacements."""
    cluster = make_cluster(3)
    ul = cluster.client("writer").create_unbounded(3, 3, 3, fragment_max_entries=3)
    lid = ul.ledger_id
    assert [ul.append(b"%d" % i) for i in range(3)] == [0, 1, 2]
    for b in cluster.running_bookies():  # the bookies' half of a delete
        cluster.runtime.run(cluster.bookie(b).drop_ledgers([lid]))
    with pytest.raises(LedgerDeletedError, match=f"ledger {lid} was deleted"):
        ul.append(b"the next fragment's first")
    with pytest.raises(LedgerDeletedError):
        ul.append(b"later")


def test_a_takeover_of_a_deleted_stream_raises_ledger_deleted(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    """A takeover whose term-raising reads meet the tombstones (the bookies dropped the
    stream, whose metadata the takeover read just before) says the stream was deleted."""
    cluster = make_cluster(3)
    ul = cluster.client("writer").create_unbounded(3, 3, 3)
    assert [ul.append(b"%d" % i) for i in range(3)] == [0, 1, 2]
    lid = ul.ledger_id
    for b in cluster.running_bookies():  # the bookies' half of a delete
        cluster.runtime.run(cluster.bookie(b).drop_ledgers([lid]))
    with pytest.raises(LedgerDeletedError, match=f"ledger {lid} was deleted"):
        cluster.client("next").open_unbounded(lid)
