"""The TCP transport's framing: a u32 big-endian length, then one frame of the codec."""

from __future__ import annotations

import struct

from embedlog.transport import tls_mismatch
from embedlog.wire.messages import FrameError

LENGTH = struct.Struct(">I")
# Far above any entry a client sends (the write cache itself defaults to 64 MiB) and far
# below what would let one bad length prefix make a peer allocate gigabytes.
MAX_FRAME = 64 * 1024 * 1024


def frame(payload: bytes) -> bytes:
    return LENGTH.pack(len(payload)) + payload


class TlsRecordError(FrameError):
    """A TLS record where a frame was expected: the peer speaks TLS and this side does not."""


def frame_length(head: bytes, limit: int) -> int:
    """The length a frame's prefix announces; FrameError above ``limit`` (TlsRecordError
    when the prefix is the start of a TLS record)."""
    (n,) = LENGTH.unpack(head)
    if n > limit:
        if tls_mismatch.is_tls_record(head):  # as a length, far above any limit
            raise TlsRecordError("the peer speaks TLS on a connection without TLS")
        raise FrameError(f"frame of {n} bytes exceeds the {limit} byte limit")
    return n
