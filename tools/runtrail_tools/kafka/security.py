"""A secured local broker: SASL_SSL with SCRAM-SHA-512, or mutual TLS, with KRaft's ACLs.

Why one module: the broker's listener settings, the credentials generated for it and the
client settings a principal needs must agree, so they are derived from the same folder
(``<broker home>/security``): ``ca.crt``, one PEM identity per principal
(:mod:`runtrail_tools.kafka.pki`), ``scram/<principal>.password`` and ``mode``.

Both modes: every listener is TLS. The controller listener requires a client certificate (the
broker's own; KRaft cannot check SCRAM there), the ``StandardAuthorizer`` denies what no ACL
allows, and the broker and admin principals are super users. A certificate's principal is its
CN (``User:<CN>``). SCRAM credentials live in the cluster metadata: the broker's and the
admin's are written when the storage is formatted (through a Java argument file, never argv),
every other principal's is set by :func:`upsert_scram_users` at each start, so a password
changed in its file is the broker's after the next ``kafka up``.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from runtrail.files import open_private, private_dir
from runtrail.kafka.errors import BrokerError
from runtrail_tools.kafka.pki import BROKER_HOSTS, Authority, Identity

Mode = Literal["scram", "mtls"]
MODES: tuple[Mode, ...] = ("scram", "mtls")
MECHANISM = "SCRAM-SHA-512"
#: The broker's own principal (inter-broker and controller connections).
BROKER_PRINCIPAL = "runtrail-broker"
#: The operator's principal: a super user (creates topics, ACLs, users).
ADMIN_PRINCIPAL = "runtrail-admin"
#: The client listener's name (and security protocol) per mode.
LISTENER: dict[Mode, str] = {"scram": "SASL_SSL", "mtls": "SSL"}
_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
#: ``User:<CN>`` for a certificate subject ``CN=<name>[,…]``.
_PRINCIPAL_RULES = "RULE:^CN=([^,]+).*$/$1/,DEFAULT"


@dataclass(frozen=True)
class ClientSettings:
    """What a client of one principal sets: librdkafka options and options read from files
    (``RUNTRAIL_KAFKA_OPTIONS`` and ``RUNTRAIL_KAFKA_OPTION_FILES``)."""

    principal: str
    options: dict[str, str]
    option_files: dict[str, str]

    def environment(self, bootstrap_servers: str) -> dict[str, str]:
        """The ``RUNTRAIL_*`` variables that make every runtrail client this principal."""
        return {
            "RUNTRAIL_BOOTSTRAP_SERVERS": bootstrap_servers,
            "RUNTRAIL_KAFKA_OPTIONS": json.dumps(self.options, sort_keys=True),
            "RUNTRAIL_KAFKA_OPTION_FILES": json.dumps(self.option_files, sort_keys=True),
        }

    def java_properties(self) -> dict[str, str]:
        """The same identity for a Java client (the ai4j adapter's ``kafkaProperty``); secrets
        come from files through Kafka's ``DirectoryConfigProvider``, not from the text."""
        props = {"security.protocol": self.options["security.protocol"]}
        props["ssl.truststore.type"] = "PEM"
        props["ssl.truststore.location"] = self.options["ssl.ca.location"]
        props["config.providers"] = "dir"
        props["config.providers.dir.class"] = (
            "org.apache.kafka.common.config.provider.DirectoryConfigProvider"
        )
        if "sasl.password" in self.option_files:
            secret = Path(self.option_files["sasl.password"])
            props["sasl.mechanism"] = MECHANISM
            props["sasl.jaas.config"] = (
                "org.apache.kafka.common.security.scram.ScramLoginModule required "
                f'username="{self.principal}" password="${{dir:{secret.parent}:{secret.name}}}";'
            )
        if "ssl.key.password" in self.option_files:
            secret = Path(self.option_files["ssl.key.password"])
            password = f"${{dir:{secret.parent}:{secret.name}}}"
            props["ssl.keystore.type"] = "PKCS12"
            props["ssl.keystore.location"] = str(secret.with_name(f"{self.principal}.p12"))
            props["ssl.keystore.password"] = password
            props["ssl.key.password"] = password
        return props


class BrokerSecurity:
    """The credentials and listener settings of one secured broker home."""

    def __init__(self, home: Path, mode: Mode, principals: Iterable[str] = ()) -> None:
        if mode not in MODES:
            raise BrokerError(f"unknown security mode {mode!r} (known: {', '.join(MODES)})")
        self.mode: Mode = mode
        self.folder = Path(home) / "security"
        self.authority = Authority(self.folder / "tls")
        self.principals = tuple(dict.fromkeys((ADMIN_PRINCIPAL, *principals)))

    @property
    def listener(self) -> str:
        return LISTENER[self.mode]

    @property
    def mode_file(self) -> Path:
        return self.folder / "mode"

    def scram_password_file(self, principal: str) -> Path:
        return self.folder / "scram" / f"{principal}.password"

    # --- credentials ----------------------------------------------------------------------

    def ensure(self) -> None:
        """Generate what is missing: the CA, the broker's certificate, and per principal a
        certificate (mtls) or a SCRAM password (scram). Existing files are kept."""
        private_dir(self.folder)
        recorded = recorded_mode(self.folder.parent)
        if recorded is not None and recorded != self.mode:
            raise BrokerError(
                f"the broker in {self.folder.parent} was set up for --security {recorded}; "
                f"stop it and remove {self.folder.parent} to change to {self.mode}"
            )
        self.authority.ensure()
        self.authority.identity(BROKER_PRINCIPAL, BROKER_HOSTS)
        for principal in (BROKER_PRINCIPAL, *self.principals):
            if self.mode == "mtls":
                self.authority.identity(principal)
            else:
                self._ensure_password(principal)

    def record_mode(self) -> None:
        """Called once the storage is formatted with this mode's credentials."""
        self.mode_file.write_text(self.mode + "\n", encoding="ascii")

    def _ensure_password(self, principal: str) -> None:
        path = self.scram_password_file(principal)
        if path.is_file():
            return
        private_dir(path.parent)
        with open_private(path, "w", encoding="ascii") as out:
            out.write(secrets.token_urlsafe(24))

    def scram_password(self, principal: str) -> str:
        return self.scram_password_file(principal).read_text(encoding="ascii").strip()

    def identity(self, principal: str) -> Identity:
        return Identity(self.authority.folder, principal)

    # --- the broker -----------------------------------------------------------------------

    def format_arguments(self) -> list[str]:
        """Extra ``StorageTool format`` arguments: the SCRAM users the broker needs before it
        runs. They hold passwords: the caller passes them in an argument file."""
        if self.mode != "scram":
            return []
        args: list[str] = []
        for principal in (BROKER_PRINCIPAL, ADMIN_PRINCIPAL):
            password = self.scram_password(principal)
            args += ["--add-scram", f"{MECHANISM}=[name={principal},password={password}]"]
        return args

    def secure_properties(self, text: str) -> str:
        """``server.properties`` text with its PLAINTEXT listener made this mode's, and the
        TLS, SASL and authorizer settings appended (later keys win in a properties file)."""
        listener = self.listener
        lines = []
        for line in text.splitlines():
            key = line.split("=", 1)[0].strip()
            if key in ("listeners", "advertised.listeners"):
                line = line.replace("PLAINTEXT://", f"{listener}://")
            elif key in ("listener.security.protocol.map", "inter.broker.listener.name"):
                continue
            lines.append(line)
        broker = self.identity(BROKER_PRINCIPAL)
        key_password = broker.key_password.read_text(encoding="ascii").strip()
        extra = {
            "inter.broker.listener.name": listener,
            "listener.security.protocol.map": f"CONTROLLER:SSL,{listener}:{listener}",
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(broker.keystore),
            "ssl.keystore.password": key_password,
            "ssl.key.password": key_password,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.authority.certificate),
            "listener.name.controller.ssl.client.auth": "required",
            "ssl.principal.mapping.rules": _PRINCIPAL_RULES,
            "authorizer.class.name": _AUTHORIZER,
            "super.users": f"User:{BROKER_PRINCIPAL};User:{ADMIN_PRINCIPAL}",
            "allow.everyone.if.no.acl.found": "false",
        }
        if self.mode == "mtls":
            extra["listener.name.ssl.ssl.client.auth"] = "required"
        else:
            password = self.scram_password(BROKER_PRINCIPAL)
            extra["sasl.enabled.mechanisms"] = MECHANISM
            extra["sasl.mechanism.inter.broker.protocol"] = MECHANISM
            extra["listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"] = (
                "org.apache.kafka.common.security.scram.ScramLoginModule required "
                f'username="{BROKER_PRINCIPAL}" password="{password}";'
            )
        lines += ["", f"# --- runtrail: --security {self.mode} ---"]
        lines += [f"{key}={_escape(value)}" for key, value in extra.items()]
        return "\n".join(lines) + "\n"

    # --- clients --------------------------------------------------------------------------

    def client(self, principal: str) -> ClientSettings:
        """The client settings of ``principal`` (one of :attr:`principals`)."""
        options = {
            "security.protocol": self.listener,
            "ssl.ca.location": str(self.authority.certificate),
        }
        files: dict[str, str] = {}
        if self.mode == "scram":
            options["sasl.mechanism"] = MECHANISM
            options["sasl.username"] = principal
            files["sasl.password"] = str(self.scram_password_file(principal))
        else:
            identity = self.identity(principal)
            options["ssl.certificate.location"] = str(identity.certificate)
            options["ssl.key.location"] = str(identity.key)
            files["ssl.key.password"] = str(identity.key_password)
        return ClientSettings(principal, options, files)

    def write_client_files(self, bootstrap_servers: str) -> Path:
        """Per principal, ``clients/<principal>.env`` (``export`` lines for runtrail) and
        ``clients/<principal>.properties`` (a Java client's, e.g. the ai4j adapter's); no
        secret in either: secrets stay in the files they name. Returns the folder."""
        folder = private_dir(self.folder / "clients")
        for principal in self.principals:
            client = self.client(principal)
            env = client.environment(bootstrap_servers)
            text = "".join(f"export {k}={_shell_quote(v)}\n" for k, v in env.items())
            with open_private(folder / f"{principal}.env", "w", encoding="utf-8") as out:
                out.write(text)
            props = client.java_properties()  # the listener's bootstrapServers() says where
            text = "".join(f"{k}={_escape(v)}\n" for k, v in props.items())
            with open_private(folder / f"{principal}.properties", "w", encoding="utf-8") as out:
                out.write(text)
        return folder


def recorded_mode(home: Path) -> Mode | None:
    """The security mode the broker home was formatted with, if any."""
    try:
        text = (Path(home) / "security" / "mode").read_text(encoding="ascii").strip()
    except OSError:
        return None
    return next((m for m in MODES if m == text), None)


def upsert_scram_users(admin: Any, security: BrokerSecurity, timeout: float = 30.0) -> None:
    """Set every principal's SCRAM credential to the password in its file (scram mode)."""
    if security.mode != "scram":
        return
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    upserts = [
        UserScramCredentialUpsertion(p, info, security.scram_password(p).encode("ascii"))
        for p in security.principals
    ]
    for principal, future in admin.alter_user_scram_credentials(upserts).items():
        try:
            future.result(timeout=timeout)
        except Exception as exc:
            raise BrokerError(f"cannot set the SCRAM credential of {principal}: {exc}") from exc


_UNSAFE = re.compile(r"[\\\n]")


def _escape(value: str) -> str:
    """A properties-file value: backslashes and newlines escaped."""
    return _UNSAFE.sub(lambda m: "\\\\" if m.group() == "\\" else "\\n", value)


def _shell_quote(value: str) -> str:
    return "'" + value.replace("'", "'\"'\"'") + "'"
