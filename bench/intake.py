"""Benchmark: the worker's intake of ``segments`` with two readers in one process, in CPU seconds.

A leading ``segcoord run`` worker reads each ``segments`` record twice: its Faust consumer (timeline and upsert
agents) and the planner feed's own consumer. Each builds an :class:`~streaming.service.intake.InputRecord` per
record and decodes it, sharing envelopes through :mod:`streaming.service.shared_envelopes` as ``segcoord run``
configures it. Here both readers run in this process, in batches of 2000 (the worker's fetch size), the second
``--lag`` records behind the first (the planner feed catching up runs tens of thousands behind; at a paced rate a
batch or two). No broker, no agents: only what the two readers' intake costs.

Baseline in the same run: one reader alone (records built and decoded once each, sharing off), the intake a
process with one consumer of ``segments`` would have. Printed: CPU seconds of each (best of ``--rounds``), the
two readers' cost as a multiple of the one reader's (2.0: no decode shared; 1.0 would be free sharing), and the
table's hits and misses.

Run: ``python -m bench.intake [--segments 50000] [--lag 2000 8000] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import time

from bench.service import segment_events
from events import encode
from streaming.service.intake import InputRecord
from streaming.service.shared_envelopes import SHARED

TOPIC = "bench.segments"
BATCH = 2000


def _read(values: list[bytes], start: int) -> None:
    """One reader's batch from ``start``: a record per value (a consumer's own copy of the bytes), each decoded."""
    for r in [InputRecord(TOPIC, 0, o, b"k", bytes(values[o]), 1) for o in range(start, min(len(values),
                                                                                        start + BATCH))]:
        r.decoded()


def one_reader(values: list[bytes]) -> float:
    SHARED.configure({})
    cpu = time.process_time()
    for start in range(0, len(values), BATCH):
        _read(values, start)
    return time.process_time() - cpu


def two_readers(values: list[bytes], lag: int) -> tuple[float, int, int]:
    """CPU seconds, hits and misses of the leader and a reader ``lag`` records behind it (sharing on)."""
    SHARED.configure({TOPIC: 2})
    hits, misses = SHARED.hits, SHARED.misses
    cpu = time.process_time()
    lead = follow = 0
    n = len(values)
    while follow < n:
        if lead < n:
            _read(values, lead)
            lead += BATCH
        if lead - follow > lag or lead >= n:
            _read(values, follow)
            follow += BATCH
    spent = time.process_time() - cpu
    SHARED.configure({})
    return spent, SHARED.hits - hits, SHARED.misses - misses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--segments", type=int, default=50_000)
    parser.add_argument("--lag", type=int, nargs="+", default=[2000, 8000])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    values = [encode(e) for e in segment_events(args.segments)]
    base = min(one_reader(values) for _ in range(args.rounds))
    print(f"one reader (baseline): {base:.3f} CPU s for {len(values)} records "
          f"({base / len(values) * 1e6:.1f} us per record)")
    for lag in args.lag:
        runs = [two_readers(values, lag) for _ in range(args.rounds)]
        spent, hits, misses = min(runs)
        print(f"two readers, the second {lag} records behind: {spent:.3f} CPU s = {spent / base:.2f}x one reader; "
              f"{hits} hits, {misses} misses")


if __name__ == "__main__":
    main()
