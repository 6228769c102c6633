"""``segcoord events``: the event contract."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def cmd_events_validate(args: argparse.Namespace) -> int:
    from coordinator.readmodel.validate import PayloadError, check_payload
    from streaming.jsonlines import JsonLinesError, read_numbered_envelopes

    count = 0
    for lineno, env in read_numbered_envelopes(Path(args.file)):
        try:
            check_payload(env.event)  # rules and dynamic config: what the planner would refuse
        except PayloadError as e:
            raise JsonLinesError(f"{args.file}:{lineno}: {e}") from None
        count += 1
    print(f"{count} valid events in {args.file}")
    return 0


def register(sub: Any) -> None:
    evs = sub.add_parser("events", help="the event contract")
    esub = evs.add_subparsers(dest="action", metavar="ACTION", required=True)
    validate = esub.add_parser("validate", help="validate a JSON-lines file of envelopes, payloads included "
                               "(rules and dynamic config are parsed as the planner parses them)")
    validate.add_argument("file")
    validate.set_defaults(func=cmd_events_validate)
