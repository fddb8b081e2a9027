"""Telling a TLS misconfiguration from a lost connection, on the TCP transport.

A client and a bookie that disagree about TLS rarely get a word through: asyncio's
TLS server closes the connection without an alert when a handshake fails, and a
plaintext peer sees only bytes it cannot frame. What each side can observe:

* a TLS client whose bookie's certificate it cannot verify: a verification error
  during its own handshake (certain);
* a TLS client of a plaintext bookie: the bookie answers the ClientHello with a TLS
  protocol_version alert (``PLAINTEXT_PORT_ALERT``), so the handshake fails naming it;
* a plaintext client of a TLS bookie: the connection closes before any answer. The
  client then tries a TLS handshake of its own (``speaks_tls``): if the port speaks
  TLS, the mismatch is certain;
* a TLS client whose certificate the bookie refuses (none, or not signed by the CA the
  bookie trusts): with TLS 1.3 the client's handshake completes and the connection
  closes before any answer. The client then opens one more connection with the same
  settings and sends nothing (``closes_after_handshake``): a bookie that closes it at
  once refused the certificate.

Only a connection closed before its first answer, with requests sent, is examined:
one probe per such connection, never on the path of a working one.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time

# A TLS record starts with its content type (21 alert, 22 handshake) and major version 3.
_TLS_CONTENT_TYPES = (21, 22)

# A fatal protocol_version alert in a plaintext TLS record: what a bookie without TLS
# answers a ClientHello, so that the client's TLS stack says at once what is wrong.
PLAINTEXT_PORT_ALERT = bytes([21, 3, 3, 0, 2, 2, 70])

# Handshake failures that mean "this port does not speak TLS (of a version we accept)".
_NOT_TLS = frozenset(
    {"TLSV1_ALERT_PROTOCOL_VERSION", "WRONG_VERSION_NUMBER", "UNSUPPORTED_PROTOCOL"}
)

NOT_TLS_PORT = (
    "the bookie does not speak TLS on this port: configure the client without TLS "
    "(no tls_ca), or the bookie with it"
)
PLAINTEXT_CLIENT = (
    "the bookie speaks TLS and this client does not: give the client tls_ca (and tls_cert "
    "and tls_key if the bookie requires client certificates)"
)
CERTIFICATE_REFUSED = (
    "the bookie closed the connection right after the TLS handshake: it refuses this "
    "client's certificate (none given, or not signed by the CA the bookie trusts); give "
    "the client tls_cert and tls_key signed by that CA"
)


def is_tls_record(prefix: bytes) -> bool:
    """Whether the first bytes a peer sent are a TLS record (a handshake or an alert),
    read where a frame's length prefix was expected."""
    return len(prefix) >= 2 and prefix[0] in _TLS_CONTENT_TYPES and prefix[1] == 3


def tls_refusal(exc: BaseException, *, handshake: bool = True) -> str | None:
    """What a TLS failure says is misconfigured, for the operator; None when it says
    nothing for certain (a reset or EOF mid-handshake also ends a bookie that crashes).
    After the ``handshake`` only an alert from the peer counts (TLS 1.3 servers refuse a
    client certificate once the client's side of the handshake is done)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        detail = exc.verify_message or str(exc)
        return (
            f"certificate verification failed ({detail}): the client's tls_ca must hold the "
            "CA that signed the bookie's certificate, and that must name the bookie's address"
        )
    if not isinstance(exc, ssl.SSLError) or isinstance(exc, ssl.SSLEOFError):
        return None
    reason = str(exc.reason or "")
    if not handshake and "ALERT" not in reason:
        return None
    if reason in _NOT_TLS:
        return NOT_TLS_PORT
    if reason == "TLSV13_ALERT_CERTIFICATE_REQUIRED":
        return (
            "the bookie requires a client certificate: give the client tls_cert and "
            "tls_key signed by the CA the bookie trusts"
        )
    if "ALERT" in reason and ("CERTIFICATE" in reason or "UNKNOWN_CA" in reason):
        return (
            f"the bookie refused this client's certificate ({reason}): it must be signed by "
            "the CA the bookie trusts, and valid now"
        )
    return f"the TLS handshake failed: {reason or exc}"


def _probe_context() -> ssl.SSLContext:
    # Only asks "does this port speak TLS?": nothing is sent, nothing needs trusting.
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


async def speaks_tls(host: str, port: int, timeout: float) -> bool:
    """Whether the server at host:port completes (or refuses with a TLS alert) a TLS
    handshake: a TLS server. A plaintext bookie answers ``PLAINTEXT_PORT_ALERT``."""
    try:
        async with asyncio.timeout(timeout):
            _reader, writer = await asyncio.open_connection(host, port, ssl=_probe_context())
    except ssl.SSLError as exc:
        return not isinstance(exc, ssl.SSLEOFError) and str(exc.reason or "") not in _NOT_TLS
    except (OSError, TimeoutError):
        return False
    writer.transport.abort()
    return True


async def closes_after_handshake(host: str, port: int, ctx: ssl.SSLContext, timeout: float) -> bool:
    """Whether the server at host:port completes a handshake with ``ctx`` and then closes
    the connection without a word before the client sends anything: what a TLS 1.3
    server does to a client certificate it refuses."""
    started = time.monotonic()
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(
                host, port, ssl=ctx, server_hostname=host
            )
    except (OSError, TimeoutError):
        return False
    # The refusal reaches us about one round trip after our side of the handshake ended;
    # the handshake itself took a round trip or two.
    wait = min(1.0, max(0.25, 2 * (time.monotonic() - started)))
    try:
        data = await asyncio.wait_for(reader.read(1), wait)
    except TimeoutError:
        return False  # still open: the certificate was accepted
    except OSError:
        return True  # reset
    finally:
        with contextlib.suppress(Exception):
            writer.transport.abort()
    return data == b""


async def why_closed(
    host: str, port: int, ctx: ssl.SSLContext | None, timeout: float
) -> str | None:
    """Why, if TLS says, the bookie at host:port closed a connection made with ``ctx``
    (None: plaintext) before answering anything; None if TLS is not the reason."""
    if ctx is None:
        if await speaks_tls(host, port, timeout):
            return PLAINTEXT_CLIENT
    elif await closes_after_handshake(host, port, ctx, timeout):
        return CERTIFICATE_REFUSED
    return None
