"""Hostile input (size and shape) against every agent: nothing lost, no crash, refusals dead-lettered with a reason.

The cases are :mod:`streaming.hostile`'s (the bench ``bench/hostile.py`` prints their worst per-event times).
What a user would notice when this fails: one oversized or deeply nested record stops an agent (every restart
crashes on it again), or a record vanishes without a dead letter saying why.
"""

from __future__ import annotations

from streaming import hostile

REFUSED = ("oversized", "over the bound", "nested", "2^31", "forged")
# the planner's dynamic config bound (the upsert agent ignores configs; the balancer's fold skips a config it
# cannot parse, as the planner agent does)
REFUSED_BY = {"planner": ("50000 keys",), "balancer": ("50000 keys",)}


def test_every_agent_takes_or_dead_letters_every_hostile_record() -> None:
    figures = list(hostile.run(b"unit-hostile-key"))
    assert {t.agent for t in figures} == {"timeline", "lockbox", "planner", "upserts", "balancer"}
    for t in figures:
        assert t.applied + t.dead_lettered == t.events, t  # nothing lost
        if any(word in t.name for word in (*REFUSED, *REFUSED_BY.get(t.agent, ()))):
            assert t.dead_lettered == t.events, t
        else:
            assert t.dead_lettered == 0, t


def test_the_refusals_name_their_reason() -> None:
    with hostile.agents(b"k") as by_name:
        agent, sink = by_name["timeline"]
        cases = {c.name: c for c in hostile.segments_cases(b"k")}
        topic = hostile.TOPICS.name("segments")
        for i, name in enumerate(["oversized message", "numbered_overwrite root range 2^31",
                                  "mark-unused of 10001 ids (over the bound)", "forged publish",
                                  "forged mark-unused",
                                  "65 numbered_overwrite generations in one chunk (over the bound)"]):
            [(key, value)] = cases[name].records
            agent.process([hostile.InputRecord(topic, 0, i, key, value, hostile.T0)])
        reasons = [d.reason for d in hostile.dead_letters(sink)]
    assert len(reasons) == 6
    assert "payload.segments[64].shardSpec" in reasons[5] and "at most 64 numbered_overwrite generations" in reasons[5]
    assert "at most 1048576 bytes" in reasons[0]
    assert "payload.segment.shardSpec" in reasons[1] and "numbered_overwrite" in reasons[1]
    assert "payload.segmentIds" in reasons[2] and "at most 10000 items" in reasons[2]
    assert "only the lockbox publishes" in reasons[3]
    assert "only the coordinator marks segments" in reasons[4]


def test_the_list_bounds_of_lock_requests_and_rules_name_their_field() -> None:
    with hostile.agents(b"k") as by_name:
        lockbox, lockbox_sink = by_name["lockbox"]
        planner, planner_sink = by_name["planner"]
        locks = {c.name: c for c in hostile.lock_request_cases()}
        [lock] = locks["segment lock of 32769 partitions (over the bound)"].records
        [rules] = {c.name: c for c in hostile.cluster_cases()}["101 rules for one data source (over the bound)"].records
        lockbox.process([hostile.InputRecord(hostile.TOPICS.name("lock-requests"), 0, 0, *lock, hostile.T0)])
        planner.process([hostile.InputRecord(hostile.TOPICS.name("cluster"), 0, 0, *rules, hostile.T0)])
        [lock_reason] = [d.reason for d in hostile.dead_letters(lockbox_sink)]
        [rules_reason] = [d.reason for d in hostile.dead_letters(planner_sink)]
    assert "payload.partitionIds" in lock_reason and "at most 32768 items" in lock_reason
    assert "payload.rules" in rules_reason and "at most 100 items" in rules_reason

