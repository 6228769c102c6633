"""Who a ``segcoord run`` worker is in its consumer groups, and the refusal of a second one with the same identity.

A worker's **id** is ``--worker-id`` when given, else derived from its state
folder: ``<host>-<8 hex digits of the folder's absolute path>``. Its static
group instance id in the coordinator group is ``<group>.<worker id>``: static
membership lets a worker killed with SIGKILL and restarted take its partitions
back at once, without waiting for the dead member's session to expire, and it
must therefore be unique per worker (two workers sharing one used to process
every input twice: Kafka fenced one of them back and forth).

Its Kafka **client id** is ``segcoord-<worker id>-<folder digest>``, so the
group's member list says which state folder each member runs on. At start
:func:`refuse_duplicate` reads the group's members: a live member with the same
instance id but another folder digest is a second worker with the same identity,
and the start is refused with a message naming both. The same folder is never
a second worker: RocksDB locks a state folder, so a second process on it cannot
open its stores (:class:`~streaming.service.state.StateStoreError`); a member
with the same id and the same folder digest is this worker's own previous run
(killed, its session not yet expired), which static membership replaces.
"""

from __future__ import annotations

import hashlib
import re
import socket
import time
from dataclasses import dataclass
from pathlib import Path

_ID = re.compile(r"^[A-Za-z0-9._-]{1,100}$")


class DuplicateWorkerError(RuntimeError):
    """Another live worker already has this worker's identity."""


@dataclass(frozen=True, slots=True)
class WorkerIdentity:
    """A worker's id, its state folder's digest, and the ids derived from them."""

    worker_id: str
    folder_digest: str

    def instance_id(self, group: str) -> str:
        return f"{group}.{self.worker_id}"

    @property
    def client_id(self) -> str:
        return f"segcoord-{self.worker_id}-{self.folder_digest}"


def folder_digest(state_dir: Path) -> str:
    """8 hex digits naming a state folder (its absolute path).

    >>> folder_digest(Path("/var/lib/segcoord/w1")) == folder_digest(Path("/var/lib/segcoord/w1/"))
    True
    """
    return hashlib.blake2b(str(Path(state_dir).absolute()).encode(), digest_size=4).hexdigest()


def identity(state_dir: Path, worker_id: str | None = None) -> WorkerIdentity:
    """The worker's identity: ``worker_id`` (checked: letters, digits, ``._-``), else host + folder digest."""
    digest = folder_digest(state_dir)
    if worker_id is None:
        host = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())[:60] or "host"
        return WorkerIdentity(f"{host}-{digest}", digest)
    if not _ID.match(worker_id):
        raise ValueError(f"worker id {worker_id!r}: 1 to 100 letters, digits, '.', '_' or '-'")
    return WorkerIdentity(worker_id, digest)


def refuse_duplicate(bootstrap: str, group: str, me: WorkerIdentity, *, attempts: int = 3) -> None:
    """Raise :class:`DuplicateWorkerError` when a live member of ``group`` has this worker's instance id and
    runs on another state folder. A broker that does not answer is asked ``attempts`` times, then the check
    is left to Kafka (which fences one of two members sharing an instance id)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    from streaming import credentials

    admin = AdminClient(credentials.client_config(bootstrap))
    wanted = me.instance_id(group)
    for attempt in range(attempts):
        try:
            description = admin.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)
        except (KafkaException, TimeoutError):  # the result's wait can outlast the request's timeout
            time.sleep(1.0 + attempt)
            continue
        for member in description.members:
            if member.group_instance_id != wanted or member.client_id == me.client_id:
                continue
            raise DuplicateWorkerError(
                f"another worker with id {me.worker_id!r} is running in group {group!r} (client "
                f"{member.client_id!r} on {member.host.lstrip('/')}; this one is {me.client_id!r}): give each "
                f"worker its own --worker-id, or leave it out so the id comes from --state-dir. If that worker "
                f"was stopped, retry once its session has expired (about 10 s).")
        return
