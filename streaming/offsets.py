"""A partition's offsets, asked of a broker that may still be electing the partition's leader.

Right after a topic is created (or a broker restarts), ``get_watermark_offsets`` can fail with
NOT_LEADER_FOR_PARTITION, LEADER_NOT_AVAILABLE or UNKNOWN_TOPIC_OR_PART for a moment; a loaded machine makes
that moment seconds long. :func:`watermarks` asks again until a leader answers or ``patience_s`` passes, and
raises every other error at once. The one place this retry lives: the consumer, replay, the benchmarks and the
tests use it.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

# what a partition whose leader is being elected answers
ELECTING = frozenset({KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                      KafkaError.UNKNOWN_TOPIC_OR_PART})


def watermarks(consumer: Any, tp: TopicPartition, *, timeout: float = 10.0, patience_s: float = 30.0,
               electing: frozenset[int] = ELECTING) -> tuple[int, int]:
    """``consumer.get_watermark_offsets(tp)`` as (low, high), asked again while it fails with one of ``electing``."""
    deadline = time.monotonic() + patience_s
    while True:
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=timeout)
            return int(low), int(high)
        except KafkaException as e:
            code = e.args[0].code() if e.args and isinstance(e.args[0], KafkaError) else None
            if code not in electing or time.monotonic() > deadline:
                raise
            time.sleep(0.2)  # the poll interval while the leader is elected
