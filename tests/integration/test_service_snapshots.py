"""Two ``segcoord run`` workers: B gains A's partition of ``segments`` after A is SIGKILLed, from A's snapshot.

Both workers write per-partition timeline snapshots to ``snapshots`` (every 100 events here). A owns one of the
two partitions and B the other. After A wrote a snapshot of its partition, A is SIGKILLed and the stream goes
on; once A's session expires B gains the partition. The test proves B started from the snapshot: B's log names
the snapshot's offset, and B's store says it read only the records from that offset on (fewer than the
partition holds). The deduplicated ``timeline`` output still equals a pure fold of ``segments``: nothing lost,
nothing doubled, every re-emission byte-identical.
"""

from __future__ import annotations

import random
import re
import uuid
from pathlib import Path

import pytest

from events import Topics, decode, encode
from events.topics import SEGMENTS, TIMELINE
from streaming.admin import create_topics
from streaming.producer import EventProducer
from streaming.service.state import AgentStateStore
from streaming.service.timeline_agent import FORMAT_VERSION, STORE_NAME, TimelineAgent
from streaming.service.timeline_snapshots import latest_snapshots
from tests.integration.processes import kill_alive, wait_for
from tests.integration.test_service_timeline import pure_fold, read_all, segment_stream
from tests.integration.test_service_workers import Worker

pytestmark = pytest.mark.integration

EVERY = 100


def gained(worker: Worker, segments: str) -> list[tuple[int, str]]:
    """(partition, how) of every partition of ``segments`` the worker's log says it gained."""
    pattern = re.compile(rf"timeline agent: partition (\d+) of {re.escape(segments)}(: no snapshot| from the snapshot)")
    return [(int(m.group(1)), m.group(2).strip(": ")) for m in pattern.finditer(worker.log.read_text())]


def test_a_worker_gaining_a_killed_workers_partition_starts_from_its_snapshot(
        kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEGCOORD_TIMELINE_SNAPSHOT_EVERY", str(EVERY))
    topics = Topics(f"t{uuid.uuid4().hex[:10]}.")
    create_topics(kafka_bootstrap, topics, partitions=2)
    segments = topics.name(SEGMENTS)
    events = segment_stream(random.Random(20261125), 3000)
    first, second = events[:2000], events[2000:]
    a, b = Worker(kafka_bootstrap, topics, tmp_path, "a"), Worker(kafka_bootstrap, topics, tmp_path, "b")
    try:
        a.start()
        wait_for("worker a to take the partitions", lambda: len(gained(a, segments)) >= 2, [a], 120)
        b.start()
        wait_for("worker b to take a partition", lambda: gained(b, segments), [a, b], 120)
        b_part = gained(b, segments)[0][0]
        a_part = 1 - b_part
        producer = EventProducer(kafka_bootstrap, topics)
        for e in first:
            producer.send(e)
        producer.flush(60)
        a_end = max(r.offset + 1 for r in read_all(kafka_bootstrap, segments) if r.partition == a_part)
        assert a_end > 3 * EVERY, "the stream put too little on a's partition for the test to say anything"

        def a_snapshot_at() -> int:
            snap = latest_snapshots(kafka_bootstrap, topics, [a_part]).get(a_part)
            return 0 if snap is None or snap.writer != "a" else snap.next_offset

        wait_for("a's snapshot of its partition", lambda: a_snapshot_at() >= 3 * EVERY, [a, b], 180)
        a.kill()  # SIGKILL: a's session expires, then b gains a's partition
        for e in second:
            producer.send(e)
        producer.close()
        wait_for("b to gain a's partition", lambda: any(p == a_part for p, _ in gained(b, segments)[1:]), [b], 120)
        expected = pure_fold(read_all(kafka_bootstrap, segments))
        wait_for("every visibility change", lambda: len({decode(r.value).event_id for r in read_all(
            kafka_bootstrap, topics.name(TIMELINE))}) >= len(expected.outputs), [b], 300)
        assert b.stop() == 0, b.tail()
    finally:
        kill_alive((a, b))

    # b started a's partition from the snapshot, and read only the tail after it
    how = [h for p, h in gained(b, segments)[1:] if p == a_part]
    assert how and how[-1] == "from the snapshot", b.tail()
    line = re.findall(rf"partition {a_part} of \S+ from the snapshot at offset (\d+) \(written by a", b.log.read_text())
    assert line, b.tail()
    ends = {p: max(r.offset + 1 for r in read_all(kafka_bootstrap, segments) if r.partition == p) for p in (0, 1)}
    with AgentStateStore(tmp_path / "b" / STORE_NAME, FORMAT_VERSION) as store:
        agent = TimelineAgent(store, topics, sink=None)  # type: ignore[arg-type]
        adopted = agent.adopted[a_part]
        offsets = agent.next_offsets()
    at = int(line[-1])
    assert adopted["offset"] == at and adopted["writer"] == "a" and 0 < at < ends[a_part]
    assert offsets[(segments, a_part)] == ends[a_part]
    assert adopted["read"] == ends[a_part] - at < ends[a_part], adopted  # the tail only, not the whole partition
    print(f"b adopted a's snapshot of partition {a_part} at offset {at} of {ends[a_part]}: read {adopted['read']} "
          f"records instead of {ends[a_part]}")

    # the deduplicated timeline output equals the pure fold
    first_seen: dict[str, bytes] = {}
    for r in read_all(kafka_bootstrap, topics.name(TIMELINE)):
        e = decode(r.value)
        assert first_seen.setdefault(e.event_id, r.value) == r.value, "a re-emitted visibility change differs"  # type: ignore[arg-type]
    assert sorted(first_seen.values()) == sorted(encode(e) for e in expected.outputs)
