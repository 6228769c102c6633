"""The main job for now: a real broker, the design's topics, one event of every type through Kafka.

Starts (or reuses) the local broker unless a bootstrap address is given,
creates the topics, produces one event of every type plus one malformed
message, consumes them all back, checks each arrived unchanged and that the
malformed one reached ``deadletter`` with its reason, prints what happened,
and stops the broker if it started it.
"""

from __future__ import annotations

import base64
import time
import uuid
from pathlib import Path

from events import DeadLettered, Envelope, Event, decode, encode
from events.topics import DEADLETTER, SEGMENTS
from streaming import config
from streaming.admin import create_topics
from streaming.consumer import EventConsumer
from streaming.examples import example_envelopes
from streaming.local_broker import LocalBroker
from streaming.producer import EventProducer


def run_demo(*, bootstrap: str | None, home: Path, keep_broker: bool = False, timeout: float = 60.0) -> int:
    broker = None
    started_here = False
    t0 = time.monotonic()
    if bootstrap is None:
        broker = LocalBroker(home)
        started_here = not broker.status().running
        bootstrap = broker.start()
        verb = "started" if started_here else "reused"
        print(f"[broker] {verb} local Kafka at {bootstrap} in {time.monotonic() - t0:.1f}s (home {home})")
    try:
        return _round_trip(bootstrap, timeout)
    finally:
        if broker is not None and started_here and not keep_broker:
            broker.stop()
            print("[broker] stopped the broker this demo started")


def _round_trip(bootstrap: str, timeout: float) -> int:
    topics = config.topics()
    for r in create_topics(bootstrap, topics):
        print(f"[topics] {r.name:32s} partitions={r.partitions} {r.outcome}")
    run = uuid.uuid4().hex[:8]
    now_ms = int(time.time() * 1000)
    sent = [
        Envelope(e.event, f"{run}-{i:02d}", e.occurred_at, e.key, e.causation_id)
        for i, e in enumerate(example_envelopes(now_ms))
    ]
    producer = EventProducer(bootstrap, topics)
    for env in sent:
        producer.send(env)
    bad_value = b'{"event_type": "segment_announced", "payload": {"server": 7}}'
    producer.send_raw(topics.name(SEGMENTS), f"demo-{run}".encode(), bad_value)
    producer.flush()
    print(f"[produce] {len(sent)} events of {len(sent)} types and 1 malformed message (run {run})")

    expected = {e.event_id: e for e in sent}
    consumer = EventConsumer(bootstrap, topics, f"segcoord-demo-{run}",
                             sorted({e.event.event_topic for e in sent} | {DEADLETTER}))
    received: dict[str, Envelope[Event]] = {}
    letter: DeadLettered | None = None
    deadline = time.monotonic() + timeout
    try:
        while (len(received) < len(expected) or letter is None) and time.monotonic() < deadline:
            for rec in consumer.poll(timeout=1.0):
                env = rec.envelope
                if env.event_id in expected:
                    received[env.event_id] = env
                    same = "unchanged" if env == expected[env.event_id] else "CHANGED"
                    print(f"[consume] {rec.topic}[{rec.partition}]@{rec.offset:<4d} "
                          f"{env.event_type:30s} key={env.key:20s} {same}")
                elif isinstance(env.event, DeadLettered) and env.key == f"demo-{run}":
                    letter = env.event
                    print(f"[deadletter] {env.event.topic}[{env.event.partition}]@{env.event.offset}: "
                          f"{env.event.reason}")
            consumer.commit()
    finally:
        consumer.close()
    changed = [i for i, e in received.items() if e != expected[i]]
    missing = sorted(set(expected) - set(received))
    ok = not changed and not missing and letter is not None
    if letter is not None and base64.b64decode(letter.original_value or "") != bad_value:
        ok = False
        print("[deadletter] original bytes differ")
    # the bytes on the wire are a pure function of the envelope
    ok = ok and all(encode(decode(encode(e))) == encode(e) for e in sent)
    print(f"[result] {len(received)}/{len(expected)} events round-tripped unchanged, "
          f"malformed message {'dead-lettered' if letter else 'NOT dead-lettered'}: {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1
