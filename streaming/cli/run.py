"""``segcoord run``: the coordinator service (timeline, lockbox and planner agents)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import Any

from coordinator.placement.liveness import DEFAULT_SERVER_TIMEOUT_MS
from coordinator.placement.settled import SettledWindow
from streaming import config
from streaming.cli.common import CliError, add_kafka, broker, topics
from streaming.service.state import AppliedWindow, write_buffer_bytes


def _stop_before_start(_signum: int, _frame: Any) -> None:
    """A stop signal before the worker installed its own handlers: nothing is open yet (or what is unwinds with
    the exception), so the run ends with status 0, as an orderly stop does."""
    raise SystemExit(0)


def cmd_run(args: argparse.Namespace) -> int:
    # first, before the imports below (faust and the agents: seconds on a loaded machine): a SIGTERM that came
    # in while they loaded ended the process with the default action (status -15) instead of a clean exit 0
    previous = {sig: signal.signal(sig, _stop_before_start) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        return _run(args)
    except CliError:  # bad input: nothing ran (main() called in-process, e.g. by tests, keeps its handlers)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        raise


def _run(args: argparse.Namespace) -> int:
    from streaming.admin import create_topics
    from streaming.service.app import run_service
    from streaming.service.outage import until_reachable
    from streaming.service.state import StateStoreError
    from streaming.service.worker_identity import DuplicateWorkerError

    tps = topics(args)
    address = args.bootstrap or os.environ.get("SEGCOORD_BOOTSTRAP")
    if args.server_timeout_millis <= 0:
        raise CliError(f"--server-timeout-millis: must be a positive number of ms, got {args.server_timeout_millis}")
    try:
        window = AppliedWindow(args.dedupe_window_ids, args.dedupe_window_ms)
    except ValueError as e:
        raise CliError(f"--dedupe-window-ids / --dedupe-window-ms: {e}") from None
    try:
        settled = SettledWindow(args.settled_window_ms, args.settled_window_segments)
    except ValueError as e:
        raise CliError(f"--settled-window-ms / --settled-window-segments: {e}") from None
    try:
        write_buffer_bytes()
    except ValueError as e:
        raise CliError(str(e)) from None
    if args.plan_every <= 0:
        raise CliError(f"--plan-every: must be a positive number of seconds, got {args.plan_every}")
    if args.coordinator_period <= 0:
        raise CliError(f"--coordinator-period: must be a positive number of seconds, got {args.coordinator_period}")
    if args.no_planner and args.planner_only:
        raise CliError("--no-planner with --planner-only: a worker that neither plans nor runs the agents does "
                       "nothing; pick one (or neither: a worker runs both)")
    if args.no_planner and args.balancer == "spark":
        raise CliError("--no-planner with --balancer spark: the Spark balancer is started beside the planner; start "
                       "it with a worker that stands for the planner election (or run it apart: --balancer external "
                       "on the workers)")
    http = None
    if args.http:
        from streaming.http import parse_address

        try:
            http = parse_address(args.http)
        except ValueError as e:
            raise CliError(f"--http: {e}") from None
    if not address:
        address = broker(args).start()  # starts the local broker, or reuses the running one
    # topics it has to create get the cluster's default replication (topics create --replication sets it)
    until_reachable("creating the topics", lambda: create_topics(address, tps, replication=None))
    state_dir = Path(args.state_dir) if args.state_dir else config.home_dir() / "service" / tps.prefix.rstrip(".")
    agents = ("timeline, lockbox and upsert agents (--no-planner)" if args.no_planner else
              "the planner only (--planner-only)" if args.planner_only else "timeline, lockbox and planner agents")
    print(f"segcoord run: {agents} on {address}, topics {tps.prefix}*, state {state_dir}", flush=True)
    supervisor = None
    if args.balancer == "spark":
        from streaming.balancer.supervisor import BalancerSupervisor

        command = [sys.executable, "-m", "streaming.cli", "balancer", "run", "--bootstrap", address,
                   "--topic-prefix", tps.prefix, "--checkpoint", str(state_dir / "balancer-checkpoint")]
        for tier in args.balancer_tier or ():
            command += ["--tier", tier]
        supervisor = BalancerSupervisor(command).start()
        assert supervisor.proc is not None
        print(f"segcoord run: Spark balancer started (pid {supervisor.proc.pid}); the planner agent leaves the "
              f"balancing stages to it while it runs (restarted with backoff when its query dies)", flush=True)
    try:
        return run_service(address, tps, state_dir, loglevel=args.log_level, plan_every_s=args.plan_every,
                           balancing=args.balancer == "planner", incremental=args.planner == "incremental",
                           http=http, server_timeout_ms=args.server_timeout_millis, applied_window=window,
                           settled_window=settled,
                           balancer=supervisor, period_ms=max(1, round(args.coordinator_period * 1000)),
                           worker_id=args.worker_id, http_advertise=args.http_advertise,
                           plans=not args.no_planner, agents=not args.planner_only)
    except DuplicateWorkerError as e:
        raise CliError(f"--worker-id: {e}") from None
    except ValueError as e:
        if args.worker_id is None or "worker id" not in str(e):
            raise
        raise CliError(f"--worker-id: {e}") from None
    except StateStoreError as e:
        held = " (another segcoord run is using this state folder: each worker needs its own)" \
            if "lock" in str(e).lower() else ""
        raise CliError(f"--state-dir: {e}{held}") from None
    except OSError as e:
        if http is None:
            raise
        raise CliError(f"--http {args.http}: {e.strerror or e}") from None
    finally:
        if supervisor is not None:
            supervisor.stop()


def register(sub: Any) -> None:
    run = sub.add_parser("run", help="run the coordinator service (timeline, lockbox and planner agents) until "
                                     "SIGTERM/SIGINT")
    add_kafka(run)
    run.add_argument("--state-dir", help="RocksDB state folder (default $SEGCOORD_HOME/service/<prefix>)")
    run.add_argument("--worker-id", metavar="ID",
                     help="this worker's identity in the consumer group (letters, digits, '._-'); default: the host "
                          "name and a digest of --state-dir. Several workers (each its own --state-dir) split the "
                          "partitions of segments and lock-requests; one of them, elected, runs the planner")
    run.add_argument("--no-planner", action="store_true",
                     help="this worker never stands for the planner election: it runs the timeline, lockbox and "
                          "upsert agents on its partitions and never plans; another worker of the group (one "
                          "without this flag) runs the planner. Its HTTP API redirects to that worker's "
                          "(docs/workers.md, \"Workers that do not plan\")")
    run.add_argument("--planner-only", action="store_true",
                     help="this process only stands for the planner election and plans while elected: no "
                          "timeline, lockbox or upsert agent, no partition of the group. Beside workers started "
                          "with --no-planner it gives the planner a core of its own (docs/workers.md, \"A planner "
                          "in its own process\")")
    run.add_argument("--log-level", default="info", choices=("crit", "error", "warn", "info", "debug"),
                     help="the service's own lines (one per planning decision batch) at info, the default; the "
                          "libraries' at warn or above")
    run.add_argument("--http", metavar="HOST:PORT",
                     help="serve Druid's coordinator API, and Prometheus metrics at /metrics, there (Druid's "
                          "coordinator port is 8081: 127.0.0.1:8081; :PORT binds to loopback). Writes need "
                          "SEGCOORD_HTTP_TOKEN or SEGCOORD_HTTP_BASIC=user:password; SEGCOORD_HTTP_AUTH_READS=1 "
                          "guards reads too (docs/security.md)")
    run.add_argument("--http-advertise", metavar="URL",
                     help="the base URL other workers redirect HTTP requests to while this one runs the planner "
                          "(default http://HOST:PORT of --http; a wildcard host is replaced by this host's name). "
                          "A worker that does not run the planner answers 307 to the leader's (docs/workers.md)")
    run.add_argument("--plan-every", type=float, default=5.0, metavar="SECONDS",
                     help="the planner's timer period; it also plans at once on every relevant event (default 5)")
    run.add_argument("--server-timeout-millis", type=int, default=DEFAULT_SERVER_TIMEOUT_MS, metavar="MS",
                     help=f"a historical not heard of (heartbeat, announce) for this long is decided lost: "
                          f"server_lost on cluster, its segments unannounced (default {DEFAULT_SERVER_TIMEOUT_MS})")
    run.add_argument("--dedupe-window-ids", type=int, default=AppliedWindow().max_ids, metavar="N",
                     help="each agent remembers the ids of at most this many applied input events to drop "
                          f"duplicates (default {AppliedWindow().max_ids:,}; see docs/liveness.md)")
    run.add_argument("--dedupe-window-ms", type=int, default=AppliedWindow().max_age_ms, metavar="MS",
                     help="... and only those written to the log within this long of the newest "
                          f"(default {AppliedWindow().max_age_ms} = 7 days)")
    run.add_argument("--settled-window-ms", type=int, default=SettledWindow().max_age_ms, metavar="MS",
                     help="the planner keeps a forgotten segment's settled command ids this long of event time "
                          f"(default {SettledWindow().max_age_ms} = 7 days; see docs/placement.md)")
    run.add_argument("--settled-window-segments", type=int, default=SettledWindow().max_segments, metavar="N",
                     help="... for at most this many forgotten segments "
                          f"(default {SettledWindow().max_segments:,})")
    run.add_argument("--coordinator-period", type=float, default=60.0, metavar="SECONDS",
                     help="druid.coordinator.period: the planner balances once per period (and after server, rule "
                          "or config changes), in slices between events (default 60)")
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
