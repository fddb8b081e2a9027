"""BP-46 for unbounded ledgers: the term is the fence, the writer keeps writing.

Phase one raises a rebooted bookie's stored term to the metadata's instead of
fencing, and keeps the ledger in limbo until its peers confirm every entry the
writer sent it before the crash; then repair copies what was lost.
"""

from __future__ import annotations

import pytest

from embedlog.transport.base import next_txn
from embedlog.wire.codes import StatusCode
from embedlog.wire.entry import Digester, DigestType, master_key
from embedlog.wire.messages import OpCode, Request

NO_FLUSH = 3600.0


def test_writer_keeps_writing_through_a_suspicious_reboot_and_repair_fills_the_gap(
    make_cluster,
):
    cluster = make_cluster(
        3, journal_write_data=False, flush_interval=NO_FLUSH, repair_retry_interval=0.05
    )
    b1 = cluster.bookie_ids[0]
    ul = cluster.client("c1").create_unbounded(3, 3, 2)
    first = [ul.append(b"a%d" % i) for i in range(10)]
    cluster.crash_bookie(b1)  # loses entries 0..9
    cluster.start_bookie(b1)
    info = cluster.bookie(b1).ledger_info(ul.ledger_id)
    assert info.limbo and not info.fenced and info.term == ul.term

    more = [ul.append(b"b%d" % i) for i in range(10)]  # not fenced: the writer goes on
    assert more == list(range(10, 20)) and first == list(range(10))
    status = cluster.wait_repaired(b1)  # peers confirm up to 9 (the LAC travels on)
    assert status["limbo_ledgers"] == 0
    expected = [b"a%d" % i for i in range(10)] + [b"b%d" % i for i in range(10)]
    assert [cluster.read_from_bookie(b1, ul.ledger_id, i) for i in range(20)] == expected
    assert [e.data for e in ul.read(0, 19)] == expected
    ul.close()


def _old_term_add(cluster, bookie, ledger_id, entry_id, term):
    body = Digester(DigestType.CRC32C).pack(ledger_id, entry_id, -1, b"from the old writer")
    req = Request(OpCode.ADD, next_txn(), ledger_id, entry_id, 0, term, 0, master_key(b""), body)
    return cluster.runtime.run(cluster.transport.request("old-writer", bookie, req, 5.0))


@pytest.mark.parametrize("skip_fence", [False, True])
def test_wiped_bookie_refuses_a_displaced_writer(make_cluster, skip_fence):
    cluster = make_cluster(
        3, auto_fix_cookies=True, repair_retry_interval=0.05, unsafe_skip_fence_on_boot=skip_fence
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
        assert cluster.bookie(b3).ledger_info(ul.ledger_id).term == taken.term
    taken.close()
