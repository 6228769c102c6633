"""``segcoord run``: the coordinator service (timeline, lockbox and planner agents)."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from streaming import config
from streaming.cli.common import CliError, add_kafka, broker, topics


def cmd_run(args: argparse.Namespace) -> int:
    from streaming.admin import create_topics
    from streaming.service.app import run_service
    from streaming.service.outage import until_reachable
    from streaming.service.state import StateStoreError
    from streaming.service.worker_identity import DuplicateWorkerError

    tps = topics(args)
    address = args.bootstrap or os.environ.get("SEGCOORD_BOOTSTRAP")
    if args.plan_every <= 0:
        raise CliError(f"--plan-every: must be a positive number of seconds, got {args.plan_every}")
    http = None
    if args.http:
        from streaming.http import parse_address

        try:
            http = parse_address(args.http)
        except ValueError as e:
            raise CliError(f"--http: {e}") from None
    if not address:
        address = broker(args).start()  # starts the local broker, or reuses the running one
    def stop(_signum: int, _frame: Any) -> None:  # a stop while waiting for the broker: nothing is open yet
        raise SystemExit(0)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    until_reachable("creating the topics", lambda: create_topics(address, tps))
    state_dir = Path(args.state_dir) if args.state_dir else config.home_dir() / "service" / tps.prefix.rstrip(".")
    print(f"segcoord run: timeline, lockbox and planner agents on {address}, topics {tps.prefix}*, "
          f"state {state_dir}", flush=True)
    spark_balancer = None
    if args.balancer == "spark":
        command = [sys.executable, "-m", "streaming.cli", "balancer", "run", "--bootstrap", address,
                   "--topic-prefix", tps.prefix, "--checkpoint", str(state_dir / "balancer-checkpoint")]
        for tier in args.balancer_tier or ():
            command += ["--tier", tier]
        spark_balancer = subprocess.Popen(command, stdin=subprocess.DEVNULL)
        print(f"segcoord run: Spark balancer started (pid {spark_balancer.pid}); the planner agent leaves the "
              f"balancing stages to it", flush=True)
    try:
        return run_service(address, tps, state_dir, loglevel=args.log_level, plan_every_s=args.plan_every,
                           balancing=args.balancer == "planner", incremental=args.planner == "incremental",
                           http=http, balancer_alive=None if spark_balancer is None
                           else (lambda: spark_balancer.poll() is None), worker_id=args.worker_id)
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


def register(sub: Any) -> None:
    run = sub.add_parser("run", help="run the coordinator service (timeline, lockbox and planner agents) until "
                                     "SIGTERM/SIGINT")
    add_kafka(run)
    run.add_argument("--state-dir", help="RocksDB state folder (default $SEGCOORD_HOME/service/<prefix>)")
    run.add_argument("--worker-id", metavar="ID",
                     help="this worker's identity in the consumer group (letters, digits, '._-'); default: the host "
                          "name and a digest of --state-dir. Several workers (each its own --state-dir) split the "
                          "partitions of segments and lock-requests; one of them, elected, runs the planner")
    run.add_argument("--log-level", default="info", choices=("crit", "error", "warn", "info", "debug"),
                     help="the service's own lines (one per planning decision batch) at info, the default; the "
                          "libraries' at warn or above")
    run.add_argument("--http", metavar="HOST:PORT",
                     help="serve Druid's coordinator API, and Prometheus metrics at /metrics, there (Druid's "
                          "coordinator port is 8081: 127.0.0.1:8081)")
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
