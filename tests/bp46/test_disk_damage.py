"""Disk damage between a crash (or a stop) and the next boot is found, never silent.

Each test damages a stopped bookie's real files in a LocalCluster directory: a journal
record spoilt in the middle, the LevelDB index partly deleted or corrupt, an entry log
file gone. The bookie then boots suspicious (BP-46: fence, limbo, repair from peers),
refuses to boot with an error that says what to do, or reports what it lost so that
the auditor's re-replication copies it back. In every case no acknowledged entry is
ever answered as missing, and every one reads back in the end.
"""

from __future__ import annotations

import logging

import pytest

from embedlog.auditor.replication import replicate_cluster
from embedlog.bookie.entrylog import RECORD
from embedlog.bookie.journal_replay import FRAME, journal_files
from embedlog.cli import main
from embedlog.errors import (
    BKError,
    BookieIOError,
    LedgerRecoveryError,
    NoSuchEntryError,
    NoSuchLedgerError,
)

NO_FLUSH = 3600.0  # entries stay in the journal and the write cache until the test says
ENTRIES = 30


def _write(cluster, name="writer", *, close=False, entries=ENTRIES, ack_quorum=2):
    """One ledger (E3 WQ3, AQ2 by default) of ``entries`` acknowledged entries; returns
    its handle. With AQ2 an add returns before the third bookie's ack, so that bookie may
    not hold the last entries yet: ack_quorum=3 when a test needs every bookie to."""
    wh = cluster.client(name).create_ledger(3, 3, ack_quorum)
    for i in range(entries):
        assert wh.add(b"%s-%d" % (name.encode(), i)) == i
    if close:
        wh.close()
    return wh


def _records(path):
    """(offset, payload length) of every record of a journal file."""
    data = path.read_bytes()
    out, pos = [], 0
    while pos + FRAME.size <= len(data):
        length, _ = FRAME.unpack_from(data, pos)
        out.append((pos, length))
        pos += FRAME.size + length
    return out


def _spoil_journal(cluster, bid, where, *, nth=None):
    """Flip one byte of a middle record of the bookie's journal (its length, CRC or
    payload); intact records follow it. Returns the offset of the spoilt record."""
    _start, path = journal_files(cluster.bookie_config(bid).journal_dir)[-1]
    records = _records(path)
    assert len(records) >= 5, records
    offset, length = records[len(records) // 2 if nth is None else nth]
    at = {"length": offset, "crc": offset + 5, "payload": offset + FRAME.size + length // 2}[where]
    data = bytearray(path.read_bytes())
    data[at] ^= 0x40 if where == "length" else 0xFF  # a length that reaches past the file
    path.write_bytes(bytes(data))
    return offset


def _never_negative(cluster, bid, lid, name):
    """Every entry of the ledger reads from ``bid`` or is unknown there, never missing."""
    for eid in range(ENTRIES):
        try:
            assert cluster.read_from_bookie(bid, lid, eid) == b"%s-%d" % (name.encode(), eid)
        except BKError as exc:  # unknown (limbo) is fine, a negative is not
            assert not isinstance(exc, NoSuchEntryError | NoSuchLedgerError), exc


def _all_readable(cluster, lid, name, reader="reader"):
    rh = cluster.client(reader).open_ledger(lid)
    assert rh.is_closed and rh.last_add_confirmed == ENTRIES - 1
    got = [e.data for e in rh.read(0, ENTRIES - 1)]
    assert got == [b"%s-%d" % (name.encode(), i) for i in range(ENTRIES)]


@pytest.mark.parametrize("where", ["payload", "crc", "length"])
def test_a_spoilt_journal_record_with_intact_ones_after_it_makes_a_suspicious_boot(
    make_cluster, where
):
    cluster = make_cluster(3, flush_interval=NO_FLUSH, repair_retry_interval=0.2)
    wh = _write(cluster, ack_quorum=3)  # the crashed bookie journaled every entry
    bid = cluster.bookie_ids[0]
    cluster.crash_bookie(bid)
    offset = _spoil_journal(cluster, bid, where)
    cluster.start_bookie(bid)

    status = cluster.bookie(bid).status()
    reasons = " ".join(status["suspicious_boot"])
    assert f"is corrupt at byte {offset}" in reasons and ".jnl" in reasons
    assert status["protected_ledgers"] == 1
    _never_negative(cluster, bid, wh.ledger_id, "writer")
    assert cluster.wait_repaired(bid)["limbo_ledgers"] == 0
    for eid in range(ENTRIES):  # what the spoilt record held was copied back from a peer
        assert cluster.read_from_bookie(bid, wh.ledger_id, eid) == b"writer-%d" % eid
    _all_readable(cluster, wh.ledger_id, "writer")
    # Repaired and flushed: the next crash and boot find a whole journal.
    cluster.crash_bookie(bid)
    cluster.start_bookie(bid)
    assert not cluster.bookie(bid).status()["suspicious_boot"]


def test_two_spoilt_journals_and_the_third_bookie_down_do_not_truncate_the_ledger(make_cluster):
    """An open ledger whose three bookies are one down and two with a journal spoilt in
    the middle (each in another place): recovery must not close it short."""
    cluster = make_cluster(3, flush_interval=NO_FLUSH, repair_retry_interval=0.2)
    wh = _write(cluster)
    b1, b2, b3 = cluster.bookie_ids
    # AQ2 (the recoveries below rely on it): an add returns before the slowest bookie's
    # ack, so B1 or B2 may not have journaled the last entries yet. Both must have, or an
    # entry the other's spoilt record covers would be on neither.
    for bid in (b1, b2):
        cluster.runtime.run(cluster.bookie(bid).journal.sync())
    cluster.crash_bookie(b1)
    cluster.crash_bookie(b2)
    cluster.stop_bookie(b3)
    records = len(_records(journal_files(cluster.bookie_config(b1).journal_dir)[-1][1]))
    _spoil_journal(cluster, b1, "payload", nth=records // 3)
    _spoil_journal(cluster, b2, "length", nth=2 * records // 3)
    cluster.start_bookie(b1)
    cluster.start_bookie(b2)
    assert cluster.bookie(b1).status()["suspicious_boot"]
    assert cluster.bookie(b2).status()["suspicious_boot"]
    for bid in (b1, b2):
        _never_negative(cluster, bid, wh.ledger_id, "writer")
    for eid in range(ENTRIES):  # each lost another record: one of them has every entry
        held = []
        for bid in (b1, b2):
            try:
                held.append(cluster.read_from_bookie(bid, wh.ledger_id, eid))
            except BKError:
                pass
        assert b"writer-%d" % eid in held

    # Both answer "unknown" for what they may have lost and for what lies past the end:
    # nobody can say where the ledger ends. Recovery refuses to guess, and the ledger stays
    # recoverable (with two of its three bookies in limbo it stays so until one of them
    # is repaired by hand: see docs/security.md, "Disk damage").
    for reader, third in (("reader-third-down", "down"), ("reader-third-up", "up")):
        if third == "up":
            cluster.start_bookie(b3)
        with pytest.raises(LedgerRecoveryError, match="cannot tell whether entry"):
            cluster.client(reader, request_timeout=2.0).open_ledger(wh.ledger_id)
        assert not cluster.metadata.read_ledger(wh.ledger_id).is_closed
    for eid in range(ENTRIES):
        assert cluster.read_from_bookie(b3, wh.ledger_id, eid) == b"writer-%d" % eid


def test_a_journal_file_deleted_between_two_others_makes_a_suspicious_boot(make_cluster):
    cluster = make_cluster(
        3, flush_interval=NO_FLUSH, repair_retry_interval=0.2, journal_max_file_size=400
    )
    wh = _write(cluster, ack_quorum=3)  # the crashed bookie journaled every entry
    bid = cluster.bookie_ids[0]
    cluster.crash_bookie(bid)
    files = journal_files(cluster.bookie_config(bid).journal_dir)
    assert len(files) >= 3, files
    gone_from, gone = files[1]
    gone.unlink()
    cluster.start_bookie(bid)
    reasons = " ".join(cluster.bookie(bid).status()["suspicious_boot"])
    assert f"the records from LSN {gone_from} to {files[2][0]}" in reasons
    _never_negative(cluster, bid, wh.ledger_id, "writer")
    cluster.wait_repaired(bid)
    for eid in range(ENTRIES):
        assert cluster.read_from_bookie(bid, wh.ledger_id, eid) == b"writer-%d" % eid


@pytest.mark.parametrize(
    "tail",
    [b"\x00\x00\x01\x00not a whole record", b"\x00\x00\x00\x30" + b"\x07" * 20 + bytes(4096)],
    ids=["partial record", "partial record then zeros"],
)
def test_a_torn_journal_tail_is_cut_and_the_boot_is_not_suspicious(make_cluster, caplog, tail):
    cluster = make_cluster(3, flush_interval=NO_FLUSH)
    wh = _write(cluster, ack_quorum=3)  # the crashed bookie acknowledged every entry
    bid = cluster.bookie_ids[0]
    cluster.crash_bookie(bid)
    _start, path = journal_files(cluster.bookie_config(bid).journal_dir)[-1]
    whole = path.stat().st_size
    with path.open("ab") as f:
        f.write(tail)
    with caplog.at_level(logging.WARNING, logger="embedlog.bookie.journal"):
        cluster.start_bookie(bid)
    assert f"{path}: torn tail at byte {whole} of {whole + len(tail)}, cut there" in caplog.text
    assert not cluster.bookie(bid).status()["suspicious_boot"]
    for eid in range(ENTRIES):
        assert cluster.read_from_bookie(bid, wh.ledger_id, eid) == b"writer-%d" % eid
    assert wh.add(b"writer-more") == ENTRIES  # the writer goes on: nothing was fenced


def _index_files(cluster, bid, suffix):
    return sorted(cluster.bookie_config(bid).index_dir.glob(f"*{suffix}"))


def _in_tables(cluster):
    """Fill a ledger, then restart the bookie twice: LevelDB moves what its log holds
    into table files (.ldb) when it opens, and the journal files those writes covered
    are deleted. Returns the writer's handle (its ledger closed)."""
    wh = _write(cluster, close=True)
    for _ in range(2):
        cluster.stop_bookie(cluster.bookie_ids[0])
        cluster.start_bookie(cluster.bookie_ids[0])
    assert _index_files(cluster, cluster.bookie_ids[0], ".ldb")
    return wh


def _follow_the_advice(cluster, bid, wh, exc):
    """The refusal names the index directory and the way out; taking it repairs the bookie."""
    index_dir = cluster.bookie_config(bid).index_dir
    message = str(exc.value)
    assert str(index_dir) in message and "damaged" in message
    assert "auto_fix_cookies=True" in message and "wipe_bookie" in message
    _all_readable(cluster, wh.ledger_id, "writer", "reader-while-refused")
    cluster.wipe_bookie(bid, "index")
    cluster.start_bookie(bid, auto_fix_cookies=True)
    status = cluster.wait_repaired(bid)
    assert status["suspicious_boot"] and status["repair"]["state"] == "done"
    for eid in range(ENTRIES):
        assert cluster.read_from_bookie(bid, wh.ledger_id, eid) == b"writer-%d" % eid


@pytest.mark.parametrize("lost", ["CURRENT", "MANIFEST", "table"])
def test_a_partly_deleted_index_refuses_the_boot_and_says_what_to_do(make_cluster, lost):
    cluster = make_cluster(3, flush_interval=0.05, repair_retry_interval=0.2)
    wh = _in_tables(cluster)
    bid = cluster.bookie_ids[0]
    cluster.stop_bookie(bid)
    index_dir = cluster.bookie_config(bid).index_dir
    if lost == "CURRENT":
        (index_dir / "CURRENT").unlink()
    elif lost == "MANIFEST":
        (index_dir / (index_dir / "CURRENT").read_text().strip()).unlink()
    else:
        _index_files(cluster, bid, ".ldb")[0].unlink()
    with pytest.raises(BookieIOError) as refused:
        cluster.start_bookie(bid)
    _follow_the_advice(cluster, bid, wh, refused)


def test_a_corrupt_index_log_refuses_the_boot(make_cluster):
    """LevelDB's paranoid checks: a spoilt record in its log is corruption, not skipped."""
    cluster = make_cluster(3, flush_interval=0.05, repair_retry_interval=0.2)
    _in_tables(cluster)
    bid = cluster.bookie_ids[0]
    wh = _write(cluster, "second", close=True)  # its locations are in LevelDB's log only
    cluster.runtime.run(cluster.bookie(bid).flush())
    cluster.stop_bookie(bid)
    (wal,) = [f for f in _index_files(cluster, bid, ".log") if f.stat().st_size > 200]
    data = bytearray(wal.read_bytes())
    data[len(data) // 3] ^= 0xFF
    wal.write_bytes(bytes(data))
    with pytest.raises(BookieIOError, match="Corruption") as refused:
        cluster.start_bookie(bid)
    index_dir = cluster.bookie_config(bid).index_dir
    assert str(index_dir) in str(refused.value)
    cluster.wipe_bookie(bid, "index")
    cluster.start_bookie(bid, auto_fix_cookies=True)
    cluster.wait_repaired(bid)
    for eid in range(ENTRIES):
        assert cluster.read_from_bookie(bid, wh.ledger_id, eid) == b"second-%d" % eid


def test_an_index_that_lost_its_latest_writes_makes_a_suspicious_boot(make_cluster):
    """LevelDB's log deleted: the index opens, older than the journal. The journal no
    longer has the records between the index's checkpoint and its first file, so the
    index lost writes that were flushed (the journal had been trimmed past them)."""
    # Small journal files: the flushes of the second ledger delete the ones they cover.
    cluster = make_cluster(
        3, flush_interval=0.05, repair_retry_interval=0.2, journal_max_file_size=1024
    )
    _in_tables(cluster)
    bid = cluster.bookie_ids[0]
    # AQ3: that bookie journaled every entry before the flush below, which deletes the
    # journal files they are in (with AQ2 the last ones could come after it).
    wh = _write(cluster, "second", close=True, ack_quorum=3)
    cluster.runtime.run(cluster.bookie(bid).flush())
    cluster.stop_bookie(bid)
    for wal in _index_files(cluster, bid, ".log"):
        wal.unlink()
    cluster.start_bookie(bid)
    status = cluster.bookie(bid).status()
    assert any("are missing" in r for r in status["suspicious_boot"]), status
    _never_negative(cluster, bid, wh.ledger_id, "second")
    cluster.wait_repaired(bid)
    for eid in range(ENTRIES):
        assert cluster.read_from_bookie(bid, wh.ledger_id, eid) == b"second-%d" % eid


def test_a_missing_entry_log_is_found_at_boot_and_by_the_auditor_then_repaired(make_cluster):
    cluster = make_cluster(3, flush_interval=0.05)
    wh = _write(cluster, close=True)
    bid = cluster.bookie_ids[1]
    cluster.runtime.run(cluster.bookie(bid).flush())
    cluster.stop_bookie(bid)
    logs = [p for p in cluster.bookie_config(bid).ledger_dir.glob("*.log") if p.stat().st_size]
    assert logs
    for p in logs:
        p.unlink()
    cluster.start_bookie(bid)

    damage = cluster.bookie(bid).status()["entry_log_damage"]
    assert len(damage) == len(logs) and all(str(p) in " ".join(damage) for p in logs)
    assert f"{ENTRIES} indexed entries of ledger(s) {wh.ledger_id}" in damage[0]
    with pytest.raises(BKError, match="EIO"):  # the index has it: never "no such entry"
        cluster.read_from_bookie(bid, wh.ledger_id, 0)

    report = cluster.check_metadata()
    (violation,) = report.by_category("durability")
    assert violation.ledger_id == wh.ledger_id
    assert f"bookie {bid} lacks {ENTRIES} entries" in violation.detail

    result = replicate_cluster(cluster)
    assert result.ok and result.entries_copied == ENTRIES
    for eid in range(ENTRIES):
        assert cluster.read_from_bookie(bid, wh.ledger_id, eid) == b"writer-%d" % eid
    assert cluster.check_metadata().ok
    cluster.stop_bookie(bid)  # the copies are in new entry logs: nothing is lost any more
    cluster.start_bookie(bid)
    assert cluster.bookie(bid).status()["entry_log_damage"] == []


def test_bookie_status_cli_reports_a_missing_entry_log(make_cluster, zk_uri, capsys):
    cluster = make_cluster(3, flush_interval=0.05, metadata_uri=zk_uri)
    wh = _write(cluster, close=True)
    bid = cluster.bookie_ids[0]
    cluster.runtime.run(cluster.bookie(bid).flush())
    cluster.stop_bookie(bid)
    for p in cluster.bookie_config(bid).ledger_dir.glob("*.log"):
        p.unlink()
    cluster.start_bookie(bid)
    args = ["bookie", "status", "--data-dir", str(cluster.data_dir), "--metadata-uri", zk_uri]
    assert main([*args, bid]) == 0
    out = capsys.readouterr().out
    assert "disk damage: entry log" in out and "is missing" in out
    assert f"of ledger(s) {wh.ledger_id} " in out


def test_a_new_entry_log_never_takes_the_id_of_a_missing_one(make_cluster):
    """The newest entry log deleted: the next one gets a new id, so an index entry that
    points into the lost log can never read a record of the new one."""
    cluster = make_cluster(3, flush_interval=0.05)
    wh = _write(cluster, close=True)
    bid = cluster.bookie_ids[0]
    cluster.runtime.run(cluster.bookie(bid).flush())
    cluster.stop_bookie(bid)
    newest = max(p for p in cluster.bookie_config(bid).ledger_dir.glob("*.log") if p.stat().st_size)
    for p in cluster.bookie_config(bid).ledger_dir.glob("*.log"):
        if p >= newest:
            p.unlink()
    cluster.start_bookie(bid)
    other = _write(cluster, "other", close=True)
    cluster.runtime.run(cluster.bookie(bid).flush())
    assert not newest.exists()
    assert cluster.bookie(bid).status()["entry_log_damage"]
    with pytest.raises(BKError, match="EIO"):
        cluster.read_from_bookie(bid, wh.ledger_id, 0)
    assert cluster.read_from_bookie(bid, other.ledger_id, 0) == b"other-0"


def test_an_entry_log_record_spoilt_in_place_is_found_when_read_then_repaired(make_cluster):
    cluster = make_cluster(3, flush_interval=0.05)
    wh = _write(cluster, close=True)
    bid = cluster.bookie_ids[2]
    cluster.runtime.run(cluster.bookie(bid).flush())
    cluster.stop_bookie(bid)
    spoilt = 0
    for path in cluster.bookie_config(bid).ledger_dir.glob("*.log"):
        data = bytearray(path.read_bytes())
        pos = 0
        while pos + RECORD.size <= len(data):
            length, _crc, lid, eid = RECORD.unpack_from(data, pos)
            if (lid, eid) == (wh.ledger_id, 5):
                data[pos + RECORD.size + length // 2] ^= 0xFF
                path.write_bytes(bytes(data))
                spoilt += 1
            pos += RECORD.size + length
    assert spoilt == 1
    cluster.start_bookie(bid)
    with pytest.raises(BKError, match="EIO"):  # the index has it: never "no such entry"
        cluster.read_from_bookie(bid, wh.ledger_id, 5)

    (violation,) = cluster.check_metadata().by_category("durability")
    assert f"bookie {bid} lacks 1 entry its write sets assign it: 5" in violation.detail
    result = replicate_cluster(cluster)
    assert result.ok and result.entries_copied == 1
    assert cluster.read_from_bookie(bid, wh.ledger_id, 5) == b"writer-5"
    assert cluster.check_metadata().ok
