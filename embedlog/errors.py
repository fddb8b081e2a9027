"""Exceptions raised to embedlog users. Every one carries a BookKeeper-style ``code``."""

from __future__ import annotations

from embedlog.wire.codes import StatusCode


class BKError(Exception):
    """Base of every embedlog protocol error."""

    code: int = -1

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.__class__.__doc__ or self.__class__.__name__)


class LedgerFencedError(BKError):
    """The ledger was fenced by a recovering client; this writer may no longer add to it."""

    code = -101


class LedgerClosedError(BKError):
    """The ledger is closed."""

    code = -11


class NoSuchLedgerError(BKError):
    """No such ledger."""

    code = -7


class NoSuchEntryError(BKError):
    """No such entry."""

    code = -13


class ReadPastLastConfirmedError(NoSuchEntryError):
    """The entry lies past the last add confirmed (or the last entry of a closed ledger)."""


class UnknownError(BKError):
    """EUNKNOWN: the bookie cannot say whether it holds the entry (limbo ledger)."""

    code = -107


class InvalidTermError(BKError):
    """Another client took over this unbounded ledger with a higher term."""

    code = -108


class DigestMismatchError(BKError):
    """An entry failed its digest check: it was tampered with or corrupted."""

    code = -5


class UnauthorizedAccessError(BKError):
    """Wrong ledger password."""

    code = -102


class NotEnoughBookiesError(BKError):
    """Not enough writable bookies to form the ensemble."""

    code = -6


class LedgerRecoveryError(BKError):
    """Ledger recovery could not decide safely; the ledger is left recoverable."""

    code = -10


class MetadataVersionError(BKError):
    """The metadata changed since it was read (compare-and-swap conflict)."""

    code = -17


class CookieError(BKError):
    """A bookie's cookie is missing or does not match: its disks are not what it had."""

    code = -30


class BKTimeoutError(BKError):
    """No answer in time: the outcome is unknown."""

    code = -23


class BookieUnavailableError(BKError):
    """The bookie could not be reached: the outcome is unknown."""

    code = -8


class TlsHandshakeError(BookieUnavailableError):
    """TLS between this client and a bookie failed: one side speaks TLS and the other does
    not, or a certificate was refused. A configuration error, not a transient fault: fix
    the TLS settings of the client or the bookie (docs/security.md). As for any bookie
    that cannot be reached, the outcome of the request is unknown."""


class BookieIOError(BKError):
    """The bookie failed to read or write its disk."""

    code = -12


class BadRequestError(BKError):
    """The request was malformed."""

    code = -14


class ReadOnlyBookieError(BKError):
    """The bookie is read-only and refuses writes."""

    code = -104


class EntryTooLargeError(BKError, ValueError):
    """The entry is larger than the client's max_entry_size (docs/security.md)."""

    code = -100


class TooManyAddsInFlightError(BKError):
    """A handle's bound on adds in flight was reached and the add could not wait for room."""

    code = -105


class MetadataError(BKError):
    """The metadata store failed or holds something it cannot decode."""

    code = -9


class MetadataUnavailableError(MetadataError):
    """The metadata store (ZooKeeper) did not answer within the metadata timeout: it is
    down or unreachable. Nothing is known to have changed; calling again once it is back
    is safe for reads (a write's outcome may be unknown, as for any MetadataError)."""


class ClientClosedError(BKError, RuntimeError):
    """The client was closed, or its cluster stopped: make a new client to go on."""

    code = -19


class NoSuchLedgerInMetadataError(NoSuchLedgerError):
    """The metadata store has no such ledger."""

    code = -25


class StreamNameTakenError(BKError, ValueError):
    """Another stream already has this name (names are unique in the cluster)."""

    code = -26


class CursorRewindError(BKError, ValueError):
    """A commit below the cursor's committed position (force=True moves it back)."""

    code = -27


class LedgerDeletedError(NoSuchLedgerError):
    """The ledger (or stream) was deleted: nothing more can be written to it or read from it.

    A writer that still holds a handle learns it from the bookies (they keep a tombstone
    of every ledger deleted through them and refuse writes to it) or the metadata store;
    cursor commits and sink records of a deleted stream raise it too. Open a new ledger or
    create the stream again to go on."""

    code = -28


_BY_STATUS: dict[int, type[BKError]] = {
    StatusCode.ENOLEDGER: NoSuchLedgerError,
    StatusCode.ENOENTRY: NoSuchEntryError,
    StatusCode.EFENCED: LedgerFencedError,
    StatusCode.EUA: UnauthorizedAccessError,
    StatusCode.EUNKNOWN: UnknownError,
    StatusCode.EINVALIDTERM: InvalidTermError,
    StatusCode.EIO: BookieIOError,
    StatusCode.EBADREQ: BadRequestError,
    StatusCode.EREADONLY: ReadOnlyBookieError,
    StatusCode.EDELETED: LedgerDeletedError,
}


def status_name(status: int) -> str:
    """A bookie status as its name ("EFENCED"), or the number when it has none."""
    return StatusCode(status).name if status in StatusCode._value2member_map_ else str(status)


def error_for_status(status: int, context: str = "") -> BKError:
    """The user-facing exception for a non-OK bookie status."""
    cls = _BY_STATUS.get(status, UnknownError)
    name = status_name(status)
    return cls(f"{context}: bookie answered {name}" if context else f"bookie answered {name}")
