"""One micro-batch: fold the batch's records with the core's fold, balance each tier, queue the moves.

:func:`run_batch` is the whole per-batch logic of the Spark job without Spark (the
stateful processor only restores and stores :class:`~streaming.balancer.placement.BalancerPlacement`),
so unit tests and the benchmark run exactly what the job runs.

**Folding** is :meth:`coordinator.placement.state.PlacementState.evolve`, record by
record in the order given (the processor puts a batch's commands before its answers).
A record whose rules or config do not parse is skipped (the planner agent
dead-letters it).

**The moves** are :func:`coordinator.planner.planner.balance_state`'s on the live
state: the pure planner's balancing stages (7 within the balancing share of each
server's load queue, 10, 11), its move rule (:mod:`coordinator.balancer.strategy`), its
limits (``DynamicConfig.effective``, ``queue_shares``), with the tier's balancing run
number as ``run``, so the candidates are drawn by a generator seeded from (run, tier,
stage). The moves are folded into the state as they are chosen and renamed to the ids
they are sent under (:mod:`streaming.balancer.commands`), so reading them back changes
nothing and the next batch counts them against the limits.

**Why a run number, not the raw batch id.** The run number advances once per
micro-batch that balances the tier (one holding a trigger) and is kept in the
state, so a batch re-executed from the checkpoint sees the same number. The raw batch
id also counts batches that cannot change anything (our own commands read back), and
how many of those Spark cuts depends on timing and restarts (after a crash the
replayed batch's commands are read back in an extra batch): seeding with it would make
the moves after a restart differ from an uninterrupted run's.

**Cost.** A batch without a trigger (only our own commands read back) folds and
stops. Otherwise every configured tier with servers is balanced once: the fold keeps
the candidate index and each tier's cost index current record by record (O(log n)
amortised each), a run settles the commands that timed out (a pass over the commands in
flight) and costs one cost-index query per candidate drawn (every server of the tier at
once). Nothing in a batch is proportional to the number of segments, except the first
use of a tier's cost index (built once in bulk, then kept).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from coordinator.locks.seal import use_refusal
from coordinator.planner.planner import balance_state
from events.envelope import Envelope
from events.registry import Event
from events.schema import EventValidationError
from streaming import credentials
from streaming.balancer.commands import move_envelopes
from streaming.balancer.placement import BalancerPlacement


@dataclass
class BatchResult:
    commands: list[Envelope[Event]] = field(default_factory=list)  # every tier's, in tier order
    by_tier: dict[str, list[Envelope[Event]]] = field(default_factory=dict)
    summaries: dict[str, dict[str, Any]] = field(default_factory=dict)  # tier -> what the batch did there


def run_batch(placement: BalancerPlacement, envelopes: Iterable[Envelope[Event]], batch_id: int,
              tiers: Sequence[str], answered: Callable[[str], bool] | None = None, *, cache_hit: bool = True,
              compute_cost: bool = False, publish_key: bytes | None = None) -> BatchResult:
    """Fold ``envelopes`` (in the order given) into ``placement`` and, if any can change the balance, balance each
    of ``tiers`` once. ``answered(command_id)``: whether the store holds the id as settled (earlier batches).

    A publish or mark whose seal does not verify under ``publish_key`` (None: the deployment's,
    :func:`streaming.credentials.publish_key`) is skipped (``refused`` in the summary): the one check of
    :mod:`coordinator.locks.seal`, as every other fold runs it; the worker's timeline agent dead-letters it."""
    started = time.perf_counter()
    key = publish_key if publish_key is not None else credentials.publish_key()
    state = placement.state
    if answered is not None:
        state.settled_before = answered
    triggered, folded, skipped, refused = False, 0, 0, 0
    for env in envelopes:
        if use_refusal(env, key) is not None:
            refused += 1
            continue
        try:
            triggered = state.evolve(env).trigger or triggered
        except (EventValidationError, ValueError):
            skipped += 1
            continue
        folded += 1
    result = BatchResult()
    now = state.last_event_at
    if triggered:
        state.expire(now)
    for tier in sorted(set(tiers)):
        summary: dict[str, Any] = {"tier": tier, "batch": batch_id, "records": folded, "skipped": skipped,
                                   "refused": refused,
                                   "moves": 0, "triggered": triggered, "cacheHit": cache_hit}
        result.summaries[tier] = summary
        servers = [n for n in state.tiers.get(tier, []) if n not in state.decommissioning]
        if not (triggered and servers):
            continue
        run = placement.runs.get(tier, 0) + 1
        placement.runs[tier] = run
        plan = balance_state(state, tier, now=now, run=run, compute_cost=compute_cost)
        moves = [c for c in plan.commands if c.type == "move"]
        commands = move_envelopes(state, moves, tier, run, now)
        result.by_tier[tier] = commands
        result.commands.extend(commands)
        limits = state.config.effective(len(state.used), len(state.tier_of))
        cap = limits.max_segments_in_node_loading_queue
        share = state.config.queue_shares().balancing
        summary.update({
            "run": run, "moves": len(moves), "servers": len(servers), "segments": len(state.used),
            "maxSegmentsToMove": limits.max_segments_to_move,
            "balancingQueueCap": None if cap <= 0 else cap * share, "queueCap": None if cap <= 0 else cap,
            "stages": dict(sorted(Counter(str(c.stage) for c in moves).items())),
        })
        if compute_cost:
            summary["costBefore"] = plan.metrics["balancer/cost/before"]
            summary["costAfter"] = plan.metrics["balancer/cost/after"]
    placement.version = batch_id
    seconds = time.perf_counter() - started
    for tier, summary in result.summaries.items():
        summary["balancingQueues"] = balancing_queues(placement, tier)
        summary["seconds"] = seconds
    return result


def balancing_queues(placement: BalancerPlacement, tier: str) -> dict[str, int]:
    """Balancing loads in each server's queue (what the balancing share limits), after the batch."""
    state = placement.state
    counts = {n: state.queued[n]["balancing"] for n in state.tiers.get(tier, [])}
    return {n: c for n, c in sorted(counts.items()) if c > 0}
