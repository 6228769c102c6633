"""The coordinator dynamic configuration: Druid's defaults, merging, round trips, errors, queue shares, smart limits."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from coordinator.rules import ConfigError, DynamicConfig, EffectiveLimits, QueueShares
from coordinator.rules.dynamic_config import IGNORED_KEYS, compute_max_segments_to_move

DRUID_DEFAULTS = {
    "millisToWaitBeforeDeleting": 900_000,
    "maxSegmentsToMove": 100,
    "replicationThrottleLimit": 500,
    "maxSegmentsInNodeLoadingQueue": 500,
    "pauseCoordination": False,
    "decommissioningNodes": [],
    "smartSegmentLoading": True,
    "replicateAfterLoadTimeout": False,
    "useRoundRobinSegmentAssignment": True,
    "maxNonPrimaryReplicantsToLoad": 2_147_483_647,
    "decommissioningMaxPercentOfMaxSegmentsToMove": 70,
    "loadingMinPercent": 70,
    "decommissioningMinPercent": 10,
    "decommissioningMaxPercent": 70,
    "balancingMinPercent": 20,
    "numBestServersLogBase": 5,
}

CUSTOM = {
    "millisToWaitBeforeDeleting": 60_000,
    "maxSegmentsToMove": 25,
    "replicationThrottleLimit": 40,
    "maxSegmentsInNodeLoadingQueue": 0,
    "pauseCoordination": True,
    "decommissioningNodes": ["hist-2:8083", "hist-1:8083"],
    "smartSegmentLoading": False,
    "replicateAfterLoadTimeout": True,
    "useRoundRobinSegmentAssignment": False,
    "maxNonPrimaryReplicantsToLoad": 10,
    "decommissioningMaxPercentOfMaxSegmentsToMove": 0,
    "loadingMinPercent": 50,
    "decommissioningMinPercent": 25,
    "decommissioningMaxPercent": 100,
    "balancingMinPercent": 25,
    "numBestServersLogBase": 2.5,
}


def test_defaults_are_druids() -> None:
    config = DynamicConfig.parse({})
    assert config == DynamicConfig()
    assert config.to_json() == DRUID_DEFAULTS
    assert (config.max_segments_to_move, config.replication_throttle_limit, config.max_segments_in_node_loading_queue,
            config.millis_to_wait_before_deleting) == (100, 500, 500, 900_000)
    assert config.smart_segment_loading and config.use_round_robin_segment_assignment
    assert not config.pause_coordination and not config.replicate_after_load_timeout
    assert config.decommissioning_nodes == ()


def test_every_key_round_trips() -> None:
    config = DynamicConfig.parse(CUSTOM)
    assert config.decommissioning_nodes == ("hist-1:8083", "hist-2:8083")
    out = config.to_json()
    assert out == {**CUSTOM, "decommissioningNodes": ["hist-1:8083", "hist-2:8083"]}
    assert DynamicConfig.parse(json.loads(json.dumps(out))) == config
    assert DynamicConfig.parse(DynamicConfig().to_json()) == DynamicConfig()


def test_null_means_default() -> None:
    assert DynamicConfig.parse({key: None for key in DRUID_DEFAULTS}) == DynamicConfig()


def test_updated_merges_onto_the_current_config_as_druids_post_does() -> None:
    current = DynamicConfig.parse(CUSTOM)
    after = current.updated({"maxSegmentsToMove": 7, "pauseCoordination": None})
    assert after.max_segments_to_move == 7
    assert after.pause_coordination is True           # null keeps the current value
    assert after.replication_throttle_limit == 40     # absent keeps the current value
    assert dataclasses.replace(after, max_segments_to_move=25) == current
    assert current.max_segments_to_move == 25         # the current config is untouched


def test_decommissioning_nodes_as_a_comma_separated_string() -> None:
    # Druid's parseJsonStringOrArray: the console could once only send a string
    config = DynamicConfig.parse({"decommissioningNodes": " b:1, a:1,, b:1 "})
    assert config.decommissioning_nodes == ("a:1", "b:1")
    assert DynamicConfig.parse({"decommissioningNodes": ["b", "a", "b"]}).decommissioning_nodes == ("a", "b")
    assert DynamicConfig.parse({"decommissioningNodes": ""}).decommissioning_nodes == ()


@pytest.mark.parametrize("key", sorted(IGNORED_KEYS))
def test_druids_other_keys_are_accepted_and_ignored(key: str) -> None:
    config = DynamicConfig.parse({key: [1, "anything"], "maxSegmentsToMove": 3})
    assert config == DynamicConfig(max_segments_to_move=3)
    assert key not in config.to_json()


def test_a_config_as_druid_27_returns_it_is_accepted() -> None:
    # GET /druid/coordinator/v1/config of a Druid 27 coordinator left at its defaults
    druid_json = {
        "millisToWaitBeforeDeleting": 900000, "mergeBytesLimit": 524288000, "mergeSegmentsLimit": 100,
        "maxSegmentsToMove": 100, "percentOfSegmentsToConsiderPerMove": 100.0, "useBatchedSegmentSampler": True,
        "replicantLifetime": 15, "replicationThrottleLimit": 500, "balancerComputeThreads": 1,
        "emitBalancingStats": False, "killDataSourceWhitelist": [], "killPendingSegmentsSkipList": [],
        "maxSegmentsInNodeLoadingQueue": 500, "decommissioningNodes": [],
        "decommissioningMaxPercentOfMaxSegmentsToMove": 70, "pauseCoordination": False,
        "replicateAfterLoadTimeout": False, "maxNonPrimaryReplicantsToLoad": 2147483647,
        "useRoundRobinSegmentAssignment": True, "smartSegmentLoading": True,
    }
    assert DynamicConfig.parse(druid_json) == DynamicConfig()


def test_config_is_immutable() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        DynamicConfig().max_segments_to_move = 1  # type: ignore[misc]


@pytest.mark.parametrize(("bad", "message"), [
    ({"maxSegmentsToMove": -1}, "maxSegmentsToMove: expected a non-negative integer, got -1"),
    ({"replicationThrottleLimit": -5}, "replicationThrottleLimit: expected a non-negative integer, got -5"),
    ({"maxSegmentsInNodeLoadingQueue": -1}, "maxSegmentsInNodeLoadingQueue: expected a non-negative integer"),
    ({"maxNonPrimaryReplicantsToLoad": -1}, "maxNonPrimaryReplicantsToLoad: expected a non-negative integer"),
    ({"millisToWaitBeforeDeleting": -1}, "millisToWaitBeforeDeleting: expected a non-negative integer"),
    ({"maxSegmentsToMove": "100"}, "maxSegmentsToMove: expected an integer, got '100'"),
    ({"maxSegmentsToMove": 1.5}, "maxSegmentsToMove: expected an integer, got 1.5"),
    ({"maxSegmentsToMove": True}, "maxSegmentsToMove: expected an integer, got True"),
    ({"maxSegmentsToMove": 2**31}, "maxSegmentsToMove: 2147483648 exceeds the maximum 2147483647"),
    ({"millisToWaitBeforeDeleting": 2**63}, "millisToWaitBeforeDeleting: 9223372036854775808 exceeds the maximum"),
    ({"pauseCoordination": 1}, "pauseCoordination: expected true or false, got 1"),
    ({"smartSegmentLoading": "false"}, "smartSegmentLoading: expected true or false, got 'false'"),
    ({"useRoundRobinSegmentAssignment": None, "replicateAfterLoadTimeout": "yes"},
     "replicateAfterLoadTimeout: expected true or false"),
    ({"decommissioningNodes": 3}, "decommissioningNodes: expected a list of server names or a comma-separated"),
    ({"decommissioningNodes": ["a", 1]}, "decommissioningNodes[1]: expected a string, got 1"),
    ({"decommissioningNodes": ["a", ""]}, "decommissioningNodes[1]: must not be empty"),
    ({"decommissioningMaxPercentOfMaxSegmentsToMove": 101},
     "decommissioningMaxPercentOfMaxSegmentsToMove: 101 exceeds the maximum 100"),
    ({"loadingMinPercent": -1}, "loadingMinPercent: expected a non-negative integer, got -1"),
    ({"balancingMinPercent": 120}, "balancingMinPercent: 120 exceeds the maximum 100"),
    ({"decommissioningMaxPercent": 50.5}, "decommissioningMaxPercent: expected an integer, got 50.5"),
    ({"loadingMinPercent": 71},
     "loadingMinPercent + decommissioningMinPercent + balancingMinPercent: 71 + 10 + 20 = 101 exceeds 100"),
    ({"loadingMinPercent": 30, "decommissioningMinPercent": 40, "decommissioningMaxPercent": 30},
     "decommissioningMinPercent: 40 exceeds decommissioningMaxPercent 30"),
    ({"numBestServersLogBase": 1}, "numBestServersLogBase: must be a finite number above 1, got 1"),
    ({"numBestServersLogBase": 0.5}, "numBestServersLogBase: must be a finite number above 1, got 0.5"),
    ({"numBestServersLogBase": float("inf")}, "numBestServersLogBase: must be a finite number above 1"),
    ({"numBestServersLogBase": float("nan")}, "numBestServersLogBase: must be a finite number above 1"),
    ({"numBestServersLogBase": "5"}, "numBestServersLogBase: expected a number, got '5'"),
    ({"numBestServersLogBase": True}, "numBestServersLogBase: expected a number, got True"),
    ({"maxSegmentToMove": 5}, "maxSegmentToMove: unknown coordinator dynamic configuration key "
                              "(did you mean 'maxSegmentsToMove'?)"),
    ({"shinyNewKnob": 1}, "shinyNewKnob: unknown coordinator dynamic configuration key"),
])
def test_invalid_values_name_the_key_and_the_reason(bad: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        DynamicConfig.parse(bad)
    assert str(info.value).startswith(message), str(info.value)


@pytest.mark.parametrize("bad", [[], "maxSegmentsToMove=5", None])
def test_config_must_be_an_object(bad: Any) -> None:
    with pytest.raises(ConfigError, match=r"^dynamic config: expected a JSON object"):
        DynamicConfig.parse(bad)


def test_direct_construction_is_checked_too() -> None:
    assert issubclass(ConfigError, ValueError)
    with pytest.raises(ConfigError, match=r"^maxSegmentsToMove: expected a non-negative integer"):
        DynamicConfig(max_segments_to_move=-1)
    with pytest.raises(ConfigError, match="exceeds 100"):
        DynamicConfig(balancing_min_percent=30)
    assert DynamicConfig(decommissioning_nodes=("b", "a", "b")).decommissioning_nodes == ("a", "b")


def test_boundary_values_are_valid() -> None:
    config = DynamicConfig.parse({
        "maxSegmentsToMove": 0, "replicationThrottleLimit": 2_147_483_647, "loadingMinPercent": 0,
        "decommissioningMinPercent": 0, "decommissioningMaxPercent": 0, "balancingMinPercent": 100,
        "decommissioningMaxPercentOfMaxSegmentsToMove": 100, "numBestServersLogBase": 1.0001,
    })
    assert config.balancing_min_percent == 100 and config.max_segments_to_move == 0


# -- queue shares -----------------------------------------------------------------------------------------------


def test_default_queue_shares_are_the_minimums() -> None:
    shares = DynamicConfig().queue_shares()
    assert shares == QueueShares(loading=0.7, decommissioning=0.1, balancing=0.2)
    loading, decommissioning, balancing = shares
    assert (loading, decommissioning, balancing) == (0.7, 0.1, 0.2)


@pytest.mark.parametrize(("loading", "decommissioning", "balancing", "expected"), [
    (50, 10, 20, (0.7, 0.1, 0.2)),      # 20 left over: to loading
    (0, 0, 0, (1.0, 0.0, 0.0)),
    (0, 30, 70, (0.0, 0.3, 0.7)),
    (60, 15, 25, (0.6, 0.15, 0.25)),
])
def test_queue_shares_complete_to_one_through_loading(
    loading: int, decommissioning: int, balancing: int, expected: tuple[float, float, float]
) -> None:
    config = DynamicConfig.parse({"loadingMinPercent": loading, "decommissioningMinPercent": decommissioning,
                                  "balancingMinPercent": balancing})
    shares = config.queue_shares()
    assert shares == pytest.approx(expected)
    assert sum(shares) == pytest.approx(1.0)
    assert shares.loading >= loading / 100


# -- smart segment loading --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("used_segments", "throttle", "threads"), [
    (0, 100, 1),                    # the floor
    (4_999, 100, 1),                # 2 % is 99: floored
    (5_000, 100, 1),
    (5_050, 101, 1),
    (10_000, 200, 1),
    (49_999, 999, 1),               # integer division, as Java
    (50_000, 1_000, 2),             # one more balancer thread per step: 50k, 50k, 75k, 75k, 100k, ...
    (100_000, 2_000, 3),
    (175_000, 3_500, 4),
    (1_000_000, 20_000, 8),         # at most 8 threads
    (123_456_789, 2_469_135, 8),
])
def test_smart_segment_loading_follows_current_druid(used_segments: int, throttle: int, threads: int) -> None:
    config = DynamicConfig.parse({"maxSegmentsToMove": 5, "replicationThrottleLimit": 7,
                                  "maxSegmentsInNodeLoadingQueue": 9, "useRoundRobinSegmentAssignment": False,
                                  "maxNonPrimaryReplicantsToLoad": 3,
                                  "decommissioningMaxPercentOfMaxSegmentsToMove": 10})
    assert config.effective(used_segments, server_count=12) == EffectiveLimits(
        replication_throttle_limit=throttle,
        max_segments_to_move=compute_max_segments_to_move(used_segments, threads),
        max_segments_in_node_loading_queue=0,
        use_round_robin=True,
        max_non_primary_replicants_to_load=2_147_483_647,
        decommissioning_max_percent_of_max_segments_to_move=100,
        smart=True,
        balancer_compute_threads=threads,
    )


@pytest.mark.parametrize(("segments_in_tier", "threads", "moves"), [
    (0, 1, 100),                    # at least 100, even for an empty tier
    (400, 1, 100),                  # 12.5 % is 50: the floor wins
    (8_000, 1, 1_000),              # 12.5 %: the cap
    (16_000, 1, 2_000),
    (80_000, 1, 10_000),
    (400_000, 1, 8_000),            # 2^21 thousand computations / ~2^18 segments
    (400_000, 2, 16_000),           # twice the threads, twice the moves
    (1_000_000, 1, 4_000),
    (10_000_000, 1, 100),           # the floor again
])
def test_smart_max_segments_to_move_per_tier_as_druids_compute_max_segments_to_move(
        segments_in_tier: int, threads: int, moves: int) -> None:
    limits = DynamicConfig().effective(1_000 if threads == 1 else 60_000, 3)
    assert limits.balancer_compute_threads == threads
    assert limits.max_segments_to_move_in(segments_in_tier) == moves == compute_max_segments_to_move(
        segments_in_tier, threads)
    assert moves >= 100 and (moves == 100 or moves <= segments_in_tier // 8)


def test_without_smart_loading_every_tier_has_the_configured_max_segments_to_move() -> None:
    limits = DynamicConfig.parse({"smartSegmentLoading": False, "maxSegmentsToMove": 7}).effective(10**6, 3)
    assert [limits.max_segments_to_move_in(n) for n in (0, 10**3, 10**7)] == [7, 7, 7]


@pytest.mark.parametrize(("moves", "percent", "drains"), [(3, 60, 2), (100, 70, 70), (10, 0, 0), (7, 100, 7),
                                                          (1, 1, 1)])
def test_decommissioning_max_percent_of_max_segments_to_move_caps_drains(moves: int, percent: int,
                                                                          drains: int) -> None:
    """Druid 27's BalanceSegments: ceil(maxSegmentsToMove * percent / 100) of a tier's moves may drain."""
    limits = DynamicConfig.parse({"smartSegmentLoading": False, "maxSegmentsToMove": moves,
                                  "decommissioningMaxPercentOfMaxSegmentsToMove": percent}).effective(0, 0)
    assert limits.max_drains_in(moves) == drains
    smart = DynamicConfig.parse({"decommissioningMaxPercentOfMaxSegmentsToMove": percent}).effective(0, 0)
    assert smart.max_drains_in(moves) == moves  # smart loading drains first, up to every move (Druid 28+)


def test_server_count_does_not_change_smart_limits() -> None:
    config = DynamicConfig()
    assert config.effective(80_000, 1) == config.effective(80_000, 500)


def test_without_smart_loading_the_configured_values_apply() -> None:
    config = DynamicConfig.parse(CUSTOM)
    assert config.effective(1_000_000, 3) == EffectiveLimits(
        replication_throttle_limit=40,
        max_segments_to_move=25,
        max_segments_in_node_loading_queue=0,
        use_round_robin=False,
        max_non_primary_replicants_to_load=10,
        decommissioning_max_percent_of_max_segments_to_move=0,
    )
    defaults_off = DynamicConfig(smart_segment_loading=False).effective(0, 0)
    assert (defaults_off.replication_throttle_limit, defaults_off.max_segments_to_move,
            defaults_off.max_segments_in_node_loading_queue, defaults_off.use_round_robin) == (500, 100, 500, True)


@pytest.mark.parametrize(("segments", "servers", "message"), [
    (-1, 3, "segment_count: expected a non-negative integer"),
    (3, -1, "server_count: expected a non-negative integer"),
    (1.0, 3, "segment_count: expected an integer"),
])
def test_effective_rejects_bad_counts(segments: Any, servers: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=f"^{message}"):
        DynamicConfig().effective(segments, servers)
