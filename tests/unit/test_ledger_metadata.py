from hypothesis import given
from hypothesis import strategies as st

from embedlog.metadata.ledger_metadata import LedgerMetadata, LedgerState
from embedlog.wire.entry import DigestType


def make(**kw):
    base = dict(
        ledger_id=3,
        ensemble_size=3,
        write_quorum=2,
        ack_quorum=2,
        fragments=[(0, ("a", "b", "c")), (12, ("d", "b", "c"))],
    )
    base.update(kw)
    return LedgerMetadata(**base)


def test_round_trip_and_ensembles_view():
    md = make(
        state=LedgerState.CLOSED,
        last_entry_id=20,
        digest_type=DigestType.MAC,
        custom_metadata={"app": b"\x00\x01"},
    )
    back = LedgerMetadata.from_bytes(md.to_bytes(), version=4)
    assert back == md and back.version == 4
    assert back.ensembles == {0: ["a", "b", "c"], 12: ["d", "b", "c"]}
    assert back.ensemble_for(11) == ("a", "b", "c") and back.ensemble_for(12)[0] == "d"


def test_unknown_fields_are_preserved():
    import json

    doc = json.loads(make().to_bytes())
    doc["future_field"] = {"x": 1}
    md = LedgerMetadata.from_bytes(json.dumps(doc).encode())
    assert json.loads(md.evolve(last_entry_id=5).to_bytes())["future_field"] == {"x": 1}


def test_with_ensemble_replaces_a_fragment_starting_at_the_same_entry():
    md = make().with_ensemble(12, ("e", "b", "c"))
    assert md.ensembles == {0: ["a", "b", "c"], 12: ["e", "b", "c"]}
    md = md.with_ensemble(15, ("e", "f", "c"))
    assert list(md.ensembles) == [0, 12, 15]


@given(
    starts=st.lists(st.integers(1, 10_000), max_size=30, unique=True),
    entry_id=st.integers(-5, 10_100),
)
def test_fragment_for_is_the_last_fragment_starting_at_or_before_the_entry(starts, entry_id):
    fragments = [(s, (f"b{s}",)) for s in [0, *sorted(starts)]]
    md = make(ensemble_size=1, write_quorum=1, ack_quorum=1, fragments=fragments)
    at_or_before = [f for f in fragments if f[0] <= entry_id]
    expected = at_or_before[-1] if at_or_before else fragments[0]
    assert md.fragment_for(entry_id) == expected
