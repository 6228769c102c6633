"""``segcoord demo``: the coordinator at work on a cluster of its own (streaming/demo/)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from streaming import config
from streaming.cli.common import add_bootstrap, add_home


def cmd_demo(args: argparse.Namespace) -> int:
    from streaming.demo import run_demo

    return run_demo(bootstrap=args.bootstrap, home=Path(args.home) if args.home else config.home_dir(),
                    out=Path(args.out), quick=args.quick, keep=args.keep)


def register(sub: Any) -> None:
    demo = sub.add_parser("demo", help="the coordinator at work for ~2 minutes on a cluster of its own, with a report")
    add_bootstrap(demo, "use this broker instead of the demo's own local one")
    add_home(demo, "home of the demo's broker and state: HOME/demo (default $SEGCOORD_HOME)")
    demo.add_argument("--out", default="demo-report", help="folder of the report (index.html, plots, logs)")
    demo.add_argument("--quick", action="store_true", help="a shortened workload (the CI smoke test)")
    demo.add_argument("--keep", action="store_true", help="leave the broker, the service and the historicals running")
    demo.set_defaults(func=cmd_demo)
