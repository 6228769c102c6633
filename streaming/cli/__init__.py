"""``segcoord``: the command line of the segment coordinator.

One module per command group, each with a ``register(subparsers)``; the shared options (``--bootstrap``,
``--topic-prefix``, ``--json``, ``--home``) are declared once in :mod:`streaming.cli.common`. Every
subcommand prints one clear line and exits non-zero on bad input or a failed dependency; ``--help`` at
every level lists what is there.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from streaming.cli import balance, broker, demo, events, historical, locks, log, operate, run, task, timeline, upserts
from streaming.cli.common import CliError

__all__ = ["CliError", "build_parser", "main"]

GROUPS = (demo, run, broker, timeline, locks, balance, log, historical, events, task, operate, upserts)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="segcoord",
        description="An event-sourced streaming segment coordinator (Druid-style) on Kafka.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for group in GROUPS:
        group.register(sub)
    operate.register_watch(sub)
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
