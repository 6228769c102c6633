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
``decommissioningMaxPercentOfMaxSegmentsToMove``      70          0..100
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
>>> limits.replication_throttle_limit, limits.max_segments_to_move, limits.max_segments_in_node_loading_queue
(2400, 1000, 0)
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

#: Smart segment loading (Druid 27.0's ``SegmentLoadingConfig.create``): the throttle is this
#: percentage of the used segments, at least ``SMART_MIN_REPLICATION_THROTTLE``; moves are capped.
SMART_THROTTLE_PERCENT = 2
SMART_MIN_REPLICATION_THROTTLE = 100
SMART_MAX_SEGMENTS_TO_MOVE = 1000


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

    ``max_segments_in_node_loading_queue`` 0 means unlimited.
    """

    replication_throttle_limit: int
    max_segments_to_move: int
    max_segments_in_node_loading_queue: int
    use_round_robin: bool
    max_non_primary_replicants_to_load: int
    decommissioning_max_percent_of_max_segments_to_move: int


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
        """The limits of one run, as Druid 27.0's ``SegmentLoadingConfig.create(dynamicConfig, numUsedSegments)``.

        With ``smartSegmentLoading`` (``segment_count`` is the number of used segments):

        - ``replication_throttle_limit = max(100, segment_count * 2 // 100)`` (2 %, at least 100);
        - ``max_segments_to_move = min(1000, replication_throttle_limit)``;
        - ``max_segments_in_node_loading_queue = 0`` (unlimited);
        - ``use_round_robin = True``;
        - ``max_non_primary_replicants_to_load = 2147483647`` (no limit);
        - ``decommissioning_max_percent_of_max_segments_to_move = 100``.

        Without it, the configured values. ``server_count`` does not enter Druid's formula; it is
        checked (non-negative) and otherwise unused.

        Later Druid releases changed this: 28 dropped the cap and computes ``maxSegmentsToMove``
        in ``BalanceSegments`` from the segments on historicals and the balancer threads, and the
        newest uses 5 % for the throttle. 27.0 is the release whose keys this configuration has
        (``maxNonPrimaryReplicantsToLoad`` and ``decommissioningMaxPercentOfMaxSegmentsToMove``
        were removed later), so its formula is the one used.
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
        return EffectiveLimits(
            replication_throttle_limit=throttle,
            max_segments_to_move=min(SMART_MAX_SEGMENTS_TO_MOVE, throttle),
            max_segments_in_node_loading_queue=0,
            use_round_robin=True,
            max_non_primary_replicants_to_load=JAVA_INT_MAX,
            decommissioning_max_percent_of_max_segments_to_move=100,
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
