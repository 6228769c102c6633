"""The Spark Structured Streaming balancer: placement events in, move commands out, on Kafka.

    segments + cluster + commands ──▶ groupBy(one key)
      .transformWithStateInPandas(BalancerProcessor)  [RocksDB state: the placement codec's entries]
      ──▶ foreachBatch: LoadSegment / DropSegment on ``commands``

Every input record goes to the one group, which folds it with the core's placement
fold and balances every configured tier (``--tier``, default ``_default_tier``) in
turn: an announce names a server, not its tier, and the tier of a server is state
(its ``ServerJoined``), so the records cannot be split by tier before the fold (see
:mod:`streaming.balancer.placement`, "Keying").

**Exactly-once effect: deterministic ids, idempotent consumers** (not a
transactional producer). Command ids are a pure function of (tier, balancing run,
move index) (:mod:`streaming.balancer.commands`; the run number is the batch id without
the batches that cannot change the balance), and a batch re-executed after a crash
reads the same offsets from the same state version, so it re-sends byte-identical
commands; every consumer of ``commands`` already drops seen ids (the historical by
command id, the planner agent by event id) and a move's drop waits for its target's
announce. This keeps readers on the plain ``read_uncommitted`` consumers the rest of
the system uses, works with Spark's ordinary output path, and costs at most one
duplicated batch of commands per crash. (A transactional producer keyed by the batch
id would also need every reader switched to ``read_committed`` and would still
re-send the batch after a crash between commit of the transaction and of Spark's
batch.) Commands are written from ``foreachBatch`` on the driver with the
idempotent producer and flushed before Spark commits the batch.

``SEGCOORD_BALANCER_CRASH_AFTER_BATCH=N`` (tests only) kills the process with
SIGKILL right after batch N's commands are flushed and before Spark commits it: the
worst moment for duplicates.

Submit to a cluster unchanged: ``spark-submit --jars <the four Kafka jars> streaming/balancer/job.py
--bootstrap HOST:PORT --checkpoint DIR`` (see docs/spark-balancer.md).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from events.topics import CLUSTER, COMMANDS, SEGMENTS, Topics
from streaming import credentials
from streaming.producer import EventProducer

CRASH_ENV = "SEGCOORD_BALANCER_CRASH_AFTER_BATCH"
DEFAULT_TIERS = ("_default_tier",)
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"


def start(spark: Any, bootstrap: str, topics: Topics, checkpoint: Path, *, tiers: Sequence[str] = DEFAULT_TIERS,
          trigger_seconds: float = 1.0, available_now: bool = False, metrics_path: Path | None = None,
          compute_cost: bool = False, load_timeout_ms: int | None = None) -> Any:
    """Start the balancer query on ``spark``; returns the StreamingQuery."""
    from pyspark.sql import functions as F

    from streaming.balancer.state import GROUP, OUTPUT_SCHEMA, BalancerProcessor

    security = credentials.kafka_security()  # from the environment or a config file, never the command line
    security.check_bootstrap(bootstrap)
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", ",".join(topics.name(t) for t in (SEGMENTS, CLUSTER, COMMANDS)))
        .option("startingOffsets", "earliest")
    )
    for name, value in security.java().items():
        reader = reader.option(f"kafka.{name}", value)
    source = reader.load()
    rows = source.select(
        F.lit(GROUP).alias("group"),
        "topic", "partition", "offset", F.col("value").cast("string").alias("value"),
    )
    scope = str(Path(checkpoint).resolve())
    key = credentials.publish_key()  # the seal check (docs/security.md): only sealed publishes and marks count
    processor = BalancerProcessor(scope, tiers, compute_cost=compute_cost, publish_key=key) \
        if load_timeout_ms is None else BalancerProcessor(scope, tiers, load_timeout_ms, compute_cost, key)
    out = rows.groupBy("group").transformWithStateInPandas(
        statefulProcessor=processor, outputStructType=OUTPUT_SCHEMA, outputMode="Append", timeMode="None")
    sink = CommandSink(bootstrap, topics, metrics_path)
    writer = out.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
    writer = writer.trigger(availableNow=True) if available_now else \
        writer.trigger(processingTime=f"{max(trigger_seconds, 0.1)} seconds")
    # One shuffle partition: there is one group, so a batch is one stateful task on one Python worker. With
    # more, each batch also runs a task per empty partition, each on a Python worker from Spark's pool; which
    # worker gets the group's task then varies from batch to batch, and a worker without the live placement
    # restores it from the maps (time proportional to the cluster, streaming.balancer.state). The query
    # copies the session's settings when it starts, and a checkpoint keeps the number it was started with.
    previous = spark.conf.get(SHUFFLE_PARTITIONS)
    spark.conf.set(SHUFFLE_PARTITIONS, "1")
    try:
        return writer.queryName(f"balancer-{topics.prefix}").start()
    finally:
        spark.conf.set(SHUFFLE_PARTITIONS, previous)


class CommandSink:
    """foreachBatch: the batch's commands, in (tier, sequence) order, on ``commands``; summaries to a file."""

    def __init__(self, bootstrap: str, topics: Topics, metrics_path: Path | None) -> None:
        self.bootstrap, self.topics, self.metrics_path = bootstrap, topics, metrics_path
        self._producer: EventProducer | None = None

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = sorted(df.collect(), key=lambda r: (r["tier"], r["seq"]))
        if self._producer is None:
            self._producer = EventProducer(self.bootstrap, self.topics)
        topic = self.topics.name(COMMANDS)
        for r in rows:
            if r["kind"] == "command":
                self._producer.send_raw(topic, r["key"].encode(), r["value"].encode())
        self._producer.flush()
        if self.metrics_path is not None:
            with self.metrics_path.open("ab") as f:
                for r in rows:
                    if r["kind"] == "summary":
                        summary = orjson.loads(r["value"])
                        summary["commandIds"] = [orjson.loads(c["value"])["event_id"] for c in rows
                                                 if c["kind"] == "command" and c["tier"] == r["tier"]]
                        f.write(orjson.dumps(summary) + b"\n")
        if os.environ.get(CRASH_ENV) == str(batch_id):
            os.kill(os.getpid(), signal.SIGKILL)  # after the write, before Spark commits the batch


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="segcoord balancer run", description="the Spark Structured Streaming balancer")
    add_arguments(p)
    return p


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap", help="HOST:PORT (default $SEGCOORD_BOOTSTRAP, else the local broker)")
    p.add_argument("--topic-prefix", "--prefix", dest="prefix", default=None,
                   help="topic name prefix (default $SEGCOORD_TOPIC_PREFIX or 'segcoord.')")
    p.add_argument("--tier", action="append", dest="tiers", metavar="TIER",
                   help="a tier to balance (repeat; default _default_tier)")
    p.add_argument("--checkpoint", default=None, help="checkpoint directory (default $SEGCOORD_HOME/balancer/<prefix>)")
    p.add_argument("--trigger-seconds", type=float, default=1.0, help="micro-batch interval (default 1)")
    p.add_argument("--available-now", action="store_true", help="process what is on the topics, then exit")
    p.add_argument("--metrics", default=None, help="append one JSON line per tier and batch to this file")
    p.add_argument("--report-cost", action="store_true", help="compute the tier's total cost per batch (slow)")
    p.add_argument("--master", default=None, help="Spark master (default local[2]; under spark-submit, its own)")


def run(args: argparse.Namespace, bootstrap: str) -> int:
    """Run the job until it ends (``--available-now``) or is interrupted."""
    from streaming import config
    from streaming.spark import local_spark

    topics = Topics(args.prefix) if args.prefix else config.topics()
    checkpoint = (Path(args.checkpoint) if args.checkpoint
                  else config.home_dir() / "balancer" / topics.prefix.rstrip("."))
    if os.environ.get("PYSPARK_GATEWAY_PORT") and not args.master:  # under spark-submit: its master and jars
        from pyspark.sql import SparkSession

        from streaming.spark import STATE_STORE_CONF

        builder = (SparkSession.builder.appName("segcoord-balancer")
                   .config("spark.ui.showConsoleProgress", "false")
                   .config("spark.sql.session.timeZone", "UTC"))
        for key, value in STATE_STORE_CONF.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
    else:
        spark = local_spark("segcoord-balancer", **({"master": args.master} if args.master else {}))
    query = start(spark, bootstrap, topics, checkpoint, tiers=args.tiers or DEFAULT_TIERS,
                  trigger_seconds=args.trigger_seconds, available_now=args.available_now,
                  metrics_path=Path(args.metrics) if args.metrics else None, compute_cost=args.report_cost)
    print(f"segcoord balancer: tiers {', '.join(args.tiers or DEFAULT_TIERS)} on {bootstrap}, topics "
          f"{topics.prefix}*, checkpoint {checkpoint}", flush=True)
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    error = query.exception()
    if error is not None:
        print(f"segcoord balancer: the query failed: {error}", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """spark-submit entry point: ``spark-submit ... streaming/balancer/job.py --bootstrap HOST:PORT``."""
    args = build_parser().parse_args(argv)
    bootstrap = args.bootstrap or os.environ.get("SEGCOORD_BOOTSTRAP")
    if not bootstrap:
        print("pass --bootstrap HOST:PORT or set SEGCOORD_BOOTSTRAP", file=sys.stderr)
        return 2
    return run(args, bootstrap)


if __name__ == "__main__":
    sys.exit(main())
