"""When a writer stops waiting for its oldest add: the decisions, as pure functions.

A bookie with no replacement is retried after a pause (pipeline.py, ``retry_due``). At
the end of each pause the writer asks whether waiting can still help the oldest add
not acknowledged: not if TLS refusals alone keep it from its ack quorum (a configuration
error, which waiting out the quorum timeout would not mend), nor once it has waited
longer than the quorum timeout for its ack quorum (or for an unreadied member of its
write set to confirm it).
"""

from __future__ import annotations

from collections.abc import Sequence

from embedlog.errors import BKError, NotEnoughBookiesError, TlsHandshakeError
from embedlog.ledger.pending import PendingAdd


def refused_by_tls(
    p: PendingAdd,
    ledger_id: int,
    ensemble: Sequence[str],
    slots: Sequence[int],
    need: int,
    tls_refused: dict[str, TlsHandshakeError],
) -> TlsHandshakeError | None:
    """The error to fail with if TLS refusals alone keep ``p`` (written to ``slots`` of
    ``ensemble``) from its ack quorum of ``need``; None if they do not."""
    if not tls_refused or p.acked >= need:
        return None
    refused = [
        tls_refused[ensemble[i]] for i in slots if not p.has_ack(i) and ensemble[i] in tls_refused
    ]
    if not refused or len(slots) - len(refused) >= need:
        return None
    return TlsHandshakeError(
        f"entry {ledger_id}:{p.entry_id} cannot reach its ack quorum and no "
        f"replacement bookie is available: {refused[0]}"
    )


def quorum_timed_out(
    p: PendingAdd,
    ledger_id: int,
    need: int,
    *,
    held_back: bool,
    now: float,
    quorum_timeout: float,
) -> BKError | None:
    """The error to fail with if ``p`` has waited longer than ``quorum_timeout`` for its
    ack quorum of ``need`` (or, ``held_back``, for an unreadied member's confirmation)."""
    if (p.acked < need or held_back) and now - p.created > quorum_timeout:
        return NotEnoughBookiesError(
            f"entry {ledger_id}:{p.entry_id} could not reach its ack "
            f"quorum in {quorum_timeout}s and no replacement "
            "bookie is available"
        )
    return None


def gives_up(
    p: PendingAdd,
    ledger_id: int,
    ensemble: Sequence[str],
    slots: Sequence[int],
    need: int,
    tls_refused: dict[str, TlsHandshakeError],
    *,
    held_back: bool,
    now: float,
    quorum_timeout: float,
) -> BKError | None:
    """The error to fail the writer with at the end of a retry's pause, TLS refusals'
    first; None: waiting for ``p`` can still help."""
    return refused_by_tls(p, ledger_id, ensemble, slots, need, tls_refused) or quorum_timed_out(
        p, ledger_id, need, held_back=held_back, now=now, quorum_timeout=quorum_timeout
    )
