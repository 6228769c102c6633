"""SASL/SCRAM-SHA-512 and per-role ACLs for the local broker (``segcoord kafka start --secure``).

Under ``<home>/kafka/credentials/`` (mode 0700), created once:

- ``<principal>.password``: one random password per principal (mode 0600);
- ``<principal>.properties``: a client properties file for ``SEGCOORD_KAFKA_CONFIG``
  (:mod:`streaming.credentials`) of each role and of ``admin``.

Principals: ``admin`` (super user: the broker's own inter-broker principal, topic creation and ACLs),
``controller`` (PLAIN on the loopback controller listener, super user) and one per role (:data:`ROLES`).
The admin's SCRAM credential is written into the KRaft metadata when storage is formatted
(``--add-scram``); the role users are created (idempotently) through the admin client at every start.

ACLs (:func:`role_acls`, granted by :func:`grant_acls` for one topic prefix): see docs/security.md. Every
consumer role may READ any consumer group (group names are not data; the topics are guarded).
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from events.topics import (
    CLUSTER,
    COMMANDS,
    DEADLETTER,
    LOCK_REQUESTS,
    LOCKS,
    METRICS,
    SEGMENTS,
    SNAPSHOTS,
    TIMELINE,
    UPSERT_STRATEGY,
    Topics,
)
from streaming.credentials import KafkaSecurity, write_properties
from streaming.service.election import ELECTION_TOPIC

MECHANISM = "SCRAM-SHA-512"
SUPER = ("admin", "controller")


@dataclass(frozen=True, slots=True)
class Role:
    name: str
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    doc: str


ALL_TOPICS = (LOCK_REQUESTS, LOCKS, SEGMENTS, CLUSTER, TIMELINE, COMMANDS, DEADLETTER, SNAPSHOTS, METRICS,
              UPSERT_STRATEGY)

#: What each role may read and write (logical topic names under the deployment's prefix).
ROLES: tuple[Role, ...] = (
    Role("coordinator", ALL_TOPICS, (LOCKS, TIMELINE, COMMANDS, SEGMENTS, DEADLETTER, CLUSTER, SNAPSHOTS, METRICS,
                                        UPSERT_STRATEGY),
         "the service (segcoord run): decisions, visibility, commands, publishes, dead letters, server_lost, "
         "upsert strategies"),
    Role("task", (LOCKS,), (LOCK_REQUESTS,), "an indexing task: lock, allocation and publish requests"),
    Role("historical", (COMMANDS, SEGMENTS, CLUSTER), (SEGMENTS, CLUSTER),
         "a historical: reads its commands (and segments and cluster, to rebuild what it holds at start), "
         "announces to segments, joins and refuses on cluster"),
    Role("operator", ALL_TOPICS, (CLUSTER, LOCK_REQUESTS),
         "an operator: rules and dynamic config on cluster, segments imports through the lockbox; reads all"),
    Role("subscriber", (TIMELINE, SEGMENTS, UPSERT_STRATEGY), (),
         "a query layer: reads timeline and segments, and upsert strategies"),
)


def credentials_dir(kafka_dir: Path) -> Path:
    return kafka_dir / "credentials"


def _principals() -> Iterator[str]:
    yield from SUPER
    for role in ROLES:
        yield role.name


def ensure_credentials(kafka_dir: Path) -> None:
    """Create the passwords and client properties files once (existing ones are kept)."""
    folder = credentials_dir(kafka_dir)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    for name in _principals():
        path = folder / f"{name}.password"
        if not path.exists():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_urlsafe(24) + "\n")
        if name != "controller":
            write_properties(folder / f"{name}.properties", security(kafka_dir, name))


def password(kafka_dir: Path, name: str) -> str:
    return (credentials_dir(kafka_dir) / f"{name}.password").read_text().strip()


def security(kafka_dir: Path, name: str) -> KafkaSecurity:
    return KafkaSecurity("SASL_PLAINTEXT", MECHANISM, name, password(kafka_dir, name))


def client_settings(kafka_dir: Path, name: str) -> dict[str, str]:
    return security(kafka_dir, name).librdkafka()


def format_args(kafka_dir: Path) -> list[str]:
    """The storage tool's arguments that put the admin's SCRAM credential into the initial metadata."""
    return ["--add-scram", f"{MECHANISM}=[name=admin,password={password(kafka_dir, 'admin')}]"]


def broker_props(kafka_dir: Path, port: int, cport: int, voters: str | None = None) -> dict[str, str]:
    """server.properties entries of a secure node: SCRAM on the client listener, PLAIN on the controller one."""
    admin, ctl = password(kafka_dir, "admin"), password(kafka_dir, "controller")
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule"
    plain = "org.apache.kafka.common.security.plain.PlainLoginModule"
    return {
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}",
        "advertised.listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:SASL_PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": MECHANISM,
        "sasl.mechanism.inter.broker.protocol": MECHANISM,
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": MECHANISM,
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config":
            f'{scram} required username="admin" password="{admin}";',
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config":
            f'{plain} required username="controller" password="{ctl}" user_controller="{ctl}";',
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": ";".join(f"User:{p}" for p in SUPER),
        "allow.everyone.if.no.acl.found": "false",
    }


def create_role_users(bootstrap: str, kafka_dir: Path, timeout: float = 30.0) -> None:
    """Upsert every role's SCRAM credential (idempotent), as the admin."""
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    admin = AdminClient({"bootstrap.servers": bootstrap, **client_settings(kafka_dir, "admin")})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    upserts = [UserScramCredentialUpsertion(r.name, info, password(kafka_dir, r.name).encode()) for r in ROLES]
    for future in admin.alter_user_scram_credentials(upserts, request_timeout=timeout).values():
        future.result()


def role_acls(topics: Topics) -> list[tuple[str, str, str, str]]:
    """(principal, resource type, resource name, operation) of every ALLOW ACL; topic names are literal."""
    out: list[tuple[str, str, str, str]] = []
    for role in ROLES:
        principal = f"User:{role.name}"
        for t in role.reads:
            out += [(principal, "TOPIC", topics.name(t), "READ"), (principal, "TOPIC", topics.name(t), "DESCRIBE")]
        for t in role.writes:
            out += [(principal, "TOPIC", topics.name(t), "WRITE"), (principal, "TOPIC", topics.name(t), "DESCRIBE")]
        if role.reads:
            out.append((principal, "GROUP", "*", "READ"))
        if role.name == "coordinator":  # Faust declares its topics at start (they exist: CREATE answers "exists")
            out += [(principal, "TOPIC", topics.name(t), op)
                    for t in ALL_TOPICS for op in ("CREATE", "DESCRIBE_CONFIGS")]
            # the planner election (streaming.service.election): a one-partition topic segcoord run creates
            out += [(principal, "TOPIC", topics.prefix + ELECTION_TOPIC, op)
                    for op in ("READ", "WRITE", "DESCRIBE", "CREATE", "DESCRIBE_CONFIGS")]
    return sorted(set(out))


def grant_acls(bootstrap: str, admin_settings: dict[str, str], topics: Topics, timeout: float = 30.0) -> int:
    """Create the role ACLs for the topics under ``topics.prefix`` (idempotent); returns how many."""
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap, **admin_settings})
    bindings = [AclBinding(ResourceType[rtype], name, ResourcePatternType.LITERAL, principal, "*",
                           AclOperation[op], AclPermissionType.ALLOW)
                for principal, rtype, name, op in role_acls(topics)]
    for future in admin.create_acls(bindings, request_timeout=timeout).values():
        future.result()
    # the broker's authorizer learns them from the metadata log a moment later: wait until it lists them all
    wanted = {(b.principal, b.restype, b.name, b.operation) for b in bindings}
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                  AclPermissionType.ANY)
    deadline = time.monotonic() + timeout
    while True:
        listed = admin.describe_acls(everything, request_timeout=timeout).result()
        if wanted <= {(b.principal, b.restype, b.name, b.operation) for b in listed}:
            return len(bindings)
        if time.monotonic() > deadline:
            raise TimeoutError(f"the broker does not list the {len(bindings)} ACLs after {timeout:.0f}s")
        time.sleep(0.1)
