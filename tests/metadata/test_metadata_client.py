"""MetadataClient (ledgers, ids, cookies, bookie registration) over every store."""

from __future__ import annotations

import json
import threading

import pytest

from embedlog.errors import MetadataVersionError, NoSuchLedgerInMetadataError
from embedlog.metadata.client import MetadataClient, ledger_path
from embedlog.metadata.ledger_metadata import LedgerMetadata, LedgerState
from embedlog.metadata.store import MetadataStore, NodeExistsError
from embedlog.wire.entry import DigestType


def sample(ledger_id: int = -1, **changes: object) -> LedgerMetadata:
    md = LedgerMetadata(
        ledger_id=ledger_id,
        ensemble_size=3,
        write_quorum=3,
        ack_quorum=2,
        fragments={0: ["b1", "b2", "b3"]},
        digest_type=DigestType.CRC32C,
        password_hash="ab" * 16,
        custom_metadata={"app": b"\x00\xffbinary"},
        ctime=1700000000.5,
    )
    return md.evolve(**changes) if changes else md


@pytest.fixture
def mc(store: MetadataStore) -> MetadataClient:
    return MetadataClient(store)


# -- ids ---------------------------------------------------------------------------------------


def test_next_ledger_id_counts_up(mc: MetadataClient) -> None:
    assert [mc.next_ledger_id() for _ in range(5)] == [0, 1, 2, 3, 4]


def test_next_ledger_id_unique_under_threads(store: MetadataStore) -> None:
    n, per_thread = 8, 20
    got: list[list[int]] = [[] for _ in range(n)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(n)

    def work(i: int) -> None:
        # Each thread has its own client and session: for ZooKeeper, its own connection.
        session = store.session()
        try:
            client = MetadataClient(session)
            barrier.wait()
            for _ in range(per_thread):
                got[i].append(client.next_ledger_id())
        except BaseException as exc:
            errors.append(exc)
        finally:
            session.close()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    ids = [x for part in got for x in part]
    assert sorted(ids) == list(range(n * per_thread))
    for part in got:
        assert part == sorted(part)  # one client never sees the counter go back


def test_create_ledger_ids_unique_under_threads(store: MetadataStore) -> None:
    mc = MetadataClient(store)
    n = 8
    created: list[int] = []
    lock = threading.Lock()
    barrier = threading.Barrier(n)

    def work() -> None:
        barrier.wait()
        for _ in range(5):
            md = mc.create_ledger(sample())
            with lock:
                created.append(md.ledger_id)

    threads = [threading.Thread(target=work) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(created) == len(set(created)) == n * 5
    assert sorted(mc.list_ledgers()) == sorted(created)


# -- ledgers -----------------------------------------------------------------------------------


def test_ledger_round_trip(mc: MetadataClient) -> None:
    md = mc.create_ledger(sample())
    assert md.ledger_id == 0 and md.version == 0
    back = mc.read_ledger(md.ledger_id)
    assert back == md
    assert back.version == 0
    assert back.custom_metadata == {"app": b"\x00\xffbinary"}
    assert back.ensembles == {0: ["b1", "b2", "b3"]}


def test_create_ledger_with_explicit_id(mc: MetadataClient) -> None:
    md = mc.create_ledger(sample(ledger_id=77))
    assert md.ledger_id == 77
    with pytest.raises(NodeExistsError):
        mc.create_ledger(sample(ledger_id=77))


def test_write_ledger_cas(mc: MetadataClient) -> None:
    md = mc.create_ledger(sample())
    closed = mc.write_ledger(md.evolve(state=LedgerState.CLOSED, last_entry_id=9))
    assert closed.version == 1
    # A second client still holding the version-0 copy loses the race.
    with pytest.raises(MetadataVersionError):
        mc.write_ledger(md.with_ensemble(5, ("b1", "b2", "b4")))
    now = mc.read_ledger(md.ledger_id)
    assert now.state is LedgerState.CLOSED and now.last_entry_id == 9
    assert now.version == 1


def test_concurrent_ledger_writers_one_wins(store: MetadataStore) -> None:
    mc = MetadataClient(store)
    md = mc.create_ledger(sample())
    n = 6
    barrier = threading.Barrier(n)
    outcomes: list[object] = [None] * n

    def work(i: int) -> None:
        session = store.session()
        try:
            barrier.wait()
            outcomes[i] = MetadataClient(session).write_ledger(md.evolve(last_entry_id=i))
        except MetadataVersionError as exc:
            outcomes[i] = exc
        finally:
            session.close()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    winners = [o for o in outcomes if isinstance(o, LedgerMetadata)]
    assert len(winners) == 1, outcomes
    assert all(isinstance(o, MetadataVersionError) for o in outcomes if o is not winners[0])
    assert mc.read_ledger(md.ledger_id) == winners[0]


def test_a_ledger_read_again_unchanged_is_not_parsed_again(
    mc: MetadataClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follower re-reads its stream's metadata after every LAC: the client parses the
    stored bytes only when they or their version changed (another client's write, a
    delete and a create of the same id at version 0 again)."""
    md = mc.create_ledger(sample(ledger_id=5))
    parsed: list[int] = []
    real = LedgerMetadata.from_bytes

    def from_bytes(data: bytes, version: int = -1) -> LedgerMetadata:
        parsed.append(version)
        return real(data, version)

    monkeypatch.setattr(LedgerMetadata, "from_bytes", from_bytes)
    first = mc.read_ledger(5)
    assert mc.read_ledger(5) is first and parsed == [0]
    other = MetadataClient(mc.store)
    other.write_ledger(md.evolve(last_entry_id=3))
    assert mc.read_ledger(5).last_entry_id == 3 and parsed == [0, 1]
    other.delete_ledger(5)
    other.create_ledger(sample(ledger_id=5, ensemble_size=4, write_quorum=2))
    again = mc.read_ledger(5)
    assert (again.version, again.ensemble_size, again.write_quorum) == (0, 4, 2)
    assert parsed == [0, 1, 0]


def test_missing_ledger(mc: MetadataClient) -> None:
    with pytest.raises(NoSuchLedgerInMetadataError):
        mc.read_ledger(12345)
    with pytest.raises(NoSuchLedgerInMetadataError):
        mc.write_ledger(sample(ledger_id=12345).evolve(version=0))
    with pytest.raises(NoSuchLedgerInMetadataError):
        mc.delete_ledger(12345)


def test_delete_and_list_ledgers(mc: MetadataClient) -> None:
    ids = [mc.create_ledger(sample()).ledger_id for _ in range(4)]
    mc.create_ledger(sample(ledger_id=1000))
    assert list(mc.list_ledgers()) == [*ids, 1000]
    md = mc.read_ledger(ids[1])
    mc.write_ledger(md.evolve(state=LedgerState.CLOSED))
    with pytest.raises(MetadataVersionError):
        mc.delete_ledger(ids[1], version=0)
    mc.delete_ledger(ids[1], version=1)
    mc.delete_ledger(ids[2])
    assert list(mc.list_ledgers()) == [ids[0], ids[3], 1000]


def test_unknown_fields_survive_a_rewrite(mc: MetadataClient, store: MetadataStore) -> None:
    """A newer writer's fields land in ``extra`` and are written back unchanged."""
    doc = json.loads(sample(ledger_id=5).to_bytes())
    doc["format_version"] = 2
    doc["placement_policy"] = {"name": "rack-aware", "min_racks": 2}
    doc["future_flag"] = True
    store.create(ledger_path(5), json.dumps(doc).encode())

    md = mc.read_ledger(5)
    assert md.extra == {
        "placement_policy": {"name": "rack-aware", "min_racks": 2},
        "future_flag": True,
    }
    mc.write_ledger(md.evolve(state=LedgerState.CLOSED, last_entry_id=3))

    raw = json.loads(store.get(ledger_path(5))[0])
    assert raw["placement_policy"] == {"name": "rack-aware", "min_racks": 2}
    assert raw["future_flag"] is True
    assert raw["state"] == "CLOSED"
    assert mc.read_ledger(5).extra == md.extra


# -- cluster instance, cookies, bookies, under-replication ------------------------------------


def test_instance_id_is_stable(mc: MetadataClient, store: MetadataStore) -> None:
    first = mc.instance_id()
    assert first
    assert MetadataClient(store).instance_id() == first


def test_cookie_lifecycle(mc: MetadataClient) -> None:
    assert mc.read_cookie("b1") is None
    assert mc.write_cookie("b1", b"cookie-v0", None) == 0
    with pytest.raises(NodeExistsError):
        mc.write_cookie("b1", b"again", None)
    assert mc.read_cookie("b1") == (b"cookie-v0", 0)
    assert mc.write_cookie("b1", b"cookie-v1", 0) == 1
    with pytest.raises(MetadataVersionError):
        mc.write_cookie("b1", b"stale", 0)
    mc.delete_cookie("b1")
    mc.delete_cookie("b1")  # idempotent
    assert mc.read_cookie("b1") is None


def test_bookie_registration(mc: MetadataClient, store: MetadataStore) -> None:
    b1, b2 = store.session(), store.session()
    mc.register_bookie(b1, "b1", {"address": "127.0.0.1:3181", "rack": "/r1"}, readonly=False)
    mc.register_bookie(b2, "b2", {"address": "127.0.0.1:3182"}, readonly=False)
    assert mc.writable_bookies() == ["b1", "b2"]
    assert mc.bookie_info("b1") == {"address": "127.0.0.1:3181", "rack": "/r1"}

    mc.register_bookie(b2, "b2", {"address": "127.0.0.1:3182"}, readonly=True)
    assert mc.writable_bookies() == ["b1"]
    assert mc.readonly_bookies() == ["b2"]
    assert mc.bookie_info("b2") == {"address": "127.0.0.1:3182"}

    mc.unregister_bookie(b1, "b1")
    assert mc.writable_bookies() == []
    assert mc.bookie_info("b1") is None

    b2.expire()  # type: ignore[attr-defined]  # the bookie crashed
    assert mc.readonly_bookies() == []
    assert mc.bookie_info("b2") is None
    b1.close()


def test_registration_vanishes_when_bookie_session_closes(
    mc: MetadataClient, store: MetadataStore
) -> None:
    session = store.session()
    mc.register_bookie(session, "b9", {"address": "x"}, readonly=False)
    session.close()
    assert mc.writable_bookies() == []


def test_underreplication_marks(mc: MetadataClient) -> None:
    mc.mark_underreplicated(3, ["b2", "b1"])
    mc.mark_underreplicated(3, ["b9"])  # the first mark (and its time) stays
    mc.mark_underreplicated(11, ["b1"])
    marks = mc.underreplicated()
    assert sorted(marks) == [3, 11]
    assert marks[3]["bookies"] == ["b1", "b2"]
    assert isinstance(marks[3]["since"], float)
    mc.clear_underreplicated(3)
    mc.clear_underreplicated(3)
    assert sorted(mc.underreplicated()) == [11]
