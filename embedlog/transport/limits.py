"""What one TCP client may cost a bookie: the bounds, and the decisions that enforce them.

A bookie server reads a connection's requests only while that connection's unsent
answers and requests in progress are under their bounds, holds at most
``max_connections`` connections, and closes a connection that is idle or stalls in
the middle of a frame. docs/security.md ("Limits") lists every bound.
"""

from __future__ import annotations

from typing import Any

from attrs import frozen

from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import OpCode, Response

DEFAULT_MAX_CONNECTIONS = 1000
# Answers a bookie holds for one connection (written, not yet taken by the client) before
# it stops reading that connection's requests.
DEFAULT_MAX_UNSENT_ANSWER_BYTES = 4 * 1024 * 1024
# Requests of one connection being handled at once (an add waiting for its fsync, a
# long-poll waiting for a LAC): past it the bookie reads no more until one is answered.
DEFAULT_MAX_REQUESTS_IN_PROGRESS = 1000
DEFAULT_IDLE_TIMEOUT = 300.0  # seconds
DEFAULT_PARTIAL_FRAME_TIMEOUT = 30.0  # seconds without a byte of a frame that has begun

# Answers carry the txn of the request they answer; clients number requests from 1. A
# frame with txn 0 is the bookie speaking about the connection itself.
NOTICE_TXN = 0


@frozen
class ConnectionLimits:
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_unsent_answer_bytes: int = DEFAULT_MAX_UNSENT_ANSWER_BYTES
    max_requests_in_progress: int = DEFAULT_MAX_REQUESTS_IN_PROGRESS
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    partial_frame_timeout: float = DEFAULT_PARTIAL_FRAME_TIMEOUT

    @classmethod
    def of(cls, config: Any) -> ConnectionLimits:
        """The limits a bookie's settings (a BookieConfig, or anything with its names) set."""
        return cls(
            max_connections=config.max_connections,
            max_unsent_answer_bytes=config.max_unsent_answer_bytes,
            max_requests_in_progress=config.max_requests_in_progress,
            idle_timeout=config.idle_timeout,
            partial_frame_timeout=config.partial_frame_timeout,
        )

    @property
    def check_interval(self) -> float:
        """How often the server looks for idle and stalled connections: a timeout is
        enforced at most this much late."""
        return min(self.idle_timeout, self.partial_frame_timeout) / 4


def may_read(limits: ConnectionLimits, unsent: int, in_progress: int) -> bool:
    """Whether the server may read a connection's next request, given the bytes of answers
    it holds for it and the requests of it being handled."""
    return unsent <= limits.max_unsent_answer_bytes and (
        in_progress < limits.max_requests_in_progress
    )


def close_reason(
    limits: ConnectionLimits,
    now: float,
    *,
    last_active: float,
    frame_progress: float | None,
    in_progress: int,
) -> str | None:
    """Why a connection must be closed now, or None.

    ``frame_progress``: when the last byte of a frame still incomplete arrived (None
    between frames); ``last_active``: when the connection last did anything (a request
    received or answered, or the client taking some of its answers).
    """
    if frame_progress is not None:
        stalled = now - frame_progress
        if stalled > limits.partial_frame_timeout:
            return (
                f"sent part of a frame, then nothing for {stalled:.1f}s (bookie setting "
                f"partial_frame_timeout={limits.partial_frame_timeout:g})"
            )
        return None
    idle = now - last_active
    if in_progress == 0 and idle > limits.idle_timeout:
        return (
            f"idle for {idle:.1f}s: no request and no answer taken (bookie setting "
            f"idle_timeout={limits.idle_timeout:g})"
        )
    return None


def refusal(limits: ConnectionLimits) -> Response:
    """The notice a bookie sends on a connection it refuses, before closing it."""
    why = (
        f"the bookie refused the connection: its limit of {limits.max_connections} "
        "connections is reached (bookie setting max_connections)"
    )
    return Response(OpCode.READ_LAC, NOTICE_TXN, StatusCode.ETOOMANYREQUESTS, -1, body=why.encode())


def notice_reason(resp: Response) -> str | None:
    """What a bookie's notice (txn 0) says, or None for an ordinary answer."""
    if resp.txn != NOTICE_TXN:
        return None
    return resp.body.decode("utf-8", "replace") or "the bookie closed the connection"
