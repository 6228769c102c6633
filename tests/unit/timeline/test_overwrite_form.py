"""Druid's numbered_overwrite shard specs and the proposal's list form give identical timeline states.

The list form here states what the Druid form means: an output lists every root partition of its range and
every earlier output over that range, and its group is its generation's outputs.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.timeline.timeline import Timeline
from events import Interval, SegmentDescriptor
from events.schema import decode_record

DAY = Interval.parse("2026-01-01/P1D")


def _chunk(roots: int, first: tuple[int, int, int], second: int) -> list[tuple[int, tuple[int, int, int, int],
                                                                             tuple[int, ...], tuple[int, ...]]]:
    """Overwrite outputs of a chunk: (partition, (start, end, minor, size), overshadowed, group).

    ``first`` compacts root partitions [a, b) into ``n`` outputs (minor 1); ``second`` > 0 compacts those
    outputs again into that many (minor 2)."""
    a, b, n = first
    gen1 = [32768 + i for i in range(n)]
    out = [(p, (a, b, 1, n), tuple(range(a, b)), tuple(gen1)) for p in gen1]
    if second:
        gen2 = [32768 + n + i for i in range(second)]
        out += [(p, (a, b, 2, second), (*range(a, b), *gen1), tuple(gen2)) for p in gen2]
    return out


def _descriptor(p: int, druid: bool, spec: tuple[int, int, int, int] | None = None,
                over: tuple[int, ...] = (), group: tuple[int, ...] = ()) -> SegmentDescriptor:
    if spec is None:
        return SegmentDescriptor("ds", DAY, "v1", p, 10, shard_spec={"type": "numbered", "partitionNum": p,
                                                                      "partitions": 0})
    s, e, minor, size = spec
    shard = {"type": "numbered_overwrite", "partitionId": p, "startRootPartitionId": s, "endRootPartitionId": e,
             "minorVersion": minor, "atomicUpdateGroupSize": size}
    if druid:
        return SegmentDescriptor("ds", DAY, "v1", p, 10, shard_spec=shard)
    return SegmentDescriptor("ds", DAY, "v1", p, 10, overshadowed_segments=over, atomic_update_group=group,
                             shard_spec={"type": "numbered", "partitionNum": p, "partitions": 0})


def _states(roots: int, outputs: list[tuple[int, tuple[int, int, int, int], tuple[int, ...], tuple[int, ...]]],
            used: set[int], online: set[int], druid: bool) -> dict[int, str]:
    """The timeline's state of each partition id when ``used`` of the chunk are published and ``online`` served,
    the overwrite outputs written in the Druid form (``druid``) or as explicit lists."""
    segs = {p: _descriptor(p, druid) for p in range(roots)}
    segs.update({p: _descriptor(p, druid, spec, over, group) for p, spec, over, group in outputs})
    tl = Timeline.build("ds", [segs[p] for p in sorted(used)],
                        {segs[p].id: (segs[p], ("h1",)) for p in sorted(online)})
    return {sid.partition_id: state for sid, state in tl.states().items()}

@settings(max_examples=300, deadline=None)
@given(st.integers(1, 4).flatmap(lambda roots: st.tuples(
    st.just(roots),
    st.tuples(st.integers(0, roots - 1), st.integers(1, roots), st.integers(1, 3)).filter(lambda t: t[0] < t[1]),
    st.integers(0, 2),
    st.data())))
def test_druid_form_and_list_form_give_identical_states(case: tuple) -> None:  # type: ignore[type-arg]
    roots, first, second, data = case
    outputs = _chunk(roots, first, second)
    every = [*range(roots), *(p for p, *_ in outputs)]
    # every published segment is used (known while offline), as the lockbox publishes them; some outputs of the
    # last generation may not be published yet (its group waits for them); any published one may be online
    last = [p for p, spec, _, _ in outputs if spec[2] == max(s[2] for _, s, _, _ in outputs)]
    used = set(every) - data.draw(st.sets(st.sampled_from(last)), label="unpublished")
    online = data.draw(st.sets(st.sampled_from(sorted(used))), label="online")
    druid_form, list_form = (_states(roots, outputs, used, online, druid) for druid in (True, False))
    assert druid_form == list_form


def test_real_druid_metadata_decodes_with_its_overwrite_partition() -> None:
    obj = {"dataSource": "ds", "interval": DAY.iso(), "version": "v1", "size": 10,
           "shardSpec": {"type": "numbered_overwrite", "partitionId": 32768, "startRootPartitionId": 0,
                         "endRootPartitionId": 3, "minorVersion": 1, "atomicUpdateGroupSize": 1}}
    seg = decode_record(SegmentDescriptor, obj, "segment")
    assert (seg.partition_id, seg.overwrite_spec) == (32768, (0, 3, 1, 1))
    roots = [_descriptor(p, True) for p in range(3)]
    tl = Timeline.build("ds", [*roots, seg], {s.id: (s, ("h1",)) for s in [*roots, seg]})
    assert {sid.partition_id: st for sid, st in tl.states().items()} == {0: "overshadowed", 1: "overshadowed",
                                                                          2: "overshadowed", 32768: "visible"}


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 4).flatmap(lambda roots: st.tuples(
    st.just(roots),
    st.tuples(st.integers(0, roots - 1), st.integers(1, roots + 3), st.integers(1, 3)).filter(lambda t: t[0] < t[1]),
    st.integers(0, 2),
    st.data())))
def test_root_ids_nobody_published_count_as_listed_ids_nobody_declares(case: tuple) -> None:  # type: ignore[type-arg]
    """A range over root ids that were never published (beyond the known roots, or some of them left out):
    the Druid form (which names those ids by one stand-in, not one by one) still means what the list form
    naming every id of the range means."""
    roots, first, second, data = case
    outputs = _chunk(roots, first, second)
    published_roots = data.draw(st.sets(st.sampled_from(range(roots))), label="published roots")
    used = published_roots | {p for p, *_ in outputs}
    online = data.draw(st.sets(st.sampled_from(sorted(used))), label="online")
    druid_form, list_form = (_states(roots, outputs, used, online, druid) for druid in (True, False))
    assert druid_form == list_form
