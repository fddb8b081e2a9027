"""The TCP transport's framing: a u32 big-endian length, then one frame of the codec."""

from __future__ import annotations

import struct

LENGTH = struct.Struct(">I")
# Far above any entry a client sends (the write cache itself defaults to 64 MiB) and far
# below what would let one bad length prefix make a peer allocate gigabytes.
MAX_FRAME = 64 * 1024 * 1024


def frame(payload: bytes) -> bytes:
    return LENGTH.pack(len(payload)) + payload
