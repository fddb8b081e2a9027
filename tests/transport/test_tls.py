"""TLS with the operator's own certificates: mutual TLS, refusals, mismatches, bad files.

Every certificate here is real, made by tls_certs.py: the operator's CA signs the
bookies' and a client's certificate; a foreign CA signs a stranger's client certificate.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from tls_certs import HOST, Pki, issue, make_pki

import embedlog
from embedlog import LocalCluster
from embedlog.bookie.config import BookieConfig
from embedlog.errors import BookieUnavailableError, LedgerRecoveryError, TlsHandshakeError
from embedlog.transport import tls, tls_mismatch
from embedlog.transport.base import next_txn
from embedlog.transport.tcp import BookieServer, TcpTransport
from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import OpCode, Request, Response

BOOKIE = "bookie-1"
PAYLOADS = [b"entry %d" % i for i in range(10)]


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path / "pki")


def mtls_settings(pki: Pki, *, require: bool = True) -> dict[str, Any]:
    return {
        "tls_cert": pki.bookie.cert,
        "tls_key": pki.bookie.key,
        "tls_ca": pki.ca.cert,
        "tls_require_client_cert": require,
    }


# -- decisions as pure functions -----------------------------------------------------------------


def _ssl_error(reason: str) -> ssl.SSLError:
    exc = ssl.SSLError(1, f"[SSL: {reason}] ...")
    exc.reason = reason  # type: ignore[misc]
    return exc


@pytest.mark.parametrize(
    ("exc", "says"),
    [
        (_ssl_error("TLSV1_ALERT_PROTOCOL_VERSION"), "does not speak TLS"),
        (_ssl_error("WRONG_VERSION_NUMBER"), "does not speak TLS"),
        (_ssl_error("TLSV13_ALERT_CERTIFICATE_REQUIRED"), "requires a client certificate"),
        (_ssl_error("TLSV1_ALERT_UNKNOWN_CA"), "refused this client's certificate"),
        (_ssl_error("SSLV3_ALERT_BAD_CERTIFICATE"), "refused this client's certificate"),
        (_ssl_error("NO_SHARED_CIPHER"), "the TLS handshake failed: NO_SHARED_CIPHER"),
        # Also how a crashing bookie ends a handshake: not a TLS verdict.
        (ssl.SSLEOFError(8, "EOF occurred in violation of protocol"), None),
        (ConnectionResetError(), None),
        (TimeoutError(), None),
    ],
)
def test_what_a_tls_failure_says(exc: BaseException, says: str | None) -> None:
    got = tls_mismatch.tls_refusal(exc)
    assert got is None if says is None else (got is not None and says in got)
    # On an established connection only the peer's alert is a verdict.
    after = tls_mismatch.tls_refusal(exc, handshake=False)
    reason = str(getattr(exc, "reason", "") or "")
    assert after == (got if "ALERT" in reason else None)


def test_a_tls_record_read_as_a_length_prefix() -> None:
    assert tls_mismatch.is_tls_record(bytes([22, 3, 1, 2]))  # a ClientHello
    assert tls_mismatch.is_tls_record(tls_mismatch.PLAINTEXT_PORT_ALERT[:4])
    assert not tls_mismatch.is_tls_record(bytes([0, 0, 0, 60]))  # a frame of 60 bytes
    assert not tls_mismatch.is_tls_record(bytes([22, 4, 0, 0]))


# -- the operator's files are checked, with one clear error each ---------------------------------


def test_bad_files_are_named_with_what_to_do(pki: Pki, tmp_path: Path) -> None:
    b, c = pki.bookie, pki.client
    missing = tmp_path / "nope.pem"
    with pytest.raises(tls.TlsConfigError, match=rf"tls_cert {missing} does not exist"):
        tls.server_context(missing, b.key)
    with pytest.raises(tls.TlsConfigError, match=rf"tls_ca {missing} does not exist"):
        tls.client_context(missing)
    with pytest.raises(tls.TlsConfigError, match=rf"tls_key {c.key} does not match tls_cert"):
        tls.server_context(b.cert, c.key)
    with pytest.raises(tls.TlsConfigError, match=rf"tls_cert {b.key} holds no PEM certificate"):
        tls.client_context(pki.ca.cert, b.key, b.key)
    with pytest.raises(tls.TlsConfigError, match="tls_cert without tls_key"):
        tls.client_context(pki.ca.cert, c.cert)
    with pytest.raises(tls.TlsConfigError, match="tls_require_client_cert needs tls_ca"):
        tls.server_context(b.cert, b.key, require_client_cert=True)
    # A client certificate is not one a bookie may serve, and the other way round.
    with pytest.raises(tls.TlsConfigError, match="lacks serverAuth"):
        tls.server_context(c.cert, c.key)
    server_only = issue(pki.ca, tmp_path, "server-only", server=True)
    with pytest.raises(tls.TlsConfigError, match="lacks clientAuth"):
        tls.client_context(pki.ca.cert, server_only.cert, server_only.key)
    with pytest.raises(tls.TlsConfigError, match=r"does not name 10\.9\.8\.7.*IP:10\.9\.8\.7"):
        tls.server_context(b.cert, b.key, host="10.9.8.7")
    expired = issue(pki.ca, tmp_path, "expired", server=True, valid_days=-1)
    with pytest.raises(tls.TlsConfigError, match=r"expired on .* renew it"):
        tls.server_context(expired.cert, expired.key)
    encrypted = tmp_path / "encrypted.key"
    encrypted.write_bytes(
        ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"pw"),
        )
    )
    with pytest.raises(tls.TlsConfigError, match=rf"tls_key {encrypted} is encrypted"):
        tls.server_context(b.cert, encrypted)
    assert isinstance(tls.TlsConfigError(), ValueError)  # the CLI reports ValueErrors plainly


def test_bookie_and_cluster_tls_settings_are_checked_up_front(pki: Pki, tmp_path: Path) -> None:
    for bad, says in [
        ({"tls_cert": pki.bookie.cert}, "tls_cert without tls_key"),
        ({"tls_ca": pki.ca.cert}, "tls_ca needs tls_cert and tls_key"),
        (
            {"tls_cert": pki.bookie.cert, "tls_key": pki.bookie.key, "tls_require_client_cert": 1},
            "tls_require_client_cert needs tls_ca",
        ),
    ]:
        with pytest.raises(ValueError, match=says):
            BookieConfig.from_settings("b", tmp_path, **bad)
    with pytest.raises(ValueError, match=r"need.* transport='tcp'"):
        LocalCluster(3, tmp_path / "c", **mtls_settings(pki))
    # At construction, before anything boots: the file and what to do.
    gone = tmp_path / "gone.key"
    with pytest.raises(tls.TlsConfigError, match=rf"tls_key {gone} does not exist"):
        LocalCluster(3, tmp_path / "c", transport="tcp", **{**mtls_settings(pki), "tls_key": gone})
    # The cluster's own clients present the bookies' certificate: it must allow clientAuth.
    server_only = issue(pki.ca, tmp_path, "server-only", server=True)
    with pytest.raises(tls.TlsConfigError, match="lacks clientAuth"):
        LocalCluster(
            3,
            tmp_path / "c",
            transport="tcp",
            **{**mtls_settings(pki), "tls_cert": server_only.cert, "tls_key": server_only.key},
        )


# -- the transport against one bookie ------------------------------------------------------------


class EchoBookie:
    async def handle(self, req: Request) -> Response:
        return Response.to(req, StatusCode.EOK, entry_id=req.entry_id, body=req.body)


def read(entry_id: int) -> Request:
    return Request(OpCode.READ, next_txn(), 7, entry_id)


def run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(main(), 60))  # type: ignore[arg-type]


class Attempts(TcpTransport):
    """A TcpTransport that counts its connection attempts."""

    def __init__(self, address: str, ctx: ssl.SSLContext | None) -> None:
        super().__init__(lambda _b: address, ssl_context=ctx)
        self.opened = 0

    async def _open(self, bookie_id: str) -> Any:
        self.opened += 1
        return await super()._open(bookie_id)


async def refused(server: BookieServer, ctx: ssl.SSLContext | None) -> tuple[str, int]:
    """The TLS error of a client with ``ctx`` asking ``server`` five times in a row, and
    how many connections the five took."""
    client = Attempts(server.address, ctx)
    messages = []
    try:
        for i in range(5):
            # A timeout far beyond the test's own: the answer must be the TLS refusal.
            with pytest.raises(TlsHandshakeError) as caught:
                await client.request("c1", BOOKIE, read(i), 600)
            messages.append(str(caught.value))
    finally:
        await client.close()
    assert len(set(messages)) == 1, messages  # the same verdict, not a new attempt's
    return messages[0], client.opened


def test_mutual_tls_and_every_refusal_at_the_handshake(pki: Pki) -> None:
    async def main() -> None:
        server_ctx = tls.server_context(
            pki.bookie.cert, pki.bookie.key, ca=pki.ca.cert, require_client_cert=True, host=HOST
        )
        server = BookieServer(EchoBookie(), ssl_context=server_ctx)
        await server.start()
        try:
            good = TcpTransport(
                lambda _b: server.address,
                ssl_context=tls.client_context(pki.ca.cert, pki.client.cert, pki.client.key),
            )
            try:
                assert (await good.request("c1", BOOKIE, read(3), 5)).entry_id == 3
                (conn,) = good._conns.values()
                peer = conn._writer.get_extra_info("ssl_object")
                assert peer is not None and peer.version() in ("TLSv1.2", "TLSv1.3")
            finally:
                await good.close()

            # No client certificate, and one from a CA the bookie does not trust.
            for ctx in (
                tls.client_context(pki.ca.cert),
                tls.client_context(pki.ca.cert, pki.foreign_client.cert, pki.foreign_client.key),
            ):
                message, opened = await refused(server, ctx)
                assert "TLS" in message and "refuses this client's certificate" in message
                assert opened == 1  # later requests failed at once, without reconnecting
            # A bookie certificate the client cannot verify.
            ctx = tls.client_context(pki.foreign_ca.cert, pki.client.cert, pki.client.key)
            message, opened = await refused(server, ctx)
            assert "TLS" in message and "certificate verification failed" in message
            assert opened == 1
            # A plaintext client of this TLS bookie.
            message, opened = await refused(server, None)
            assert "the bookie speaks TLS and this client does not" in message
            assert opened == 1
        finally:
            await server.close()

        plain = BookieServer(EchoBookie())  # and a TLS client of a plaintext bookie
        await plain.start()
        try:
            message, opened = await refused(plain, tls.client_context(pki.ca.cert))
            assert "the bookie does not speak TLS on this port" in message
            assert opened == 1
            # The bookie survived it and serves plaintext clients as before.
            ok = TcpTransport(lambda _b: plain.address)
            try:
                assert (await ok.request("c1", BOOKIE, read(1), 5)).entry_id == 1
            finally:
                await ok.close()
        finally:
            await plain.close()

    run(main)


def test_a_lost_connection_is_not_taken_for_tls(pki: Pki) -> None:
    """A TLS bookie that goes away before answering: unavailable, not a TLS error."""

    class Silent:
        async def handle(self, req: Request) -> Response:
            await asyncio.sleep(3600)
            raise AssertionError("never answers")

    async def main() -> None:
        server = BookieServer(
            Silent(), ssl_context=tls.server_context(pki.bookie.cert, pki.bookie.key)
        )
        await server.start()
        client = TcpTransport(
            lambda _b: server.address, ssl_context=tls.client_context(pki.ca.cert)
        )
        try:
            asking = asyncio.ensure_future(client.request("c1", BOOKIE, read(0), 600))
            while not server._readers:
                await asyncio.sleep(0.01)
            await server.close()  # stops listening and drops the connection
            with pytest.raises(BookieUnavailableError) as caught:
                await asking
            assert not isinstance(caught.value, TlsHandshakeError)
            assert not client._tls_refused
        finally:
            await client.close()
            await server.close()

    run(main)


# -- LocalCluster with the operator's files ------------------------------------------------------


def write_ledger(client: Any) -> int:
    wh = client.create_ledger(3, 3, 2)
    for p in PAYLOADS:
        wh.add(p)
    wh.close()
    return int(wh.ledger_id)


def read_all(client: Any, lid: int, **kw: Any) -> list[bytes]:
    rh = client.open_ledger(lid, **kw)
    return [e.data for e in rh.read(0, rh.last_add_confirmed)]


def test_mutual_tls_cluster_end_to_end(make_cluster: Any, pki: Pki) -> None:
    cluster = make_cluster(3, transport="tcp", **mtls_settings(pki))
    assert cluster.tls and cluster.transport.tls_ca == pki.ca.cert
    assert cluster.bookie_config("bookie-1").tls_cert == pki.bookie.cert
    # The cluster's own client (it presents the bookies' certificate) ...
    own = cluster.client("own")
    lid = write_ledger(own)
    assert read_all(own, lid) == PAYLOADS
    conn = next(iter(cluster.transport.client._conns.values()))
    assert conn._writer.get_extra_info("ssl_object") is not None
    # ... and one with a client certificate of its own, as another process would have.
    client = cluster.client(
        "mtls", tls_ca=pki.ca.cert, tls_cert=pki.client.cert, tls_key=pki.client.key
    )
    assert read_all(client, lid) == PAYLOADS
    mine = write_ledger(client)
    assert read_all(own, mine) == PAYLOADS
    # A restarted bookie serves TLS again (its context is made at each boot).
    cluster.stop_bookie("bookie-2")
    cluster.start_bookie("bookie-2")
    assert cluster.read_from_bookie("bookie-2", mine, 0) == PAYLOADS[0]


@pytest.mark.parametrize("who", ["no certificate", "foreign CA"])
def test_cluster_refuses_clients_without_a_certificate_of_its_ca(
    make_cluster: Any, pki: Pki, who: str
) -> None:
    cluster = make_cluster(3, transport="tcp", **mtls_settings(pki))
    own = cluster.client("own")
    lid = write_ledger(own)
    live = own.create_ledger(3, 3, 2)  # open: opening it recovers (fences) it
    live.add(b"live")
    cert: dict[str, Path] = {}
    if who == "foreign CA":
        cert = {"tls_cert": pki.foreign_client.cert, "tls_key": pki.foreign_client.key}
    # request_timeout far above the test's own limit: what ends each call is the refusal.
    stranger = cluster.client("stranger", request_timeout=600, tls_ca=pki.ca.cert, **cert)
    wh = stranger.create_ledger(3, 3, 2)  # metadata only
    with pytest.raises(TlsHandshakeError, match="refuses this client's certificate"):
        wh.add(b"x")
    with pytest.raises(TlsHandshakeError, match="TLS"):
        stranger.open_ledger(lid, recover=False).read(0, 0)
    with pytest.raises(LedgerRecoveryError, match="TLS"):
        stranger.open_ledger(live.ledger_id)
    # Nothing the stranger did reached a bookie: the writer goes on, the ledgers are intact.
    assert live.add(b"still mine") == 1
    assert read_all(own, lid, recover=False) == PAYLOADS


def test_one_bookie_with_an_untrusted_certificate_is_only_unavailable(
    make_cluster: Any, pki: Pki
) -> None:
    """A bookie whose certificate clients cannot verify is left out like an unreachable
    one: writes go on while the others make the ack quorum; when TLS leaves an entry no
    quorum (and no replacement), the add fails with the TLS error at once."""
    cluster = make_cluster(3, transport="tcp", **mtls_settings(pki))
    stray = issue(pki.foreign_ca, pki.ca.cert.parent / "stray", "stray", server=True)
    cluster.stop_bookie("bookie-3")
    cluster.start_bookie(
        "bookie-3",
        tls_cert=stray.cert,
        tls_key=stray.key,
        tls_ca=None,
        tls_require_client_cert=False,
    )
    client = cluster.client("w", request_timeout=600)
    wh = client.create_ledger(3, 3, 2)
    assert [wh.add(p) for p in PAYLOADS] == list(range(len(PAYLOADS)))
    assert set(wh.metadata.ensembles[0]) == {"bookie-1", "bookie-2", "bookie-3"}
    wh.close()
    assert read_all(client, wh.ledger_id) == PAYLOADS
    # Every bookie's ack needed: bookie-3's refusal leaves no quorum.
    strict = client.create_ledger(3, 3, 3)
    with pytest.raises(TlsHandshakeError, match=r"cannot reach its ack quorum.*bookie-3"):
        strict.add(b"x")


@pytest.mark.parametrize("bookies_tls", [True, False], ids=["tls-bookies", "plain-bookies"])
def test_tls_mismatch_from_another_process_says_tls(
    make_cluster: Any, pki: Pki, zk_uri: str, bookies_tls: bool
) -> None:
    settings = mtls_settings(pki, require=False) if bookies_tls else {}
    cluster = make_cluster(3, transport="tcp", metadata_uri=zk_uri, **settings)
    lid = write_ledger(cluster.client("own"))
    # The opposite of the bookies' setting.
    tls_args = {} if bookies_tls else {"tls_ca": pki.ca.cert}
    says = "speaks TLS and this client does not" if bookies_tls else "does not speak TLS"
    with embedlog.connect(zk_uri, name="other", request_timeout=600, **tls_args) as other:
        with pytest.raises(TlsHandshakeError, match=says):
            other.open_ledger(lid, recover=False).read(0, 0)
        wh = other.create_ledger(3, 3, 2)
        with pytest.raises(TlsHandshakeError, match=says):
            wh.add(b"x")
    # With matching settings the same call works.
    match = {"tls_ca": pki.ca.cert} if bookies_tls else {}
    with embedlog.connect(zk_uri, name="right", **match) as right:
        assert read_all(right, lid, recover=False) == PAYLOADS


def test_connect_checks_its_tls_files(tmp_path: Path, pki: Pki, zk_uri: str) -> None:
    with pytest.raises(tls.TlsConfigError, match="tls_key without tls_cert"):
        embedlog.connect(zk_uri, tls_ca=pki.ca.cert, tls_key=pki.client.key)
    with pytest.raises(tls.TlsConfigError, match=rf"tls_key {pki.bookie.key} does not match"):
        embedlog.connect(zk_uri, tls_cert=pki.client.cert, tls_key=pki.bookie.key)
