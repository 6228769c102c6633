"""``segcoord``: the command line of the segment coordinator.

Every subcommand prints one clear line and exits non-zero on bad input or a
failed dependency; ``--help`` at every level lists what is there.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from streaming import config


class CliError(Exception):
    """A user-facing error: printed as one line, exit code 2."""


def _bootstrap(args: argparse.Namespace) -> str:
    if getattr(args, "bootstrap", None):
        return str(args.bootstrap)
    env = os.environ.get("SEGCOORD_BOOTSTRAP")
    if env:
        return env
    from streaming.local_broker import LocalBroker

    status = LocalBroker(config.home_dir()).status()
    if status.running and status.bootstrap:
        return status.bootstrap
    raise CliError("no Kafka broker: pass --bootstrap HOST:PORT, set SEGCOORD_BOOTSTRAP, or run `segcoord kafka start`")


def _broker(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from streaming.local_broker import LocalBroker

    home = Path(args.home) if getattr(args, "home", None) else config.home_dir()
    return LocalBroker(home, heap_mb=getattr(args, "heap_mb", 512))


# -- kafka ---------------------------------------------------------------------
def cmd_kafka_start(args: argparse.Namespace) -> int:
    broker = _broker(args)
    started = time.monotonic()
    bootstrap = broker.start(timeout=args.timeout)
    print(f"kafka running at {bootstrap} (pid {broker.status().pid}, home {broker.home}, "
          f"{time.monotonic() - started:.1f}s)")
    return 0


def cmd_kafka_stop(args: argparse.Namespace) -> int:
    broker = _broker(args)
    print("kafka stopped" if broker.stop() else "kafka was not running")
    return 0


def cmd_kafka_status(args: argparse.Namespace) -> int:
    status = _broker(args).status()
    print(f"kafka {status.describe()}")
    return 0 if status.running else 1


# -- topics --------------------------------------------------------------------
def _partition_overrides(items: Sequence[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        name, sep, count = item.partition("=")
        if not sep or not count.isdigit():
            raise CliError(f"--partitions-for {item!r}: expected TOPIC=COUNT, e.g. commands=6")
        out[name] = int(count)
    return out


def cmd_topics_create(args: argparse.Namespace) -> int:
    from events.topics import Topics
    from streaming.admin import create_topics

    topics = Topics(args.prefix) if args.prefix is not None else config.topics()
    try:
        results = create_topics(
            _bootstrap(args), topics, partitions=args.partitions,
            overrides=_partition_overrides(args.partitions_for), replication=args.replication,
        )
    except ValueError as e:
        raise CliError(str(e)) from None
    for r in results:
        print(f"{r.name:32s} partitions={r.partitions:<3d} {r.outcome}")
    return 0


# -- jars ----------------------------------------------------------------------
def cmd_jars_fetch(args: argparse.Namespace) -> int:
    from streaming import maven

    for bundle in (maven.kafka_broker_bundle(), maven.spark_kafka_bundle()):
        started = time.monotonic()
        jars = maven.fetch(bundle)
        print(f"{bundle.folder_name}: {len(jars)} jars in {maven.jar_folder(bundle)} "
              f"({time.monotonic() - started:.1f}s)")
    return 0


# -- events --------------------------------------------------------------------
def cmd_events_validate(args: argparse.Namespace) -> int:
    from streaming.jsonlines import read_envelopes

    count = sum(1 for _ in read_envelopes(Path(args.file)))
    print(f"{count} valid events in {args.file}")
    return 0


# -- timeline ------------------------------------------------------------------
def cmd_timeline_replay(args: argparse.Namespace) -> int:
    import orjson

    from streaming.timeline_replay import replay, replay_json, replay_text

    if args.at is not None and args.at < 0:
        raise CliError(f"--at {args.at}: a line number must be at least 0")
    timelines = replay(Path(args.file), args.at)
    if args.json:
        print(orjson.dumps(replay_json(timelines)).decode())
    else:
        print(replay_text(timelines))
    return 0


def cmd_timeline_lookup(args: argparse.Namespace) -> int:
    import orjson

    from streaming.timeline_replay import lookup_json, parse_interval, replay

    interval = parse_interval(args.interval)
    entries = lookup_json(replay(Path(args.file), args.at), args.datasource, interval)
    if args.json:
        print(orjson.dumps(entries).decode())
    else:
        for e in entries:
            print(f"{e['segment']}  {', '.join(e['intervals'])}")
        if not entries:
            print(f"nothing of {args.datasource} is queryable in {interval.iso()}")
    return 0


# -- locks ---------------------------------------------------------------------
def cmd_locks_replay(args: argparse.Namespace) -> int:
    import orjson

    from streaming.locks_replay import replay_json, replay_text

    if args.json:
        print(orjson.dumps(replay_json(Path(args.file))).decode())
    else:
        print(replay_text(Path(args.file)))
    return 0


# -- balance -------------------------------------------------------------------
def cmd_balance_cost(args: argparse.Namespace) -> int:
    from coordinator.balancer.cost import cost
    from events.interval import Interval, IntervalError

    intervals = []
    for name, text in (("X_INTERVAL", args.x), ("Y_INTERVAL", args.y)):
        try:
            intervals.append(Interval.parse(text))
        except IntervalError as e:
            raise CliError(f"{name}: {e}") from None
    try:
        value = cost(intervals[0], intervals[1], same_data_source=args.same_datasource,
                     half_life_hours=args.half_life_hours)
    except ValueError as e:
        raise CliError(f"--half-life-hours: {e}") from None
    print(repr(value))
    return 0


def cmd_balance_simulate(args: argparse.Namespace) -> int:
    import orjson

    from streaming.balance_sim import simulate, text

    try:
        result = simulate(args.servers, args.datasources, args.days, args.seed, args.moves, Path(args.out),
                          args.half_life_hours)
    except ValueError as e:
        raise CliError(str(e)) from None
    print(orjson.dumps(result).decode() if args.json else text(result))
    return 0


# -- simulate ------------------------------------------------------------------
def cmd_simulate(args: argparse.Namespace) -> int:
    import orjson

    from coordinator.planner.simulator import Scenario, ScenarioError, Simulator
    from streaming.scenario_text import render

    path = Path(args.scenario)
    try:
        doc = orjson.loads(path.read_bytes())
    except OSError as e:
        raise CliError(f"{path}: {e.strerror or e}") from None
    except orjson.JSONDecodeError as e:
        raise CliError(f"{path}: not JSON: {e}") from None
    try:
        reports = Simulator(Scenario.parse(doc)).run(compute_cost=not args.no_cost, planner=args.planner)
    except ScenarioError as e:
        raise CliError(f"{path}: {e}") from None
    if args.json:
        print(orjson.dumps({"runs": [r.to_json() for r in reports]}).decode())
    else:
        print(render(reports))
    return 0


# -- replay and audit ---------------------------------------------------------------
def cmd_replay(args: argparse.Namespace) -> int:
    import orjson

    from events.topics import Topics
    from streaming.replay import ReplayError, Until, replay, text

    topics = Topics(args.topic_prefix) if args.topic_prefix is not None else config.topics()
    try:
        until = Until.parse(args.until) if args.until else None
        fold = replay(_bootstrap(args), topics, until)
    except ReplayError as e:
        raise CliError(str(e)) from None
    print(orjson.dumps(fold.to_json()).decode() if args.json else text(fold))
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    import orjson

    from events.topics import Topics
    from streaming.replay import ReplayError, as_json, audit

    topics = Topics(args.topic_prefix) if args.topic_prefix is not None else config.topics()
    try:
        violations = audit(_bootstrap(args), topics, command_timeout_ms=args.command_timeout_ms)
    except ReplayError as e:
        raise CliError(str(e)) from None
    if args.json:
        print(orjson.dumps({"violations": as_json(violations)}).decode())
    else:
        for v in violations:
            print(v)
        print(f"{len(violations)} violation(s)")
    return 1 if violations else 0


# -- historical ------------------------------------------------------------------
def cmd_historical(args: argparse.Namespace) -> int:
    import signal
    import threading

    from events.topics import Topics
    from streaming.historical import Historical, parse_size

    try:
        size = parse_size(args.max_size)
    except ValueError as e:
        raise CliError(f"--max-size: {e}") from None
    if args.load_ms < 0:
        raise CliError(f"--load-ms: must be >= 0, got {args.load_ms}")
    topics = Topics(args.topic_prefix) if args.topic_prefix is not None else config.topics()
    server = Historical(args.name, args.tier, size, _bootstrap(args), topics, args.load_ms)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(f"historical {args.name} [{args.tier}], {size} bytes, serving (SIGTERM or Ctrl-C stops it)", flush=True)
    server.run(stop)
    return 0


# -- demo ----------------------------------------------------------------------
def cmd_demo(args: argparse.Namespace) -> int:
    from streaming.demo import run_demo

    return run_demo(bootstrap=args.bootstrap, home=Path(args.home) if args.home else config.home_dir(),
                    keep_broker=args.keep_broker)


# -- run -----------------------------------------------------------------------
def cmd_run(args: argparse.Namespace) -> int:
    from events.topics import Topics
    from streaming.admin import create_topics
    from streaming.service.app import run_service
    from streaming.service.state import StateStoreError

    topics = Topics(args.topic_prefix) if args.topic_prefix is not None else config.topics()
    bootstrap = args.bootstrap or os.environ.get("SEGCOORD_BOOTSTRAP")
    if args.plan_every <= 0:
        raise CliError(f"--plan-every: must be a positive number of seconds, got {args.plan_every}")
    if not bootstrap:
        bootstrap = _broker(args).start()  # starts the local broker, or reuses the running one
    create_topics(bootstrap, topics)
    state_dir = Path(args.state_dir) if args.state_dir else config.home_dir() / "service" / topics.prefix.rstrip(".")
    print(f"segcoord run: timeline, lockbox and planner agents on {bootstrap}, topics {topics.prefix}*, "
          f"state {state_dir}", flush=True)
    spark_balancer = None
    if args.balancer == "spark":
        command = [sys.executable, "-m", "streaming.cli", "balancer", "run", "--bootstrap", bootstrap,
                   "--topic-prefix", topics.prefix, "--checkpoint", str(state_dir / "balancer-checkpoint")]
        for tier in args.balancer_tier or ():
            command += ["--tier", tier]
        spark_balancer = subprocess.Popen(command, stdin=subprocess.DEVNULL)
        print(f"segcoord run: Spark balancer started (pid {spark_balancer.pid}); the planner agent leaves the "
              f"balancing stages to it", flush=True)
    try:
        return run_service(bootstrap, topics, state_dir, loglevel=args.log_level, plan_every_s=args.plan_every,
                           balancing=args.balancer == "planner", incremental=args.planner == "incremental")
    except StateStoreError as e:
        raise CliError(f"--state-dir: {e}") from None
    finally:
        if spark_balancer is not None:
            _stop_child(spark_balancer)


def _stop_child(child: subprocess.Popen[bytes]) -> None:
    """SIGTERM a child process, then SIGKILL it if it has not ended within 30 s."""
    if child.poll() is None:
        child.terminate()
        try:
            child.wait(30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(10)


# -- task ------------------------------------------------------------------------
def _json_arg(name: str, text: str | None) -> object:
    import orjson

    if text is None:
        return None
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise CliError(f"{name}: not JSON: {e}") from None


def _segments_arg(args: argparse.Namespace) -> list[object]:
    """Descriptors from ``--segment JSON`` (repeatable) and ``--segments-file`` (a JSON list or JSON lines)."""
    import orjson

    objs: list[object] = [_json_arg("--segment", text) for text in args.segment]
    if args.segments_file:
        path = Path(args.segments_file)
        try:
            text = sys.stdin.read() if args.segments_file == "-" else path.read_text()
        except OSError as e:
            raise CliError(f"{path}: {e.strerror or e}") from None
        try:
            loaded = orjson.loads(text) if text.lstrip().startswith("[") else [
                orjson.loads(line) for line in text.splitlines() if line.strip()]
        except orjson.JSONDecodeError as e:
            raise CliError(f"{path}: not JSON: {e}") from None
        objs.extend(loaded)
    if not objs:
        raise CliError("publish: give at least one --segment JSON or --segments-file FILE")
    return objs


def cmd_task(args: argparse.Namespace) -> int:
    """One request of an ingestion task; prints every decision seen for it as a JSON line."""
    import orjson

    from events.instant import parse_instant
    from events.interval import IntervalError
    from events.schema import decode_record
    from events.segment import SegmentDescriptor
    from events.topics import Topics
    from streaming.task_client import RequestRefused, TaskClient, TaskClientError

    topics = Topics(args.topic_prefix) if args.topic_prefix is not None else config.topics()
    if args.timeout <= 0:
        raise CliError(f"--timeout: must be > 0, got {args.timeout}")
    segments = []
    if args.action == "publish":
        segments = [decode_record(SegmentDescriptor, obj, f"segments[{i}]")
                    for i, obj in enumerate(_segments_arg(args))]
    try:
        client = TaskClient(_bootstrap(args), topics, args.task_id, args.group_id or args.task_id, args.task_type,
                            args.datasource, args.priority, timeout=args.timeout)
    except TaskClientError as e:
        raise CliError(str(e)) from None
    try:
        if args.action == "start":
            decision = client.start()
        elif args.action == "lock":
            parts = [int(p) for p in args.partition_ids.split(",")] if args.partition_ids else None
            decision = client.lock(args.interval, args.lock_type, args.granularity, partition_ids=parts,
                                   mode="try" if args.try_lock else None, timeout_ms=args.timeout_ms,
                                   version=args.version)
        elif args.action == "release":
            decision = client.release(args.interval)
        elif args.action == "allocate":
            try:
                timestamp = int(args.timestamp) if args.timestamp.isdigit() else parse_instant(args.timestamp)
            except ValueError as e:
                raise CliError(f"--timestamp: {e}") from None
            decision = client.allocate(timestamp, args.sequence_name, args.previous_segment_id,
                                       interval=args.interval, lock_granularity=args.lock_granularity,
                                       lock_type=args.lock_type, skip_lineage_check=args.skip_lineage_check)
        elif args.action == "publish":
            decision = client.publish(segments, _json_arg("--start-metadata", args.start_metadata),  # type: ignore[arg-type]
                                      _json_arg("--end-metadata", args.end_metadata),  # type: ignore[arg-type]
                                      kind=args.kind)
        else:
            decision = client.finish(args.status)
    except RequestRefused as e:
        for env in e.seen:
            print(orjson.dumps(env.to_json()).decode())
        print(f"segcoord: refused: {e}", file=sys.stderr)
        return 1
    except IntervalError as e:
        raise CliError(f"--interval: {e}") from None
    except (TaskClientError, ValueError) as e:
        raise CliError(str(e)) from None
    finally:
        client.close()
    for env in decision.seen:
        print(orjson.dumps(env.to_json()).decode())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="segcoord",
        description="An event-sourced streaming segment coordinator (Druid-style) on Kafka.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    demo = sub.add_parser("demo", help="start the local broker, create topics, round-trip one event of every type")
    demo.add_argument("--bootstrap", help="use this broker instead of starting the local one")
    demo.add_argument("--home", help="local broker home (default $SEGCOORD_HOME)")
    demo.add_argument("--keep-broker", action="store_true", help="leave a broker the demo started running")
    demo.set_defaults(func=cmd_demo)

    run = sub.add_parser("run", help="run the coordinator service (timeline, lockbox and planner agents) until "
                                          "SIGTERM/SIGINT")
    run.add_argument("--bootstrap", help="HOST:PORT (default $SEGCOORD_BOOTSTRAP, else the local broker)")
    run.add_argument("--state-dir", help="RocksDB state folder (default $SEGCOORD_HOME/service/<prefix>)")
    run.add_argument("--topic-prefix", help="topic name prefix (default $SEGCOORD_TOPIC_PREFIX or 'segcoord.')")
    run.add_argument("--log-level", default="warn", choices=("crit", "error", "warn", "info", "debug"))
    run.add_argument("--plan-every", type=float, default=5.0, metavar="SECONDS",
                     help="the planner's timer period; it also plans at once on every relevant event (default 5)")
    run.add_argument("--planner", choices=("incremental", "full"), default="incremental",
                     help="incremental (default): an event plans the segments it touched, a timer run balances and "
                          "looks at everything every 15 min; full: every run looks at every segment (the reference)")
    run.add_argument("--balancer", choices=("planner", "spark", "external"), default="planner",
                     help="who makes the balancing moves: the planner agent (default); 'spark' starts the Spark "
                          "balancer beside the service and the planner skips its balancing stages; 'external': "
                          "the planner skips them, a Spark balancer runs elsewhere")
    run.add_argument("--balancer-tier", action="append", metavar="TIER",
                     help="with --balancer spark: a tier the Spark balancer balances (repeatable; default "
                          "_default_tier)")
    run.set_defaults(func=cmd_run)

    kafka = sub.add_parser("kafka", help="the local single-node Kafka broker (KRaft, from Maven jars)")
    ksub = kafka.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, func, helptext in (
        ("start", cmd_kafka_start, "fetch the jars once, format storage, start, wait until it answers"),
        ("stop", cmd_kafka_stop, "stop the broker this home started (data is kept)"),
        ("status", cmd_kafka_status, "whether it runs and where (exit 1 when not running)"),
    ):
        p = ksub.add_parser(name, help=helptext)
        p.add_argument("--home", help="broker home (default $SEGCOORD_HOME, ~/.local/state/segcoord)")
        p.add_argument("--heap-mb", type=int, default=512, help="broker JVM heap in MB (default 512)")
        p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for it to answer")
        p.set_defaults(func=func)

    topics = sub.add_parser("topics", help="Kafka topics of the design")
    tsub = topics.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = tsub.add_parser("create", help="create every topic (idempotent)")
    create.add_argument("--bootstrap", help="HOST:PORT (default $SEGCOORD_BOOTSTRAP or the local broker)")
    create.add_argument("--partitions", type=int, default=3, help="partitions per topic (default 3)")
    create.add_argument("--partitions-for", action="append", default=[], metavar="TOPIC=N",
                        help="partition count of one topic, e.g. commands=6 (repeatable)")
    create.add_argument("--replication", type=int, default=1, help="replication factor (default 1)")
    create.add_argument("--prefix", help="topic name prefix (default $SEGCOORD_TOPIC_PREFIX or 'segcoord.')")
    create.set_defaults(func=cmd_topics_create)

    jars = sub.add_parser("jars", help="Java jars fetched from Maven Central")
    jsub = jars.add_subparsers(dest="action", metavar="ACTION", required=True)
    fetch = jsub.add_parser("fetch", help="fetch the Kafka broker and Spark Kafka connector jars (cached)")
    fetch.set_defaults(func=cmd_jars_fetch)

    tl = sub.add_parser("timeline", help="the segment timeline (standby / visible / overshadowed)")
    tlsub = tl.add_subparsers(dest="action", metavar="ACTION", required=True)
    rp = tlsub.add_parser("replay", help="fold a JSON-lines file of segment events; print states and visible set")
    rp.add_argument("file")
    rp.add_argument("--json", action="store_true", help='{"segments": {id: state}, "visible": {dataSource: [id]}}')
    rp.add_argument("--at", type=int, metavar="N", help="apply the events of lines 1..N only")
    rp.set_defaults(func=cmd_timeline_replay)
    lk = tlsub.add_parser("lookup", help="the visible segments of a data source over an interval")
    lk.add_argument("file")
    lk.add_argument("--datasource", required=True)
    lk.add_argument("--interval", required=True, metavar="START/END")
    lk.add_argument("--at", type=int, metavar="N", help="apply the events of lines 1..N only")
    lk.add_argument("--json", action="store_true", help='[{"segment": id, "intervals": ["start/end", ...]}]')
    lk.set_defaults(func=cmd_timeline_lookup)

    lk_cmd = sub.add_parser("locks", help="the task lockbox")
    lksub = lk_cmd.add_subparsers(dest="action", metavar="ACTION", required=True)
    lrp = lksub.add_parser("replay", help="run a JSON-lines file of task requests; print decisions and final locks")
    lrp.add_argument("file")
    lrp.add_argument("--json", action="store_true", help='{"decisions": [...], "locks": [...]}')
    lrp.set_defaults(func=cmd_locks_replay)

    bal = sub.add_parser("balance", help="cost-based placement (seed 000)")
    bsub = bal.add_subparsers(dest="action", metavar="ACTION", required=True)
    bc = bsub.add_parser("cost", help="the joint cost of two segments' intervals, in hours squared")
    bc.add_argument("x", metavar="X_INTERVAL", help="ISO-8601 start/end")
    bc.add_argument("y", metavar="Y_INTERVAL", help="ISO-8601 start/end")
    bc.add_argument("--same-datasource", action="store_true", help="both segments of one data source (factor 2)")
    bc.add_argument("--half-life-hours", type=float, default=24.0, help="decay half-life (default 24)")
    bc.set_defaults(func=cmd_balance_cost)
    bs = bsub.add_parser("simulate", help="seed 000's experiment: random vs cost-based placement and rebalancing")
    bs.add_argument("--servers", type=int, default=20)
    bs.add_argument("--datasources", type=int, default=10)
    bs.add_argument("--days", type=int, default=90)
    bs.add_argument("--seed", type=int, default=7)
    bs.add_argument("--moves", type=int, default=2000, help="greedy moves when rebalancing the random placement")
    bs.add_argument("--half-life-hours", type=float, default=24.0)
    bs.add_argument("--out", default="balance-simulation", help="folder for the PNG pictures")
    bs.add_argument("--json", action="store_true")
    bs.set_defaults(func=cmd_balance_simulate)

    sim = sub.add_parser("simulate", help="run a cluster scenario through the rule-driven planner (seed 004)")
    sim.add_argument("scenario", metavar="SCENARIO.json")
    sim.add_argument("--json", action="store_true", help='one JSON document: {"runs": [...]}')
    sim.add_argument("--no-cost", action="store_true", help="skip the total-cost metrics (slow on big clusters)")
    mode = sim.add_mutually_exclusive_group()
    mode.add_argument("--incremental", dest="planner", action="store_const", const="incremental",
                      help="plan each run only the segments that changed, as the planner agent does (default)")
    mode.add_argument("--full", dest="planner", action="store_const", const="full",
                      help="every run looks at every segment (the reference)")
    sim.set_defaults(func=cmd_simulate, planner="incremental")

    rep = sub.add_parser("replay", help="rebuild timeline, locks and placement from the topics as of a point")
    rep.add_argument("--until", metavar="TIME|TOPIC:PARTITION:OFFSET", help="stop there (default: the end)")
    rep.add_argument("--json", action="store_true")
    rep.add_argument("--bootstrap", metavar="HOST:PORT")
    rep.add_argument("--topic-prefix", default=None)
    rep.set_defaults(func=cmd_replay)
    aud = sub.add_parser("audit", help="check the whole log's invariants; exit 1 when any is violated")
    aud.add_argument("--command-timeout-ms", type=int, default=15 * 60_000,
                     help="a command unanswered this long before the log's end is a violation (default 15 min)")
    aud.add_argument("--json", action="store_true")
    aud.add_argument("--bootstrap", metavar="HOST:PORT")
    aud.add_argument("--topic-prefix", default=None)
    aud.set_defaults(func=cmd_audit)

    hist = sub.add_parser("historical", help="a simulated historical: executes its load/drop commands, announces")
    hist.add_argument("--name", required=True)
    hist.add_argument("--tier", default="_default_tier")
    hist.add_argument("--max-size", required=True, help="10GB, 512MiB or bytes")
    hist.add_argument("--load-ms", type=int, default=50, help="simulated time to load one segment (default 50)")
    hist.add_argument("--bootstrap", metavar="HOST:PORT")
    hist.add_argument("--topic-prefix", default=None)
    hist.set_defaults(func=cmd_historical)

    # -- the Spark balancer (streaming/balancer/) --
    from streaming.balancer import job as balancer_job

    balancer = sub.add_parser("balancer", help="the Spark Structured Streaming balancer (moves on commands)")
    bal_run = balancer.add_subparsers(dest="action", metavar="ACTION", required=True).add_parser(
        "run", help="run the balancer job (local Spark by default) until interrupted or --available-now ends")
    balancer_job.add_arguments(bal_run)
    bal_run.set_defaults(func=lambda args: balancer_job.run(args, _bootstrap(args)))

    evs = sub.add_parser("events", help="the event contract")
    esub = evs.add_subparsers(dest="action", metavar="ACTION", required=True)
    validate = esub.add_parser("validate", help="validate a JSON-lines file of envelopes")
    validate.add_argument("file")
    validate.set_defaults(func=cmd_events_validate)
    task = sub.add_parser("task", help="an ingestion task's requests to the lockbox agent; prints decisions as JSON")
    task_sub = task.add_subparsers(dest="action", metavar="ACTION", required=True)
    task_actions = {
        "start": "register the task (answered by task_registered)",
        "lock": "request a lock (waits through lock_waiting; exit 1 when denied)",
        "allocate": "allocate a segment id for a row (exit 1 when denied)",
        "release": "release the task's locks on one interval (exit 1 when it holds none)",
        "publish": "publish segments (exit 1 when rejected)",
        "finish": "end the task and release its locks",
    }
    for name, helptext in task_actions.items():
        tp = task_sub.add_parser(name, help=helptext)
        tp.add_argument("--task-id", required=True)
        tp.add_argument("--datasource", required=True)
        tp.add_argument("--group-id", help="task group (default: the task id)")
        tp.add_argument("--task-type", default="index_kafka", help="Druid task type (default index_kafka)")
        tp.add_argument("--priority", type=int, help="lock priority (default: by task type)")
        tp.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the decision (default 30)")
        tp.add_argument("--bootstrap", metavar="HOST:PORT")
        tp.add_argument("--topic-prefix", default=None)
        tp.set_defaults(func=cmd_task)
        if name == "lock":
            tp.add_argument("--interval", required=True, metavar="START/END")
            tp.add_argument("--lock-type", default="exclusive", choices=("exclusive", "shared", "append", "replace"))
            tp.add_argument("--granularity", default="timeChunk", choices=("timeChunk", "segment"))
            tp.add_argument("--partition-ids", metavar="0,1,...", help="partitions of a segment lock")
            tp.add_argument("--try", dest="try_lock", action="store_true", help="denied at once if not free now")
            tp.add_argument("--timeout-ms", type=int, help="deny if still waiting after this much event time")
            tp.add_argument("--version", help="a segment lock's version or a timeChunk lock's preferred one")
        elif name == "release":
            tp.add_argument("--interval", required=True, metavar="START/END")
        elif name == "allocate":
            tp.add_argument("--timestamp", required=True, help="ISO-8601 instant or epoch milliseconds")
            tp.add_argument("--sequence-name", required=True)
            tp.add_argument("--previous-segment-id")
            tp.add_argument("--interval", metavar="START/END", help="the time chunk (default: an existing one)")
            tp.add_argument("--lock-granularity", default="timeChunk", choices=("timeChunk", "segment"))
            tp.add_argument("--lock-type", default="exclusive", choices=("exclusive", "shared", "append", "replace"))
            tp.add_argument("--skip-lineage-check", action="store_true")
        elif name == "publish":
            tp.add_argument("--segment", action="append", default=[], metavar="JSON",
                            help="a segment descriptor (Druid DataSegment JSON); repeatable")
            tp.add_argument("--segments-file", metavar="FILE",
                            help="a JSON list or JSON lines of descriptors; - = stdin")
            tp.add_argument("--start-metadata", metavar="JSON")
            tp.add_argument("--end-metadata", metavar="JSON")
            tp.add_argument("--kind", choices=("insert", "append", "replace"), help="publish kind (default insert)")
        elif name == "finish":
            tp.add_argument("--status", default="success", choices=("success", "failed"))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from events.schema import EventValidationError
    from streaming.jsonlines import JsonLinesError
    from streaming.local_broker import BrokerError
    from streaming.maven import JarFetchError

    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (CliError, BrokerError, JarFetchError, JsonLinesError, EventValidationError, FileNotFoundError) as e:
        print(f"segcoord: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
