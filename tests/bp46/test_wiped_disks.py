"""A bookie whose disks were replaced: refused without auto-fix, repaired with it.

In every case every acknowledged entry stays readable, and after the repair the
bookie again holds every entry its write sets assign to it.
"""

from __future__ import annotations

import json
import shutil

import pytest

from embedlog.bookie.integrity import assigned_entries
from embedlog.cli import main
from embedlog.errors import CookieError


def _fill(cluster, ledgers=3, entries=30):
    """Closed and open ledgers over 4 bookies (E4 WQ2 AQ2: each bookie holds half)."""
    c = cluster.client("writer")
    acked = {}
    handles = []
    for i in range(ledgers):
        wh = c.create_ledger(4, 2, 2)
        acked[wh.ledger_id] = [wh.add(b"%d-%d" % (wh.ledger_id, n)) for n in range(entries)]
        if i % 2 == 0:
            wh.close()
        handles.append(wh)
    return acked, handles


def _assert_all_readable(cluster, acked, name, *, recover=True):
    """Every acknowledged entry reads back (open ledgers: recovered, or up to their LAC)."""
    reader = cluster.client(name)
    for lid, ids in acked.items():
        rh = reader.open_ledger(lid, recover=recover)
        last = max(ids) if recover else rh.last_add_confirmed
        assert recover or last >= max(ids) - 1  # an open ledger's LAC trails by one at most
        got = rh.read(0, last)
        assert [e.data for e in got] == [b"%d-%d" % (lid, n) for n in range(last + 1)]


def _assert_holds_assignment(cluster, bid):
    for lid in cluster.metadata.list_ledgers():
        md = cluster.metadata.read_ledger(lid)
        last = md.last_entry_id
        for eid, _peers in assigned_entries(md, bid, last):
            assert cluster.read_from_bookie(bid, lid, eid) == b"%d-%d" % (lid, eid)


@pytest.mark.parametrize("what", ["all", "ledgers", "index", "journal"])
def test_wiped_disk_refused_without_auto_fix_then_repaired_with_it(make_cluster, what):
    cluster = make_cluster(4, flush_interval=0.05, repair_retry_interval=0.2)
    acked, _ = _fill(cluster)
    bid = cluster.bookie_ids[1]
    cluster.runtime.run(cluster.bookie(bid).flush())
    cluster.stop_bookie(bid)
    cluster.wipe_bookie(bid, what)

    with pytest.raises(CookieError, match="embedlog bookie fixcookie"):
        cluster.start_bookie(bid)
    # With one of four bookies down and no spare, recovering the open ledgers would wait for
    # an ack quorum that cannot form; reading up to their LAC needs no recovery.
    _assert_all_readable(cluster, acked, "reader-while-down", recover=False)

    cluster.start_bookie(bid, auto_fix_cookies=True)
    status = cluster.wait_repaired(bid)
    assert status["suspicious_boot"] and status["protected_ledgers"] == len(acked)
    assert status["repair"]["state"] == "done" and status["limbo_ledgers"] == 0
    _assert_all_readable(cluster, acked, "reader-after")
    _assert_holds_assignment(cluster, bid)  # every ledger is closed by now (open ones recovered)
    # The cookies are whole again: a plain restart is not suspicious.
    cluster.stop_bookie(bid)
    cluster.start_bookie(bid)
    assert not cluster.bookie(bid).status()["suspicious_boot"]


def test_copies_are_flushed_before_limbo_is_cleared(make_cluster):
    """The repair's copies reach the write cache, not the journal. Were limbo cleared
    before they are flushed, a crash would take them while the bookie, now out of limbo
    and booting cleanly (the journal is on), answers NoSuchEntry for entries it must hold."""
    cluster = make_cluster(4, flush_interval=3600.0, repair_retry_interval=0.2)
    acked, _ = _fill(cluster)
    bid = cluster.bookie_ids[1]
    cluster.stop_bookie(bid)
    cluster.wipe_bookie(bid, "all")
    cluster.start_bookie(bid, auto_fix_cookies=True)
    status = cluster.wait_repaired(bid)
    assert status["repair"]["entries_copied"] > 0 and status["limbo_ledgers"] == 0
    cluster.crash_bookie(bid)
    cluster.start_bookie(bid)
    status = cluster.bookie(bid).status()
    assert not status["suspicious_boot"] and status["limbo_ledgers"] == 0
    _assert_holds_assignment(cluster, bid)
    _assert_all_readable(cluster, acked, "reader")


def test_fixcookie_cli_then_boot_protects_and_repairs(make_cluster, capsys):
    cluster = make_cluster(4, flush_interval=0.05)
    acked, handles = _fill(cluster, ledgers=2)
    data_dir = cluster.data_dir
    bid = cluster.bookie_ids[2]
    cluster.stop()  # the embedded metadata store is one process's at a time
    for d in ("journal", "ledgers", "index"):  # the operator replaces the disks
        shutil.rmtree(data_dir / bid / d)
        (data_dir / bid / d).mkdir()

    assert main(["bookie", "fixcookie", "--data-dir", str(data_dir), bid]) == 0
    out = capsys.readouterr().out
    assert "has no cookie" in out and "next boot fences" in out
    assert main(["bookie", "fixcookie", "--data-dir", str(data_dir), bid]) == 0
    assert "nothing to fix" in capsys.readouterr().out

    again = make_cluster(4, data_dir=data_dir)  # no auto-fix: the cookies are fine now
    status = again.wait_repaired(bid)
    assert status["suspicious_boot"], "fixcookie must leave phase one pending"
    assert status["protected_ledgers"] == len(acked)
    _assert_all_readable(again, acked, "reader")
    _assert_holds_assignment(again, bid)
    for wh in handles:  # open ledgers were recovered by the repair: their writers are fenced
        assert again.metadata.read_ledger(wh.ledger_id).is_closed


def test_fixcookie_refuses_a_disk_of_another_bookie(make_cluster, capsys):
    cluster = make_cluster(3)
    data_dir = cluster.data_dir
    a, b = cluster.bookie_ids[:2]
    cluster.stop()
    shutil.copy(data_dir / b / "ledgers" / "COOKIE", data_dir / a / "ledgers" / "COOKIE")
    assert main(["bookie", "fixcookie", "--data-dir", str(data_dir), a]) != 0
    assert f"belongs to bookie {b}" in capsys.readouterr().err
    # The cluster starts without that bookie, and says why.
    again = make_cluster(3, data_dir=data_dir, auto_fix_cookies=True)
    assert list(again.failed_bookies) == [a]
    assert isinstance(again.failed_bookies[a], CookieError)
    assert "cannot be fixed automatically" in str(again.failed_bookies[a])
    assert a not in again.running_bookies()


def test_fixcookie_refuses_a_running_bookie(make_cluster, zk_uri, capsys):
    cluster = make_cluster(3, metadata_uri=zk_uri)
    bid = cluster.bookie_ids[0]
    code = main(
        ["bookie", "fixcookie", "--data-dir", str(cluster.data_dir), "--metadata-uri", zk_uri, bid]
    )
    assert code != 0
    assert "is running" in capsys.readouterr().err


def test_bookie_status_cli_reports_repair(make_cluster, zk_uri, capsys):
    cluster = make_cluster(
        3,
        metadata_uri=zk_uri,
        journal_write_data=False,
        flush_interval=3600.0,
        repair_retry_interval=0.2,
    )
    wh = cluster.client("c1").create_ledger(3, 3, 2)
    for i in range(5):
        wh.add(b"x%d" % i)
    bid = cluster.bookie_ids[0]
    cluster.crash_bookie(bid)
    cluster.start_bookie(bid)
    cluster.wait_repaired(bid)
    args = ["bookie", "status", "--data-dir", str(cluster.data_dir), "--metadata-uri", zk_uri]
    assert main([*args, bid]) == 0
    out = capsys.readouterr().out
    assert "unclean shutdown while adds skipped the journal" in out
    assert "repair: done, 1/1 ledgers" in out
    assert main([*args, "--json", bid]) == 0
    doc = json.loads(capsys.readouterr().out)[bid]  # JSON only, nothing before it
    assert doc["running"] == "writable"
    assert "unclean shutdown while adds skipped the journal" in doc["status"]["suspicious_boot"]
    assert doc["status"]["repair"]["state"] == "done"
    assert doc["status"]["repair"]["ledgers_recovered"] == 1
    # Recovery writes the entries back to the whole write set; repair copies what is left.
    assert [cluster.read_from_bookie(bid, wh.ledger_id, i) for i in range(5)] == [
        b"x%d" % i for i in range(5)
    ]
