"""Benchmark: the cost of the bounded applied-id window in an agent store's commit (issue 16).

An agent commits batches of fresh input-event ids with its offsets. Measured on a real RocksDB store:

- **baseline**: the layout before the window: one ``applied/<id>`` key per id and the offsets, one write batch
  per commit (written here with the same rocksdict options, as the store wrote it);
- **windowed**: :class:`streaming.service.state.AgentStateStore` with a window of ``--window`` ids: per id the
  ``applied`` key, its time index entry and a duplicate check, and per commit the expiry of the oldest ids in
  the same write batch.

Also the duplicate check of ids never seen (the common case: one get before, one per live generation now).
Printed: ids/s of each, the windowed/baseline ratios, and the stored id count at the end (flat at the window for
the windowed store, growing with the run for the baseline).

Run: ``.venv/bin/python -m bench.applied_window [--batches 400] [--batch 500] [--window 50000]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from rocksdict import Rdict, WriteBatch

from streaming.service.state import APPLIED_PREFIX, AgentStateStore, AppliedWindow, _options

LOOKUPS = 100_000


def baseline(path: Path, batches: int, size: int) -> tuple[float, int, float]:
    db = Rdict(str(path), _options())
    began = time.perf_counter()
    for b in range(batches):
        write = WriteBatch(raw_mode=True)
        for i in range(size):
            write.put(APPLIED_PREFIX + f"{b:08d}-{i:05d}-0123456789abcdef".encode(), b"")
        write.put(b"offset/t\x000", str((b + 1) * size).encode())
        db.write(write)
    seconds = time.perf_counter() - began
    count = sum(1 for _ in db.keys(from_key=APPLIED_PREFIX) if _.startswith(APPLIED_PREFIX))
    began = time.perf_counter()
    for i in range(LOOKUPS):  # the common case: a fresh id, not there
        db.get(APPLIED_PREFIX + f"fresh-{i}".encode())
    lookup = LOOKUPS / (time.perf_counter() - began)
    db.close()
    return batches * size / seconds, count, lookup


def windowed(path: Path, batches: int, size: int, window: int) -> tuple[float, int, float]:
    with AgentStateStore(path, "bench/1", AppliedWindow(max_ids=window)) as store:
        began = time.perf_counter()
        for b in range(batches):
            batch = store.batch()
            for i in range(size):
                batch.mark_applied(f"{b:08d}-{i:05d}-0123456789abcdef", 1_000_000 + b)
            batch.set_offset("t", 0, (b + 1) * size)
            store.commit(batch)
        seconds = time.perf_counter() - began
        began = time.perf_counter()
        for i in range(LOOKUPS):
            store.applied(f"fresh-{i}")
        lookup = LOOKUPS / (time.perf_counter() - began)
        return batches * size / seconds, len(store.scan_raw(APPLIED_PREFIX)), lookup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=400)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--window", type=int, default=50_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base_rate, base_count, base_lookup = baseline(Path(tmp) / "base", args.batches, args.batch)
        win_rate, win_count, win_lookup = windowed(Path(tmp) / "win", args.batches, args.batch, args.window)
    print(f"applied ids committed: {args.batches} batches x {args.batch}")
    print(f"  baseline (unbounded set):  {base_rate:12,.0f} ids/s, {base_count:,} ids stored at the end")
    print(f"  windowed ({args.window:,} ids):   {win_rate:12,.0f} ids/s, {win_count:,} ids stored at the end")
    print(f"  duplicate checks of fresh ids: baseline {base_lookup:,.0f}/s, windowed {win_lookup:,.0f}/s")
    print(f"  windowed / baseline: {win_rate / base_rate:.2f}x commit throughput, "
          f"{win_lookup / base_lookup:.2f}x duplicate checks, {win_count / base_count:.2f}x stored ids")


if __name__ == "__main__":
    main()
