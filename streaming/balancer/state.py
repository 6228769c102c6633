"""The balancer's Spark state: one group per tier, kept with ``transformWithStateInPandas`` in RocksDB.

**Why transformWithStateInPandas** (not ``applyInPandasWithState``): its state is
made of named variables with per-entry updates, so a micro-batch writes the entries
it changed (an announce rewrites one segment's entry) instead of re-serializing the
tier's whole placement into one ``GroupState`` value every batch. It needs protobuf
and the RocksDB state store provider, which :func:`streaming.spark.local_spark` sets.

State variables (all values JSON strings, see :mod:`streaming.balancer.placement`):
``meta`` (value: version = the last batch id that changed it, event time, rules,
config), ``segments``, ``servers``, ``queue``, ``answered`` (maps).

**The live placement.** Rebuilding a tier from the maps and its cost caches costs
time proportional to the tier, so each Python worker keeps the last
:class:`TierPlacement` of each (checkpoint, tier) in memory, tagged with the state
version it reflects. A batch uses it only when that tag equals the stored ``meta`` version
(same worker, previous batch committed); otherwise (a new worker, a restart from
the checkpoint, a retried batch, the tier landing on another worker) it rebuilds
from the maps. The live object is taken out of the cache while a batch runs and put
back only when the batch succeeded, so a failed attempt never leaves a half-updated
placement behind a valid tag.

**The batch id** comes from the task's local property ``streaming.sql.batchId``
(Spark sets it for every micro-batch, including a re-execution after a restart); it
tags the state version. The moves' seed and ids use the tier's balancing run number
instead (see :mod:`streaming.balancer.batch` for why).

**Cost per batch.** Map state is reached through a socket to the JVM (measured here:
about 15k entry updates and 25k iterated entries per second), so the first batch of
a big tier (every announce is a write) and a cold rebuild are the slow ones; a rolling
batch reads and writes only the entries of the records it folds.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pandas as pd
from pyspark import TaskContext
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle, TimerValues

from events.envelope import decode
from events.schema import EventValidationError
from streaming.balancer.batch import run_batch
from streaming.balancer.placement import ANSWERED, QUEUE, SEGMENTS, SERVERS, TierPlacement
from streaming.inflight import DEFAULT_LOAD_TIMEOUT_MS

OUTPUT_SCHEMA = "tier string, seq long, kind string, key string, value string"
BATCH_ID_PROPERTY = "streaming.sql.batchId"

_LIVE: dict[tuple[str, str], TierPlacement] = {}  # per Python worker: (scope, tier) -> placement after last batch


def current_batch_id() -> int:
    context = TaskContext.get()
    raw = context.getLocalProperty(BATCH_ID_PROPERTY) if context is not None else None
    if raw is None:
        raise RuntimeError(f"no {BATCH_ID_PROPERTY} in the task context: run inside a streaming query")
    return int(raw)


def topic_rank(topic: str) -> int:
    """Within a batch, commands first: a command read back is queued before an answer in the same batch."""
    return 0 if topic.endswith("commands") else 1


class BalancerProcessor(StatefulProcessor):
    def __init__(self, scope: str, load_timeout_ms: int = DEFAULT_LOAD_TIMEOUT_MS, compute_cost: bool = False) -> None:
        """``scope`` names the state (the checkpoint): two queries in one Spark never share live placements."""
        self.scope = scope
        self.load_timeout_ms = load_timeout_ms
        self.compute_cost = compute_cost

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.meta = handle.getValueState("meta", "json string")
        self.maps = {name: handle.getMapState(name, "k string", "v string")
                     for name in (SEGMENTS, SERVERS, QUEUE, ANSWERED)}

    def _load(self, tier: str) -> tuple[TierPlacement, bool]:
        meta = self.meta.get()[0] if self.meta.exists() else None
        stored = orjson.loads(meta)["version"] if meta is not None else -1
        live = _LIVE.pop((self.scope, tier), None)
        if live is not None and live.version == stored:
            return live, True

        def entries(name: str) -> Iterator[tuple[str, str]]:
            state = self.maps[name]
            if not state.exists():
                return iter(())
            return ((k[0], v[0]) for k, v in state.iterator())

        return TierPlacement.restore(tier, meta, entries(SEGMENTS), entries(SERVERS), entries(QUEUE),
                                     self.load_timeout_ms), False

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        tier = str(key[0])
        batch_id = current_batch_id()
        frames = [f for f in rows]
        table = pd.concat(frames) if frames else pd.DataFrame(columns=["topic", "partition", "offset", "value"])
        records = sorted(zip(table["topic"], table["partition"], table["offset"], table["value"], strict=True),
                         key=lambda r: (topic_rank(r[0]), r[0], int(r[1]), int(r[2])))
        envelopes = []
        for _topic, _partition, _offset, value in records:
            try:
                envelopes.append(decode(value))
            except EventValidationError:
                continue  # the agents dead-letter bad input; the balancer skips it
        placement, hit = self._load(tier)
        answered = self.maps[ANSWERED]
        result = run_batch(placement, envelopes, batch_id, lambda cid: answered.containsKey((cid,)),
                           cache_hit=hit, compute_cost=self.compute_cost)
        for family, k, value in placement.take_dirty():
            if value is None:
                self.maps[family].removeKey((k,))
            else:
                self.maps[family].updateValue((k,), (value,))
        self.meta.update((placement.meta(),))
        _LIVE[(self.scope, tier)] = placement
        out = [(tier, i, "command", env.key, env_json) for i, (env, env_json) in
               enumerate((e, orjson.dumps(e.to_json()).decode()) for e in result.commands)]
        out.append((tier, len(out), "summary", tier, orjson.dumps(result.summary).decode()))
        yield pd.DataFrame(out, columns=["tier", "seq", "kind", "key", "value"])

    def close(self) -> None:
        pass
