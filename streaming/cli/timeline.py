"""``segcoord timeline``: fold a file of segment events offline."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from streaming.cli.common import CliError, add_json


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


def register(sub: Any) -> None:
    tl = sub.add_parser("timeline", help="the segment timeline (standby / visible / overshadowed)")
    tlsub = tl.add_subparsers(dest="action", metavar="ACTION", required=True)
    rp = tlsub.add_parser("replay", help="fold a JSON-lines file of segment events; print states and visible set")
    rp.add_argument("file")
    add_json(rp, '{"segments": {id: state}, "visible": {dataSource: [id]}}')
    rp.add_argument("--at", type=int, metavar="N", help="apply the events of lines 1..N only")
    rp.set_defaults(func=cmd_timeline_replay)
    lk = tlsub.add_parser("lookup", help="the visible segments of a data source over an interval")
    lk.add_argument("file")
    lk.add_argument("--datasource", required=True)
    lk.add_argument("--interval", required=True, metavar="START/END")
    lk.add_argument("--at", type=int, metavar="N", help="apply the events of lines 1..N only")
    add_json(lk, '[{"segment": id, "intervals": ["start/end", ...]}]')
    lk.set_defaults(func=cmd_timeline_lookup)
