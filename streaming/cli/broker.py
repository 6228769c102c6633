"""``segcoord kafka``, ``segcoord topics`` and ``segcoord jars``: the local broker, the topics, the jars."""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from streaming.cli.common import CliError, add_bootstrap, add_home, add_topic_prefix, bootstrap, broker, topics


def cmd_kafka_start(args: argparse.Namespace) -> int:
    if args.brokers > 1:
        return _start_cluster(args)
    local = broker(args)
    if args.secure:
        local.secure = True
    started = time.monotonic()
    address = local.start(timeout=args.timeout)
    print(f"kafka running at {address} (pid {local.status().pid}, home {local.home}, "
          f"{time.monotonic() - started:.1f}s)")
    if local.secure:
        _grant(local, address, topics(args))
    return 0


def _cluster(args: argparse.Namespace, brokers: int) -> Any:
    from streaming import config
    from streaming.local_cluster import LocalCluster

    home = Path(args.home) if getattr(args, "home", None) else config.home_dir()
    return LocalCluster(home, brokers, heap_mb=min(getattr(args, "heap_mb", 512), 512))


def _start_cluster(args: argparse.Namespace) -> int:
    cluster = _cluster(args, args.brokers)
    if args.secure:
        cluster.secure = True
    started = time.monotonic()
    address = cluster.start(timeout=max(args.timeout, 180.0))
    print(f"kafka cluster of {args.brokers} nodes running at {address} (home {cluster.dir}, "
          f"{time.monotonic() - started:.1f}s); create topics with --replication {args.brokers} "
          f"(min.insync.replicas {args.brokers - 1})")
    if cluster.secure:
        _grant(cluster, address, topics(args))
    return 0


def _grant(local: Any, address: str, names: Any) -> None:
    from streaming import local_sasl

    count = local_sasl.grant_acls(address, local.admin_config(), names)
    folder = local_sasl.credentials_dir(local.dir)
    print(f"SASL/SCRAM-SHA-512 with ACLs: {count} ACLs for topics {names.prefix}*; client settings per role in "
          f"{folder}/<role>.properties (roles: admin, {', '.join(r.name for r in local_sasl.ROLES)}); "
          f"use one with SEGCOORD_KAFKA_CONFIG=<file>")


def cmd_kafka_acls(args: argparse.Namespace) -> int:
    local = broker(args)
    status = local.status()
    if not status.running or not status.bootstrap:
        raise CliError(f"the local broker under {local.home} is not running (segcoord kafka start --secure)")
    if not local.secure:
        raise CliError(f"the local broker under {local.home} is open (started without --secure): no ACLs to grant")
    _grant(local, status.bootstrap, topics(args))
    return 0


def cmd_kafka_setup_roles(args: argparse.Namespace) -> int:
    """Role passwords in a folder, and (unless --generate-only) the SCRAM users and ACLs on any cluster."""
    from streaming import credentials, kafka_roles

    folder = Path(args.credentials_dir)
    if args.generate_only:
        kafka_roles.ensure_passwords(folder, args.ca)
        print(f"passwords and client properties of {', '.join(kafka_roles.PRINCIPALS)} in {folder} (mode 0600)")
        return 0
    address = bootstrap(args)
    try:
        sec = credentials.kafka_security()
        sec.check_bootstrap(address)
    except credentials.CredentialsError as e:
        raise CliError(str(e)) from None
    if not sec.sasl:
        raise CliError(f"no admin credentials: set {credentials.CONFIG_ENV} to the admin's properties file "
                       f"(or {credentials.USERNAME_ENV}/{credentials.PASSWORD_ENV}), never on the command line")
    ca = args.ca if args.ca is not None else sec.ca_location
    count = kafka_roles.setup_roles(address, folder, topics(args), ca, args.timeout)
    print(f"SCRAM-SHA-512 users {', '.join(r for r in kafka_roles.PRINCIPALS if r not in ('admin', 'controller'))} "
          f"on {address}, {count} ACLs for topics {topics(args).prefix}*; client settings per role in "
          f"{folder}/<role>.properties (use one with {credentials.CONFIG_ENV}=<file>)")
    return 0


def cmd_kafka_stop(args: argparse.Namespace) -> int:
    print("kafka stopped" if broker(args).stop() else "kafka was not running")
    if args.brokers > 1 and _cluster(args, args.brokers).stop():
        print(f"kafka cluster of {args.brokers} nodes stopped")
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
        if name in ("start", "stop"):
            p.add_argument("--brokers", type=int, default=1, metavar="N",
                           help="N > 1: a replicated cluster of N KRaft nodes on loopback under <home>/kafka-cluster "
                                "(docs/operations.md); default 1, the single broker")
        if name == "start":
            p.add_argument("--secure", action="store_true",
                           help="SASL/SCRAM-SHA-512, StandardAuthorizer, one principal per role with ACLs "
                                "(docs/security.md); a home keeps the mode it was first started in")
            add_topic_prefix(p)
    acls = ksub.add_parser("acls", help="grant the role ACLs of a secure local broker for a topic prefix")
    add_home(acls, "broker home (default $SEGCOORD_HOME, ~/.local/state/segcoord)")
    add_topic_prefix(acls)
    acls.set_defaults(func=cmd_kafka_acls)
    roles = ksub.add_parser(
        "setup-roles",
        help="on any cluster: a SCRAM user per role (passwords kept in a folder) and the role ACLs, as the admin "
             "($SEGCOORD_KAFKA_CONFIG, never argv); docs/security.md")
    add_bootstrap(roles)
    roles.add_argument("--credentials-dir", required=True, metavar="DIR",
                       help="folder of <principal>.password and <principal>.properties (made once, mode 0600; "
                            "existing passwords are kept)")
    roles.add_argument("--ca", default=None, metavar="PATH",
                       help="CA file path to write into the role properties (SASL_SSL); default the admin's "
                            "ssl.ca.location; none: SASL_PLAINTEXT (loopback only)")
    roles.add_argument("--generate-only", action="store_true",
                       help="only make the folder's passwords and properties files; contact no broker")
    roles.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the cluster")
    add_topic_prefix(roles)
    roles.set_defaults(func=cmd_kafka_setup_roles)

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
