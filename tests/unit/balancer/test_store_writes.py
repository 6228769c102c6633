"""The Spark balancer's state holds what the placement fold holds: a forgotten settled id leaves ``answered``.

The fold forgets a gone segment's settled ids when its tombstone leaves the settled window
(``coordinator/placement/settled.py``) and says so as an ``ans`` write with no value; the query's map must then
delete the id, or it grows by one id per command for ever (it used to write every ``ans`` entry back).
The map states here are plain dicts behind the three methods the processor calls.
"""

from __future__ import annotations

from typing import Any

from streaming.balancer.placement import ANSWERED, META, PLACEMENT, StoreWrite
from streaming.balancer.state import store_writes


class MapState:
    def __init__(self) -> None:
        self.data: dict[tuple[str, ...], tuple[str, ...]] = {}

    def updateValue(self, key: tuple[str, ...], value: tuple[str, ...]) -> None:
        self.data[key] = value

    def removeKey(self, key: tuple[str, ...]) -> None:
        self.data.pop(key, None)


class ValueState:
    def __init__(self) -> None:
        self.value: Any = None

    def update(self, value: tuple[str, ...]) -> None:
        self.value = value


def test_a_forgotten_settled_id_is_deleted_from_answered_and_placement_deletes_stay_deletes() -> None:
    meta, placement, answered = ValueState(), MapState(), MapState()
    first: list[StoreWrite] = [
        (ANSWERED, ("c1",), ""), (ANSWERED, ("c2",), ""),
        (PLACEMENT, ("gone", "wiki_x"), '{"at": 1}'), (PLACEMENT, ("seg", "wiki_y"), "{}"),
        (META, (), '{"version": 0}'),
    ]
    store_writes(first, meta, placement, answered)
    assert set(answered.data) == {("c1",), ("c2",)}
    later: list[StoreWrite] = [
        (ANSWERED, ("c1",), None),  # the tombstone expired: its segment's ids are forgotten
        (PLACEMENT, ("gone", "wiki_x"), None),
        (META, (), '{"version": 1}'),
    ]
    store_writes(later, meta, placement, answered)
    assert set(answered.data) == {("c2",)}
    assert set(placement.data) == {("seg", "wiki_y")}
    assert meta.value == ('{"version": 1}',)
