"""``segcoord locks``: the task lockbox."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from streaming.cli.common import add_json


def cmd_locks_replay(args: argparse.Namespace) -> int:
    import orjson

    from streaming.locks_replay import replay_json, replay_text

    if args.json:
        print(orjson.dumps(replay_json(Path(args.file))).decode())
    else:
        print(replay_text(Path(args.file)))
    return 0


def register(sub: Any) -> None:
    from streaming.cli.operate import register_locks_live

    lk_cmd = sub.add_parser("locks", help="the task lockbox: live locks and waiting requests (no ACTION), or "
                                          "`locks replay FILE`")
    register_locks_live(lk_cmd)
    lksub = lk_cmd.add_subparsers(dest="action", metavar="ACTION", required=False)
    lrp = lksub.add_parser("replay", help="run a JSON-lines file of task requests; print decisions and final locks")
    lrp.add_argument("file")
    add_json(lrp, '{"decisions": [...], "locks": [...]}')
    lrp.set_defaults(func=cmd_locks_replay)
