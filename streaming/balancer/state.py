"""The balancer's Spark state: one group for the cluster, kept with ``transformWithStateInPandas`` in RocksDB.

**Why transformWithStateInPandas** (not ``applyInPandasWithState``): its state is
made of named variables with per-entry updates, so a micro-batch writes the entries
it changed (an announce rewrites one ``held`` entry and its segment's entry) instead
of re-serializing the whole placement into one ``GroupState`` value every batch. It
needs protobuf and the RocksDB state store provider, which :func:`streaming.spark.local_spark` sets.

State variables (see :mod:`streaming.balancer.placement`): the map ``placement``
((family, key) -> the placement codec's value), the map ``answered`` (settled command
ids, looked up, never iterated) and the value ``meta``. Each batch writes exactly what
``codec.changed`` names.

**The live placement.** Restoring the fold and its cost caches from the maps costs
time proportional to the cluster, so each Python worker keeps the last
:class:`BalancerPlacement` of each checkpoint in memory, tagged with the state version
(batch id) it reflects. A batch uses it only when that tag equals the stored ``meta``
version (same worker, previous batch committed); otherwise (a new worker, a restart
from the checkpoint, a retried batch) it restores from the maps. The live object is
taken out of the cache while a batch runs and put back only when the batch succeeded,
so a failed attempt never leaves a half-updated placement behind a valid tag.
The query has one shuffle partition (:func:`streaming.balancer.job.start`), so each batch is
one task on one Python worker and Spark's pool hands the same worker back batch after
batch; Spark stops its idle Python workers after a minute without any Python task, so
the first batch after a minute without input restores (each summary's ``restoreSeconds``).

**The batch id** comes from the task's local property ``streaming.sql.batchId``
(Spark sets it for every micro-batch, including a re-execution after a restart); it
tags the state version. The moves' seed and ids use each tier's balancing run number
instead (see :mod:`streaming.balancer.batch` for why).

**Cost per batch.** Map state is reached through a socket to the JVM (measured here:
about 15k entry updates and 25k iterated entries per second), so the first batch of
a big cluster (every announce is two writes) and a cold restore are the slow ones; a
rolling batch looks up and writes only the entries of the records it folds and the
moves it makes, and the state store commits a changelog of those writes
(:data:`streaming.spark.STATE_STORE_CONF`), not a snapshot of the whole state.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import orjson
import pandas as pd
from pyspark import TaskContext
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle, TimerValues

from coordinator.placement.records import DEFAULT_LOAD_TIMEOUT_MS
from events.envelope import Envelope, decode
from events.registry import Event
from events.schema import EventValidationError
from streaming.balancer.batch import run_batch
from streaming.balancer.placement import ANSWERED, META, PLACEMENT, BalancerPlacement, StoreWrite, meta_version

OUTPUT_SCHEMA = "tier string, seq long, kind string, key string, value string"
BATCH_ID_PROPERTY = "streaming.sql.batchId"
GROUP = "cluster"  # the one group key (see streaming.balancer.placement, "Keying")

_LIVE: dict[str, BalancerPlacement] = {}  # per Python worker: scope -> placement after the last batch


def current_batch_id() -> int:
    context = TaskContext.get()
    raw = context.getLocalProperty(BATCH_ID_PROPERTY) if context is not None else None
    if raw is None:
        raise RuntimeError(f"no {BATCH_ID_PROPERTY} in the task context: run inside a streaming query")
    return int(raw)


def decode_rows(values: Iterable[Any]) -> list[Envelope[Event]]:
    """The envelopes of a batch's values, in order; tombstones (null, which pandas may hand over as NaN) and
    undecodable values are skipped: the worker's agents dead-letter them, once (events.deadletter)."""
    out: list[Envelope[Event]] = []
    for value in values:
        try:
            out.append(decode(value))
        except EventValidationError:
            continue
    return out


def topic_rank(topic: str) -> int:
    """Within a batch, commands first: a command read back is queued before an answer in the same batch."""
    return 0 if topic.endswith("commands") else 1


def store_writes(writes: Iterable[StoreWrite], meta: Any, placement: Any, answered: Any) -> None:
    """Apply :meth:`BalancerPlacement.changed` to the query's state: ``meta`` (a value state), ``placement`` and
    ``answered`` (map states). A write whose value is None deletes its key, in ``answered`` too: the placement
    fold forgets a gone segment's settled ids once its tombstone leaves the settled window
    (``coordinator/placement/settled.py``), so the map holds what the fold holds and stays bounded."""
    for family, k, value in writes:
        if family == META:
            meta.update((value,))
        elif value is None:
            (answered if family == ANSWERED else placement).removeKey(k)
        elif family == ANSWERED:
            answered.updateValue(k, ("",))
        else:
            placement.updateValue(k, (value,))

class BalancerProcessor(StatefulProcessor):
    def __init__(self, scope: str, tiers: Sequence[str], load_timeout_ms: int = DEFAULT_LOAD_TIMEOUT_MS,
                 compute_cost: bool = False, publish_key: bytes | None = None) -> None:
        """``scope`` names the state (the checkpoint): two queries in one Spark never share live placements.
        ``tiers``: the tiers to balance. ``publish_key``: the deployment's (read by the driver and shipped
        with the processor, so the Python workers need no access to the key file); None: read where it runs."""
        self.publish_key = publish_key
        self.scope = scope
        self.tiers = tuple(sorted(set(tiers)))
        self.load_timeout_ms = load_timeout_ms
        self.compute_cost = compute_cost

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.meta = handle.getValueState(META, "json string")
        self.placement = handle.getMapState(PLACEMENT, "f string, k string", "v string")
        self.answered = handle.getMapState(ANSWERED, "k string", "v string")

    def _answered(self, cid: str) -> bool:
        return bool(self.answered.containsKey((cid,)))

    def _load(self) -> tuple[BalancerPlacement, bool]:
        meta = self.meta.get()[0] if self.meta.exists() else None
        live = _LIVE.pop(self.scope, None)
        if live is not None and live.version == meta_version(meta):
            return live, True
        entries: Iterator[tuple[str, str, str]] = iter(()) if not self.placement.exists() else (
            (k[0], k[1], v[0]) for k, v in self.placement.iterator())
        return BalancerPlacement.restore(entries, meta, self.load_timeout_ms, self._answered), False

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        batch_id = current_batch_id()
        frames = [f for f in rows]
        table = pd.concat(frames) if frames else pd.DataFrame(columns=["topic", "partition", "offset", "value"])
        records = sorted(zip(table["topic"], table["partition"], table["offset"], table["value"], strict=True),
                         key=lambda r: (topic_rank(r[0]), r[0], int(r[1]), int(r[2])))
        envelopes = decode_rows(value for _t, _p, _o, value in records)
        started = time.perf_counter()
        placement, hit = self._load()
        loaded = time.perf_counter()
        result = run_batch(placement, envelopes, batch_id, self.tiers, self._answered, cache_hit=hit,
                           compute_cost=self.compute_cost, publish_key=self.publish_key)
        stored = time.perf_counter()
        store_writes(placement.changed(), self.meta, self.placement, self.answered)
        _LIVE[self.scope] = placement
        for summary in result.summaries.values():  # where the processor's time went, beside run_batch's own
            summary["restoreSeconds"] = loaded - started  # ~0 with the live placement, O(cluster) without it
            summary["storeSeconds"] = time.perf_counter() - stored
        out: list[tuple[str, int, str, str, str]] = []
        for tier in self.tiers:
            seq = 0
            for env in result.by_tier.get(tier, []):
                out.append((tier, seq, "command", env.key, orjson.dumps(env.to_json()).decode()))
                seq += 1
            out.append((tier, seq, "summary", tier, orjson.dumps(result.summaries[tier]).decode()))
        yield pd.DataFrame(out, columns=["tier", "seq", "kind", "key", "value"])

    def close(self) -> None:
        pass
