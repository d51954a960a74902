"""Kafka credentials without a broker: the ``*_FILE`` form of secret options, how a refusal is
worded, the generated certificates, the secured broker's settings and the ACL table.

The same pieces against real secured brokers: ``tests/test_kafka_security.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka import KafkaError
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from runtrail.config import KafkaOptionFileError, Settings
from runtrail.kafka.auth import describe, is_auth_failure, naming_options
from runtrail_tools.kafka import acls
from runtrail_tools.kafka.pki import Authority
from runtrail_tools.kafka.security import BrokerSecurity
from runtrail_tools.settings_catalog import masked
from tests.test_settings_masking import run_settings

DOC = Path(__file__).resolve().parents[1] / "docs" / "OPERATIONS.md"
BEGIN, END = "<!-- acls:begin -->", "<!-- acls:end -->"


def test_a_secret_option_is_read_from_its_file_at_each_client(tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("first\n")  # a Secret file's trailing newline is not the password's
    settings = Settings(
        kafka_options={"sasl.username": "svc"}, kafka_option_files={"sasl.password": secret}
    )
    assert settings.kafka_config()["sasl.password"] == "first"
    secret.write_text("rotated")
    assert settings.kafka_config()["sasl.password"] == "rotated"
    assert "rotated" not in settings.model_dump_json()  # the settings hold the path only


def test_the_file_form_comes_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "key-password"
    secret.write_text("k")
    monkeypatch.setenv("RUNTRAIL_KAFKA_OPTION_FILES", json.dumps({"ssl.key.password": str(secret)}))
    assert Settings().kafka_config()["ssl.key.password"] == "k"
    assert Settings(kafka_option_files=f"ssl.key.password={secret}").kafka_option_files == {
        "ssl.key.password": secret
    }


def test_an_unreadable_file_or_an_option_given_twice_is_an_error_without_a_secret(
    tmp_path: Path,
) -> None:
    missing = Settings(kafka_option_files={"sasl.password": tmp_path / "nope"})
    with pytest.raises(KafkaOptionFileError, match=r"sasl\.password from .*nope"):
        missing.kafka_config()
    secret = tmp_path / "pw"
    secret.write_text("pw-in-file")
    twice = Settings(
        kafka_options={"sasl.password": "pw-inline"}, kafka_option_files={"sasl.password": secret}
    )
    with pytest.raises(KafkaOptionFileError, match="both") as caught:
        twice.kafka_config()
    assert "pw-" not in str(caught.value)


def test_runtrail_settings_shows_the_files_not_their_secrets(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("pw-from-file-1")
    out = run_settings({"RUNTRAIL_KAFKA_OPTION_FILES": json.dumps({"sasl.password": str(secret)})})
    assert str(secret) in out and "pw-from-file" not in out
    assert masked("kafka_option_files", {"sasl.password": secret}) == str(
        {"sasl.password": str(secret)}
    )


CONFIG = {
    "bootstrap.servers": "b:9092",
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "runtrail-audit",
    "sasl.password": "pw-never-shown",
}


def test_a_refused_password_is_one_sentence_naming_broker_mechanism_and_user() -> None:
    err = KafkaError(
        KafkaError._AUTHENTICATION,
        "sasl_ssl://10.0.0.7:9093/bootstrap: SASL authentication error: Authentication failed "
        "during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512 "
        "(after 320ms in state AUTH_REQ)",
    )
    assert is_auth_failure(err)
    text = describe(err, naming_options(CONFIG))
    assert text.startswith("Kafka broker 10.0.0.7:9093 refused the connection (SASL_SSL, ")
    assert "SCRAM-SHA-512, as runtrail-audit" in text and "after 320ms" not in text
    assert "pw-never-shown" not in text and "pw-never-shown" not in str(naming_options(CONFIG))


@pytest.mark.parametrize(
    ("code", "text", "refused"),
    [
        (
            KafkaError._SSL,
            "ssl://h:1/bootstrap: SSL handshake failed: certificate verify failed",
            True,
        ),
        (
            KafkaError._TRANSPORT,
            "ssl://h:1/1: Receive failed: ssl/tls alert certificate unknown",
            True,
        ),
        (KafkaError._TRANSPORT, "ssl://h:1/1: Receive failed: ssl/tls alert bad certificate", True),
        (
            KafkaError._TRANSPORT,
            "ssl://h:1/1: Connect to ipv4#h:1 failed: Connection refused",
            False,
        ),
        (KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down", False),
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, "not authorized", False),
    ],
)
def test_which_errors_are_refused_credentials(code: int, text: str, refused: bool) -> None:
    assert is_auth_failure(KafkaError(code, text)) is refused


def test_generated_certificates_name_their_principal_and_keep_keys_encrypted(
    tmp_path: Path,
) -> None:
    authority = Authority(tmp_path / "tls")
    broker = authority.identity("runtrail-broker", ("127.0.0.1", "localhost"))
    client = authority.identity("runtrail-agent")
    ca = x509.load_pem_x509_certificate(authority.certificate.read_bytes())
    for identity in (broker, client):
        cert = x509.load_pem_x509_certificate(identity.certificate.read_bytes())
        assert cert.issuer == ca.subject
        assert cert.subject.rfc4514_string() == f"CN={identity.name}"
        password = identity.key_password.read_bytes()
        assert b"ENCRYPTED PRIVATE KEY" in identity.key.read_bytes()
        serialization.load_pem_private_key(identity.key.read_bytes(), password)
        key, chain_cert, _ = pkcs12.load_key_and_certificates(
            identity.keystore.read_bytes(), password
        )
        assert key is not None and chain_cert == cert
        assert identity.key.stat().st_mode & 0o077 == 0
    sans = x509.load_pem_x509_certificate(broker.certificate.read_bytes()).extensions
    names = sans.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in names.get_values_for_type(x509.DNSName)
    # issued once: a second call keeps the files (clients already hold them)
    before = client.certificate.read_bytes()
    assert authority.identity("runtrail-agent").certificate.read_bytes() == before


TEMPLATE = """listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093
advertised.listeners=PLAINTEXT://127.0.0.1:9092
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
"""


@pytest.mark.parametrize(("mode", "listener"), [("scram", "SASL_SSL"), ("mtls", "SSL")])
def test_the_secured_broker_settings(tmp_path: Path, mode: str, listener: str) -> None:
    security = BrokerSecurity(tmp_path, mode, ["runtrail-agent"])  # type: ignore[arg-type]
    security.ensure()
    text = security.secure_properties(TEMPLATE)
    assert f"listeners={listener}://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093" in text
    assert "PLAINTEXT" not in text
    assert f"listener.security.protocol.map=CONTROLLER:SSL,{listener}:{listener}" in text
    assert "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer" in text
    assert "listener.name.controller.ssl.client.auth=required" in text
    assert ("listener.name.ssl.ssl.client.auth=required" in text) is (mode == "mtls")
    client = security.client("runtrail-agent")
    assert client.options["security.protocol"] == listener
    secrets = [Path(p).read_text() for p in client.option_files.values()]
    assert secrets and not any(s in json.dumps(client.options) for s in secrets)
    folder = security.write_client_files("127.0.0.1:9092")
    written = (folder / "runtrail-agent.env").read_text() + (
        folder / "runtrail-agent.properties"
    ).read_text()
    assert not any(s in written for s in secrets)
    other = BrokerSecurity(tmp_path, "mtls" if mode == "scram" else "scram")
    security.record_mode()
    with pytest.raises(Exception, match="was set up for"):
        other.ensure()


def test_the_acl_table_in_the_docs_is_current() -> None:
    text = DOC.read_text()
    assert BEGIN in text and END in text, "docs/OPERATIONS.md lacks the ACL table markers"
    block = text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n") + "\n"
    assert block == acls.markdown_table(acls.roles(Settings())), (
        "docs/OPERATIONS.md ACL table is stale: regenerate with `runtrail kafka acls --markdown`"
    )


def test_the_agent_may_write_events_and_nothing_else() -> None:
    settings = Settings()
    (agent,) = [r for r in acls.roles(settings) if r.kind == acls.AGENT]
    assert agent.grants == (acls.Grant("topic", settings.events_topic, ("Write", "Describe")),)
    commands = acls.kafka_acls_commands([agent], "b:9092")
    assert commands[1] == (
        "kafka-acls.sh --bootstrap-server b:9092 --command-config admin.properties --add "
        "--allow-principal User:runtrail-agent --operation Write --operation Describe "
        "--topic runtrail.events"
    )
    # every consumer service has a principal, a group and the dead-letter topic
    for service in acls.CONSUMER_OUTPUTS:
        (role,) = [r for r in acls.roles(settings) if r.kind == service]
        assert acls.Grant("group", f"runtrail.{service}", ("Read",)) in role.grants
        assert acls.Grant("topic", settings.dlq_topic, ("Write", "Describe")) in role.grants
