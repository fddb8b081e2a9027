"""Real certificates for TLS tests: a CA of our own, and certificates it signs."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path
from typing import Any

from attrs import frozen
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

HOST = "127.0.0.1"


@frozen
class CA:
    cert: Path  # the PEM file clients and bookies are given as tls_ca
    key: Any
    name: x509.Name


@frozen
class Identity:
    cert: Path
    key: Path


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _key_pem(key: Any) -> bytes:
    return key.private_bytes(  # type: ignore[no-any-return]
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def make_ca(directory: Path, name: str) -> CA:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    path = _write(directory / f"{name}.pem", cert.public_bytes(serialization.Encoding.PEM))
    return CA(path, key, subject)


def issue(
    ca: CA,
    directory: Path,
    name: str,
    *,
    server: bool = False,
    client: bool = False,
    host: str = HOST,
    valid_days: int = 30,
) -> Identity:
    """A certificate ``ca`` signs for ``name``: for TLS servers at ``host`` and/or clients."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    usages = [ExtendedKeyUsageOID.SERVER_AUTH] * server + [ExtendedKeyUsageOID.CLIENT_AUTH] * client
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca.name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1 + max(0, -valid_days)))
        .not_valid_after(now + datetime.timedelta(days=valid_days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), False
        )
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(host))]), False
        )
    cert = builder.sign(ca.key, hashes.SHA256())
    return Identity(
        _write(directory / f"{name}.crt", cert.public_bytes(serialization.Encoding.PEM)),
        _write(directory / f"{name}.key", _key_pem(key)),
    )


@frozen
class Pki:
    """The operator's CA with a bookie and a client certificate, and a stranger's CA with
    a client certificate of its own."""

    ca: CA
    bookie: Identity  # serverAuth for 127.0.0.1 and clientAuth (the cluster's own clients)
    client: Identity
    foreign_ca: CA
    foreign_client: Identity


def make_pki(directory: Path) -> Pki:
    ca = make_ca(directory, "operator-ca")
    foreign = make_ca(directory / "foreign", "foreign-ca")
    return Pki(
        ca=ca,
        bookie=issue(ca, directory, "bookie", server=True, client=True),
        client=issue(ca, directory, "client", client=True),
        foreign_ca=foreign,
        foreign_client=issue(foreign, directory / "foreign", "client", client=True),
    )
