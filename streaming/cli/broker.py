"""``segcoord kafka``, ``segcoord topics`` and ``segcoord jars``: the local broker, the topics, the jars."""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

from streaming.cli.common import CliError, add_bootstrap, add_home, add_topic_prefix, bootstrap, broker, topics


def cmd_kafka_start(args: argparse.Namespace) -> int:
    local = broker(args)
    started = time.monotonic()
    address = local.start(timeout=args.timeout)
    print(f"kafka running at {address} (pid {local.status().pid}, home {local.home}, "
          f"{time.monotonic() - started:.1f}s)")
    return 0


def cmd_kafka_stop(args: argparse.Namespace) -> int:
    print("kafka stopped" if broker(args).stop() else "kafka was not running")
    return 0


def cmd_kafka_status(args: argparse.Namespace) -> int:
    status = broker(args).status()
    print(f"kafka {status.describe()}")
    return 0 if status.running else 1


def _partition_overrides(items: Sequence[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        name, sep, count = item.partition("=")
        if not sep or not count.isdigit():
            raise CliError(f"--partitions-for {item!r}: expected TOPIC=COUNT, e.g. commands=6")
        out[name] = int(count)
    return out


def cmd_topics_create(args: argparse.Namespace) -> int:
    from streaming.admin import create_topics

    try:
        results = create_topics(
            bootstrap(args), topics(args), partitions=args.partitions,
            overrides=_partition_overrides(args.partitions_for), replication=args.replication,
        )
    except ValueError as e:
        raise CliError(str(e)) from None
    for r in results:
        print(f"{r.name:32s} partitions={r.partitions:<3d} {r.outcome}")
    return 0


def cmd_jars_fetch(args: argparse.Namespace) -> int:
    from streaming import maven

    for bundle in (maven.kafka_broker_bundle(), maven.spark_kafka_bundle()):
        started = time.monotonic()
        jars = maven.fetch(bundle)
        print(f"{bundle.folder_name}: {len(jars)} jars in {maven.jar_folder(bundle)} "
              f"({time.monotonic() - started:.1f}s)")
    return 0


def register(sub: Any) -> None:
    kafka = sub.add_parser("kafka", help="the local single-node Kafka broker (KRaft, from Maven jars)")
    ksub = kafka.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, func, helptext in (
        ("start", cmd_kafka_start, "fetch the jars once, format storage, start, wait until it answers"),
        ("stop", cmd_kafka_stop, "stop the broker this home started (data is kept)"),
        ("status", cmd_kafka_status, "whether it runs and where (exit 1 when not running)"),
    ):
        p = ksub.add_parser(name, help=helptext)
        add_home(p, "broker home (default $SEGCOORD_HOME, ~/.local/state/segcoord)")
        p.add_argument("--heap-mb", type=int, default=512, help="broker JVM heap in MB (default 512)")
        p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for it to answer")
        p.set_defaults(func=func)

    tps = sub.add_parser("topics", help="Kafka topics of the design")
    tsub = tps.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = tsub.add_parser("create", help="create every topic (idempotent)")
    add_bootstrap(create)
    create.add_argument("--partitions", type=int, default=3, help="partitions per topic (default 3)")
    create.add_argument("--partitions-for", action="append", default=[], metavar="TOPIC=N",
                        help="partition count of one topic, e.g. commands=6 (repeatable)")
    create.add_argument("--replication", type=int, default=1, help="replication factor (default 1)")
    add_topic_prefix(create)
    create.set_defaults(func=cmd_topics_create)

    jars = sub.add_parser("jars", help="Java jars fetched from Maven Central")
    jsub = jars.add_subparsers(dest="action", metavar="ACTION", required=True)
    fetch = jsub.add_parser("fetch", help="fetch the Kafka broker and Spark Kafka connector jars (cached)")
    fetch.set_defaults(func=cmd_jars_fetch)
