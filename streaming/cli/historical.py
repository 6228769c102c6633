"""``segcoord historical``: a simulated historical server."""

from __future__ import annotations

import argparse
from typing import Any

from coordinator.placement.liveness import DEFAULT_HEARTBEAT_MS
from streaming.cli.common import CliError, add_kafka, bootstrap, topics


def cmd_historical(args: argparse.Namespace) -> int:
    import logging
    import signal
    import sys
    import threading

    from streaming.historical import Historical, parse_size

    try:
        size = parse_size(args.max_size)
    except ValueError as e:
        raise CliError(f"--max-size: {e}") from None
    if args.load_ms < 0:
        raise CliError(f"--load-ms: must be >= 0, got {args.load_ms}")
    if args.heartbeat_ms <= 0:
        raise CliError(f"--heartbeat-ms: must be > 0, got {args.heartbeat_ms}")
    logging.basicConfig(stream=sys.stdout, level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    server = Historical(args.name, args.tier, size, bootstrap(args), topics(args), args.load_ms, args.heartbeat_ms)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(f"historical {args.name} [{args.tier}], {size} bytes, serving (SIGTERM or Ctrl-C stops it)", flush=True)
    server.run(stop)
    return 0


def register(sub: Any) -> None:
    hist = sub.add_parser("historical", help="a simulated historical: executes its load/drop commands, announces")
    hist.add_argument("--name", required=True)
    hist.add_argument("--tier", default="_default_tier")
    hist.add_argument("--max-size", required=True, help="10GB, 512MiB or bytes")
    hist.add_argument("--load-ms", type=int, default=50, help="simulated time to load one segment (default 50)")
    hist.add_argument("--heartbeat-ms", type=int, default=DEFAULT_HEARTBEAT_MS,
                      help=f"period of its server_heartbeat on cluster (default {DEFAULT_HEARTBEAT_MS}; the "
                           f"coordinator decides server_lost after --server-timeout-millis of silence)")
    add_kafka(hist)
    hist.set_defaults(func=cmd_historical)
