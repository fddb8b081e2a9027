"""Which entries an unbounded ledger's truncation drops: pure rules, table-tested in
tests/bookie/test_truncation_rules.py.

A truncation of term T (a takeover's no-op with AddFlags.TRUNCATE, or TRIM ABOVE when a
fragment gets a new member) exists to drop what OLDER terms left above its cut point:
ids term T is about to write again. It must never drop term T's own entries. Those can
reach the bookie before the truncation does: the TRIM ABOVE of a rollover that timed out
while the writer went on sending the fragment's entries, a resend that overtook a no-op,
or a delayed duplicate. Dropping one of them loses an acknowledged entry.

Each entry of an unbounded ledger carries the term of the writer that made it at the
start of its payload (wire/entry.py FLAG_TERM), after the digest; the bookie never knows
a ledger's digest type, so the truncation tells it the digest's length.
"""

from __future__ import annotations

from embedlog.wire.entry import FLAG_NOOP, FLAG_TERM, HEADER, TERM, header_fields, split_term

DIGEST_LENGTHS = frozenset({0, 4, 32})  # DUMMY, CRC32C, MAC (wire/entry.py)


def trim_above_body(digest_len: int) -> bytes:
    """The body of a TRIM ABOVE request: the ledger's digest length, one byte."""
    return bytes([digest_len])


def digest_len_of_trim(body: bytes) -> int | None:
    """A TRIM ABOVE body's digest length; None if the body is not one (EBADREQ)."""
    if len(body) != 1 or body[0] not in DIGEST_LENGTHS:
        return None
    return body[0]


def digest_len_of_noop(entry: bytes) -> int | None:
    """A truncating no-op's digest length, from its size: a no-op's payload is its term
    alone. None when the entry is no no-op with a term (then terms are not told apart)."""
    if len(entry) < HEADER.size:
        return None
    flags = header_fields(entry)[3]
    if not (flags & FLAG_NOOP and flags & FLAG_TERM):
        return None
    n = len(entry) - HEADER.size - TERM.size
    return n if n in DIGEST_LENGTHS else None


def dropped_by_truncation(entry: bytes, term: int, digest_len: int | None) -> bool:
    """Whether a truncation of ``term`` drops ``entry``, one of the ledger's entries above
    its cut point: yes for an older term's entry (or one without a term), no for an entry
    of ``term`` itself. Without a digest length every entry is dropped."""
    if digest_len is None or len(entry) < HEADER.size + digest_len:
        return True
    flags = header_fields(entry)[3]
    entry_term = split_term(flags, entry[HEADER.size + digest_len :])[0]
    return entry_term is None or entry_term < term
