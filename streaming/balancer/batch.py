"""One micro-batch of one tier: fold the batch's records, roll the cost caches, balance, queue the moves.

:func:`run_batch` is the whole per-batch logic of the Spark job without Spark (the
stateful processor only loads and saves :class:`~streaming.balancer.placement.TierPlacement`),
so unit tests and the benchmark run exactly what the job runs.

**The moves** are :func:`coordinator.planner.planner.balance_tier`'s: the pure
planner's balancing stages (7 within the balancing share of each server's load
queue, 10, 11), its move rule (:mod:`coordinator.balancer.strategy`), its limits
(``DynamicConfig.effective``, ``queue_shares``), with ``view.run`` = the tier's balancing
run number, so the segment order is a generator seeded from (run, tier, stage).

**Why a run number, not the raw batch id.** The run number advances once per
micro-batch that balances the tier (one holding a trigger) and is kept in the tier's
state, so a batch re-executed from the checkpoint sees the same number. The raw batch id
also counts batches that cannot change anything (our own commands read back, other
tiers' events), and how many of those Spark cuts depends on timing and restarts (after a
crash the replayed batch's commands are read back in an extra batch): seeding with it
would make the moves after a restart differ from an uninterrupted run's. The run number
is the batch id with those batches left out. In-flight
commands (the planner agent's and earlier batches') are queue items of the view, so
they count against the limits; the moves of this batch are queued in the placement
before the next batch, so no batch overshoots.

**Rolling.** A batch without a trigger (only our own commands read back, or events of
other tiers) does nothing but fold. Otherwise the live per-server cost caches are
updated for the (server, segment) pairs the batch touched, O(log n) each, and handed
to ``balance_tier``, which builds only the missing ones. What stays proportional to
the cluster per triggered batch is the view's bookkeeping (sets of ids, the rule
match of each used segment: plain Python set work, no cost arithmetic).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from coordinator.planner.planner import balance_tier
from events.commands import DropSegment, LoadSegment
from events.envelope import Envelope
from events.registry import Event
from streaming.balancer.commands import move_envelopes
from streaming.balancer.placement import TierPlacement


@dataclass
class BatchResult:
    commands: list[Envelope[Event]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)


def run_batch(placement: TierPlacement, envelopes: Iterable[Envelope[Event]], batch_id: int,
              answered_before: Callable[[str], bool] = lambda _cid: False, *, cache_hit: bool = True,
              compute_cost: bool = False) -> BatchResult:
    """Fold ``envelopes`` (in the order given) into ``placement`` and balance its tier once if any can change
    the balance. ``answered_before(command_id)``: whether the state says an earlier batch saw it answered."""
    started = time.perf_counter()
    triggered = False
    folded = 0
    for env in envelopes:
        before = isinstance(env.event, LoadSegment | DropSegment) and answered_before(env.event_id)
        triggered = placement.apply(env, before) or triggered
        folded += 1
    summary: dict[str, Any] = {"tier": placement.tier, "batch": batch_id, "records": folded, "moves": 0,
                               "triggered": triggered, "cacheHit": cache_hit}
    result = BatchResult(summary=summary)
    servers = placement.active_servers()
    if triggered and servers:
        placement.runs += 1
        run = placement.runs
        view = placement.view(run)
        summary["rolledPairs"] = placement.roll_caches()
        summary["cachesBefore"] = len(placement.caches)
        plan = balance_tier(view, placement.tier, placement.caches, compute_cost)
        moves = [c for c in plan.commands if c.type == "move"]
        result.commands = move_envelopes(placement, moves, run)
        placement.roll_caches()  # the moves are queued now: their pairs are already in the caches
        limits = view.config.effective(len(view.used), len(view.servers))
        cap = limits.max_segments_in_node_loading_queue
        share = view.config.queue_shares().balancing
        summary.update({
            "run": run, "moves": len(moves), "servers": len(servers), "segments": len(view.used),
            "maxSegmentsToMove": limits.max_segments_to_move,
            "balancingQueueCap": None if cap <= 0 else cap * share, "queueCap": None if cap <= 0 else cap,
            "stages": dict(sorted(Counter(str(c.stage) for c in moves).items())),
        })
        if compute_cost:
            summary["costBefore"] = plan.metrics["balancer/cost/before"]
            summary["costAfter"] = plan.metrics["balancer/cost/after"]
    summary["balancingQueues"] = balancing_queues(placement)
    placement.version = batch_id
    summary["seconds"] = time.perf_counter() - started
    return result


def balancing_queues(placement: TierPlacement) -> dict[str, int]:
    """In-flight balancing loads per server (what the balancing share limits), after the batch."""
    counts: Counter[str] = Counter(i.server for i in placement.queue.values()
                                   if i.action == "load" and i.purpose == "balancing")
    return dict(sorted(counts.items()))
