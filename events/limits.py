"""Bounds on input: what one event may carry, so no client can make an agent slow or large by size alone.

Every consumer decodes through :func:`events.envelope.decode`, which refuses a message larger than
:data:`MAX_EVENT_BYTES` before parsing it; the list bounds are part of the record types (``wire(...,
max_items=N)``), so a longer list is refused while decoding, naming its field path. A refused record
goes to ``deadletter`` with the reason, like any invalid record (docs/security.md).

- event size: 1 MiB, Kafka's default ``message.max.bytes``: nothing larger reaches a topic of a
  default broker anyway;
- segments per publish or import request: 5,000 (a task publishes its own segments; Druid's largest
  compactions publish hundreds to a few thousand);
- partitions per lock request: 32,768 (the core partition ids of one time chunk, [0, 32768) in Druid);
- rules per data source: 100 (Druid's rule chains are a handful long);
- ``overshadowedSegments`` and ``atomicUpdateGroup`` per segment: 32,768 each (the size of Druid's
  overwrite partition id range [32768, 65536));
- segment ids per mark-unused: 10,000 (an operator's batch; more is several events);
- Druid overwrite generations (distinct ``numbered_overwrite`` (startRootPartitionId, endRootPartitionId,
  minorVersion)) of one time chunk in one publish, import or mark-used: 64. A task's publish holds one
  generation per chunk (its segment lock allocated one minor version) and an import holds the few a chunk
  still uses; the timeline's list form of a chunk grows with the square of its generations (each lists every
  earlier one it overwrites), so 3,000 in one event took 15 s and 1 GB.
"""

from __future__ import annotations

MAX_EVENT_BYTES = 1 << 20
MAX_SEGMENTS_PER_REQUEST = 5_000
MAX_PARTITIONS_PER_LOCK_REQUEST = 32_768
MAX_RULES_PER_DATA_SOURCE = 100
MAX_PARTITION_REFERENCES = 32_768
MAX_SEGMENT_IDS = 10_000
MAX_OVERWRITE_GENERATIONS_PER_CHUNK = 64
