"""Kafka client credentials from the environment or a file, and the refusal of plaintext credentials off loopback.

What a user would notice when this fails: a password sent in clear to a remote broker, or a client that
silently connects without the credentials the operator configured.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from streaming.credentials import CredentialsError, client_config, kafka_security, publish_key, read_properties

SCRAM = {"SEGCOORD_KAFKA_USERNAME": "task", "SEGCOORD_KAFKA_PASSWORD": "pw"}


def test_nothing_configured_is_plaintext_without_authentication() -> None:
    assert client_config("broker.example:9092", {}) == {"bootstrap.servers": "broker.example:9092"}


def test_scram_from_the_environment_on_loopback() -> None:
    assert client_config("127.0.0.1:9092,localhost:9093,[::1]:9094", SCRAM) == {
        "bootstrap.servers": "127.0.0.1:9092,localhost:9093,[::1]:9094", "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "task", "sasl.password": "pw"}


@pytest.mark.parametrize("bootstrap", ["10.0.0.5:9092", "127.0.0.1:9092,kafka.example:9092", "[2001:db8::1]:9092"])
def test_plaintext_credentials_to_a_non_loopback_address_are_refused(bootstrap: str) -> None:
    with pytest.raises(CredentialsError, match="refusing to send Kafka credentials in plaintext"):
        client_config(bootstrap, SCRAM)


def test_with_tls_credentials_may_go_anywhere(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    got = client_config("kafka.example:9093", {**SCRAM, "SEGCOORD_KAFKA_CA": str(ca)})
    assert got["security.protocol"] == "SASL_SSL" and got["ssl.ca.location"] == str(ca)
    java = kafka_security({**SCRAM, "SEGCOORD_KAFKA_CA": str(ca)}).java()  # Spark's Kafka source
    assert java["sasl.jaas.config"].endswith('username="task" password="pw";') and java["ssl.truststore.type"] == "PEM"


def test_a_properties_file_and_its_errors(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text("# the task role\nsecurity.protocol=SASL_PLAINTEXT\nsasl.username=task\nsasl.password=p=w\n")
    sec = kafka_security({"SEGCOORD_KAFKA_CONFIG": str(path)})
    assert (sec.protocol, sec.username, sec.password) == ("SASL_PLAINTEXT", "task", "p=w")
    path.write_text("bootstrap.servers=x\n")
    with pytest.raises(CredentialsError, match=r"client.properties:1: unknown key 'bootstrap.servers'"):
        read_properties(path)
    with pytest.raises(CredentialsError, match="set both"):
        kafka_security({"SEGCOORD_KAFKA_USERNAME": "task"})


def test_the_publish_key_is_made_once_and_kept(tmp_path: Path) -> None:
    env = {"SEGCOORD_PUBLISH_KEY_FILE": str(tmp_path / "k")}
    first = publish_key(env)
    assert len(first) == 64 and publish_key(env) == first
    assert (tmp_path / "k").stat().st_mode & 0o777 == 0o600
    assert publish_key({"SEGCOORD_PUBLISH_KEY": "given"}) == b"given"


# The local broker's own tooling uses the admin principal's settings from the files it generated itself.
_OWN_SETTINGS = {"streaming/local_sasl.py", "streaming/local_broker.py", "streaming/local_cluster.py"}


def _takes_client_config(arg: ast.expr) -> bool:
    def is_client_config(node: ast.expr | None) -> bool:
        return isinstance(node, ast.Call) and (
            (isinstance(node.func, ast.Attribute) and node.func.attr == "client_config")
            or (isinstance(node.func, ast.Name) and node.func.id == "client_config"))

    if is_client_config(arg):
        return True
    return isinstance(arg, ast.Dict) and any(k is None and is_client_config(v)
                                             for k, v in zip(arg.keys, arg.values, strict=True))


def test_every_kafka_client_of_the_project_takes_the_configured_credentials() -> None:
    """Every confluent-kafka Producer, Consumer and AdminClient built in ``streaming/`` gets its settings from
    ``credentials.client_config`` (so a client cannot silently connect without the configured credentials, as
    ``segcoord upserts`` did before); Faust's and Spark's clients are covered by their integration tests."""
    root = Path(__file__).resolve().parents[2]
    offenders = []
    for path in sorted((root / "streaming").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), rel)):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if name not in ("Producer", "Consumer", "AdminClient") or not node.args:
                continue
            if rel not in _OWN_SETTINGS and not _takes_client_config(node.args[0]):
                offenders.append(f"{rel}:{node.lineno}")
    assert not offenders, offenders
