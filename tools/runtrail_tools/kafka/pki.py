"""A certificate authority and the certificates of a secured local broker and its clients.

Why: a secured broker needs TLS on every listener and, for mutual TLS, one client
certificate per principal; generating them here (``cryptography``, no ``keytool`` or
``openssl`` on the path) lets ``runtrail kafka up --security …`` and the tests run on any
machine with Java. Certificates are PEM (Kafka reads a PEM truststore, librdkafka reads
everything PEM); each private key is encrypted with a random password kept beside it
(``<name>.key-password``), so clients read ``ssl.key.password`` from a file as production
does. Java gets the same key and certificate as a PKCS#12 keystore under that password:
Kafka's file-based PEM keystores need an encrypted key, and Java 17 cannot decrypt the PBES2
PEM keys ``cryptography`` writes, but reads PBES2 PKCS#12.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from runtrail.files import open_private, private_dir

#: How long generated certificates are valid: a dev broker's state outlives many restarts.
VALIDITY = dt.timedelta(days=825)
#: The hosts the broker certificate is valid for (it binds loopback only).
BROKER_HOSTS = ("127.0.0.1", "localhost")


@dataclass(frozen=True)
class Identity:
    """One principal's PEM files: certificate, encrypted key, both in one keystore file."""

    folder: Path
    name: str

    @property
    def certificate(self) -> Path:
        return self.folder / f"{self.name}.crt"

    @property
    def key(self) -> Path:
        """The PKCS#8 private key, encrypted with :attr:`key_password`."""
        return self.folder / f"{self.name}.key"

    @property
    def key_password(self) -> Path:
        return self.folder / f"{self.name}.key-password"

    @property
    def keystore(self) -> Path:
        """Key and certificate as PKCS#12 (password: :attr:`key_password`), for Java."""
        return self.folder / f"{self.name}.p12"

    def exists(self) -> bool:
        return self.certificate.is_file()


class Authority:
    """The CA of one state folder: created once, then reused to sign new identities."""

    def __init__(self, folder: Path) -> None:
        self.folder = private_dir(folder)
        self.certificate = self.folder / "ca.crt"
        self._key_file = self.folder / "ca.key"

    def ensure(self) -> None:
        """Create the CA's key and self-signed certificate unless they exist."""
        if self.certificate.is_file() and self._key_file.is_file():
            return
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "runtrail local CA")])
        now = dt.datetime.now(dt.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
            )
            .sign(key, hashes.SHA256())
        )
        _write(self._key_file, _key_pem(key, None))
        _write(self.certificate, cert.public_bytes(serialization.Encoding.PEM))

    def identity(self, name: str, hosts: tuple[str, ...] = ()) -> Identity:
        """The identity ``name`` (its certificate's CN, so its Kafka principal ``User:name``),
        issued once; ``hosts`` makes it a server certificate for those names too."""
        identity = Identity(self.folder, name)
        if identity.exists():
            return identity
        self.ensure()
        ca_key = serialization.load_pem_private_key(self._key_file.read_bytes(), None)
        assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
        ca_cert = x509.load_pem_x509_certificate(self.certificate.read_bytes())
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                critical=False,
            )
        )
        if hosts:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
            builder = builder.add_extension(
                x509.SubjectAlternativeName([_general_name(h) for h in hosts]), critical=False
            )
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        password = secrets.token_urlsafe(24)
        key_pem = _key_pem(key, password)
        cert_pem = cert.public_bytes(serialization.Encoding.PEM)
        _write(identity.key_password, password.encode("ascii"))
        _write(identity.key, key_pem)
        _write(
            identity.keystore,
            pkcs12.serialize_key_and_certificates(
                name.encode("utf-8"),
                key,
                cert,
                [ca_cert],
                serialization.BestAvailableEncryption(password.encode("ascii")),
            ),
        )
        _write(identity.certificate, cert_pem)  # last: its presence means the rest is there
        return identity


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _key_pem(key: ec.EllipticCurvePrivateKey, password: str | None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode("ascii"))
        if password
        else serialization.NoEncryption()
    )
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )


def _write(path: Path, data: bytes) -> None:
    with open_private(path, "wb") as out:
        out.write(data)
