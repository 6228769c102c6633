"""``segcoord upserts define|strategy|consolidate|replay``: upsert tables (docs/upserts.md)."""

from __future__ import annotations

import argparse
import time
import uuid
from pathlib import Path
from typing import Any

from streaming.cli.common import CliError, add_json, add_kafka, bootstrap, topics


def _print_json(doc: object) -> None:
    import orjson

    print(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS).decode())


_OPTIONS = {"primaryDataSource": "--primary", "appendDataSource": "--append", "keyColumns": "--key",
            "versionColumn": "--version-column", "tableTypeColumn": "--table-type-column"}


def _columns(text: str, option: str) -> tuple[str, ...]:
    cols = tuple(c.strip() for c in text.split(","))
    if not text.strip() or any(not c for c in cols):
        raise CliError(f"{option}: expected comma-separated column names, got {text!r}")
    return cols


def _produce(args: argparse.Namespace, event: Any) -> str:
    from events import Envelope, Instant
    from events.keys import partition_key
    from streaming.producer import EventProducer, ProduceError

    env = Envelope(event, uuid.uuid4().hex, Instant(int(time.time() * 1000)), partition_key(event) or "upserts")
    producer = EventProducer(bootstrap(args), topics(args))
    try:
        producer.send(env)
        producer.flush()
    except ProduceError as e:
        raise CliError(str(e)) from None
    return env.event_id


def cmd_define(args: argparse.Namespace) -> int:
    from coordinator.upserts import UpsertTable, UpsertTableError
    from events.upserts import UpsertTableSet

    for option, value in (("--stale-grace-ms", args.stale_grace_ms),
                          ("--consolidate-every-ms", args.consolidate_every_ms)):
        if value < 0:
            raise CliError(f"{option}: must be >= 0, got {value}")
    event = UpsertTableSet(name=args.name, append_data_source=args.append, primary_data_source=args.primary,
                           key_columns=_columns(args.key, "--key"), version_column=args.version_column,
                           table_type_column=args.table_type_column, stale_grace_millis=args.stale_grace_ms,
                           consolidation_period_millis=args.consolidate_every_ms)
    try:
        UpsertTable.of(event)
    except UpsertTableError as e:
        text = str(e)
        for field, option in _OPTIONS.items():
            text = text.replace(f"payload.{field}", option).replace(field, option)
        raise CliError(text) from None
    event_id = _produce(args, event)
    applied = args.wait <= 0 or _wait_for_strategy(args, args.name, args.wait)
    if args.json:
        _print_json({"eventId": event_id, "applied": applied})
    elif applied:
        print(f"upsert table {args.name}: defined (append {args.append}, primary {args.primary}, "
              f"key {','.join(event.key_columns)}, version column {args.version_column})")
    else:
        print(f"upsert table {args.name}: written, no strategy within {args.wait:g}s (is `segcoord run` running?)")
    return 0 if applied else 3


def _wait_for_strategy(args: argparse.Namespace, table: str, wait_s: float) -> bool:
    from streaming.upserts import UpsertStrategy

    client = UpsertStrategy(bootstrap(args), topics(args))
    try:
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            client.refresh(0.5)
            if table in client.tables():
                return True
        return False
    finally:
        client.close()


def cmd_strategy(args: argparse.Namespace) -> int:
    from events.interval import Interval, IntervalError
    from streaming.upserts import UnknownUpsertTable, UpsertStrategy

    interval = None
    if args.interval is not None:
        try:
            interval = Interval.parse(args.interval)
        except IntervalError as e:
            raise CliError(f"--interval: {e}") from None
    client = UpsertStrategy(bootstrap(args), topics(args))
    try:
        client.catch_up(1.0)
        try:
            record = client.record(args.name)
            filt = client.filter_for(args.name, interval)
        except UnknownUpsertTable as e:
            raise CliError(str(e)) from None
    finally:
        client.close()
    from coordinator.upserts import filter_terms

    if args.json:
        _print_json({**record, "filter": filt, "interval": None if interval is None else interval.iso()})
        return 0
    latest = record["latest"]
    print(f"upsert table {args.name}: {len(latest)} fresh keys in {record['appendDataSource']} "
          f"(their primary data in {record['primaryDataSource']} is superseded); filter: {filter_terms(filt)} terms"
          f"{'' if interval is None else ' over ' + interval.iso()}")
    for row in latest[:20]:
        key = ", ".join(f"{k}={v}" for k, v in row["key"].items())
        print(f"  {key}  version {row['version']}{'  (tombstone)' if row['tombstone'] else ''}")
    if len(latest) > 20:
        print(f"  ... {len(latest) - 20} more (--json for all)")
    _print_json(filt)
    return 0


def cmd_consolidate(args: argparse.Namespace) -> int:
    from events.upserts import UpsertConsolidationAsked

    event_id = _produce(args, UpsertConsolidationAsked(table=args.name))
    if args.json:
        _print_json({"eventId": event_id})
    else:
        print(f"upsert table {args.name}: consolidation asked; the upsert agent answers with "
              "consolidation_requested on the cluster topic")
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from coordinator.upserts import filter_terms
    from coordinator.upserts.replay import UpsertReplay
    from streaming.jsonlines import read_envelopes

    path = Path(args.file)
    replay = UpsertReplay()
    for env in read_envelopes(path):
        try:
            replay.apply(env)
        except ValueError as e:
            raise CliError(f"{path}: event {env.event_id} ({env.event_type}): {e}") from None
    report = replay.report()
    if args.json:
        _print_json(report)
        return 0
    if not report["tables"]:
        print("no upsert table declared in the file")
    for name, t in report["tables"].items():
        print(f"upsert table {name}: {len(t['latest'])} keys, {len(t['stale'])} segments cleanup would mark unused, "
              f"filter {filter_terms(t['filter'])} terms")
        for row in t["latest"]:
            key = ", ".join(f"{k}={v}" for k, v in row["key"].items())
            print(f"  {key}  version {row['version']}{'  (tombstone)' if row['tombstone'] else ''}")
        for sid in t["stale"]:
            print(f"  stale: {sid}{'  (' + t['rejected'][sid] + ')' if sid in t['rejected'] else ''}")
        _print_json(t["filter"])
    return 0


def register(sub: Any) -> None:
    up = sub.add_parser("upserts", help="upsert tables: versioned pipeline partitions over append + primary tables")
    usub = up.add_subparsers(dest="action", metavar="ACTION", required=True)

    d = usub.add_parser("define", help="declare (or redefine) an upsert table (upsert_table_set on cluster)")
    d.add_argument("name", metavar="NAME")
    d.add_argument("--append", required=True, metavar="DS", help="the append data source (re-ingests)")
    d.add_argument("--primary", required=True, metavar="DS", help="the primary data source (consolidated)")
    d.add_argument("--key", required=True, metavar="COL,COL", help="the partition key columns, e.g. source,date")
    d.add_argument("--version-column", required=True, metavar="COL")
    d.add_argument("--table-type-column", default="table_type", metavar="COL",
                   help="the constant column telling append from primary rows (default table_type)")
    d.add_argument("--stale-grace-ms", type=int, default=900_000, metavar="MS",
                   help="upsertStaleGraceMillis: how long a stale append segment stays used (default 900000)")
    d.add_argument("--consolidate-every-ms", type=int, default=86_400_000, metavar="MS",
                   help="consolidationPeriodMillis: the consolidation schedule (default daily; 0: never)")
    d.add_argument("--wait", type=float, default=20.0, metavar="SECONDS",
                   help="wait until the upsert agent wrote the table's strategy (0: do not wait)")
    add_json(d, '{"eventId", "applied"}')
    add_kafka(d)
    d.set_defaults(func=cmd_define)

    s = usub.add_parser("strategy", help="the table's current strategy and Druid filter (from upsert-strategy)")
    s.add_argument("name", metavar="NAME")
    s.add_argument("--interval", metavar="I", help="narrow the filter to a query interval (ISO start/end)")
    add_json(s, "the strategy record with the filter for --interval")
    add_kafka(s)
    s.set_defaults(func=cmd_strategy)

    c = usub.add_parser("consolidate", help="ask for a consolidation of the table now")
    c.add_argument("name", metavar="NAME")
    add_json(c, '{"eventId"}')
    add_kafka(c)
    c.set_defaults(func=cmd_consolidate)

    r = usub.add_parser("replay", help="fold a JSON-lines file of envelopes offline: latest versions, stale "
                                       "segments, filter per table")
    r.add_argument("file", metavar="FILE.jsonl")
    add_json(r, '{"tables": {NAME: {"latest": [...], "stale": [...], "filter": {...}}}}')
    r.set_defaults(func=cmd_replay)
