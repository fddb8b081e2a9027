"""A ledger's state as the index and the journal's state records hold it: the bytes
``LedgerInfo.to_json`` builds are json.dumps's, and ``from_json`` reads any JSON
object of those fields as the JSON parser does."""

import json

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from embedlog.bookie.index import LedgerInfo

ints = st.integers(min_value=-(2**63), max_value=2**63 - 1)
states = st.builds(
    LedgerInfo,
    master_key=st.one_of(st.binary(max_size=20).map(bytes.hex), st.text(max_size=8)),
    fenced=st.booleans(),
    limbo=st.booleans(),
    term=ints,
    explicit_lac=ints,
    lac=ints,
    lafr=ints,
    truncated_term=ints,
)


def _by_the_parser(info: LedgerInfo) -> bytes:
    return json.dumps(
        {
            "k": info.master_key,
            "f": info.fenced,
            "l": info.limbo,
            "t": info.term,
            "x": info.explicit_lac,
            "c": info.lac,
            "r": info.lafr,
            "u": info.truncated_term,
        },
        separators=(",", ":"),
    ).encode()


@given(states)
def test_the_bytes_are_json_dumps_s_and_read_back_alike(info):
    data = info.to_json()
    assert data == _by_the_parser(info)
    assert LedgerInfo.from_json(data) == info


@given(states, st.sampled_from(["spaced", "reordered", "older"]))
def test_other_spellings_of_a_state_read_as_the_parser_reads_them(info, spelling):
    d = json.loads(_by_the_parser(info))
    if spelling == "spaced":
        data = json.dumps(d).encode()
    elif spelling == "reordered":
        data = json.dumps(dict(reversed(d.items())), separators=(",", ":")).encode()
    else:  # written before the r and u fields
        del d["r"], d["u"]
        data = json.dumps(d, separators=(",", ":")).encode()
    expected = attrs.evolve(info, lafr=-1, truncated_term=-1) if spelling == "older" else info
    assert LedgerInfo.from_json(data) == expected


@pytest.mark.parametrize(
    "data",
    [
        b'{"k":"ab","f":true,"l":false,"t":007,"x":1,"c":1,"r":1,"u":1}',  # no leading zeros
        b'{"k":"ab","f":true,"l":false,"t":1,"x":1,"c":1,"r":1',
        b"",
        b"\xff",
    ],
)
def test_damaged_bytes_are_refused_as_the_parser_refuses_them(data):
    with pytest.raises(ValueError):
        LedgerInfo.from_json(data)
