"""Certificates for a local cluster's mutual TLS (`midtown cluster up --tls`): a CA made
for the cluster, and one certificate per process it signs, all in DIR/tls/.

    ca.pem                 the cluster's CA (give it to clients: Client(tls_ca=...), --tls-ca)
    <process>.pem/.key     each server's certificate and key (log-0, storage-1, ...)
    admin.pem/.key         for the `midtown` command's calls on internal services

The CA's key is kept beside them (ca.key, mode 0600) so that `cluster up` can add a
certificate for a new process; a production cluster would keep it elsewhere."""

from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Long enough for any local cluster; rotation is out of scope for a development cluster.
VALIDITY_DAYS = 3650


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write(path: Path, data: bytes, private: bool = False) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    if private:
        os.chmod(tmp, 0o600)
    tmp.replace(path)


def _pem_key(k: ec.EllipticCurvePrivateKey) -> bytes:
    return k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                           serialization.NoEncryption())


def ensure_ca(tls_dir: Path) -> None:
    """Make the cluster's CA in `tls_dir` unless it is there."""
    tls_dir.mkdir(parents=True, exist_ok=True)
    if (tls_dir / "ca.pem").exists() and (tls_dir / "ca.key").exists():
        return
    key = _key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Midtown cluster CA")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=VALIDITY_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                           critical=True)
            .sign(key, hashes.SHA256()))
    _write(tls_dir / "ca.key", _pem_key(key), private=True)
    _write(tls_dir / "ca.pem", cert.public_bytes(serialization.Encoding.PEM))


def ensure_cert(tls_dir: Path, name: str,
                hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> tuple[Path, Path]:
    """A certificate for process `name`, signed by the cluster's CA, valid for `hosts`
    (as server and as client); made unless it is there. Returns (cert path, key path)."""
    ensure_ca(tls_dir)
    cert_path, key_path = tls_dir / f"{name}.pem", tls_dir / f"{name}.key"
    if cert_path.exists() and key_path.exists():
        return cert_path, key_path
    ca_key = serialization.load_pem_private_key((tls_dir / "ca.key").read_bytes(), None)
    ca = x509.load_pem_x509_certificate((tls_dir / "ca.pem").read_bytes())
    key = _key()
    sans: list[x509.GeneralName] = []
    for h in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"midtown {name}")]))
            .issuer_name(ca.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=VALIDITY_DAYS))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))  # type: ignore[arg-type]
    _write(key_path, _pem_key(key), private=True)
    _write(cert_path, cert.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path
