"""How long the placement fold remembers settled command ids: a window over *gone* segments.

A settled id (a command answered, refused, cancelled, timed out, or a move abandoned) is kept for two
reasons, and only for them:

1. **Fresh ids.** ``Projected.fresh_command_id(kind, server, ..., segment)`` counts ``n`` up past every
   known id of that content; forgetting one could hand a new command an id that was sent before (a
   historical that answered it would then ignore the new one).
2. **Late copies.** A command read back on ``commands`` after its answer (or a move's drop half after
   the refusal of its load) must not enter the queue.

Every settled id belongs to one segment (the command's; an abandoned move's marker to the move's
segment). So the fold keeps a segment's settled ids **while the segment is known** and for a window
after it is forgotten (unused, held by no server, nothing in flight: ``PlacementState._forget``). A
forgotten segment leaves a *tombstone* (its id text, the event time it went); the oldest tombstone
expires when it is older than :attr:`SettledWindow.max_age_ms` behind the latest event time the fold
applied, or when more than :attr:`SettledWindow.max_segments` tombstones are kept; then the segment's
settled ids are forgotten (the adapters delete them). A segment known again before that (a publish, a
mark used, an announce, a load read back) loses its tombstone and keeps its ids. Ids settled for a
segment the fold does not know are tombstoned at once.

**Why it is safe** (the emitted commands are those of a fold that never forgets, ids included):

- *Fresh ids*: every content a fresh id counts names one segment (``load``, ``move``, ``drop``, ``cancel``
  of server and segment); a segment the planner decides for is known (it plans known segments only), so
  every id of that content is still kept, and the count is the same as without the window.
- *Late copies*: a command and its answer reach the fold within the consumers' lag of each other
  (seconds, minutes after a crash). Records below a partition's stored offset are never read again, so
  an id older than the window can only come back from a replay that the stored offsets already cover:
  by then the segment has been gone for ``max_age_ms`` (7 days by default) of event time.

**The one residual case.** A segment forgotten longer than the window ago and then used again (an
operator marks an old segment used) starts counting its ids from ``n = 0`` again, so its first commands
may repeat ids sent more than a window ago. A receiver that still remembers such an id ignores the
command; it times out after the load timeout and the retry gets the next ``n``.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MAX_AGE_MS = 7 * 24 * 3600 * 1000  # as the agents' applied-id window (streaming/service/state.py)
DEFAULT_MAX_SEGMENTS = 100_000


@dataclass(frozen=True, slots=True)
class SettledWindow:
    """The gone segments whose settled ids are kept: at most ``max_segments``, none gone longer than
    ``max_age_ms`` (event time) before the latest event the fold applied."""

    max_age_ms: int = DEFAULT_MAX_AGE_MS
    max_segments: int = DEFAULT_MAX_SEGMENTS

    def __post_init__(self) -> None:
        if self.max_age_ms < 0 or self.max_segments < 0:
            raise ValueError(f"settled-id window: max_age_ms and max_segments must be >= 0, got {self}")

    def expired(self, gone_at: int, latest: int, kept: int) -> bool:
        """Whether the oldest of ``kept`` tombstones, gone at ``gone_at``, expires at event time ``latest``."""
        return latest - gone_at > self.max_age_ms or kept > self.max_segments


DEFAULT_WINDOW = SettledWindow()  # 7 days of event time, 100,000 gone segments
