"""Default lock priorities by task type, as Druid's (a task or a request may override them).

>>> default_priority("index_kafka"), default_priority("index_parallel"), default_priority("compact")
(75, 50, 25)
>>> default_priority("kill")
0
"""

from __future__ import annotations

STREAMING_INGESTION = 75
BATCH_INGESTION = 50
COMPACTION = 25
DEFAULT = 0

_BY_TYPE = {
    "index_kafka": STREAMING_INGESTION,
    "index_kinesis": STREAMING_INGESTION,
    "index_realtime": STREAMING_INGESTION,
    "index_realtime_appenderator": STREAMING_INGESTION,
    "index": BATCH_INGESTION,
    "index_parallel": BATCH_INGESTION,
    "index_hadoop": BATCH_INGESTION,
    "single_phase_sub_task": BATCH_INGESTION,
    "partial_index_generate": BATCH_INGESTION,
    "partial_dimension_distribution": BATCH_INGESTION,
    "partial_range_index_generate": BATCH_INGESTION,
    "partial_index_generic_merge": BATCH_INGESTION,
    "index_msq": BATCH_INGESTION,
    "query_controller": BATCH_INGESTION,
    "query_worker": BATCH_INGESTION,
    "compact": COMPACTION,
}


def default_priority(task_type: str) -> int:
    return _BY_TYPE.get(task_type, DEFAULT)
