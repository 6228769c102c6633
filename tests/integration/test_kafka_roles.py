"""``segcoord kafka setup-roles`` against a secure broker it did not start (docs/security.md, "Docker").

The broker is a ``--secure`` local one, used only through its bootstrap address and the admin's
properties file (``SEGCOORD_KAFKA_CONFIG``), as docker-compose.secure.yml's setup service uses its
cluster. The command replaces the role passwords the broker made with the folder's own, so this module
has a broker of its own.
"""

from __future__ import annotations

import stat
import uuid
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from events import Topics
from events.topics import LOCK_REQUESTS, SEGMENTS
from streaming import kafka_roles, local_sasl
from streaming.admin import create_topics
from streaming.cli import main
from streaming.credentials import CONFIG_ENV, client_config, read_properties
from streaming.local_broker import LocalBroker

pytestmark = pytest.mark.integration


def produce(bootstrap: str, settings: dict[str, str], topic: str) -> None:
    """One record to ``topic``; raises KafkaException when the broker refuses it."""
    errors: list[KafkaError] = []
    producer = Producer({**settings, "bootstrap.servers": bootstrap, "message.timeout.ms": 20_000,
                         "error_cb": errors.append})
    producer.produce(topic, b"x", on_delivery=lambda err, _msg: errors.append(err) if err else None)
    producer.flush(30)
    if errors:
        raise KafkaException(errors[0])


def test_setup_roles_makes_users_and_acls_on_a_cluster_it_only_knows_by_address(
        secure_broker: LocalBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bootstrap = secure_broker.status().bootstrap
    assert bootstrap is not None
    topics = Topics(f"r{uuid.uuid4().hex[:10]}.")
    folder = tmp_path / "roles"
    argv = ["kafka", "setup-roles", "--bootstrap", bootstrap, "--credentials-dir", str(folder),
            "--topic-prefix", topics.prefix]

    monkeypatch.delenv(CONFIG_ENV, raising=False)
    assert main(argv) != 0  # no admin credentials in the environment: refused, nothing made
    assert not folder.exists()

    monkeypatch.setenv(CONFIG_ENV, str(local_sasl.credentials_dir(secure_broker.dir) / "admin.properties"))
    create_topics(bootstrap, topics, partitions=1)
    assert main(argv) == 0
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for name in kafka_roles.PRINCIPALS:
        assert stat.S_IMODE((folder / f"{name}.password").stat().st_mode) == 0o600
    first = {n: (folder / f"{n}.password").read_text() for n in kafka_roles.PRINCIPALS}
    assert main(argv) == 0  # idempotent: the passwords are kept
    assert {n: (folder / f"{n}.password").read_text() for n in kafka_roles.PRINCIPALS} == first

    monkeypatch.setenv(CONFIG_ENV, str(folder / "task.properties"))
    task = client_config(bootstrap)
    assert read_properties(folder / "task.properties")["sasl.password"] == first["task"].strip()
    produce(bootstrap, task, topics.name(LOCK_REQUESTS))  # the task's job, with the folder's password
    with pytest.raises(KafkaException) as refused:
        produce(bootstrap, task, topics.name(SEGMENTS))  # not where it belongs
    assert refused.value.args[0].code() in (KafkaError.TOPIC_AUTHORIZATION_FAILED,
                                            KafkaError.CLUSTER_AUTHORIZATION_FAILED), refused.value

    # the password the broker made for the task at start no longer works: the folder's replaced it
    old = local_sasl.client_settings(secure_broker.dir, "task")
    assert old["sasl.password"] != first["task"].strip()
    with pytest.raises(KafkaException):
        produce(bootstrap, old, topics.name(LOCK_REQUESTS))
