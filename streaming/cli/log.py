"""``segcoord replay`` and ``segcoord audit``: the whole log, folded or checked."""

from __future__ import annotations

import argparse
from typing import Any

from streaming.cli.common import CliError, add_json, add_kafka, bootstrap, topics


def cmd_replay(args: argparse.Namespace) -> int:
    import orjson

    from streaming.replay import ReplayError, Until, replay, text

    try:
        until = Until.parse(args.until) if args.until else None
        fold = replay(bootstrap(args), topics(args), until)
    except ReplayError as e:
        raise CliError(str(e)) from None
    print(orjson.dumps(fold.to_json()).decode() if args.json else text(fold))
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    import orjson

    from streaming.replay import ReplayError, as_json, audit_records, read_log

    try:
        report = audit_records(read_log(bootstrap(args), topics(args)), topics(args),
                               command_timeout_ms=args.command_timeout_ms)
    except ReplayError as e:
        raise CliError(str(e)) from None
    violations = report.violations
    if args.json:
        print(orjson.dumps({"violations": as_json(violations), "timelineBehind": len(report.behind)}).decode())
    else:
        for v in violations:
            print(v)
        if report.behind:
            print(f"timeline agent behind: {len(report.behind)} change(s) of input it has not read yet")
        print(f"{len(violations)} violation(s)")
    return 1 if violations else 0


def register(sub: Any) -> None:
    rep = sub.add_parser("replay", help="rebuild timeline, locks and placement from the topics as of a point")
    rep.add_argument("--until", metavar="TIME|TOPIC:PARTITION:OFFSET", help="stop there (default: the end)")
    add_json(rep)
    add_kafka(rep)
    rep.set_defaults(func=cmd_replay)
    aud = sub.add_parser("audit", help="check the whole log's invariants; exit 1 when any is violated")
    aud.add_argument("--command-timeout-ms", type=int, default=15 * 60_000,
                     help="a command unanswered this long before the log's end is a violation (default 15 min)")
    add_json(aud)
    add_kafka(aud)
    aud.set_defaults(func=cmd_audit)
