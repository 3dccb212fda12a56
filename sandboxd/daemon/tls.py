"""`sandboxd tls init`: a certificate authority of serve's own and a certificate it signed for
`api.DOMAIN` and `*.DOMAIN`, for serving E2B's domain mode (`serve --domain DOMAIN --tls-cert
--tls-key`) on a machine no public CA issues names for (README, "Reaching a sandbox's ports").

The CA is made once and kept: the certificate is issued again on each run (a new domain, or a
renewal) and clients keep trusting the same CA file. The keys are 0600; the certificates are
readable by all (users point their clients at `ca.pem`).
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from sandboxd.errors import HostError

if TYPE_CHECKING:
    from pathlib import Path

TLS_DIR = "tls"
CA_DAYS = 3650
# What browsers and Apple's clients accept at most for a server certificate.
CERT_DAYS = 397
# Node refuses a wildcard directly under a top-level name (`*.localhost`): a certificate for
# such a domain would serve Python clients and fail JS ones.
MIN_LABELS = 2

PrivateKey = ec.EllipticCurvePrivateKey


@dataclass(frozen=True)
class TlsFiles:
    """Where `tls init` writes, in the state directory's `tls/`."""

    directory: Path

    @property
    def ca_cert(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def ca_key(self) -> Path:
        return self.directory / "ca-key.pem"

    @property
    def cert(self) -> Path:
        return self.directory / "cert.pem"

    @property
    def key(self) -> Path:
        return self.directory / "key.pem"


def check_domain(domain: str) -> None:
    """Raises HostError for a domain a wildcard certificate cannot serve to every SDK."""
    labels = domain.split(".")
    if len(labels) < MIN_LABELS or not all(labels):
        raise HostError(
            f"--domain {domain!r}: needs two labels or more (e.g. e2b.localhost): Node "
            "refuses a certificate for *.TLD"
        )


def init(state_dir: Path, domain: str) -> TlsFiles:
    """The CA (kept if present) and a certificate for `api.DOMAIN` and `*.DOMAIN` signed by it.

    Raises:
        HostError: a domain of one label.
    """
    check_domain(domain)
    files = TlsFiles(state_dir / TLS_DIR)
    files.directory.mkdir(mode=0o755, parents=True, exist_ok=True)
    if files.ca_key.exists():
        ca_key = serialization.load_pem_private_key(files.ca_key.read_bytes(), None)
        ca_cert = x509.load_pem_x509_certificate(files.ca_cert.read_bytes())
        if not isinstance(ca_key, PrivateKey):
            raise HostError(f"{files.ca_key} is not an EC key that sandboxd made")
    else:
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_cert = _ca_certificate(ca_key)
        _write(files.ca_key, _key_pem(ca_key), 0o600)
        _write(files.ca_cert, ca_cert.public_bytes(serialization.Encoding.PEM), 0o644)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _server_certificate(key, domain, ca_key, ca_cert)
    _write(files.key, _key_pem(key), 0o600)
    _write(files.cert, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return files


def _ca_certificate(key: PrivateKey) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sandboxd local CA")])
    usage = x509.KeyUsage(digital_signature=False, content_commitment=False,
                          key_encipherment=False, data_encipherment=False, key_agreement=False,
                          key_cert_sign=True, crl_sign=True, encipher_only=False,
                          decipher_only=False)  # fmt: skip
    return (
        _builder(name, name, key.public_key(), CA_DAYS)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(usage, critical=True)
        .sign(key, hashes.SHA256())
    )


def _server_certificate(
    key: PrivateKey, domain: str, ca_key: PrivateKey, ca_cert: x509.Certificate
) -> x509.Certificate:
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"api.{domain}")])
    names = [x509.DNSName(f"api.{domain}"), x509.DNSName(f"*.{domain}")]
    return (
        _builder(subject, ca_cert.subject, key.public_key(), CERT_DAYS)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey, days: int
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))  # a client's clock a little behind
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
    )


def _key_pem(key: PrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())  # fmt: skip


def _write(path: Path, data: bytes, mode: int) -> None:
    """Replace `path` with `data`, created with `mode` (a key is never readable by others,
    even for a moment)."""
    part = path.with_name(path.name + ".part")
    part.unlink(missing_ok=True)
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(part, path)
