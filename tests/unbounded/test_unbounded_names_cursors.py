"""Named streams and durable cursors, on every metadata store (memory, LevelDB, ZooKeeper)."""

from __future__ import annotations

import threading

import pytest

from embedlog.errors import CursorRewindError, NoSuchLedgerError, StreamNameTakenError
from embedlog.metadata.streams import check_name, cursor_may_move

IDLE = 30.0


@pytest.fixture(params=["memory", "leveldb", "zookeeper"])
def streams_cluster(request, make_cluster):
    uri = {"memory": "memory://", "leveldb": None}.get(request.param)
    if request.param == "zookeeper":
        uri = request.getfixturevalue("zk_uri")
    return make_cluster(3, metadata_uri=uri)


@pytest.mark.parametrize(
    ("committed", "new", "force", "allowed"),
    [
        (None, 0, False, True),
        (None, -1, False, True),
        (5, 5, False, True),
        (5, 9, False, True),
        (5, 4, False, False),
        (5, 4, True, True),
        (5, -1, True, True),
    ],
)
def test_cursor_may_move(committed, new, force, allowed):
    assert cursor_may_move(committed, new, force) is allowed


@pytest.mark.parametrize(
    ("value", "error"),
    [("", ValueError), ("a/b", ValueError), ("..", ValueError), ("x\n", ValueError),
     ("x" * 201, ValueError), (7, TypeError), (None, TypeError)],
)  # fmt: skip
def test_check_name_refuses(value, error):
    with pytest.raises(error):
        check_name(value, "name")


def test_check_name_accepts():
    assert [check_name(v, "name") for v in ["orders", "a.b-c_d", "x" * 200, "é"]] == [
        "orders",
        "a.b-c_d",
        "x" * 200,
        "é",
    ]


def test_a_name_is_unique_opens_the_stream_and_is_freed_by_deleting_it(streams_cluster):
    c = streams_cluster.client("c")
    ul = c.create_unbounded(3, 3, 2, name="orders")
    ul.append(b"first")
    assert c.list_streams() == {"orders": ul.ledger_id}
    ledgers = set(c.list_ledgers())
    with pytest.raises(StreamNameTakenError, match="orders"):
        c.create_unbounded(3, 3, 2, name="orders")
    assert set(c.list_ledgers()) == ledgers  # the refused create left no ledger behind
    other = streams_cluster.client("o")
    follower = other.open_unbounded("orders", takeover=False)
    assert follower.ledger_id == ul.ledger_id
    assert [e.data for e in follower.read(0, 0)] == [b"first"]
    writer = other.open_unbounded("orders")  # a takeover by name
    assert writer.term == 2 and writer.append(b"second") == 2  # after the no-op at 1
    with pytest.raises(NoSuchLedgerError, match="no stream named 'invoices'"):
        other.open_unbounded("invoices")
    c.delete_ledger(ul.ledger_id)
    assert c.list_streams() == {}
    again = c.create_unbounded(3, 3, 2, name="orders")
    assert again.ledger_id != ul.ledger_id
    assert other.list_streams() == {"orders": again.ledger_id}


def test_two_clients_creating_the_same_name_at_once_one_wins(streams_cluster):
    clients = [streams_cluster.client(f"c{i}") for i in range(4)]
    outcomes: list[object] = []
    go = threading.Barrier(len(clients))

    def create(client) -> None:
        go.wait()
        try:
            outcomes.append(client.create_unbounded(3, 3, 2, name="race").ledger_id)
        except StreamNameTakenError as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=create, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [o for o in outcomes if isinstance(o, int)]
    assert len(winners) == 1 and len(outcomes) == len(clients)
    assert clients[0].list_streams() == {"race": winners[0]}
    assert set(clients[0].list_ledgers()) == {winners[0]}


def test_a_name_left_behind_by_an_interrupted_delete_is_free(streams_cluster):
    """The ledger's node went but the delete stopped before freeing the name."""
    c = streams_cluster.client("c")
    ul = c.create_unbounded(3, 3, 2, name="orders")
    c.runtime.run(c.ctx.meta(c.ctx.metadata.delete_ledger, ul.ledger_id))
    assert c.list_streams() == {}
    assert c.create_unbounded(3, 3, 2, name="orders").ledger_id != ul.ledger_id


def test_cursors_commit_forward_refuse_rewinds_and_survive_clients(streams_cluster):
    c = streams_cluster.client("c")
    ul = c.create_unbounded(3, 3, 2, name="s")
    for i in range(10):
        ul.append(b"%d" % i)
    ul.commit("billing", 3)
    ul.commit("audit", 7)
    ul.commit("billing", 5)
    ul.commit("billing", 5)  # the same position again: fine
    with pytest.raises(CursorRewindError, match="billing"):
        ul.commit("billing", 4)
    with pytest.raises(ValueError, match="past the last add confirmed"):
        ul.commit("billing", 10)
    other = streams_cluster.client("o").open_unbounded("s", takeover=False)
    assert other.cursors() == {"billing": 5, "audit": 7}
    other.commit("audit", 2, force=True)
    ul.delete_cursor("billing")
    ul.delete_cursor("billing")  # already gone: nothing happens
    assert ul.cursors() == {"audit": 2}
    c.delete_ledger(ul.ledger_id)
    fresh = c.create_unbounded(3, 3, 2)
    assert fresh.cursors() == {}
    assert streams_cluster.client("x").create_unbounded(3, 3, 2, name="s").cursors() == {}


def test_tail_with_a_cursor_starts_after_its_position_or_at_the_trim_point(make_cluster):
    cluster = make_cluster(3)
    ul = cluster.client("w").create_unbounded(3, 3, 2, fragment_max_entries=10)
    for i in range(40):
        ul.append(b"%d" % i)
    ul.trim(20)
    f = cluster.client("f").open_unbounded(ul.ledger_id, takeover=False)
    fresh = f.tail(timeout=IDLE, cursor="new")
    assert next(fresh).entry_id == 20 and fresh.skipped == 0
    f.commit("c", 30)
    assert [e.entry_id for e in f.tail(cursor="c", timeout=0)] == list(range(31, 40))
    f.commit("old", 25)
    ul.trim(30)
    old = f.tail(cursor="old", timeout=0)
    assert [e.entry_id for e in old] == list(range(30, 40))
    assert old.skipped == 4  # 26..29 were trimmed before the cursor's consumer read them
    with pytest.raises(ValueError, match="not both"):
        f.tail(5, cursor="c")


def test_a_consumer_restarting_from_its_cursor_while_the_writer_appends_and_trims(
    make_cluster,
):
    """Each round a new client resumes from cursor "billing", takes some entries, commits
    every 25 and then stops abruptly (what it took after its last commit is lost with it,
    as an application's uncommitted work would be). The writer keeps appending and trims
    whole fragments below the cursor. In the end the committed output holds every entry
    exactly once, in order."""
    cluster = make_cluster(4)
    writer = cluster.client("w").create_unbounded(3, 3, 2, fragment_max_entries=40, name="pay")
    total = 1200
    appended = threading.Event()

    def write() -> None:
        for i in range(total):
            writer.append(b"e%d" % i)
            if i % 100 == 99:
                below = writer.cursors().get("billing", -1) + 1
                writer.trim(max(0, min(below, i - 100)))  # retention, held back by the cursor
        appended.set()

    t = threading.Thread(target=write)
    t.start()
    output: list[tuple[int, bytes]] = []
    rounds = 0
    while not output or output[-1][0] != total - 1:
        rounds += 1
        client = cluster.client(f"consumer{rounds}")
        ul = client.open_unbounded("pay", takeover=False)
        taken: list[tuple[int, bytes]] = []
        tail = ul.tail(cursor="billing", timeout=IDLE)
        for e in tail:
            taken.append((e.entry_id, e.data))
            if len(taken) % 25 == 0 or e.entry_id == total - 1:
                ul.commit("billing", e.entry_id)
                output.extend(taken)
                taken.clear()
                if e.entry_id == total - 1:
                    break
            if len(taken) == 11 and rounds % 3 == 0:
                break  # stops between commits
            if len(output) >= rounds * 97:
                break
        assert tail.skipped == 0
        client.close()
    t.join()
    assert appended.is_set() and rounds > 5
    assert output == [(i, b"e%d" % i) for i in range(total)]
