"""What fencing a deposed planner would cost with Kafka transactions, against the epoch rule we use.

The planner sends each batch's commands and flushes before it commits its store. Two ways to fence an old
leader (docs/workers.md, "Fencing a deposed leader"):

- **epochs** (what the planner does): the idempotent producer as today (``acks=all``), one flush per batch;
  the epoch is a field of each command, and the fold voids older epochs. Its cost is an int per command.
- **transactions**: one ``transactional.id`` for the planner role; each batch is ``begin_transaction``,
  the sends, ``commit_transaction`` (the broker writes commit markers to every partition touched).

Both send the same batches (``--commands`` command-sized messages over the partitions of one topic),
interleaved batch by batch so load on the machine hits both alike; the figures are each batch's latency
from its first send to its flush or commit returning. The ratio (transactions / epochs) is the figure to use.

    python -m bench.fencing [--batches 300] [--commands 8]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer

from bench.broker import bench_broker
from streaming import credentials
from streaming.admin import create_topic

PAYLOAD = b"x" * 600  # about the size of an encoded load_segment


def run(bootstrap: str, batches: int, commands: int) -> dict[str, list[float]]:
    topic = f"bench-fencing-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=3)
    base = {**credentials.client_config(bootstrap), "acks": "all", "linger.ms": 0}
    plain = Producer({**base, "enable.idempotence": True})
    txn = Producer({**base, "transactional.id": f"bench-planner-{uuid.uuid4().hex[:8]}"})
    txn.init_transactions(30)
    for warm in (plain, txn):  # metadata and connections first
        if warm is txn:
            txn.begin_transaction()
        warm.produce(topic, key=b"w", value=PAYLOAD)
        if warm is txn:
            txn.commit_transaction(30)
        else:
            warm.flush(30)
    out: dict[str, list[float]] = {"epochs": [], "transactions": []}
    for b in range(batches):
        keys = [f"h{(b * commands + i) % 10}".encode() for i in range(commands)]
        began = time.perf_counter()
        for k in keys:
            plain.produce(topic, key=k, value=PAYLOAD)
        plain.flush(30)
        out["epochs"].append(time.perf_counter() - began)
        began = time.perf_counter()
        txn.begin_transaction()
        for k in keys:
            txn.produce(topic, key=k, value=PAYLOAD)
        txn.commit_transaction(30)
        out["transactions"].append(time.perf_counter() - began)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, default=300)
    ap.add_argument("--commands", type=int, default=8, help="commands per planner batch")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as work, bench_broker(Path(work)) as bootstrap:
        got = run(bootstrap, args.batches, args.commands)
    base = got["epochs"]
    print(f"{args.batches} batches of {args.commands} commands, interleaved")
    for name, xs in got.items():
        q = statistics.quantiles(xs, n=100)
        print(f"{name:13s} per batch: p50 {q[49] * 1000:7.2f} ms  p99 {q[98] * 1000:7.2f} ms  "
              f"mean {statistics.fmean(xs) * 1000:7.2f} ms  ratio to epochs (mean) "
              f"{statistics.fmean(xs) / statistics.fmean(base):.2f}")


if __name__ == "__main__":
    main()
