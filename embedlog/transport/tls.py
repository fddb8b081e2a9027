"""TLS for the TCP transport: a self-signed certificate for local clusters, and SSL contexts.

A LocalCluster with ``tls=True`` keeps one certificate for 127.0.0.1 under
``data_dir/tls/``: every bookie serves it, and clients trust exactly it (it is
its own CA), so a client given another CA fails the handshake instead of
talking to an unverified peer.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
from pathlib import Path

CERT_FILE = "cert.pem"
KEY_FILE = "key.pem"
_VALIDITY = datetime.timedelta(days=3650)
_RENEW_BEFORE = datetime.timedelta(days=1)


def ensure_self_signed(directory: Path, host: str = "127.0.0.1") -> tuple[Path, Path]:
    """(cert, key) under ``directory``: reused while valid for ``host``, else made anew.

    Reuse matters: other processes (``embedlog.connect(..., tls_ca=cert)``) keep
    trusting the same file across restarts of the cluster.
    """
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / CERT_FILE, directory / KEY_FILE
    if cert_path.exists() and key_path.exists() and _still_good(cert_path, host):
        return cert_path, key_path
    _generate(cert_path, key_path, host)
    return cert_path, key_path


def _still_good(cert_path: Path, host: str) -> bool:
    from cryptography import x509

    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, x509.ExtensionNotFound):
        return False
    now = datetime.datetime.now(datetime.UTC)
    if cert.not_valid_after_utc - now < _RENEW_BEFORE:
        return False
    return _san_for(host) in list(san)


def _san_for(host: str) -> object:
    from cryptography import x509

    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _generate(cert_path: Path, key_path: Path, host: str) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"embedlog local cluster {host}")])
    now = datetime.datetime.now(datetime.UTC)
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # tolerate clock skew
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.SubjectAlternativeName([_san_for(host)]), critical=False)  # type: ignore[list-item]
        # Its own CA: clients load exactly this file as their trust anchor.
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(ski, critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    # Write the key readable by its owner only, and both files atomically: a process
    # reading them concurrently never sees half a PEM.
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    _write_atomic(key_path, key_pem, mode=0o600)
    _write_atomic(cert_path, cert.public_bytes(serialization.Encoding.PEM), mode=0o644)


def _write_atomic(path: Path, data: bytes, *, mode: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def server_context(cert: Path | str, key: Path | str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(cert), str(key))
    return ctx


def client_context(ca: Path | str | None = None) -> ssl.SSLContext:
    """Verifies the bookie's certificate and host name against ``ca`` (system CAs if None)."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca) if ca else None)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx
