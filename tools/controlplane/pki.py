"""The control plane's certificates: one CA, the API server's serving certificate, client
certificates for each component and the admin, and the service-account signing key.

Everything is made fresh for each cluster (EC P-256 for TLS, RSA 2048 for service-account tokens)
and written as PEM files in the cluster's folder.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Names the API server's certificate answers to, inside and outside the cluster.
API_SERVER_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
API_SERVER_IPS = ("127.0.0.1", "10.96.0.1")


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    """Paths of every PEM file the components are started with."""

    directory: Path
    ca: KeyPair
    apiserver: KeyPair
    kubelet_client: KeyPair
    #: The serving certificate of every KWOK node server (what a kubelet serves on its port).
    kubelet: KeyPair
    service_account_key: Path
    service_account_pub: Path
    clients: dict[str, KeyPair]

    def ca_pem(self) -> bytes:
        return self.ca.cert.read_bytes()


def _write_key(path: Path, key: Any) -> None:
    from cryptography.hazmat.primitives import serialization

    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    path.chmod(0o600)


def create(directory: Path, clients: dict[str, tuple[str, tuple[str, ...]]]) -> Pki:
    """Write a CA and every certificate into ``directory``.

    ``clients`` maps a file stem to (common name, organizations), e.g.
    ``{"admin": ("kubernetes-admin", ("system:masters",))}``.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=7)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "airflow-k8s-retry-controlplane-ca")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    ca = KeyPair(directory / "ca.crt", directory / "ca.key")
    ca.cert.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    _write_key(ca.key, ca_key)

    def issue(stem: str, common_name: str, orgs: tuple[str, ...], *, server: bool = False) -> KeyPair:
        key = ec.generate_private_key(ec.SECP256R1())
        attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
            )
        )
        usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
        if server:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
            names: list[x509.GeneralName] = [x509.DNSName(n) for n in API_SERVER_NAMES]
            names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in API_SERVER_IPS]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        pair = KeyPair(directory / f"{stem}.crt", directory / f"{stem}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(pair.key, key)
        return pair

    apiserver = issue("apiserver", "kube-apiserver", (), server=True)
    kubelet_client = issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client", ("system:masters",))
    kubelet = issue("kubelet", "system:node:kwok", ("system:nodes",), server=True)
    issued = {stem: issue(stem, cn, orgs, server=True) for stem, (cn, orgs) in clients.items()}

    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    sa_key_path, sa_pub_path = directory / "sa.key", directory / "sa.pub"
    _write_key(sa_key_path, sa_key)
    sa_pub_path.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return Pki(directory, ca, apiserver, kubelet_client, kubelet, sa_key_path, sa_pub_path, issued)
