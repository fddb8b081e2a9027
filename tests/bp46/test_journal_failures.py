"""BP-46 state changes made for many ledgers at once (phase one at boot, limbo cleared by
repair) when the journal write that should make them durable fails: the boot or the
repair step fails with that error, and no ledger's journal future is left with an error
nobody retrieved. That part is checked by tests/escaped_errors.py at teardown: until the
test's log records are gone, the journal error they carry keeps the futures alive."""

from __future__ import annotations

import pytest

from embedlog.bookie.journal import Journal
from embedlog.cluster_bookies import repair_client_name

NO_FLUSH = 3600.0


def failing_journal(monkeypatch, journal_dir):
    real = Journal._write

    def write(self, parts, size, batch_lsn):
        if self.dir == journal_dir:
            raise OSError(5, "injected journal write error")
        return real(self, parts, size, batch_lsn)

    monkeypatch.setattr(Journal, "_write", write)


def crashed_with_ledgers(make_cluster, count=4):
    cluster = make_cluster(3, journal_write_data=False, flush_interval=NO_FLUSH)
    b1 = cluster.bookie_ids[0]
    client = cluster.client("c1")
    ledgers = []
    for _ in range(count):
        wh = client.create_ledger(3, 3, 2)
        wh.add(b"x")
        ledgers.append(wh.ledger_id)
    cluster.crash_bookie(b1)  # unclean, without the journal: phase one at the next boot
    return cluster, b1, ledgers


def test_phase_one_fails_whole_when_its_journal_write_fails(make_cluster, monkeypatch):
    cluster, b1, _ledgers = crashed_with_ledgers(make_cluster)
    failing_journal(monkeypatch, cluster.bookie_config(b1).journal_dir)
    with pytest.raises(OSError, match="injected"):
        cluster.start_bookie(b1)
    monkeypatch.undo()
    cluster.start_bookie(b1)  # phase one again, whole
    assert cluster.bookie(b1).status()["protected_ledgers"] == 4


def test_clearing_limbo_fails_whole_when_its_journal_write_fails(make_cluster, monkeypatch):
    cluster, b1, ledgers = crashed_with_ledgers(make_cluster)
    for peer in cluster.bookie_ids[1:]:  # the repair waits: this test clears limbo itself
        cluster.network.block(repair_client_name(b1), peer)
    cluster.start_bookie(b1)
    bookie = cluster.bookie(b1)
    assert sorted(bookie.limbo_ledgers()) == ledgers
    failing_journal(monkeypatch, cluster.bookie_config(b1).journal_dir)
    with pytest.raises(OSError, match="injected"):
        cluster.runtime.run(bookie.clear_limbo(ledgers))
    cluster.crash_bookie(b1)


def test_repair_outlives_a_disk_error_while_it_clears_limbo(make_cluster, monkeypatch):
    """A full or failing disk under the repair's last step (the flush of what it copied,
    the records that clear limbo) used to end the repair until the next boot, leaving the
    entries the bookie lost below their ack quorum (simulator seed 132 of
    bounded-nojournal-races). The repair now tries that step again after its interval."""
    from embedlog.bookie.repair_services import RepairServices

    cluster, b1, ledgers = crashed_with_ledgers(make_cluster)
    real = RepairServices.clear_limbo
    calls = []

    async def clear_limbo(self, ledger_ids):
        calls.append(list(ledger_ids))
        if len(calls) == 1:
            raise OSError(28, "No space left on device (injected)")
        return await real(self, ledger_ids)

    monkeypatch.setattr(RepairServices, "clear_limbo", clear_limbo)
    cluster.start_bookie(b1, repair_retry_interval=0.05)
    status = cluster.wait_repaired(b1)
    assert status["repair"]["state"] == "done", status["repair"]
    assert len(calls) >= 2
    bookie = cluster.bookie(b1)
    assert bookie.limbo_ledgers() == []
    for lid in ledgers:
        assert cluster.read_from_bookie(b1, lid, 0) == b"x"  # copied back, readable
