"""Benchmark: the worker's reader of ``snapshots`` with librdkafka's prefetch defaults and with its bound.

A worker starts a :class:`~streaming.service.timeline_snapshots.SnapshotTail` that reads ``snapshots`` from the
beginning and keeps the last record per key. Until compaction runs the topic holds every snapshot ever written.
Here ``--records`` records of ``--kb`` kB per partition (3 partitions, incompressible values) are written. Then
each round starts a fresh process that reads them to the end with the tail: once with librdkafka's defaults
(100,000 messages per partition, 64 MB), once with ``timeline_snapshots.PREFETCH``, alternating. Printed per
round: the time to read to the end and the process's peak RSS (``VmHWM``). Then the medians and their ratio
(bounded / defaults), all measured in the same run.

Run: ``.venv/bin/python -m bench.snapshot_reader [--records 40] [--kb 400] [--rounds 3]`` (its own local broker,
or ``$SEGCOORD_BOOTSTRAP``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from events.topics import SNAPSHOTS, Topics

DEFAULTS = {"queued.min.messages": 100_000, "queued.max.messages.kbytes": 65_536}  # librdkafka's own


def peak_rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def child(bootstrap: str, prefix: str, mode: str, last: dict[int, bytes]) -> None:
    """Read ``snapshots`` to the end with a tail; print seconds and peak RSS."""
    from streaming.service.timeline_snapshots import SnapshotTail

    began = time.perf_counter()
    tail = SnapshotTail(bootstrap, Topics(prefix), poll_s=0.05, extra=DEFAULTS if mode == "defaults" else {})
    tail.start()
    want = {f"timeline/{p}".encode(): v for p, v in last.items()}
    while True:
        with tail._lock:
            if all(tail._latest.get(k) == v for k, v in want.items()):
                break
        time.sleep(0.01)
    took = time.perf_counter() - began
    tail.close()
    print(f"{took:.3f} {peak_rss_kb()}")


def marker(p: int, i: int, kb: int) -> bytes:
    """The value of record ``i`` of partition ``p``: incompressible, ``kb`` kB, its last bytes say which it is."""
    return os.urandom(kb * 1024 - 16) + f"{p:04d}{i:012d}".encode()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=40, help="records per partition")
    ap.add_argument("--kb", type=int, default=400, help="size of a record")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child", nargs=3, metavar=("BOOTSTRAP", "PREFIX", "MODE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        last = {p: bytes.fromhex(sys.stdin.readline().strip()) for p in range(3)}
        child(*args.child, last)
        return

    from confluent_kafka import Producer

    from bench.broker import bench_broker
    from streaming.admin import create_topics

    with tempfile.TemporaryDirectory() as tmp, bench_broker(Path(tmp)) as bootstrap:
        prefix = f"bsnap{uuid.uuid4().hex[:8]}."
        topics = Topics(prefix)
        create_topics(bootstrap, topics, partitions=3)
        producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 2_000_000, "linger.ms": 5})
        last: dict[int, bytes] = {}
        for i in range(args.records):
            for p in range(3):
                last[p] = marker(p, i, args.kb)
                producer.produce(topics.name(SNAPSHOTS), key=f"timeline/{p}".encode(), value=last[p], partition=p)
            producer.flush(60)
        print(f"snapshots: 3 partitions x {args.records} records of {args.kb} kB "
              f"({3 * args.records * args.kb / 1024:.0f} MB)")
        results: dict[str, list[tuple[float, int]]] = {"defaults": [], "bounded": []}
        stdin = "".join(last[p].hex() + "\n" for p in range(3))
        for r in range(args.rounds):
            for mode in ("defaults", "bounded"):
                out = subprocess.run([sys.executable, "-m", "bench.snapshot_reader", "--child", bootstrap, prefix,
                                      mode], input=stdin, capture_output=True, text=True, check=True, timeout=600)
                took, rss = out.stdout.split()[-2:]
                results[mode].append((float(took), int(rss)))
                print(f"round {r + 1} {mode:8}: read to the end in {float(took):.2f} s, "
                      f"peak RSS {int(rss) / 1024:.0f} MB")
        med = {m: (statistics.median(t for t, _ in v), statistics.median(k for _, k in v)) for m, v in results.items()}
        print(f"median: defaults {med['defaults'][0]:.2f} s, {med['defaults'][1] / 1024:.0f} MB; bounded "
              f"{med['bounded'][0]:.2f} s, {med['bounded'][1] / 1024:.0f} MB; ratio bounded/defaults: time "
              f"{med['bounded'][0] / med['defaults'][0]:.2f}, peak RSS {med['bounded'][1] / med['defaults'][1]:.2f}")


if __name__ == "__main__":
    main()
