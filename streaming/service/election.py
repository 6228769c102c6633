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

Limits: a leader that is alive but cannot reach the group coordinator keeps
planning until the session timeout tells it otherwise (no fencing token on
``commands``); what it sends meanwhile has the same content-derived ids as what
the next leader decides, except where it decided differently, and later plans
trim such excess as they trim any.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from events.topics import Topics
from streaming import credentials

log = logging.getLogger("segcoord.service")

ELECTION_TOPIC = "planner-election"
SESSION_TIMEOUT_MS = 6000
HEADER = "segcoord-planner"


def say(message: str) -> None:
    """A leadership line on stdout, whatever the state of logging (elections start before the worker sets it up)."""
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} segcoord run: {message}", flush=True)


def election_topic(topics: Topics) -> str:
    return topics.prefix + ELECTION_TOPIC


def ensure_election_topic(bootstrap: str, topics: Topics) -> None:
    """Create the one-partition election topic if missing (an existing one is left as it is)."""
    from streaming.admin import create_topic

    create_topic(bootstrap, election_topic(topics), partitions=1,
                 config={"cleanup.policy": "compact", "min.compaction.lag.ms": "0"})


class Election:
    """One worker's membership of the election group (module docstring); callbacks run on its thread."""

    def __init__(self, bootstrap: str, topics: Topics, worker_id: str, *, client_id: str,
                 on_elected: Callable[[int], None], on_deposed: Callable[[], None],
                 extra: dict[str, Any] | None = None) -> None:
        self.bootstrap = bootstrap
        self.topic = election_topic(topics)
        self.group = f"{topics.prefix}coordinator.planner"
        self.worker_id = worker_id
        self.on_elected = on_elected
        self.on_deposed = on_deposed
        self.epoch: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="planner-election", daemon=True)
        self._extra = dict(extra or {})
        self._consumer = Consumer({
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
            producer.produce(self.topic, key=b"leader", value=self.worker_id.encode(), on_delivery=delivered)
            while producer.flush(0.5) and not self._stop.is_set():
                pass
        return offsets[0] if offsets else -1

    def close(self) -> None:
        """Leave the group (a leader is deposed first, so the next one is elected at once, not after a timeout)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)
        try:
            self._consumer.close()
        except Exception as e:  # the broker is away: the session expires on its own
            log.debug("planner election: close: %s", e)
        if self.epoch is not None:
            self.on_deposed()
            self.epoch = None
