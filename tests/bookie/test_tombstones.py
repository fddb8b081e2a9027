"""A bookie keeps a tombstone of every ledger it dropped (embedlog/bookie/tombstones.py)
and refuses with EDELETED every request that would give that ledger state again; the
tombstone is durable with the drop and survives restarts, journal replay and BP-46."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from harness import DIGEST, KEY, Harness, entry

from embedlog.bookie.tombstones import tombstone_verdict
from embedlog.errors import LedgerDeletedError
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.transport.base import next_txn
from embedlog.wire.codes import StatusCode
from embedlog.wire.entry import master_key
from embedlog.wire.messages import (
    AddFlags,
    OpCode,
    ReadFlags,
    Request,
    TrimFlags,
    pack_entries,
    pack_read_ask,
    unpack_entries,
    unpack_results,
)

OTHER = master_key(b"another password")
LID = 7


def req(op: OpCode, key: bytes = KEY, **kw: Any) -> Request:
    return Request(op, 1, LID, 0, master_key=key, **kw)


TABLE = [
    # (request, key the tombstone keeps, answer)
    (req(OpCode.ADD), KEY, StatusCode.EDELETED),
    (req(OpCode.ADD, flags=AddFlags.RECOVERY), KEY, StatusCode.EDELETED),
    (req(OpCode.ADD_BATCH), KEY, StatusCode.EDELETED),
    (req(OpCode.WRITE_LAC), KEY, StatusCode.EDELETED),
    (req(OpCode.READ, flags=ReadFlags.FENCE), KEY, StatusCode.EDELETED),
    (req(OpCode.READ, term=3), KEY, StatusCode.EDELETED),
    (req(OpCode.TRIM), KEY, StatusCode.EDELETED),
    (req(OpCode.TRIM, flags=TrimFlags.ABOVE, term=3), KEY, StatusCode.EDELETED),
    (req(OpCode.DELETE_LEDGER), KEY, StatusCode.EOK),  # done already
    # The key is proven first: without it, nothing (not even the news of the deletion).
    (req(OpCode.ADD, OTHER), KEY, StatusCode.EUA),
    (req(OpCode.ADD, b""), KEY, StatusCode.EUA),
    (req(OpCode.DELETE_LEDGER, OTHER), KEY, StatusCode.EUA),
    (req(OpCode.READ, OTHER, flags=ReadFlags.FENCE), KEY, StatusCode.EUA),
    (req(OpCode.ADD), b"", StatusCode.EUA),  # a ledger dropped with no key: matches none
    (req(OpCode.DELETE_LEDGER), b"", StatusCode.EUA),
    # Requests that change nothing are served as for a ledger the bookie never held.
    (req(OpCode.READ), KEY, None),
    (req(OpCode.READ, flags=ReadFlags.RECOVERY), KEY, None),
    (req(OpCode.READ_LAC), KEY, None),
    (req(OpCode.READ_BATCH), KEY, None),
    (req(OpCode.LIST_ENTRIES), KEY, None),
]


@pytest.mark.parametrize(("request_", "key", "answer"), TABLE)
def test_tombstone_verdict(request_: Request, key: bytes, answer: StatusCode | None) -> None:
    assert tombstone_verdict(request_, key) == answer


def deleted(h: Harness, lid: int = LID) -> None:
    """``lid`` written to, fenced, then deleted on the harness's bookie."""
    for i in range(3):
        assert h.add(lid, i).status == StatusCode.EOK
    assert h.request(OpCode.DELETE_LEDGER, lid).status == StatusCode.EOK


def batch(lid: int, first: int, n: int) -> bytes:
    return pack_entries([(e, entry(lid, e)) for e in range(first, first + n)])


def assert_refused_everything(h: Harness, lid: int = LID) -> None:
    """Every request that would change ``lid`` is refused, and none gave it state."""
    assert h.add(lid, 3).status == StatusCode.EDELETED
    assert h.add(lid, 0, flags=AddFlags.RECOVERY).status == StatusCode.EDELETED
    noop = DIGEST.pack(lid, 3, 2, b"")
    truncating = h.request(OpCode.ADD, lid, 3, body=noop, flags=AddFlags.TRUNCATE, term=5)
    assert truncating.status == StatusCode.EDELETED
    resp = h.request(OpCode.ADD_BATCH, lid, 3, body=batch(lid, 3, 4))
    assert resp.status == StatusCode.EDELETED
    assert [s for s, _ in unpack_results(resp.body)] == [StatusCode.EDELETED] * 4
    assert h.request(OpCode.WRITE_LAC, lid, 2).status == StatusCode.EDELETED
    assert h.read(lid, -1, flags=ReadFlags.FENCE).status == StatusCode.EDELETED
    assert h.read(lid, 0, flags=ReadFlags.FENCE | ReadFlags.RECOVERY).status == (
        StatusCode.EDELETED
    )
    assert h.read(lid, -1, term=9).status == StatusCode.EDELETED
    assert h.request(OpCode.TRIM, lid, 2).status == StatusCode.EDELETED
    above = h.request(OpCode.TRIM, lid, 0, flags=TrimFlags.ABOVE, term=9, body=bytes([4]))
    assert above.status == StatusCode.EDELETED
    # Without the key: refused as before the deletion, and nothing new is bound.
    assert h.add(lid, 3, master_key=OTHER).status == StatusCode.EUA
    assert h.request(OpCode.DELETE_LEDGER, lid, master_key=OTHER).status == StatusCode.EUA
    # A repeated delete is done already.
    assert h.request(OpCode.DELETE_LEDGER, lid).status == StatusCode.EOK
    # Reads that change nothing: as for a ledger never held.
    assert h.read(lid, 0).status == StatusCode.ENOLEDGER
    assert h.read(lid, 0, flags=ReadFlags.RECOVERY).status == StatusCode.ENOLEDGER
    assert h.request(OpCode.READ_LAC, lid).status == StatusCode.ENOLEDGER
    assert h.request(OpCode.LIST_ENTRIES, lid).status == StatusCode.ENOLEDGER
    ask = h.request(OpCode.READ_BATCH, lid, 0, body=pack_read_ask(10, 1, 1 << 20), master_key=b"")
    assert ask.status == StatusCode.EOK and unpack_entries(ask.body) == []
    bookie = h.bookie
    assert bookie is not None and bookie.storage is not None
    assert bookie.ledger_info(lid) is None and bookie.ledger_entries(lid) == []
    assert lid not in bookie.storage.ledger_ids()


def test_a_deleted_ledger_refuses_every_change(harness) -> None:
    h = harness()
    h.boot()
    deleted(h)
    assert_refused_everything(h)
    # Other ledgers are served as ever.
    assert h.add(LID + 1, 0).status == StatusCode.EOK


@pytest.mark.parametrize("journal", [True, False], ids=["journal", "no-journal"])
@pytest.mark.parametrize("how", ["stop", "crash"])
def test_the_tombstone_survives_a_restart(harness, journal: bool, how: str) -> None:
    h = harness(journal_write_data=journal)
    h.boot()
    deleted(h)
    h.stop() if how == "stop" else h.crash()
    h.boot()
    assert_refused_everything(h)
    h.crash()  # and again, after serving the refusals
    h.boot()
    assert_refused_everything(h)


def test_journal_replay_does_not_bring_a_deleted_ledger_back(harness) -> None:
    """A journal record of the ledger after the drop's checkpoint (none is written while
    the tombstone stands, so it is put there by hand) is skipped by replay."""
    from embedlog.bookie.index import LedgerInfo
    from embedlog.bookie.records import add_prefix, state_record

    h = harness()
    bookie = h.boot()
    deleted(h)
    journal = bookie.journal
    assert journal is not None

    async def late_records() -> None:
        journal.append_then(state_record(LID, LedgerInfo(master_key=KEY.hex())), lambda e: None)
        journal.append_then(entry(LID, 5), lambda e: None, prefix=add_prefix(LID, 5))
        await journal.sync()

    h.run(late_records())
    h.crash()
    bookie = h.boot()
    assert bookie.ledger_info(LID) is None and bookie.ledger_entries(LID) == []
    assert h.read(LID, 5).status == StatusCode.ENOLEDGER
    assert h.add(LID, 6).status == StatusCode.EDELETED


def test_requests_arriving_while_the_drop_runs_are_refused(harness) -> None:
    """The tombstone holds from the moment the drop starts, before it waits for the flush
    lock: an add that comes meanwhile is refused, not acknowledged and then dropped (or
    left to bring the ledger back). A second delete is answered once the drop is
    durable."""
    h = harness()
    bookie = h.boot()
    assert bookie.storage is not None
    for i in range(3):
        assert h.add(LID, i).status == StatusCode.EOK

    def send(op: OpCode, eid: int = -1, **kw: Any) -> asyncio.Future:
        kw.setdefault("master_key", KEY)
        return asyncio.ensure_future(h.serve(Request(op, next_txn(), LID, eid, **kw)))

    async def main() -> None:
        async with bookie.storage.exclusive():  # a flush under way: the drop waits
            delete = send(OpCode.DELETE_LEDGER)
            await asyncio.sleep(0.05)
            assert not delete.done()
            add = await send(OpCode.ADD, 3, body=entry(LID, 3))
            assert add.status == StatusCode.EDELETED
            again = send(OpCode.DELETE_LEDGER)
            await asyncio.sleep(0.05)
            assert not again.done()  # not durable yet: not answered yet
        assert (await delete).status == StatusCode.EOK
        assert (await again).status == StatusCode.EOK

    h.run(main())
    h.crash()
    h.boot()
    assert_refused_everything(h)


def test_garbage_collection_keeps_a_tombstone_too(harness) -> None:
    """A bookie that missed the delete drops the ledger at its next rounds (no metadata:
    the harness's store has none) and refuses its old writer from then on."""
    h = harness()
    bookie = h.boot()
    for i in range(3):
        assert h.add(LID, i).status == StatusCode.EOK
    assert h.run(bookie.gc.collect()) == []  # confirmed gone once: kept for now
    assert h.add(LID, 3).status == StatusCode.EOK
    assert h.run(bookie.gc.collect()) == [LID]
    assert_refused_everything(h)
    h.crash()
    h.boot()
    assert_refused_everything(h)


def test_bp46_neither_protects_nor_repairs_a_deleted_ledger(harness) -> None:
    """A suspicious boot (journal off) while the ledger's metadata is still there (a
    delete under way): phase one gives it no fence or limbo record, and repair finds
    nothing to do."""
    h = harness(journal_write_data=False, run_repair=False)
    h.meta.create_ledger(
        LedgerMetadata(
            ledger_id=LID,
            ensemble_size=3,
            write_quorum=3,
            ack_quorum=3,
            fragments=((0, ("b1", "b2", "b3")),),
            password_hash=KEY.hex(),
        )
    )
    h.boot()
    deleted(h)
    h.crash()
    bookie = h.boot()
    assert bookie.suspicion and bookie.phase_one_done
    assert bookie.protected_ledgers == 0
    assert bookie.ledger_info(LID) is None and bookie.limbo_ledgers() == []
    assert h.run(bookie.repairer._repair(LID)) is True
    assert bookie.ledger_info(LID) is None
    assert_refused_everything(h)
    with pytest.raises(LedgerDeletedError, match="dropped ledger 7"):
        h.run(bookie.set_ledger_state(LID, limbo=True))


def test_without_tombstones_the_old_writer_brings_the_ledger_back(harness) -> None:
    """What the tombstone prevents (the UNSAFE switch forgets deletions): the old
    writer's next add recreates the deleted ledger and is acknowledged."""
    h = harness(unsafe_forget_deletions=True)
    h.boot()
    deleted(h)
    assert h.add(LID, 3).status == StatusCode.EOK
    assert h.bookie is not None and h.bookie.ledger_entries(LID) == [3]


def test_a_truncation_waiting_while_the_ledger_is_dropped_is_refused(harness) -> None:
    """A takeover's truncating no-op admitted before the drop, whose cut waits for the
    flush lock behind it: it finds the ledger dropped and is refused, rather than set
    the ledger's state again and be acknowledged."""
    h = harness()
    bookie = h.boot()
    assert bookie.storage is not None
    for i in range(3):
        assert h.add(LID, i, term=4).status == StatusCode.EOK

    async def main() -> None:
        async with bookie.storage.exclusive():
            noop = DIGEST.pack(LID, 3, 2, b"")
            truncating = asyncio.ensure_future(
                h.serve(
                    Request(
                        OpCode.ADD,
                        next_txn(),
                        LID,
                        3,
                        flags=AddFlags.TRUNCATE,
                        term=5,
                        master_key=KEY,
                        body=noop,
                    )
                )
            )
            await asyncio.sleep(0.05)  # admitted; its cut waits for the lock
            delete = asyncio.ensure_future(
                h.serve(Request(OpCode.DELETE_LEDGER, next_txn(), LID, -1, master_key=KEY))
            )
            await asyncio.sleep(0.05)
        assert (await truncating).status == StatusCode.EDELETED
        assert (await delete).status == StatusCode.EOK

    h.run(main())
    assert_refused_everything(h)


def test_a_delete_is_answered_after_the_adds_admitted_before_it(harness) -> None:
    """An add admitted before the drop (its journal group still waiting for company) is
    answered before the DELETE_LEDGER: once a bookie said a ledger is dropped, it
    acknowledges nothing more of it."""
    h = harness(journal_max_group_wait=0.3)
    h.boot()
    assert h.add(LID, 0).status == StatusCode.EOK
    order: list[str] = []

    async def main() -> None:
        def send(op: OpCode, eid: int, name: str, **kw: Any) -> asyncio.Future:
            async def one() -> Any:
                resp = await h.serve(Request(op, next_txn(), LID, eid, master_key=KEY, **kw))
                order.append(name)
                return resp

            return asyncio.ensure_future(one())

        add = send(OpCode.ADD, 1, "add", body=entry(LID, 1))
        await asyncio.sleep(0)  # admitted and journaled, waiting for its group
        delete = send(OpCode.DELETE_LEDGER, -1, "delete")
        assert (await delete).status == StatusCode.EOK
        assert (await add).status == StatusCode.EOK

    h.run(main())
    assert order == ["add", "delete"]
    assert_refused_everything(h)
