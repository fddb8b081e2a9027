"""The add pipeline driven by scripts of events (tests/ledger/pipeline_scripts/*.txt), no cluster,
no loop, no sleeps; and the refusal rule and the phase table, as tables."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pipeline_script import run_script

from embedlog.errors import (
    InvalidTermError,
    LedgerDeletedError,
    LedgerFencedError,
    UnauthorizedAccessError,
)
from embedlog.ledger.answers import Refused, refusal_outcome
from embedlog.ledger.phase import TRANSITIONS, Phase, PhaseError
from embedlog.ledger.pipeline import AddPipeline
from embedlog.ledger.policy import BoundedPolicy
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import DELETED_TERM

SCRIPTS = sorted((Path(__file__).parent / "pipeline_scripts").glob("*.txt"))


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_script(script: Path) -> None:
    rewritten, mismatches = run_script(script)
    if os.environ.get("EMBEDLOG_REWRITE"):
        script.write_text(rewritten)
        return
    report = "\n\n".join(
        f"{command}\n---- expected\n{expected}\n---- actual\n{actual}"
        for command, expected, actual in mismatches
    )
    assert not mismatches, f"{script.name}:\n{report}"


E = StatusCode


# ``settled``: the writer needs nothing more of the entry; the pipeline says so only for a
# bounded ledger's acknowledged entries (a stream needs them on their whole write sets:
# pipeline_scripts/stream_refused_after_ack*.txt).
@pytest.mark.parametrize(
    ("status", "term", "settled", "outcome"),
    [
        (E.EDELETED, 5, False, LedgerDeletedError),
        (E.EDELETED, 5, True, LedgerDeletedError),  # even for an entry acknowledged already
        (E.EINVALIDTERM, DELETED_TERM, True, LedgerDeletedError),  # a delete's fence
        (E.EINVALIDTERM, 7, False, InvalidTermError),
        (E.EINVALIDTERM, 7, True, InvalidTermError),
        (E.EFENCED, 5, False, LedgerFencedError),
        (E.EFENCED, 5, True, Refused.IGNORE),
        (E.EUA, 5, False, UnauthorizedAccessError),
        (E.EUA, 5, True, Refused.IGNORE),
        (E.EIO, 5, False, Refused.REPLACE),
        (E.ETOOMANYREQUESTS, 5, False, Refused.REPLACE),
        (E.EIO, 5, True, Refused.IGNORE),
    ],
)
def test_what_a_refusal_means(status, term, settled, outcome) -> None:
    got = refusal_outcome(status, term, settled=settled, ledger_id=1, bookie="b1", writer_term=5)
    if isinstance(outcome, Refused):
        assert got is outcome
    else:
        assert type(got) is outcome


def test_the_phase_table_refuses_what_it_does_not_list() -> None:
    md = LedgerMetadata(1, 3, 3, 2, ((0, ("b1", "b2", "b3")),))
    for phase in Phase:
        for event in ("begin_change", "replace", "replaced", "end_change"):
            pl = AddPipeline(md, BoundedPolicy())
            pl.phase = phase
            move = {
                "begin_change": pl.begin_change,
                "end_change": pl.end_change,
                "replaced": pl.replacement_aborted,
            }.get(event)
            if move is None:
                continue  # "replace" is plan_replacement's, with a plan to make
            if (phase, event) in TRANSITIONS:
                move()
                assert pl.phase is TRANSITIONS[(phase, event)]
            else:
                with pytest.raises(PhaseError):
                    move()
