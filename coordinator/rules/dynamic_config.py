"""The coordinator's dynamic configuration: Druid's ``coordinator.config`` JSON, plus seed 004's queue shares.

**Keys and defaults.** Druid's keys with Druid's defaults (``CoordinatorDynamicConfig.Defaults``;
the numbers of the brief all agree with Druid's):

====================================================  ==========  ====================================
key                                                   default     meaning here
====================================================  ==========  ====================================
``millisToWaitBeforeDeleting``                        900000      15 minutes, a Java ``long``
``maxSegmentsToMove``                                 100
``replicationThrottleLimit``                          500
``maxSegmentsInNodeLoadingQueue``                     500         0 means unlimited
``pauseCoordination``                                 false
``decommissioningNodes``                              []          also a comma-separated string
``smartSegmentLoading``                               true        see :meth:`DynamicConfig.effective`
``replicateAfterLoadTimeout``                         false
``useRoundRobinSegmentAssignment``                    true
``maxNonPrimaryReplicantsToLoad``                     2147483647  Java's Integer.MAX_VALUE
``decommissioningMaxPercentOfMaxSegmentsToMove``      70          0..100; drains per tier and run
                                                                  (see :meth:`EffectiveLimits.max_drains_in`)
====================================================  ==========  ====================================

and seed 004's: ``loadingMinPercent`` 70, ``decommissioningMinPercent`` 10,
``decommissioningMaxPercent`` 70, ``balancingMinPercent`` 20 (each 0..100; the three minimums sum
to at most 100; decommissioning's minimum at most its maximum) and ``numBestServersLogBase`` 5
(a number above 1).

**Other keys.** Druid's Jackson ignores every unknown key; here an unknown key is an error naming
it. The keys that some Druid version defines and this coordinator has no use for are accepted,
not checked and not kept (so ``to_json`` does not write them back): ``balancerComputeThreads``,
``mergeBytesLimit``, ``mergeSegmentsLimit``, ``replicantLifetime``, ``emitBalancingStats``,
``killDataSourceWhitelist``, ``killAllDataSources``, ``killPendingSegmentsSkipList``,
``killTaskSlotRatio``, ``maxKillTaskSlots``, ``percentOfSegmentsToConsiderPerMove``,
``useBatchedSegmentSampler``, ``debugDimensions``.

**Merging.** Druid's POST of a dynamic config fills the keys it leaves out (or sets to null) from
the *current* config, not from the defaults (``CoordinatorDynamicConfigsResource`` calls
``builder.build(current)``): :meth:`DynamicConfig.updated` does that, :meth:`DynamicConfig.parse`
starts from the defaults.

Values are not coerced (``"500"`` is not a count, ``1`` is not ``true``); ``int`` settings are
at most Java's Integer.MAX_VALUE. Errors are :class:`ConfigError` naming the key and the reason.

>>> config = DynamicConfig.parse({"maxSegmentsToMove": 50, "smartSegmentLoading": False})
>>> config.max_segments_to_move, config.replication_throttle_limit
(50, 500)
>>> config.queue_shares()
QueueShares(loading=0.7, decommissioning=0.1, balancing=0.2)
>>> limits = DynamicConfig().effective(segment_count=120_000, server_count=10)
>>> limits.replication_throttle_limit, limits.balancer_compute_threads, limits.max_segments_in_node_loading_queue
(2400, 3, 0)
>>> limits.max_segments_to_move_in(40_000), limits.max_segments_to_move_in(500)
(5000, 100)
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal, NamedTuple

from coordinator.rules._json import JAVA_INT_MAX, JAVA_LONG_MAX, read_bool, read_int, read_str


class ConfigError(ValueError):
    """A dynamic configuration that is not valid; the message names the key and the reason."""


_Kind = Literal["int", "long", "bool", "percent", "nodes", "base"]

#: (JSON key, attribute, kind) of every key the configuration keeps, in ``to_json`` order.
_KEYS: tuple[tuple[str, str, _Kind], ...] = (
    ("millisToWaitBeforeDeleting", "millis_to_wait_before_deleting", "long"),
    ("maxSegmentsToMove", "max_segments_to_move", "int"),
    ("replicationThrottleLimit", "replication_throttle_limit", "int"),
    ("maxSegmentsInNodeLoadingQueue", "max_segments_in_node_loading_queue", "int"),
    ("pauseCoordination", "pause_coordination", "bool"),
    ("decommissioningNodes", "decommissioning_nodes", "nodes"),
    ("smartSegmentLoading", "smart_segment_loading", "bool"),
    ("replicateAfterLoadTimeout", "replicate_after_load_timeout", "bool"),
    ("useRoundRobinSegmentAssignment", "use_round_robin_segment_assignment", "bool"),
    ("maxNonPrimaryReplicantsToLoad", "max_non_primary_replicants_to_load", "int"),
    ("decommissioningMaxPercentOfMaxSegmentsToMove", "decommissioning_max_percent_of_max_segments_to_move", "percent"),
    ("loadingMinPercent", "loading_min_percent", "percent"),
    ("decommissioningMinPercent", "decommissioning_min_percent", "percent"),
    ("decommissioningMaxPercent", "decommissioning_max_percent", "percent"),
    ("balancingMinPercent", "balancing_min_percent", "percent"),
    ("numBestServersLogBase", "num_best_servers_log_base", "base"),
)
_BY_JSON: Mapping[str, tuple[str, _Kind]] = {key: (attr, kind) for key, attr, kind in _KEYS}

#: Keys some Druid version defines that are accepted and ignored (not checked, not kept).
IGNORED_KEYS: frozenset[str] = frozenset({
    "balancerComputeThreads",
    "mergeBytesLimit",
    "mergeSegmentsLimit",
    "replicantLifetime",
    "emitBalancingStats",
    "killDataSourceWhitelist",
    "killAllDataSources",
    "killPendingSegmentsSkipList",
    "killTaskSlotRatio",
    "maxKillTaskSlots",
    "percentOfSegmentsToConsiderPerMove",
    "useBatchedSegmentSampler",
    "debugDimensions",
})

#: Smart segment loading (current Druid's ``SegmentLoadingConfig``): the throttle is this percentage of the
#: used segments, at least ``SMART_MIN_REPLICATION_THROTTLE``; a tier moves at least ``MIN_SEGMENTS_TO_MOVE``.
SMART_THROTTLE_PERCENT = 2
SMART_MIN_REPLICATION_THROTTLE = 100
MIN_SEGMENTS_TO_MOVE = 100
_BALANCER_THREAD_STEPS = (50, 50, 75, 75, 100, 100, 150, 150)  # thousands of used segments per extra thread


def compute_num_balancer_threads(used_segments: int) -> int:
    """Druid's ``computeNumBalancerThreads``: one thread, plus one per step of used segments (50k, 50k, 75k,
    75k, 100k, 100k, 150k, 150k), in [1, 8].

    >>> [compute_num_balancer_threads(n) for n in (0, 49_999, 50_000, 100_000, 175_000, 10**9)]
    [1, 1, 2, 3, 4, 8]
    """
    remainder = used_segments // 1000
    for step, size in enumerate(_BALANCER_THREAD_STEPS):
        remainder -= size
        if remainder < 0:
            return step + 1
    return len(_BALANCER_THREAD_STEPS)


def compute_max_segments_to_move(segments_on_historicals: int, balancer_threads: int) -> int:
    """Druid's ``computeMaxSegmentsToMove``: about 2 billion cost computations per balancer thread and run,
    divided by the segments that take part (every replica loaded or queued on the historicals), in thousands;
    at least ``MIN_SEGMENTS_TO_MOVE``, at most 12.5 % of those segments (the floor wins).

    The division halves the dividend once per halving of the divisor, as Druid does (a power-of-two
    approximation), so the figures match Druid's exactly.

    >>> [compute_max_segments_to_move(n, 1) for n in (0, 800, 8_000, 80_000, 1_000_000, 10_000_000)]
    [100, 100, 1000, 10000, 4000, 100]
    """
    computations = max(1 << 21, balancer_threads << 21)  # thousands of computations
    divisor, quotient = segments_on_historicals, computations
    while divisor > 1:
        divisor >>= 1
        quotient >>= 1
    moves = quotient * 1000
    upper = segments_on_historicals >> 3
    if moves > upper:
        return max(MIN_SEGMENTS_TO_MOVE, upper)
    return max(MIN_SEGMENTS_TO_MOVE, moves)


class QueueShares(NamedTuple):
    """The share (a fraction; the three sum to 1) of a load queue each stage may use at least.

    A named tuple: ``loading, decommissioning, balancing = config.queue_shares()`` works too.
    """

    loading: float
    decommissioning: float
    balancing: float


@dataclass(frozen=True, slots=True)
class EffectiveLimits:
    """The limits one coordinator run works with: configured, or computed by smart segment loading.

    ``max_segments_in_node_loading_queue`` 0 means unlimited. ``max_segments_to_move`` is the configured
    value; with smart loading it is the value for one tier holding ``segment_count`` segments, and a run
    computes each tier's own with :meth:`max_segments_to_move_in`.
    """

    replication_throttle_limit: int
    max_segments_to_move: int
    max_segments_in_node_loading_queue: int
    use_round_robin: bool
    max_non_primary_replicants_to_load: int
    decommissioning_max_percent_of_max_segments_to_move: int
    smart: bool = False
    balancer_compute_threads: int = 1

    def max_segments_to_move_in(self, segments_in_tier: int) -> int:
        """A tier's ``maxSegmentsToMove`` (drains and balancing moves together): with smart loading
        :func:`compute_max_segments_to_move` of the replicas loaded or queued on the tier's historicals,
        else the configured value.

        >>> DynamicConfig().effective(1_000, 2).max_segments_to_move_in(80_000)
        10000
        >>> DynamicConfig(smart_segment_loading=False).effective(1_000, 2).max_segments_to_move_in(80_000)
        100
        """
        if not self.smart:
            return self.max_segments_to_move
        return compute_max_segments_to_move(segments_in_tier, self.balancer_compute_threads)

    def max_drains_in(self, max_segments_to_move: int) -> int:
        """Of a tier's moves, how many may drain decommissioning servers:
        ``ceil(maxSegmentsToMove * decommissioningMaxPercentOfMaxSegmentsToMove / 100)`` (Druid 27's
        ``BalanceSegments``; smart loading: all of them, as Druid 28 and later, which drain first).

        >>> DynamicConfig(smart_segment_loading=False, max_segments_to_move=3,
        ...               decommissioning_max_percent_of_max_segments_to_move=60).effective(0, 0).max_drains_in(3)
        2
        """
        return math.ceil(max_segments_to_move * self.decommissioning_max_percent_of_max_segments_to_move / 100)


@dataclass(frozen=True, slots=True)
class DynamicConfig:
    """The coordinator dynamic configuration; every field validated, ``decommissioning_nodes`` sorted and unique."""

    millis_to_wait_before_deleting: int = 900_000
    max_segments_to_move: int = 100
    replication_throttle_limit: int = 500
    max_segments_in_node_loading_queue: int = 500
    pause_coordination: bool = False
    decommissioning_nodes: tuple[str, ...] = ()
    smart_segment_loading: bool = True
    replicate_after_load_timeout: bool = False
    use_round_robin_segment_assignment: bool = True
    max_non_primary_replicants_to_load: int = JAVA_INT_MAX
    decommissioning_max_percent_of_max_segments_to_move: int = 70
    loading_min_percent: int = 70
    decommissioning_min_percent: int = 10
    decommissioning_max_percent: int = 70
    balancing_min_percent: int = 20
    num_best_servers_log_base: float = 5

    def __post_init__(self) -> None:
        for key, attr, kind in _KEYS:
            value = getattr(self, attr)
            if kind == "int":
                read_int(value, key, ConfigError)
            elif kind == "long":
                read_int(value, key, ConfigError, maximum=JAVA_LONG_MAX)
            elif kind == "percent":
                read_int(value, key, ConfigError, maximum=100)
            elif kind == "bool":
                read_bool(value, key, ConfigError)
            elif kind == "nodes":
                object.__setattr__(self, attr, _read_nodes(value, key))
            else:
                _check_base(value, key)
        mins = (self.loading_min_percent, self.decommissioning_min_percent, self.balancing_min_percent)
        if sum(mins) > 100:
            raise ConfigError(
                "loadingMinPercent + decommissioningMinPercent + balancingMinPercent: "
                f"{' + '.join(map(str, mins))} = {sum(mins)} exceeds 100"
            )
        if self.decommissioning_min_percent > self.decommissioning_max_percent:
            raise ConfigError(
                f"decommissioningMinPercent: {self.decommissioning_min_percent} exceeds "
                f"decommissioningMaxPercent {self.decommissioning_max_percent}"
            )

    @staticmethod
    def parse(obj: object) -> DynamicConfig:
        """Druid's dynamic config JSON; absent or null keys take Druid's defaults."""
        return DynamicConfig().updated(obj)

    def updated(self, obj: object) -> DynamicConfig:
        """This config with the keys ``obj`` sets (non-null) replaced, as Druid merges a POSTed config."""
        if not isinstance(obj, Mapping):
            raise ConfigError(f"dynamic config: expected a JSON object, got {obj!r}")
        changes: dict[str, Any] = {}
        for key, value in obj.items():
            if key in _BY_JSON:
                if value is not None:
                    changes[_BY_JSON[key][0]] = value
            elif key not in IGNORED_KEYS:
                known = sorted([*_BY_JSON, *IGNORED_KEYS])
                close = difflib.get_close_matches(str(key), known, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ConfigError(f"{key}: unknown coordinator dynamic configuration key{hint}")
        return replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        """Druid's keys (and seed 004's) with their values; ``decommissioningNodes`` as a sorted list."""
        out: dict[str, Any] = {}
        for key, attr, kind in _KEYS:
            value = getattr(self, attr)
            out[key] = list(value) if kind == "nodes" else value
        return out

    def queue_shares(self) -> QueueShares:
        """Seed 004's per-stage shares of a load queue, as fractions summing to 1.

        Reading of "completed to 100": each stage gets at least its minimum percentage
        (``decommissioningMinPercent``, ``balancingMinPercent``); what the three minimums leave
        below 100 goes to loading, the stage that makes data available. So loading gets
        ``100 - decommissioningMinPercent - balancingMinPercent`` percent, never less than
        ``loadingMinPercent``. (``decommissioningMaxPercent`` caps decommissioning when it borrows
        capacity the others leave unused; that is the planner's, not a share.)
        """
        decommissioning = self.decommissioning_min_percent
        balancing = self.balancing_min_percent
        return QueueShares(
            loading=(100 - decommissioning - balancing) / 100,
            decommissioning=decommissioning / 100,
            balancing=balancing / 100,
        )

    def effective(self, segment_count: int, server_count: int) -> EffectiveLimits:
        """The limits of one run, as current Druid's ``SegmentLoadingConfig.create(dynamicConfig, numUsedSegments)``
        and ``BalanceSegments``.

        With ``smartSegmentLoading`` (``segment_count`` is the number of used segments):

        - ``replication_throttle_limit = max(100, segment_count * 2 // 100)`` (2 %, at least 100);
        - ``balancer_compute_threads`` = :func:`compute_num_balancer_threads` of ``segment_count``;
        - ``maxSegmentsToMove`` per tier: :meth:`EffectiveLimits.max_segments_to_move_in` (at least 100, at
          most 12.5 % of the replicas on the tier's historicals); ``max_segments_to_move`` holds the value for
          a tier holding ``segment_count`` replicas;
        - ``max_segments_in_node_loading_queue = 0`` (unlimited);
        - ``use_round_robin = True``;
        - ``max_non_primary_replicants_to_load = 2147483647`` (no limit);
        - ``decommissioning_max_percent_of_max_segments_to_move = 100`` (drains first, up to the whole
          ``maxSegmentsToMove``: Druid 28 retired the key, and smart loading behaves as it does).

        Without it, the configured values (``decommissioningMaxPercentOfMaxSegmentsToMove`` honoured as Druid
        27 did). ``server_count`` does not enter Druid's formula; it is checked (non-negative) and otherwise
        unused.

        Druid 28 took the cluster-wide count of replicas on historicals for every tier; here each tier's own
        count is used (a small tier is not given a large tier's budget). Druid's newest releases compute the
        cap from the coordinator period instead (``SegmentToMoveCalculator``); this follows
        ``SegmentLoadingConfig.computeMaxSegmentsToMove``.
        """
        read_int(segment_count, "segment_count", ConfigError, maximum=JAVA_LONG_MAX)
        read_int(server_count, "server_count", ConfigError, maximum=JAVA_LONG_MAX)
        if not self.smart_segment_loading:
            return EffectiveLimits(
                replication_throttle_limit=self.replication_throttle_limit,
                max_segments_to_move=self.max_segments_to_move,
                max_segments_in_node_loading_queue=self.max_segments_in_node_loading_queue,
                use_round_robin=self.use_round_robin_segment_assignment,
                max_non_primary_replicants_to_load=self.max_non_primary_replicants_to_load,
                decommissioning_max_percent_of_max_segments_to_move=(
                    self.decommissioning_max_percent_of_max_segments_to_move
                ),
            )
        throttle = max(SMART_MIN_REPLICATION_THROTTLE, segment_count * SMART_THROTTLE_PERCENT // 100)
        threads = compute_num_balancer_threads(segment_count)
        return EffectiveLimits(
            replication_throttle_limit=throttle,
            max_segments_to_move=compute_max_segments_to_move(segment_count, threads),
            max_segments_in_node_loading_queue=0,
            use_round_robin=True,
            max_non_primary_replicants_to_load=JAVA_INT_MAX,
            decommissioning_max_percent_of_max_segments_to_move=100,
            smart=True,
            balancer_compute_threads=threads,
        )


def _read_nodes(value: object, key: str) -> tuple[str, ...]:
    """Druid's ``parseJsonStringOrArray``: a JSON array of names, or one string of comma-separated names."""
    if isinstance(value, str):
        return tuple(sorted({name.strip() for name in value.split(",") if name.strip()}))
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"{key}: expected a list of server names or a comma-separated string, got {value!r}")
    return tuple(sorted({read_str(name, f"{key}[{i}]", ConfigError) for i, name in enumerate(value)}))


def _check_base(value: object, key: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{key}: expected a number, got {value!r}")
    if not math.isfinite(value) or value <= 1:
        raise ConfigError(f"{key}: must be a finite number above 1, got {value!r}")
