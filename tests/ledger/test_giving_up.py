"""When a retried bookie's pause ends the writer (giving_up.py) and who gets which adds
again (resending.py), as tables: pure functions over adds, no pipeline."""

from __future__ import annotations

import concurrent.futures

import pytest

from embedlog.errors import NotEnoughBookiesError, TlsHandshakeError
from embedlog.ledger.giving_up import gives_up, quorum_timed_out, refused_by_tls
from embedlog.ledger.pending import PendingAdd
from embedlog.ledger.resending import missing, take_back

ENSEMBLE = ("b0", "b1", "b2")
TLS = TlsHandshakeError("handshake refused")


def add(entry_id: int, acks: tuple[int, ...] = (), *, sent: bool = True, created: float = 0.0):
    p = PendingAdd(entry_id, b"x", concurrent.futures.Future(), 0, created=created)
    p.sent = sent
    for idx in acks:
        p.ack(idx)
    return p


@pytest.mark.parametrize(
    ("acks", "refused", "need", "fails"),
    [
        ((), {}, 2, False),  # no TLS refusal at all
        ((), {"b1": TLS, "b2": TLS}, 2, True),  # one slot left for a quorum of two
        ((), {"b2": TLS}, 2, False),  # two slots left: enough
        ((0,), {"b1": TLS, "b2": TLS}, 2, True),  # one ack, the rest refuse
        ((0, 1), {"b2": TLS}, 2, False),  # the quorum is there already
        ((1,), {"b1": TLS, "b2": TLS}, 2, False),  # b1 acked before it refused: b0 left
        ((), {"b9": TLS}, 2, False),  # a bookie outside the write set
    ],
)
def test_refused_by_tls(acks, refused, need, fails) -> None:
    error = refused_by_tls(add(0, acks), 7, ENSEMBLE, [0, 1, 2], need, refused)
    assert (error is not None) == fails
    if fails:
        assert isinstance(error, TlsHandshakeError)
        assert "entry 7:0 cannot reach its ack quorum" in str(error)


@pytest.mark.parametrize(
    ("acks", "held_back", "now", "fails"),
    [
        ((), False, 59.0, False),  # waiting, within the timeout
        ((), False, 61.0, True),  # waited too long for its quorum
        ((0, 1), False, 61.0, False),  # has its quorum
        ((0, 1), True, 61.0, True),  # has it, but an unreadied member holds it back
        ((0, 1), True, 59.0, False),
    ],
)
def test_quorum_timed_out(acks, held_back, now, fails) -> None:
    p = add(3, acks, created=0.0)
    error = quorum_timed_out(p, 7, 2, held_back=held_back, now=now, quorum_timeout=60.0)
    assert (error is not None) == fails
    if fails:
        assert isinstance(error, NotEnoughBookiesError)
        assert "entry 7:3 could not reach its ack quorum in 60.0s" in str(error)


def test_gives_up_names_tls_before_the_timeout() -> None:
    p = add(0, created=0.0)

    def ask(refused: dict[str, TlsHandshakeError], now: float):
        return gives_up(
            p, 7, ENSEMBLE, [0, 1, 2], 2, refused, held_back=False, now=now, quorum_timeout=60.0
        )

    assert isinstance(ask({"b1": TLS, "b2": TLS}, 100.0), TlsHandshakeError)
    assert isinstance(ask({}, 100.0), NotEnoughBookiesError)
    assert ask({}, 1.0) is None


def write_set_e3_wq2(entry_id: int) -> list[int]:
    return [entry_id % 3, (entry_id + 1) % 3]


def test_take_back_unacks_the_replaced_slot_and_resends_to_a_ready_replacement() -> None:
    adds = [add(0, (0, 1)), add(1, (1, 2)), add(2, (2, 0)), add(3, sent=False)]
    sends = take_back(adds, 1, {1: "b9"}, {"b9"}, write_set_e3_wq2)
    # Entry 0 lies below the new fragment: its ack from slot 1 stays.
    assert adds[0].has_ack(1)
    # Entry 1's ack from slot 1 is taken back; entry 2's write set has no slot 1.
    assert not adds[1].has_ack(1) and adds[1].acked == 1
    assert adds[2].acked == 2
    # Entry 3 was never sent: its first send goes to the new fragment anyway.
    assert [(p.entry_id, idx, b) for p, idx, b in sends] == [(1, 1, "b9")]


def test_take_back_sends_nothing_to_a_replacement_not_readied() -> None:
    adds = [add(1, (1, 2))]
    assert take_back(adds, 0, {1: "b9"}, set(), write_set_e3_wq2) == []
    assert not adds[0].has_ack(1)


def test_take_back_with_the_unsafe_switch_keeps_the_acks() -> None:
    adds = [add(1, (1, 2))]
    sends = take_back(adds, 0, {1: "b9"}, {"b9"}, write_set_e3_wq2, keep_acks=True)
    assert adds[0].has_ack(1) and sends == []


def test_missing_is_what_the_slot_stores_and_has_not_confirmed() -> None:
    adds = [add(0, (0,)), add(1, (1,)), add(2), add(3, sent=False), add(4)]
    # Slot 1 stores entries 0, 1, 3, 4 (E3 WQ2); entry 1 it confirmed, 3 is unsent.
    assert [p.entry_id for p in missing(adds, 1, 0, write_set_e3_wq2)] == [0, 4]
    assert [p.entry_id for p in missing(adds, 1, 2, write_set_e3_wq2)] == [4]
