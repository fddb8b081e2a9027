"""TLS for the TCP transport: SSL contexts from the operator's files, checked first, and a
self-signed certificate for sandboxes.

Operators give PEM files: a bookie its certificate and key (``tls_cert``, ``tls_key``)
and, to verify clients, the CA their certificates must chain to (``tls_ca``, with
``tls_require_client_cert`` to refuse clients without one); a client the CA of the
bookies' certificates and, for mutual TLS, its own certificate and key. Each file is
checked before use, so a wrong path or a key of another certificate is one clear
error naming the file rather than a failed handshake later.

A LocalCluster with ``tls=True`` and no files keeps one self-signed certificate for
127.0.0.1 under ``data_dir/tls/``: every bookie serves it, and clients trust exactly
it (it is its own CA). It is for sandboxes and tests, not for deployments.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
from pathlib import Path
from typing import Any

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


# -- the operator's files ------------------------------------------------------------------------


class TlsConfigError(ValueError):
    """A TLS setting is inconsistent, or names a file that is missing or not what it must be."""


def _read(path: Path | str, setting: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise TlsConfigError(f"{setting} {path} does not exist: give the path of {what}") from None
    except OSError as exc:
        raise TlsConfigError(f"{setting} {path} cannot be read: {exc.strerror or exc}") from None


def _certificates(path: Path | str, setting: str, what: str) -> list[Any]:
    from cryptography import x509

    data = _read(path, setting, what)
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError:
        certs = []
    if not certs:
        raise TlsConfigError(
            f"{setting} {path} holds no PEM certificate (-----BEGIN CERTIFICATE-----): "
            f"give the path of {what}"
        )
    return certs


def check_ca(ca: Path | str, setting: str = "tls_ca") -> None:
    """``ca`` holds at least one PEM certificate."""
    _certificates(ca, setting, "the PEM file of the CA certificate(s) to trust")


def check_identity(
    cert: Path | str,
    key: Path | str,
    *,
    role: str,
    host: str | None = None,
    cert_setting: str = "tls_cert",
    key_setting: str = "tls_key",
) -> None:
    """``cert`` (PEM, leaf first) and ``key`` (unencrypted PEM) belong together and are fit
    for ``role`` ("server" or "client") now, and for ``host`` (a server's address).

    Raises TlsConfigError naming the file and what to do.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.x509.oid import ExtendedKeyUsageOID

    leaf = _certificates(cert, cert_setting, f"the PEM certificate of this {role}")[0]
    key_pem = _read(key, key_setting, f"the PEM private key of {cert_setting} {cert}")
    try:
        private = serialization.load_pem_private_key(key_pem, password=None)
    except TypeError:
        raise TlsConfigError(
            f"{key_setting} {key} is encrypted: give the key unencrypted, in a file only "
            "this process's user can read"
        ) from None
    except Exception:
        raise TlsConfigError(
            f"{key_setting} {key} holds no PEM private key (-----BEGIN PRIVATE KEY-----): "
            f"give the key {cert_setting} {cert} was issued for"
        ) from None
    spki = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    if private.public_key().public_bytes(*spki) != leaf.public_key().public_bytes(*spki):
        raise TlsConfigError(
            f"{key_setting} {key} does not match {cert_setting} {cert}: give the key the "
            "certificate was issued for"
        )
    now = datetime.datetime.now(datetime.UTC)
    if now < leaf.not_valid_before_utc:
        raise TlsConfigError(
            f"{cert_setting} {cert} is not valid before "
            f"{leaf.not_valid_before_utc:%Y-%m-%d %H:%M} UTC: check the clock, or issue one "
            "valid now"
        )
    if now > leaf.not_valid_after_utc:
        raise TlsConfigError(
            f"{cert_setting} {cert} expired on {leaf.not_valid_after_utc:%Y-%m-%d %H:%M} UTC: "
            "renew it"
        )
    purpose = (
        ExtendedKeyUsageOID.SERVER_AUTH if role == "server" else ExtendedKeyUsageOID.CLIENT_AUTH
    )
    try:
        usages = list(leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)
    except x509.ExtensionNotFound:
        usages = [purpose]  # no restriction
    if purpose not in usages:
        raise TlsConfigError(
            f"{cert_setting} {cert} is not for TLS {role}s (its extended key usage lacks "
            f"{role}Auth): issue one that allows it"
        )
    if host is not None and not _names(leaf, host):
        raise TlsConfigError(
            f"{cert_setting} {cert} does not name {host}, the address clients connect to "
            f"(they check it): issue it with subjectAltName {_san_text(host)}"
        )


def _names(cert: Any, host: str) -> bool:
    """Whether ``cert``'s subjectAltName covers ``host`` (an IP address exactly; a DNS name
    exactly or by a one-label wildcard), as clients will check it."""
    from cryptography import x509

    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        name = host.lower().rstrip(".")
        for dns in san.get_values_for_type(x509.DNSName):
            dns = dns.lower().rstrip(".")
            if dns == name or (
                dns.startswith("*.") and "." in name and name.split(".", 1)[1] == dns[2:]
            ):
                return True
        return False
    return ip in san.get_values_for_type(x509.IPAddress)


def _san_text(host: str) -> str:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return f"DNS:{host}"
    return f"IP:{host}"


def _load_chain(ctx: ssl.SSLContext, cert: Path | str, key: Path | str) -> None:
    try:
        ctx.load_cert_chain(str(cert), str(key))
    except ssl.SSLError as exc:  # what check_identity cannot see, e.g. a key type OpenSSL lacks
        raise TlsConfigError(f"tls_cert {cert} with tls_key {key}: {exc}") from None


def _load_ca(ctx: ssl.SSLContext, ca: Path | str) -> None:
    check_ca(ca)
    try:
        ctx.load_verify_locations(cafile=str(ca))
    except ssl.SSLError as exc:
        raise TlsConfigError(f"tls_ca {ca}: {exc}") from None


def server_context(
    cert: Path | str,
    key: Path | str,
    *,
    ca: Path | str | None = None,
    require_client_cert: bool = False,
    host: str | None = None,
) -> ssl.SSLContext:
    """A bookie's context: serves ``cert``; with ``ca``, verifies the client certificates
    presented against it (and only it), and refuses clients without one if
    ``require_client_cert``. ``host``: the address the certificate must name."""
    if require_client_cert and ca is None:
        raise TlsConfigError(
            "tls_require_client_cert needs tls_ca: the CA certificate(s) client certificates "
            "must be signed by"
        )
    check_identity(cert, key, role="server", host=host)
    # Not create_default_context(CLIENT_AUTH): it would trust every system CA to vouch
    # for clients, where only the operator's CA may.
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(ctx, cert, key)
    if ca is not None:
        _load_ca(ctx, ca)
        ctx.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
    return ctx


def client_context(
    ca: Path | str | None = None,
    cert: Path | str | None = None,
    key: Path | str | None = None,
) -> ssl.SSLContext:
    """Verifies the bookie's certificate and address against ``ca`` (system CAs if None);
    presents ``cert`` (with ``key``) to bookies that ask for a client certificate."""
    if (cert is None) != (key is None):
        given, missing = ("tls_cert", "tls_key") if key is None else ("tls_key", "tls_cert")
        raise TlsConfigError(
            f"{given} without {missing}: a client certificate needs its private key "
            "(give both, or neither)"
        )
    if ca is not None:
        check_ca(ca)
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca) if ca else None)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert is not None and key is not None:
        check_identity(cert, key, role="client")
        _load_chain(ctx, cert, key)
    return ctx
