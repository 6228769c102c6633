"""``segcoord demo``: the demonstration (streaming/demo.py)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from streaming import config
from streaming.cli.common import add_bootstrap, add_home


def cmd_demo(args: argparse.Namespace) -> int:
    from streaming.demo import run_demo

    return run_demo(bootstrap=args.bootstrap, home=Path(args.home) if args.home else config.home_dir(),
                    keep_broker=args.keep_broker)


def register(sub: Any) -> None:
    demo = sub.add_parser("demo", help="start the local broker, create topics, round-trip one event of every type")
    add_bootstrap(demo, "use this broker instead of starting the local one")
    add_home(demo, "local broker home (default $SEGCOORD_HOME)")
    demo.add_argument("--keep-broker", action="store_true", help="leave a broker the demo started running")
    demo.set_defaults(func=cmd_demo)
