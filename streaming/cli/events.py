"""``segcoord events``: the event contract."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def cmd_events_validate(args: argparse.Namespace) -> int:
    from streaming.jsonlines import read_envelopes

    count = sum(1 for _ in read_envelopes(Path(args.file)))
    print(f"{count} valid events in {args.file}")
    return 0


def register(sub: Any) -> None:
    evs = sub.add_parser("events", help="the event contract")
    esub = evs.add_subparsers(dest="action", metavar="ACTION", required=True)
    validate = esub.add_parser("validate", help="validate a JSON-lines file of envelopes")
    validate.add_argument("file")
    validate.set_defaults(func=cmd_events_validate)
