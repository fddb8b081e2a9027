"""BP-46 for unbounded ledgers: the term is the fence; repair takes the stream over.

Phase one raises a rebooted bookie's stored term to the metadata's instead of
fencing, and keeps the ledger in limbo. Repair then takes the ledger over (BP-46
recovers open ledgers; a takeover is an unbounded ledger's recovery), which
settles its end, and copies what was lost up to it.
"""

from __future__ import annotations

import time

import pytest

from embedlog.errors import InvalidTermError
from embedlog.metadata.ledger_metadata import LedgerState
from embedlog.transport.base import next_txn
from embedlog.wire.codes import StatusCode
from embedlog.wire.entry import Digester, DigestType, master_key
from embedlog.wire.messages import OpCode, Request

NO_FLUSH = 3600.0


def test_a_suspicious_reboot_takes_the_stream_over_and_repair_fills_the_gap(make_cluster):
    cluster = make_cluster(
        3, journal_write_data=False, flush_interval=NO_FLUSH, repair_retry_interval=0.05
    )
    b1 = cluster.bookie_ids[0]
    ul = cluster.client("c1").create_unbounded(3, 3, 2)
    first = [ul.append(b"a%d" % i) for i in range(10)]
    cluster.crash_bookie(b1)  # loses entries 0..9
    cluster.start_bookie(b1)
    status = cluster.wait_repaired(b1)
    assert status["limbo_ledgers"] == 0 and status["repair"]["ledgers_recovered"] == 1
    # The repair took the stream over (BP-46 recovers open ledgers): the old writer is
    # displaced, and continues by taking over again.
    with pytest.raises(InvalidTermError):
        ul.append(b"b0")
    expected = [b"a%d" % i for i in range(10)]
    assert first == list(range(10))
    assert [cluster.read_from_bookie(b1, ul.ledger_id, i) for i in range(10)] == expected
    again = cluster.client("c1").open_unbounded(ul.ledger_id)
    more = [again.append(b"b%d" % i) for i in range(3)]
    visible = [e.data for e in again.read(0, more[-1])]
    assert visible == expected + [b"b%d" % i for i in range(3)]
    again.close()


def test_limbo_lasts_until_every_entry_the_bookie_acknowledged_is_back(make_cluster):
    """Race 2 of issue 12: the bookie acknowledged e2 from its write cache and lost it
    in a crash; after the reboot the writer's first add to it is a resend of e1 < e2
    (e1's first add was lost). Limbo must not end before e2 is back: a bookie never
    answers NoSuchEntry for an entry it acknowledged."""
    cluster = make_cluster(
        3, journal_write_data=False, flush_interval=NO_FLUSH, repair_retry_interval=0.05
    )
    b1 = cluster.bookie_ids[0]
    ul = cluster.client("c1", request_timeout=0.5).create_unbounded(3, 3, 2)
    lid = ul.ledger_id
    assert ul.append(b"e0") == 0
    cluster.network.drop_next("c1", b1, "add")
    assert ul.append(b"e1") == 1  # lost on b1, acknowledged by the other two
    assert ul.append(b"e2") == 2  # acknowledged by b1 too, from its write cache
    cluster.crash_bookie(b1)  # e0..e2 gone from b1
    cluster.start_bookie(b1)
    # The writer's retry resends e1 to b1 first, then it goes on appending (until the
    # repair's takeover displaces it).
    while not cluster.bookie(b1).ledger_entries(lid):
        time.sleep(0.01)
    for i in range(3, 6):
        try:
            ul.append(b"e%d" % i)
        except InvalidTermError:
            break
    cluster.wait_repaired(b1)
    assert cluster.bookie(b1).ledger_info(lid).limbo is False
    assert [cluster.read_from_bookie(b1, lid, i) for i in range(3)] == [b"e0", b"e1", b"e2"]


def _old_term_add(cluster, bookie, ledger_id, entry_id, term):
    body = Digester(DigestType.CRC32C).pack(ledger_id, entry_id, -1, b"from the old writer")
    req = Request(OpCode.ADD, next_txn(), ledger_id, entry_id, 0, term, 0, master_key(b""), body)
    return cluster.runtime.run(cluster.transport.request("old-writer", bookie, req, 5.0))


@pytest.mark.parametrize("skip_fence", [False, True])
def test_wiped_bookie_refuses_a_displaced_writer(make_cluster, skip_fence):
    # No repair after the boot: it would take the stream over once more (a later term), and
    # then even the unsafe build refuses the old writer, by that term, as soon as the
    # repair outruns the add (it did on a loaded machine). The refusal is the boot's.
    cluster = make_cluster(
        3, auto_fix_cookies=True, run_repair=False, unsafe_skip_fence_on_boot=skip_fence
    )
    b3 = cluster.bookie_ids[2]
    ul = cluster.client("c1").create_unbounded(3, 3, 2)
    for i in range(5):
        ul.append(b"t1-%d" % i)
    taken = cluster.client("c2").open_unbounded(ul.ledger_id)  # term 2 everywhere
    assert taken.term > ul.term
    cluster.stop_bookie(b3)
    cluster.wipe_bookie(b3, "all")
    cluster.start_bookie(b3)  # the wiped disk forgot term 2

    resp = _old_term_add(cluster, b3, ul.ledger_id, 100, ul.term)
    if skip_fence:
        # The unsafe switch shows what the term raise prevents: the empty disk takes an
        # entry from the writer the takeover displaced.
        assert resp.status == StatusCode.EOK
    else:
        assert resp.status == StatusCode.EINVALIDTERM
        assert resp.term == cluster.bookie(b3).ledger_info(ul.ledger_id).term == taken.term
    taken.close()


def test_a_copy_that_fails_is_retried_without_taking_the_stream_over_again(make_cluster):
    """The repair's takeover settled the end, but an entry below it cannot be copied yet
    (its only other copy is on a bookie that is down). Later rounds retry the copy with
    the end they have: taking the ledger over again would displace its writer every
    round and the stream would never be writable."""
    cluster = make_cluster(
        4, journal_write_data=False, flush_interval=NO_FLUSH, repair_retry_interval=0.05
    )
    ul = cluster.client("c1", request_timeout=0.5).create_unbounded(3, 2, 2)
    lid = ul.ledger_id
    for i in range(14):
        ul.append(b"a%d" % i)
    me, peer = ul.metadata.last_fragment[1][:2]
    cluster.stop_bookie(peer)  # down for a while: entry 0 has no other copy
    cluster.crash_bookie(me)  # journal-less: loses its entries
    cluster.start_bookie(me)
    while cluster.metadata.read_ledger(lid).term < 2:
        time.sleep(0.01)
    rounds = cluster.bookie(me).repairer.progress
    while "no peer gave a good copy" not in rounds.waiting.get(lid, ""):
        time.sleep(0.01)
    time.sleep(0.5)  # about ten retry rounds
    md = cluster.metadata.read_ledger(lid)
    assert (md.term, md.state) == (2, LedgerState.OPEN)
    assert cluster.bookie(me).ledger_info(lid).limbo  # not before the copy is back
    cluster.start_bookie(peer)
    cluster.wait_repaired(me)
    assert cluster.metadata.read_ledger(lid).term == 2
    assert [cluster.read_from_bookie(me, lid, 0)] == [b"a0"]


def test_a_takeovers_noop_outlives_a_crash_without_the_journal(make_cluster):
    """The no-op a takeover writes comes with a cut above its id, which leaves whatever the
    bookie held at that id (an older term's entry, never acknowledged, in simulator seed
    7142 of ``unbounded-corrupt``), and the cut's flush makes that durable. The no-op is
    journaled even without the journal: a crash before the next flush keeps it, and the
    bookie serves the no-op there, not the older entry nor a gap."""
    cluster = make_cluster(3, journal_write_data=False, flush_interval=NO_FLUSH, run_repair=False)
    ul = cluster.client("c1").create_unbounded(3, 3, 2)
    for i in range(3):
        ul.append(b"a%d" % i)
    taken = cluster.client("c2").open_unbounded(ul.ledger_id)  # its no-op at 3
    assert taken.append(b"b0") == 4
    b1 = cluster.bookie_ids[0]
    cluster.crash_bookie(b1)  # the write cache is gone: b0 with it, not the no-op
    cluster.start_bookie(b1)
    assert cluster.read_from_bookie(b1, ul.ledger_id, 3) == b""  # the no-op's empty payload
    assert [cluster.read_from_bookie(b1, ul.ledger_id, i) for i in range(3)] == [
        b"a0",
        b"a1",
        b"a2",
    ]
    taken.close()
