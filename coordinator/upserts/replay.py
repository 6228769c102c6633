"""The offline replay: envelopes -> pure timeline (visibility) -> upsert fold -> per-table report.

As in the service, visibility comes from the timeline's decisions, not from the
publishes: every ``segments`` event goes through
:class:`~coordinator.timeline.timelines.Timelines` and each state change it
returns is folded as a ``segment_visibility_changed``. ``timeline`` events of the
input are ignored (the timeline decides again). The report pins the names
scripts rely on (docs/upserts.md)::

    {"tables": {NAME: {"latest": [{"key": {...}, "version": "...", "tombstone": bool}],
                       "stale": [segment ids], "filter": <Druid filter JSON>}}}

``stale`` lists what cleanup would mark unused (grace periods aside): append
segments holding only superseded versions, and rejected publishes (their reasons
under ``rejected``).

>>> UpsertReplay().report()
{'tables': {}}
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from coordinator.timeline.timelines import Timelines
from coordinator.upserts.state import UpsertState
from coordinator.upserts.strategy import build_filter
from coordinator.upserts.table import key_object
from events.envelope import Envelope
from events.registry import Event
from events.topics import SEGMENTS
from events.visibility import SegmentVisibilityChanged


class UpsertReplay:
    """The timeline and the upsert fold, fed envelopes in log order."""

    def __init__(self) -> None:
        self.timelines = Timelines()
        self.state = UpsertState()

    def apply(self, env: Envelope[Event]) -> None:
        event = env.event
        if isinstance(event, SegmentVisibilityChanged):
            return
        self.state.apply(event, env.occurred_at)
        if event.event_topic == SEGMENTS:
            for c in self.timelines.apply(event):
                sid = c.segment_id
                change = SegmentVisibilityChanged(segment_id=str(sid), data_source=sid.data_source,
                                                  interval=sid.interval, from_state=c.old, to_state=c.new)
                self.state.apply(change, env.occurred_at)

    def apply_all(self, envelopes: Iterable[Envelope[Event]]) -> UpsertReplay:
        for env in envelopes:
            self.apply(env)
        return self

    def report(self) -> dict[str, Any]:
        st = self.state
        tables: dict[str, Any] = {}
        for name in sorted(st.tables):
            table = st.tables[name]
            members = st.members(name)
            stale = sorted(s for s in st.stale if s in members)
            rejected = {s: r for s, (ds, r) in sorted(st.rejected.items()) if ds in (table.append, table.primary)}
            tables[name] = {
                "latest": [{"key": key_object(k), "version": lt.version, "tombstone": lt.tombstone}
                           for k, lt in st.latest(name).items()],
                "stale": sorted([*stale, *rejected]),
                "rejected": rejected,
                "filter": build_filter(table, st.fresh(name)),
            }
        return {"tables": tables}
