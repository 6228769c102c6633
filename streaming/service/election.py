"""Leadership through Kafka: the one member of a group that holds the single partition of an election topic leads.

Used for the planner, which needs the whole cluster and so runs on exactly one
``segcoord run`` worker at a time (docs/service.md, "Several workers").

**How.** Every worker runs a :class:`Election`: a confluent-kafka consumer in
group ``<prefix>coordinator.planner`` subscribed to ``<prefix>planner-election``,
a topic with ONE partition, created on first use (compacted: it only ever holds
the latest claims). Kafka's group protocol gives that partition to exactly one
live member. The assignment strategy is ``cooperative-sticky``: a worker that
joins does not take the partition from its owner, and a move is two-phase (the
owner's ``on_revoke`` returns before anyone's ``on_assign`` runs), so the
owner's ``on_deposed`` (which stops its planner and waits for the batch in
progress, flush included) ends before the next owner's ``on_elected`` starts.
A member that dies (SIGKILL) loses the partition when its session expires
(``SESSION_TIMEOUT_MS``); one cut off from the broker longer than that gets
``on_lost`` when it hears from the group again, and stops as well.

**Epochs.** A new owner writes a claim (its worker id) to the election topic
before it leads; the claim's offset is its **epoch**: epochs only grow, so every
leadership has its own, later than all before it. The planner's commands carry
``segcoord-planner: <worker id>@<epoch>`` in a header, so the log itself shows
that commands came from one planner at a time (epochs never go down along a
partition of ``commands``).

**Claims.** A claim's value is JSON ``{"worker": <worker id>, "http": <base URL of its HTTP API or null>}``
(a claim written before the HTTP address was added is the worker id as text). The latest claim names the
current leader: :class:`LeaderDirectory` reads it for workers that do not lead, so their HTTP API can
redirect to the leader's, as Druid's non-leader coordinators do (:mod:`streaming.http_leader`).

**Workers that never stand.** A worker started with ``segcoord run --no-planner`` is no candidate
(``candidate=False``): it never joins the election group, so it is never elected, writes no claim and never
runs the planner; its HTTP API redirects to the leader like any worker that does not lead. Some other worker
of the group (one without the flag) plans; with none, nothing plans.

**Fencing.** A leader that is alive but cut off from the group coordinator (paused, partitioned) does not
learn at once that it was deposed. Its commands carry its epoch, and every fold of ``commands`` voids a
command to a server that a later epoch already commanded (:mod:`coordinator.placement.fence`); its feed
stops as soon as it sees a later claim or a later epoch (:mod:`streaming.service.planner_feed`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from events.topics import COMMANDS, Topics
from streaming import credentials

log = logging.getLogger("segcoord.service")

ELECTION_TOPIC = "planner-election"
SESSION_TIMEOUT_MS = 6000
HEADER = "segcoord-planner"


def say(message: str) -> None:
    """A leadership line on stdout, whatever the state of logging (elections start before the worker sets it up)."""
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} segcoord run: {message}", flush=True)


@dataclass(frozen=True, slots=True)
class Claim:
    """One leadership: the worker, its epoch (the claim's offset) and its HTTP API's base URL (None: none)."""

    worker: str
    epoch: int
    http: str | None = None

    @staticmethod
    def encode(worker: str, http: str | None) -> bytes:
        return orjson.dumps({"worker": worker, "http": http})

    @staticmethod
    def decode(value: bytes | None, epoch: int) -> Claim | None:
        """The claim a record of the election topic holds (None: not a claim)."""
        if not value:
            return None
        try:
            doc = orjson.loads(value)
        except orjson.JSONDecodeError:
            doc = None
        if isinstance(doc, dict) and isinstance(doc.get("worker"), str):
            http = doc.get("http")
            return Claim(doc["worker"], epoch, http if isinstance(http, str) and http else None)
        try:
            return Claim(value.decode(), epoch)  # a claim of an older build: the worker id as text
        except UnicodeDecodeError:
            return None


def election_topic(topics: Topics) -> str:
    return topics.prefix + ELECTION_TOPIC


def ensure_election_topic(bootstrap: str, topics: Topics) -> str | None:
    """Create the one-partition election topic if missing, replicated as the deployment's ``commands`` topic is
    (replica count and ``min.insync.replicas``; the brokers' defaults when that cannot be read). An existing
    topic is left as it is; returns a warning when it is replicated less than ``commands``."""
    from streaming.admin import BROKER_DEFAULT, create_topic, replication_of

    name = election_topic(topics)
    like = replication_of(bootstrap, topics.name(COMMANDS))
    create_topic(bootstrap, name, partitions=1, replication=BROKER_DEFAULT if like is None else like.factor,
                 config={"cleanup.policy": "compact", "min.compaction.lag.ms": "0",
                         **({} if like is None else like.topic_config())})
    have = replication_of(bootstrap, name)
    if like is not None and have is not None and have.factor < like.factor:
        return (f"{name} has {have.factor} replica(s), {topics.name(COMMANDS)} {like.factor}: the planner election "
                f"stops while its one replica is down (reassign it with kafka-reassign-partitions.sh)")
    return None


class Election:
    """One worker's membership of the election group (module docstring); callbacks run on its thread."""

    def __init__(self, bootstrap: str, topics: Topics, worker_id: str, *, client_id: str,
                 on_elected: Callable[[int], None], on_deposed: Callable[[], None],
                 extra: dict[str, Any] | None = None, http: str | None = None, candidate: bool = True) -> None:
        self.bootstrap = bootstrap
        self.candidate = candidate  # False: never joins the group, never leads (segcoord run --no-planner)
        self.topic = election_topic(topics)
        self.group = f"{topics.prefix}coordinator.planner"
        self.worker_id = worker_id
        self.http = http  # this worker's HTTP API base URL, written in its claims (None: it serves none)
        self.on_elected = on_elected
        self.on_deposed = on_deposed
        self.epoch: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="planner-election", daemon=True)
        self._extra = dict(extra or {})
        self._consumer: Any = None if not candidate else Consumer({
            **credentials.client_config(bootstrap),
            "group.id": self.group,
            "client.id": client_id,
            "partition.assignment.strategy": "cooperative-sticky",
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": 1000,
            "enable.auto.commit": False,
            "auto.offset.reset": "latest",
            **self._extra,
        })

    @property
    def leading(self) -> bool:
        return self.epoch is not None

    def start(self) -> Election:
        if not self.candidate:
            say(f"planner election: this worker ({self.worker_id}) does not stand (--no-planner); another "
                f"worker plans")
            return self
        self._consumer.subscribe([self.topic], on_assign=self._assigned, on_revoke=self._revoked,
                                 on_lost=self._revoked)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                msg = self._consumer.poll(0.5)
            except KafkaException as e:
                log.warning("planner election: %s", e)
                continue
            if msg is not None and msg.error() is not None and msg.error().code() != KafkaError._PARTITION_EOF:
                log.debug("planner election: %s", msg.error())

    def _assigned(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        if not any(tp.topic == self.topic for tp in partitions) or self.epoch is not None:
            return
        epoch = self._claim()
        self.epoch = epoch
        say(f"planner election: this worker ({self.worker_id}) leads from epoch {epoch}; it plans")
        self.on_elected(epoch)

    def _revoked(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        if self.epoch is None or not any(tp.topic == self.topic for tp in partitions):
            return
        say(f"planner election: this worker ({self.worker_id}) no longer leads (epoch {self.epoch} ends); "
            f"its planner stops")
        self.on_deposed()
        self.epoch = None

    def _claim(self) -> int:
        """Write this worker's claim; its offset is the epoch (waits for the broker as long as it takes)."""
        offsets: list[int] = []
        producer = Producer({**credentials.client_config(self.bootstrap), "enable.idempotence": True, "acks": "all",
                             "message.timeout.ms": 0, **self._extra})

        def delivered(err: KafkaError | None, msg: Any) -> None:
            if err is None:
                offsets.append(msg.offset())
            else:
                log.warning("planner election: claim not written: %s", err)

        while not offsets and not self._stop.is_set():
            producer.produce(self.topic, key=b"leader", value=Claim.encode(self.worker_id, self.http),
                             on_delivery=delivered)
            while producer.flush(0.5) and not self._stop.is_set():
                pass
        return offsets[0] if offsets else -1

    def close(self) -> None:
        """Leave the group (a leader is deposed first, so the next one is elected at once, not after a timeout)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)
        if self._consumer is None:
            return
        try:
            self._consumer.close()
        except Exception as e:  # the broker is away: the session expires on its own
            log.debug("planner election: close: %s", e)
        if self.epoch is not None:
            self.on_deposed()
            self.epoch = None


class LeaderDirectory:
    """The current leader as the election topic's latest claim says, read at most every ``max_age_s``.

    Between a leader's death and its successor's claim (the session timeout, 6 s) the latest claim still names
    the dead leader; callers that redirect to it redirect to an address that does not answer for that long.
    """

    def __init__(self, bootstrap: str, topics: Topics, *, max_age_s: float = 1.0,
                 extra: dict[str, Any] | None = None) -> None:
        self.bootstrap = bootstrap
        self.topic = election_topic(topics)
        self.max_age_s = max_age_s
        self._extra = dict(extra or {})
        self._lock = threading.Lock()
        self._read_at = -float("inf")
        self._claim: Claim | None = None

    def current(self, max_age_s: float | None = None) -> Claim | None:
        """The latest claim, read again when the one known is older than ``max_age_s`` (default: the
        directory's; 0: always) (blocking: up to a few seconds; None when none can be read)."""
        with self._lock:
            if time.monotonic() - self._read_at >= (self.max_age_s if max_age_s is None else max_age_s):
                self._claim = self._read()
                self._read_at = time.monotonic()
            return self._claim

    def _read(self) -> Claim | None:
        consumer = Consumer({**credentials.client_config(self.bootstrap), "group.id": f"{self.topic}.reader",
                             "enable.auto.commit": False, **self._extra})
        try:
            tp = TopicPartition(self.topic, 0)
            high = consumer.get_watermark_offsets(tp, timeout=2)[1]
            if high is None or high <= 0:
                return None
            consumer.assign([TopicPartition(self.topic, 0, high - 1)])  # never joins the group: manual assignment
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is not None and msg.error() is None:
                    return Claim.decode(msg.value(), msg.offset())
            return None
        except KafkaException as e:
            log.debug("planner election: reading the latest claim: %s", e)
            return None
        finally:
            consumer.close()


class ElectionLeadership:
    """What the HTTP API asks (:class:`streaming.http_leader.Leadership`): this worker's election and the
    election topic's latest claim."""

    def __init__(self, election: Election, directory: LeaderDirectory, ready: Callable[[], bool]) -> None:
        self.election = election
        self.directory = directory
        self._ready = ready  # whether the planner has caught up with the log since the election

    @property
    def worker_id(self) -> str:
        return self.election.worker_id

    def leads(self) -> bool:
        return self.election.leading

    def ready(self) -> bool:
        return self._ready()

    def leader(self) -> Claim | None:
        if self.election.leading and self.election.epoch is not None:
            return Claim(self.election.worker_id, self.election.epoch, self.election.http)
        return self.directory.current()
