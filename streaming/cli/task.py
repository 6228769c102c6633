"""``segcoord task``: an ingestion task's requests to the lockbox agent."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from streaming.cli.common import CliError, add_kafka, bootstrap, json_arg, topics


def _segments_arg(args: argparse.Namespace) -> list[object]:
    """Descriptors from ``--segment JSON`` (repeatable) and ``--segments-file`` (a JSON list or JSON lines)."""
    import orjson

    objs: list[object] = [json_arg("--segment", text) for text in args.segment]
    if args.segments_file:
        path = Path(args.segments_file)
        try:
            text = sys.stdin.read() if args.segments_file == "-" else path.read_text()
        except OSError as e:
            raise CliError(f"{path}: {e.strerror or e}") from None
        try:
            loaded = orjson.loads(text) if text.lstrip().startswith("[") else [
                orjson.loads(line) for line in text.splitlines() if line.strip()]
        except orjson.JSONDecodeError as e:
            raise CliError(f"{path}: not JSON: {e}") from None
        objs.extend(loaded)
    if not objs:
        raise CliError("publish: give at least one --segment JSON or --segments-file FILE")
    return objs


def cmd_task(args: argparse.Namespace) -> int:
    """One request of an ingestion task; prints every decision seen for it as a JSON line."""
    import orjson

    from events.instant import parse_instant
    from events.interval import IntervalError
    from events.schema import decode_record
    from events.segment import SegmentDescriptor
    from streaming.task_client import RequestRefused, TaskClient, TaskClientError

    if args.timeout <= 0:
        raise CliError(f"--timeout: must be > 0, got {args.timeout}")
    segments = []
    if args.action == "publish":
        segments = [decode_record(SegmentDescriptor, obj, f"segments[{i}]")
                    for i, obj in enumerate(_segments_arg(args))]
    try:
        client = TaskClient(bootstrap(args), topics(args), args.task_id, args.group_id or args.task_id,
                            args.task_type, args.datasource, args.priority, timeout=args.timeout)
    except TaskClientError as e:
        raise CliError(str(e)) from None
    try:
        if args.action == "start":
            decision = client.start()
        elif args.action == "lock":
            parts = [int(p) for p in args.partition_ids.split(",")] if args.partition_ids else None
            decision = client.lock(args.interval, args.lock_type, args.granularity, partition_ids=parts,
                                   mode="try" if args.try_lock else None, timeout_ms=args.timeout_ms,
                                   version=args.version)
        elif args.action == "release":
            decision = client.release(args.interval)
        elif args.action == "allocate":
            try:
                timestamp = int(args.timestamp) if args.timestamp.isdigit() else parse_instant(args.timestamp)
            except ValueError as e:
                raise CliError(f"--timestamp: {e}") from None
            decision = client.allocate(timestamp, args.sequence_name, args.previous_segment_id,
                                       interval=args.interval, lock_granularity=args.lock_granularity,
                                       lock_type=args.lock_type, skip_lineage_check=args.skip_lineage_check)
        elif args.action == "publish":
            decision = client.publish(segments, json_arg("--start-metadata", args.start_metadata),  # type: ignore[arg-type]
                                      json_arg("--end-metadata", args.end_metadata),  # type: ignore[arg-type]
                                      kind=args.kind)
        else:
            decision = client.finish(args.status)
    except RequestRefused as e:
        for env in e.seen:
            print(orjson.dumps(env.to_json()).decode())
        print(f"segcoord: refused: {e}", file=sys.stderr)
        return 1
    except IntervalError as e:
        raise CliError(f"--interval: {e}") from None
    except (TaskClientError, ValueError) as e:
        raise CliError(str(e)) from None
    finally:
        client.close()
    for env in decision.seen:
        print(orjson.dumps(env.to_json()).decode())
    return 0


TASK_ACTIONS = {
    "start": "register the task (answered by task_registered)",
    "lock": "request a lock (waits through lock_waiting; exit 1 when denied)",
    "allocate": "allocate a segment id for a row (exit 1 when denied)",
    "publish": "publish segments (exit 1 when rejected)",
    "release": "release the task's locks on one interval (exit 1 when it holds none)",
    "finish": "end the task and release its locks",
}


def register(sub: Any) -> None:
    task = sub.add_parser("task", help="an ingestion task's requests to the lockbox agent; prints decisions as JSON")
    task_sub = task.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, helptext in TASK_ACTIONS.items():
        tp = task_sub.add_parser(name, help=helptext)
        tp.add_argument("--task-id", required=True)
        tp.add_argument("--datasource", required=True)
        tp.add_argument("--group-id", help="task group (default: the task id)")
        tp.add_argument("--task-type", default="index_kafka", help="Druid task type (default index_kafka)")
        tp.add_argument("--priority", type=int, help="lock priority (default: by task type)")
        tp.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the decision (default 30)")
        add_kafka(tp)
        tp.set_defaults(func=cmd_task)
        if name == "lock":
            tp.add_argument("--interval", required=True, metavar="START/END")
            tp.add_argument("--lock-type", default="exclusive", choices=("exclusive", "shared", "append", "replace"))
            tp.add_argument("--granularity", default="timeChunk", choices=("timeChunk", "segment"))
            tp.add_argument("--partition-ids", metavar="0,1,...", help="partitions of a segment lock")
            tp.add_argument("--try", dest="try_lock", action="store_true", help="denied at once if not free now")
            tp.add_argument("--timeout-ms", type=int, help="deny if still waiting after this much event time")
            tp.add_argument("--version", help="a segment lock's version or a timeChunk lock's preferred one")
        elif name == "release":
            tp.add_argument("--interval", required=True, metavar="START/END")
        elif name == "allocate":
            tp.add_argument("--timestamp", required=True, help="ISO-8601 instant or epoch milliseconds")
            tp.add_argument("--sequence-name", required=True)
            tp.add_argument("--previous-segment-id")
            tp.add_argument("--interval", metavar="START/END", help="the time chunk (default: an existing one)")
            tp.add_argument("--lock-granularity", default="timeChunk", choices=("timeChunk", "segment"))
            tp.add_argument("--lock-type", default="exclusive", choices=("exclusive", "shared", "append", "replace"))
            tp.add_argument("--skip-lineage-check", action="store_true")
        elif name == "publish":
            tp.add_argument("--segment", action="append", default=[], metavar="JSON",
                            help="a segment descriptor (Druid DataSegment JSON); repeatable")
            tp.add_argument("--segments-file", metavar="FILE",
                            help="a JSON list or JSON lines of descriptors; - = stdin")
            tp.add_argument("--start-metadata", metavar="JSON")
            tp.add_argument("--end-metadata", metavar="JSON")
            tp.add_argument("--kind", choices=("insert", "append", "replace"), help="publish kind (default insert)")
        elif name == "finish":
            tp.add_argument("--status", default="success", choices=("success", "failed"))
