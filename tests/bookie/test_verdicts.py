"""Table tests for the bookie's admission verdicts (embedlog/bookie/verdicts.py): one row
per case, every refusal status among them."""

from __future__ import annotations

import pytest

from embedlog.bookie import terms, verdicts
from embedlog.bookie.index import LedgerInfo
from embedlog.bookie.truncation import trim_above_body
from embedlog.bookie.verdicts import (
    ADMIT,
    Mode,
    Verdict,
    add_verdict,
    change_verdict,
    listing_verdict,
    negative,
    read_batch_verdict,
    read_verdict,
    refused,
    trim_above_verdict,
)
from embedlog.unbounded import rules
from embedlog.wire.codes import StatusCode as S
from embedlog.wire.messages import NO_TERM, AddFlags, OpCode, ReadFlags, Request, TrimFlags

KEY = bytes(range(20))
OTHER = bytes(range(1, 21))
LID = 7


def req(op: OpCode, *, key: bytes = KEY, term: int = NO_TERM, flags: int = 0) -> Request:
    return Request(op, 1, LID, 0, flags=flags, term=term, master_key=key)


def held(**fields: object) -> LedgerInfo:
    return LedgerInfo(master_key=KEY.hex(), **fields)  # type: ignore[arg-type]


ADD = OpCode.ADD
RECOVERY = AddFlags.RECOVERY
SERVING = Mode()
READONLY = Mode(readonly=True)


def admitted(**changes: bool) -> Verdict:
    return Verdict(**changes)


def dropped(status: S) -> Verdict:
    return Verdict(status, admitted=False, dropped=True)


# (case, request, ledger state, tombstone key, mode, well formed, verdict)
ADD_ROWS = [
    ("plain add", req(ADD), held(), None, SERVING, True, ADMIT),
    ("first add creates", req(ADD), None, None, SERVING, True, admitted(creates=True)),
    ("batch", req(OpCode.ADD_BATCH), held(), None, SERVING, True, ADMIT),
    ("read-only", req(ADD), held(), None, READONLY, True, refused(S.EREADONLY)),
    ("read-only before malformed", req(ADD), held(), None, READONLY, False, refused(S.EREADONLY)),
    ("malformed", req(ADD), held(), None, SERVING, False, refused(S.EBADREQ)),
    ("deleted", req(ADD), None, KEY, SERVING, True, dropped(S.EDELETED)),
    ("deleted, wrong key", req(ADD, key=OTHER), None, KEY, SERVING, True, dropped(S.EUA)),
    ("wrong key", req(ADD, key=OTHER), held(), None, SERVING, True, refused(S.EUA)),
    ("short key", req(ADD, key=b"k"), None, None, SERVING, True, refused(S.EUA)),
    ("keyless record", req(ADD), LedgerInfo(), None, SERVING, True, refused(S.EUA)),
    ("fenced", req(ADD), held(fenced=True), None, SERVING, True, refused(S.EFENCED)),
    ("fenced, recovery add", req(ADD, flags=RECOVERY), held(fenced=True), None, SERVING, True,
     ADMIT),
    ("fence before term", req(ADD, term=1), held(fenced=True, term=5), None, SERVING, True,
     refused(S.EFENCED)),
    ("same term", req(ADD, term=3), held(term=3), None, SERVING, True, ADMIT),
    ("higher term raises", req(ADD, term=4), held(term=3), None, SERVING, True,
     admitted(raises_term=True)),
    ("lower term", req(ADD, term=2), held(term=3), None, SERVING, True,
     refused(S.EINVALIDTERM, 3)),
    ("first add with a term", req(ADD, term=0), None, None, SERVING, True,
     admitted(creates=True, raises_term=True)),
    ("no term on a termed ledger", req(ADD), held(term=3), None, SERVING, True, ADMIT),
    ("limbo takes adds", req(ADD), held(limbo=True), None, SERVING, True, ADMIT),
]  # fmt: skip


@pytest.mark.parametrize(
    ("request_", "info", "tombstone", "mode", "well_formed", "verdict"),
    [row[1:] for row in ADD_ROWS],
    ids=[row[0] for row in ADD_ROWS],
)
def test_add_verdicts(request_, info, tombstone, mode, well_formed, verdict):
    assert add_verdict(request_, info, tombstone, mode, well_formed) == verdict


FENCE = ReadFlags.FENCE
READ = OpCode.READ

# (case, request, ledger state, tombstone key, verdict)
READ_ROWS = [
    ("plain read", req(READ, key=b""), held(), None, ADMIT),
    ("plain read of a deleted ledger", req(READ, key=b""), None, KEY, ADMIT),
    ("fence", req(READ, flags=FENCE), held(), None, admitted(fences=True, relies_on_state=True)),
    ("fence again", req(READ, flags=FENCE), held(fenced=True), None,
     admitted(relies_on_state=True)),
    ("fence creates", req(READ, flags=FENCE), None, None,
     admitted(creates=True, fences=True, relies_on_state=True)),
    ("fence, wrong key", req(READ, flags=FENCE, key=OTHER), held(), None, refused(S.EUA)),
    ("fence, no key", req(READ, flags=FENCE, key=b""), None, None, refused(S.EUA)),
    ("fence of a deleted ledger", req(READ, flags=FENCE), None, KEY, dropped(S.EDELETED)),
    ("term raises", req(READ, term=5), held(term=4), None,
     admitted(raises_term=True, relies_on_state=True)),
    ("term and fence", req(READ, term=5, flags=FENCE), held(term=4), None,
     admitted(raises_term=True, fences=True, relies_on_state=True)),
    ("same term", req(READ, term=4), held(term=4), None, admitted(relies_on_state=True)),
    ("lower term", req(READ, term=3, flags=FENCE), held(term=4), None,
     refused(S.EINVALIDTERM, 4)),
    ("term of a deleted ledger", req(READ, term=3), None, KEY, dropped(S.EDELETED)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("request_", "info", "tombstone", "verdict"),
    [row[1:] for row in READ_ROWS],
    ids=[row[0] for row in READ_ROWS],
)
def test_read_verdicts(request_, info, tombstone, verdict):
    assert read_verdict(request_, info, tombstone) == verdict


DELETE, WRITE_LAC, TRIM = OpCode.DELETE_LEDGER, OpCode.WRITE_LAC, OpCode.TRIM

# (case, request, ledger state, tombstone key, verdict)
CHANGE_ROWS = [
    ("delete", req(DELETE), held(), None, ADMIT),
    ("delete again", req(DELETE), None, KEY, dropped(S.EOK)),
    ("delete again, wrong key", req(DELETE, key=OTHER), None, KEY, dropped(S.EUA)),
    ("delete unknown", req(DELETE), None, None, refused(S.ENOLEDGER)),
    ("delete, wrong key", req(DELETE, key=OTHER), held(), None, refused(S.EUA)),
    ("write lac", req(WRITE_LAC), held(), None, ADMIT),
    ("write lac, deleted", req(WRITE_LAC), None, KEY, dropped(S.EDELETED)),
    ("write lac, unknown", req(WRITE_LAC), None, None, refused(S.ENOLEDGER)),
    ("write lac, fenced", req(WRITE_LAC), held(fenced=True), None, ADMIT),
    ("trim", req(TRIM), held(), None, ADMIT),
    ("trim, deleted", req(TRIM), None, KEY, dropped(S.EDELETED)),
    ("trim, wrong key", req(TRIM, key=OTHER), held(), None, refused(S.EUA)),
]


@pytest.mark.parametrize(
    ("request_", "info", "tombstone", "verdict"),
    [row[1:] for row in CHANGE_ROWS],
    ids=[row[0] for row in CHANGE_ROWS],
)
def test_change_verdicts(request_, info, tombstone, verdict):
    assert change_verdict(request_, info, tombstone) == verdict


ABOVE = TrimFlags.ABOVE

# (case, request, ledger state, tombstone key, well formed, verdict)
TRIM_ABOVE_ROWS = [
    ("trim above", req(TRIM, flags=ABOVE, term=2), held(term=2), None, True,
     admitted(relies_on_state=True)),
    ("raises the term", req(TRIM, flags=ABOVE, term=3), held(term=2), None, True,
     admitted(raises_term=True, relies_on_state=True)),
    ("creates", req(TRIM, flags=ABOVE, term=0), None, None, True,
     admitted(creates=True, raises_term=True, relies_on_state=True)),
    ("no term", req(TRIM, flags=ABOVE), held(), None, True, refused(S.EBADREQ)),
    ("no term before deleted", req(TRIM, flags=ABOVE), None, KEY, True, refused(S.EBADREQ)),
    ("deleted", req(TRIM, flags=ABOVE, term=2), None, KEY, True, dropped(S.EDELETED)),
    ("wrong key", req(TRIM, flags=ABOVE, term=2, key=OTHER), held(), None, True,
     refused(S.EUA)),
    ("wrong key before bad body", req(TRIM, flags=ABOVE, term=2, key=OTHER), held(), None,
     False, refused(S.EUA)),
    ("bad body", req(TRIM, flags=ABOVE, term=2), held(), None, False, refused(S.EBADREQ)),
    ("lower term", req(TRIM, flags=ABOVE, term=1), held(term=2), None, True,
     refused(S.EINVALIDTERM, 2)),
    ("fenced ledger", req(TRIM, flags=ABOVE, term=2), held(term=2, fenced=True), None, True,
     admitted(relies_on_state=True)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("request_", "info", "tombstone", "well_formed", "verdict"),
    [row[1:] for row in TRIM_ABOVE_ROWS],
    ids=[row[0] for row in TRIM_ABOVE_ROWS],
)
def test_trim_above_verdicts(request_, info, tombstone, well_formed, verdict):
    assert trim_above_verdict(request_, info, tombstone, well_formed) == verdict


# (case, request, well formed, verdict)
READ_BATCH_ROWS = [
    ("read batch", Request(OpCode.READ_BATCH, 1, LID, 0), True, ADMIT),
    ("bad body", Request(OpCode.READ_BATCH, 1, LID, 0), False, refused(S.EBADREQ)),
    ("flags", Request(OpCode.READ_BATCH, 1, LID, 0, flags=1), True, refused(S.EBADREQ)),
    ("term", Request(OpCode.READ_BATCH, 1, LID, 0, term=1), True, refused(S.EBADREQ)),
    ("negative id", Request(OpCode.READ_BATCH, 1, LID, -1), True, refused(S.EBADREQ)),
]


@pytest.mark.parametrize(
    ("request_", "well_formed", "verdict"),
    [row[1:] for row in READ_BATCH_ROWS],
    ids=[row[0] for row in READ_BATCH_ROWS],
)
def test_read_batch_verdicts(request_, well_formed, verdict):
    assert read_batch_verdict(request_, well_formed) == verdict


SKIP_LIMBO = Mode(skip_limbo=True)

# (case, ledger state, negative asked, mode, answer)
NEGATIVE_ROWS = [
    ("no entry", held(), S.ENOENTRY, SERVING, S.ENOENTRY),
    ("no ledger", None, S.ENOLEDGER, SERVING, S.ENOLEDGER),
    ("limbo: unknown", held(limbo=True), S.ENOENTRY, SERVING, S.EUNKNOWN),
    ("limbo, unsafe_skip_limbo", held(limbo=True), S.ENOENTRY, SKIP_LIMBO, S.ENOENTRY),
]


@pytest.mark.parametrize(
    ("info", "asked", "mode", "answer"),
    [row[1:] for row in NEGATIVE_ROWS],
    ids=[row[0] for row in NEGATIVE_ROWS],
)
def test_negatives_of_limbo_ledgers_are_unknown(info, asked, mode, answer):
    assert negative(info, asked, mode) == answer


# (case, ledger state, mode, verdict)
LISTING_ROWS = [
    ("list", held(), SERVING, ADMIT),
    ("unknown ledger", None, SERVING, refused(S.ENOLEDGER)),
    ("limbo", held(limbo=True), SERVING, refused(S.EUNKNOWN)),
    ("limbo, unsafe_skip_limbo", held(limbo=True), SKIP_LIMBO, ADMIT),
]


@pytest.mark.parametrize(
    ("info", "mode", "verdict"),
    [row[1:] for row in LISTING_ROWS],
    ids=[row[0] for row in LISTING_ROWS],
)
def test_listing_verdicts(info, mode, verdict):
    assert listing_verdict(info, mode) == verdict


def test_every_refusal_status_has_a_row():
    rows = [r[-1] for r in ADD_ROWS + READ_ROWS + CHANGE_ROWS + TRIM_ABOVE_ROWS + LISTING_ROWS]
    statuses = {v.status for v in rows if not v.admitted} | {r[-1] for r in NEGATIVE_ROWS}
    bookie_refusals = {
        S.EREADONLY, S.EBADREQ, S.EDELETED, S.EUA, S.EFENCED, S.EINVALIDTERM, S.ENOLEDGER,
        S.ENOENTRY, S.EUNKNOWN,
    }  # fmt: skip
    assert bookie_refusals <= statuses


def test_the_bookie_applies_the_term_rule_the_unbounded_rules_table_checks(monkeypatch):
    assert rules.bookie_accepts_term is terms.bookie_accepts_term
    # The verdicts call that function, not a copy: a rule that accepted nothing refuses.
    monkeypatch.setattr(verdicts, "bookie_accepts_term", lambda stored, request: False)
    assert add_verdict(req(ADD, term=9), held(term=3), None, SERVING, True) == refused(
        S.EINVALIDTERM, 3
    )


def test_the_bookie_carries_out_the_verdicts_term_rule(harness, monkeypatch):
    """Adds, term-raising reads and TRIM ABOVE all meet the one rule: a bookie whose rule
    admitted no term at all refuses each with its own term."""
    h = harness()
    h.boot()
    assert h.add(5, 0, term=2).status == S.EOK
    monkeypatch.setattr(verdicts, "bookie_accepts_term", lambda stored, request: False)
    for answer in (
        h.add(5, 1, term=3),
        h.read(5, -1, term=3),
        h.request(TRIM, 5, 0, flags=ABOVE, term=3, body=trim_above_body(4)),
    ):
        assert (answer.status, answer.term) == (S.EINVALIDTERM, 2)
    monkeypatch.undo()
    assert h.add(5, 1, term=3).status == S.EOK
