"""The balancer's placement: the core's fold, its balancing run numbers, and how both sit in Spark's state.

The balancer folds nothing itself. :class:`BalancerPlacement` is a
:class:`~coordinator.placement.state.PlacementState` (the one fold: servers, holdings,
commands in flight and their answers, used segments, rules, dynamic config, the
planner's projection, the balancing candidate index and the live tier cost indexes) plus,
per tier, the number of balancing runs so far (the seed and id space of the next
run), plus the batch id of the state it reflects.

**Keying: one state for the cluster, not one per tier.** Tier membership is itself
folded state (an announce names a server, not its tier; a server can rejoin in
another tier), so splitting the records by tier before the fold would need the
fold's own output, and a state per tier holding the whole cluster (the old layout:
every record offered to every tier) costs the number of tiers times the storage and
the fold work of every record. Once folded, a tier's balancing run costs
O(draws x servers x log n) whatever the cluster's size, so one group balancing its
tiers in turn is cheaper than several groups each folding every record.

**Stored form** (:mod:`coordinator.placement.codec`, nothing else): the codec's
entries in one map ``placement`` keyed by (family, key), except the settled command
ids (family ``ans``), which only grow and are only looked up, in a map ``answered``;
the codec's meta entry (plus ``version`` and ``runs``) in the value ``meta``. After
each batch the adapter writes exactly :func:`coordinator.placement.codec.changed`,
so a batch writes what its records (and its moves) changed, and the stored entries
always equal the state's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from coordinator.placement import codec
from coordinator.placement.records import DEFAULT_LOAD_TIMEOUT_MS
from coordinator.placement.state import PlacementState

PLACEMENT = "placement"  # (family, key) -> codec value (UTF-8 JSON text; "" for a held pair)
ANSWERED = "answered"    # command id -> "": settled, never in flight again
META = "meta"            # the codec's meta entry with the adapter's ``version`` and ``runs``

StoreWrite = tuple[str, tuple[str, ...], str | None]  # (PLACEMENT | ANSWERED | META, key, value; None: delete)


@dataclass
class BalancerPlacement:
    state: PlacementState = field(default_factory=PlacementState)
    runs: dict[str, int] = field(default_factory=dict)  # tier -> balancing runs so far
    version: int = -1  # the batch id of the state this object reflects (-1: empty)

    def meta(self) -> dict[str, Any]:
        return {"version": self.version, "runs": dict(sorted(self.runs.items()))}

    def changed(self) -> list[StoreWrite]:
        """The writes that bring the store to this state: :func:`codec.changed`, sorted, the meta last."""
        out: list[StoreWrite] = []
        for family, key, value in codec.changed(self.state, self.meta()):
            text = None if value is None else value.decode()
            if family == "meta":
                out.append((META, (), text))
            elif family == "ans":
                out.append((ANSWERED, (key,), "" if value is not None else None))  # None: forgotten
            else:
                out.append((PLACEMENT, (family, key), text))
        return out

    @staticmethod
    def restore(entries: Iterable[tuple[str, str, str]], meta: str | None,
                load_timeout_ms: int = DEFAULT_LOAD_TIMEOUT_MS,
                answered: Callable[[str], bool] | None = None) -> BalancerPlacement:
        """Back from the ``placement`` map's (family, key, value) entries and the ``meta`` value (the cold path:
        a new worker, a restart, a retried batch). ``answered``: the ``answered`` map's lookup."""
        stored = ((f, k, v.encode()) for f, k, v in entries)
        if meta is not None:
            stored = _with(stored, ("meta", "", meta.encode()))
        state, extra = codec.restore(stored, load_timeout_ms, answered)
        return BalancerPlacement(state, dict(extra.get("runs", {})), extra.get("version", -1))


def _with(entries: Iterable[tuple[str, str, bytes]], last: tuple[str, str, bytes]) -> Iterable[tuple[str, str, bytes]]:
    yield from entries
    yield last


def meta_version(meta: str | None) -> int:
    """The batch id a stored meta value says the state reflects (-1: none)."""
    return -1 if meta is None else int(orjson.loads(meta).get("version", -1))
