"""Benchmark: the planner's stored settled command ids with and without the settled-id window (issue 16).

A retention workload through the pure placement fold and planner, stored as the planner agent stores it (the
codec's changed entries applied to a dict after every step; settled ids looked up there, as in RocksDB): every
step (``--step-ms`` of event time) publishes one segment, which the planner loads on two of three servers; the
servers announce it (answering the loads); the segment published ``--retain`` steps earlier is marked unused,
the planner drops its copies, the servers unannounce them. Two runs over the same steps: one that never
forgets a settled id (the layout before the window) and one with the window (``--window-ms``, ``--window-segments``).

Printed: settled ids stored after every quarter of the run for both, the tombstones kept, whether both runs
decided the same commands under the same ids (they must), and the windowed run's steps/s as a ratio to the
unbounded one measured in the same process, interleaved (the figure that counts on a shared machine).

Run: ``.venv/bin/python -m bench.settled_window [--steps 20000] [--retain 200] [--step-ms 60000]
[--window-ms 604800000] [--window-segments 100000]``.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field

from coordinator.placement import codec
from coordinator.placement.settled import DEFAULT_MAX_AGE_MS, DEFAULT_MAX_SEGMENTS, SettledWindow
from coordinator.placement.state import PlacementState
from coordinator.planner.planner import plan_state
from events import Interval, SegmentDescriptor
from events.cluster import ServerJoined
from events.envelope import Envelope
from events.registry import Event
from events.schema import Instant
from events.segments import SegmentAnnounced, SegmentsMarkedUnused, SegmentsPublished, SegmentUnannounced

T0 = 1_767_225_600_000
H = 3_600_000
SERVERS = ("h1", "h2", "h3")


@dataclass
class Store:
    """What the planner agent keeps on disk: the codec's entries, settled ids with their segment's index."""

    entries: dict[tuple[str, str], bytes] = field(default_factory=dict)
    settled: dict[str, str] = field(default_factory=dict)  # command id -> segment id text
    by_segment: dict[str, set[str]] = field(default_factory=dict)

    def apply(self, state: PlacementState) -> None:
        for family, key, value in codec.changed(state):
            if family == "ans":
                old = self.settled.pop(key, None)
                if old is not None:
                    self.by_segment[old].discard(key)
                if value is not None:
                    self.settled[key] = value.decode()
                    self.by_segment.setdefault(value.decode(), set()).add(key)
            elif value is None:
                self.entries.pop((family, key), None)
            else:
                self.entries[(family, key)] = value

    def attach(self, state: PlacementState) -> None:
        state.settled_before = self.settled.__contains__
        state.settled_of = lambda text: sorted(self.by_segment.get(text, ()))


def segment(i: int) -> SegmentDescriptor:
    return SegmentDescriptor("wiki", Interval(T0 + i * H, T0 + (i + 1) * H), "v1", 0, 1000)


def run(steps: int, retain: int, step_ms: int, window: SettledWindow | None,
        samples: int = 4) -> tuple[float, list[tuple[int, int, int]], list[str]]:
    """Seconds taken, (step, settled ids stored, tombstones) every ``steps / samples`` steps, every command id."""
    st, store = PlacementState(window=window), Store()
    store.attach(st)
    ids: list[str] = []
    n = 0

    def fold(event: Event, at: int, key: str, cause: str | None = None) -> set[str]:
        nonlocal n
        n += 1
        touched = st.evolve(Envelope(event, f"e{n}", Instant(at), key, cause))
        return {str(s) for s in touched.segments}

    for name in SERVERS:
        fold(ServerJoined(server=name, tier="_default_tier", max_size_bytes=10**12), T0, name)
    out: list[tuple[int, int, int]] = []
    began = time.perf_counter()
    for i in range(steps):
        now = T0 + (i + 1) * step_ms
        seg = segment(i)
        fold(SegmentsPublished(task_id=f"t{i}", segments=(seg,)), now, "wiki")
        if i >= retain:
            fold(SegmentsMarkedUnused(segment_ids=(str(segment(i - retain).id),), reason="retention"), now, "wiki")
        scope = {seg.id} | ({segment(i - retain).id} if i >= retain else set())
        plan = plan_state(st, now, i + 1, T0, balance=False, scope=scope, mark_overshadowed=False)
        for cmd in plan.commands:  # every decision answered at once, as a historical would
            assert cmd.command_id is not None
            ids.append(cmd.command_id)
            if cmd.type == "load":
                fold(SegmentAnnounced(server=cmd.server, segment=st.segments[cmd.segment]), now, "wiki",
                     cmd.command_id)
            elif cmd.type == "drop":
                fold(SegmentUnannounced(server=cmd.server, segment_id=str(cmd.segment)), now, "wiki",
                     cmd.command_id)
        store.apply(st)
        if (i + 1) % max(1, steps // samples) == 0:
            out.append((i + 1, len(store.settled), len(st.gone)))
    return time.perf_counter() - began, out, ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--retain", type=int, default=200)
    parser.add_argument("--step-ms", type=int, default=60_000)
    parser.add_argument("--window-ms", type=int, default=DEFAULT_MAX_AGE_MS)
    parser.add_argument("--window-segments", type=int, default=DEFAULT_MAX_SEGMENTS)
    args = parser.parse_args()
    window = SettledWindow(args.window_ms, args.window_segments)
    # interleaved (unbounded, windowed, windowed, unbounded): the first run in a process pays the warm-up
    t_all, all_kept, all_ids = run(args.steps, args.retain, args.step_ms, None)
    t_win, win_kept, win_ids = run(args.steps, args.retain, args.step_ms, window)
    t_win += run(args.steps, args.retain, args.step_ms, window)[0]
    t_all += run(args.steps, args.retain, args.step_ms, None)[0]
    print(f"{args.steps:,} steps ({args.step_ms / 60_000:g} min of event time each: publish, load x2, "
          f"retain {args.retain}, drop x2); window {args.window_ms / H:g} h / {args.window_segments:,} segments")
    print("  after step   settled stored (unbounded)   settled stored (windowed)   tombstones")
    for (step, a, _), (_, w, g) in zip(all_kept, win_kept, strict=True):
        print(f"  {step:10,}   {a:26,}   {w:25,}   {g:10,}")
    print(f"  same commands under the same ids: {all_ids == win_ids} ({len(all_ids):,} commands)")
    print(f"  steps/s (two runs each): unbounded {2 * args.steps / t_all:,.0f}, windowed {2 * args.steps / t_win:,.0f} "
          f"(windowed/unbounded {t_all / t_win:.2f})")


if __name__ == "__main__":
    main()
