"""A long-lived stream: fragment rollover, trimming, bounded metadata and bookie disk."""

from __future__ import annotations

# 20,000 entries keep this test at a few seconds on two cores; the behaviour it checks
# (space stays flat while the stream grows) is the same at 100,000 (run it with
# STREAM_ENTRIES=100000 to see).
import os

import pytest
from unbounded_helpers import raw_add, stored, wait_until

from embedlog import NoSuchEntryError
from embedlog.unbounded import layout

STREAM_ENTRIES = int(os.environ.get("STREAM_ENTRIES", "20000"))
FRAGMENT = 500
KEEP = 1000  # the stream keeps about the last KEEP entries
PAYLOAD = b"p" * 200


def disk_use(path) -> int:
    total = 0
    for f in path.rglob("*"):
        try:
            total += f.stat().st_size if f.is_file() else 0
        except FileNotFoundError:
            pass  # a journal or entry log removed while we walked the directory
    return total


def test_long_stream_trimmed_as_it_goes_stays_bounded(make_cluster, tmp_path):
    cluster = make_cluster(
        4,
        data_dir=tmp_path / "stream",
        entry_log_max_size=64 * 1024,
        journal_max_file_size=256 * 1024,
        flush_interval=0.2,
    )
    ul = cluster.client("w").create_unbounded(3, 3, 2, fragment_max_entries=FRAGMENT)
    samples: list[tuple[int, int, int]] = []  # (entries, metadata bytes, max bookie bytes)
    batch = 1000
    for done in range(0, STREAM_ENTRIES, batch):
        futures = [ul.append_async(PAYLOAD) for _ in range(batch)]
        last = futures[-1].result()
        assert last == done + batch - 1
        ul.trim(last + 1 - KEEP)
        md = cluster.metadata.read_ledger(ul.ledger_id)
        per_bookie = [disk_use(tmp_path / "stream" / b) for b in cluster.bookie_ids]
        samples.append((last + 1, len(md.to_bytes()), max(per_bookie)))
    md = cluster.metadata.read_ledger(ul.ledger_id)
    # Fragments rolled over and the trimmed ones left the metadata.
    assert ul.writer.rollovers >= STREAM_ENTRIES // FRAGMENT - 1
    assert len(md.fragments) <= KEEP // FRAGMENT + 1
    assert layout.first_entry(md) >= STREAM_ENTRIES - KEEP - FRAGMENT
    assert md.bookies() <= set(cluster.bookie_ids)
    # Bounded: the metadata and each bookie's disk use at the end are no larger than
    # early on (with slack), while the bytes written grew twentyfold.
    early_md = max(s[1] for s in samples[1:4])
    early_disk = max(s[2] for s in samples[1:4])
    late_md = max(s[1] for s in samples[-5:])
    late_disk = max(s[2] for s in samples[-5:])
    written = STREAM_ENTRIES * len(PAYLOAD)
    assert late_md <= early_md * 1.5, samples
    assert late_disk <= early_disk * 3, samples
    # Far below what was written: at this scale the journal files (256 KiB) and entry logs
    # (64 KiB) a bookie keeps open dominate, not the retained 1,000 entries.
    assert late_disk < written / 2, samples
    # The retained tail reads back; trimmed entries are gone.
    low = layout.first_entry(md)
    assert [e.entry_id for e in ul.read(low, low + 2)] == [low, low + 1, low + 2]
    with pytest.raises(NoSuchEntryError):
        ul.read(0, 0)
    follower = cluster.client("f").open_unbounded(ul.ledger_id, takeover=False)
    wait_until(lambda: follower.read_last_add_confirmed() >= STREAM_ENTRIES - 1)
    tail = follower.tail(0, timeout=30.0)  # the entry is there: next() does not wait
    assert next(tail).entry_id == low  # a tail from 0 starts at the low-water mark


def test_fragments_roll_over_onto_fresh_ensembles(make_cluster):
    cluster = make_cluster(5)
    ul = cluster.client("w").create_unbounded(3, 3, 2, fragment_max_entries=20)
    futures = [ul.append_async(b"x%d" % i) for i in range(200)]
    assert futures[-1].result() == 199
    md = cluster.metadata.read_ledger(ul.ledger_id)
    assert [first for first, _ in md.fragments] == list(range(0, 200, 20))
    assert md.bookies() == set(cluster.bookie_ids)
    # Each fragment's ensemble differs from the one before it (a fresh one from placement).
    for (_, a), (_, b) in zip(md.fragments, md.fragments[1:], strict=False):
        assert set(a) != set(b)
    # A takeover keeps the setting.
    ul2 = cluster.client("c2").open_unbounded(ul.ledger_id)
    assert ul2.writer.fragment_max_entries == 20
    ids = [ul2.append(b"y") for _ in range(25)]
    md = cluster.metadata.read_ledger(ul.ledger_id)
    assert md.fragments[-1][0] > ids[0]
    assert [e.data for e in ul2.read(0, 199)] == [b"x%d" % i for i in range(200)]


def test_trim_drops_whole_fragments_only(make_cluster):
    cluster = make_cluster(3)
    ul = cluster.client("w").create_unbounded(3, 3, 2, fragment_max_entries=10)
    for f in [ul.append_async(b"%d" % i) for i in range(35)]:
        f.result()
    ul.trim(25)  # fragments 0-9 and 10-19 go; 20-29 holds 25, so it stays whole
    md = cluster.metadata.read_ledger(ul.ledger_id)
    assert [first for first, _ in md.fragments] == [20, 30]
    assert [e.entry_id for e in ul.read(20, 21)] == [20, 21]
    for b in cluster.bookie_ids:
        assert all(e >= 20 for e in cluster.bookie(b).ledger_entries(ul.ledger_id))
    with pytest.raises(NoSuchEntryError):
        ul.read(19, 20)
    ul.trim(10_000)  # never the last fragment
    md = cluster.metadata.read_ledger(ul.ledger_id)
    assert [first for first, _ in md.fragments] == [30]


def test_a_new_fragment_drops_an_older_terms_leftovers(make_cluster):
    """A bookie outside the last fragment at a takeover misses its truncate no-op and may
    keep an older term's entries (say, adds of the old writer to a bookie its ensemble
    change then dropped). Before a new fragment that includes the bookie is written, the
    writer has it drop what it holds from the fragment's first id up (once per term), so
    such an id can never be read back stale from it."""
    cluster = make_cluster(4)
    ul1 = cluster.client("c1").create_unbounded(3, 3, 2, fragment_max_entries=10)
    lid = ul1.ledger_id
    outsider = (set(cluster.bookie_ids) - set(ul1.metadata.last_fragment[1])).pop()
    for i in range(5):
        ul1.append(b"old-%d" % i)
    for eid in (12, 13):  # what term 1 left there
        assert raw_add(cluster, outsider, lid, eid, 1, b"stale").status == 0
    ul2 = cluster.client("c2").open_unbounded(lid)  # term 2, no-op at 5 (not on outsider)
    assert stored(cluster, outsider, lid, 12) == b"stale"
    assert [ul2.append(b"new-%d" % i) for i in range(5)] == [6, 7, 8, 9, 10]
    md = cluster.metadata.read_ledger(lid)
    assert md.fragments[-1][0] == 10 and outsider in md.fragments[-1][1]
    assert stored(cluster, outsider, lid, 12) is None  # gone before id 12 is written
    assert stored(cluster, outsider, lid, 13) is None
    more = [ul2.append(b"new-%d" % i) for i in range(5, 8)]
    assert more == [11, 12, 13]
    assert [e.data for e in ul2.read(12, 13)] == [b"new-6", b"new-7"]
