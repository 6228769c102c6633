"""The operator's commands: read the coordinator's state, change rules, config and servers.

Reads fold the whole log with the coordinator's own folds (:mod:`streaming.readmodel`) and print the
answers of :mod:`coordinator.readmodel`; every read takes ``--json``. Writes validate the payload with
the same pure validators first, send one event and wait for the coordinator worker to apply it
(:mod:`streaming.writes`); the outcome or the reason (with the field path) is printed.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from pathlib import Path
from typing import Any

from streaming.cli.common import CliError, add_json, add_kafka, bootstrap, topics

WAIT_HELP = "seconds to wait for the coordinator worker to apply the write (default 20)"


def _view(args: argparse.Namespace) -> Any:
    from streaming.readmodel import from_log
    from streaming.replay import ReplayError

    try:
        return from_log(bootstrap(args), topics(args))
    except ReplayError as e:
        raise CliError(str(e)) from None


def _print_json(doc: object) -> None:
    import orjson

    print(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS).decode())


def _when(ms: int | None) -> str:
    from events.instant import format_instant

    return "-" if not ms else format_instant(ms)


def _submit(args: argparse.Namespace, event: Any, what: str) -> int:
    from coordinator.readmodel.validate import PayloadError
    from streaming.writes import WriteError, submit

    try:
        ack = submit(bootstrap(args), topics(args), event, wait_s=args.wait)
    except PayloadError as e:
        raise CliError(f"{what}: refused: {e}") from None
    except WriteError as e:
        raise CliError(f"{what}: {e}") from None
    if args.json:
        _print_json({"eventId": ack.event_id, "position": ack.position, "applied": ack.applied})
    elif ack.applied:
        print(f"{what}: applied by the coordinator ({ack.position}, {ack.waited_s:.1f}s)")
    else:
        print(f"{what}: written at {ack.position}, not applied within {args.wait:g}s (is `segcoord run` "
              "running?); it takes effect when the worker reads it")
    return 0 if ack.applied else 3


def _add_write(p: argparse.ArgumentParser) -> None:
    p.add_argument("--wait", type=float, default=20.0, metavar="SECONDS", help=WAIT_HELP)
    add_json(p, '{"eventId", "position", "applied"}')
    add_kafka(p)


# -- rules -----------------------------------------------------------------------------
def cmd_rules_get(args: argparse.Namespace) -> int:
    from coordinator.readmodel import placement

    p = _view(args).placement
    doc: Any = placement.rules_of(p, args.datasource) if args.datasource else placement.rules(p)
    if args.json:
        _print_json(doc)
        return 0
    chains = {args.datasource: doc} if args.datasource else doc
    for ds, rules in chains.items():
        print(f"{ds}: " + (" | ".join(_rule_text(r) for r in rules) if rules else "(none: follows _default)"))
    return 0


def _rule_text(rule: dict[str, Any]) -> str:
    extra = {k: v for k, v in rule.items() if k != "type"}
    return rule["type"] + (" " + " ".join(f"{k}={v}" for k, v in extra.items()) if extra else "")


def cmd_rules_set(args: argparse.Namespace) -> int:
    import orjson

    from events.cluster import RulesSet

    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
    except OSError as e:
        raise CliError(f"{args.file}: {e.strerror or e}") from None
    try:
        rules = orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise CliError(f"{args.file}: not JSON: {e}") from None
    if not isinstance(rules, list) or not all(isinstance(r, dict) for r in rules):
        raise CliError(f"{args.file}: expected a JSON list of rule objects")
    return _submit(args, RulesSet(data_source=args.datasource, rules=tuple(rules)), f"rules of {args.datasource}")


def cmd_rules_history(args: argparse.Namespace) -> int:
    from events.cluster import RulesSet
    from events.instant import format_instant
    from streaming.replay import ReplayError, read_log

    try:
        entries = [{"at": format_instant(r.envelope.occurred_at), "position": r.position,
                    "eventId": r.envelope.event_id, "rules": [dict(x) for x in r.envelope.event.rules]}
                   for r in read_log(bootstrap(args), topics(args))
                   if isinstance(r.envelope.event, RulesSet) and r.envelope.event.data_source == args.datasource]
    except ReplayError as e:
        raise CliError(str(e)) from None
    if args.json:
        _print_json(entries)
    else:
        for entry in entries:
            print(f"{entry['at']}  {entry['position']}  " + " | ".join(_rule_text(r) for r in entry["rules"]))
        if not entries:
            print(f"no rules were ever set for {args.datasource}")
    return 0


# -- config ----------------------------------------------------------------------------
def cmd_config_get(args: argparse.Namespace) -> int:
    from coordinator.readmodel import placement

    doc = placement.config(_view(args).placement)
    if args.json:
        _print_json(doc)
    else:
        for key, value in doc.items():
            print(f"{key} = {value}")
    return 0


def cmd_config_set(args: argparse.Namespace) -> int:
    from coordinator.readmodel.validate import PayloadError, check_config, parse_assignments
    from events.cluster import DynamicConfigSet

    try:
        update = parse_assignments(args.assignments)
        check_config(update, path="config")
    except PayloadError as e:
        raise CliError(f"config set: refused: {e}") from None
    return _submit(args, DynamicConfigSet(config=update), "config " + ", ".join(sorted(update)))


# -- servers ---------------------------------------------------------------------------
def cmd_servers(args: argparse.Namespace) -> int:
    from coordinator.readmodel import placement

    words = list(args.words)
    if words:
        return _server_change(args, words)
    view = _view(args)
    rows = placement.servers(view.placement, view.last_heard)
    if args.json:
        _print_json(rows)
        return 0
    print(f"{'SERVER':16s} {'TIER':14s} {'USED':>12s} {'MAX':>12s} {'SEGS':>6s} {'LOAD':>5s} {'DROP':>5s} "
          f"{'STATE':14s} LAST HEARD")
    for s in rows:
        print(f"{s['name']:16s} {s['tier']:14s} {s['currSize']:12d} {s['maxSize']:12d} {s['segments']:6d} "
              f"{s['segmentsToLoad']:5d} {s['segmentsToDrop']:5d} "
              f"{'decommissioning' if s['decommissioning'] else 'active':14s} {_when(s['lastHeard'])}")
    if not rows:
        print("no servers have joined")
    return 0


def _server_change(args: argparse.Namespace, words: list[str]) -> int:
    from events.cluster import ServerDecommissioned, ServerRecommissioned

    if len(words) != 2 or words[0] not in ("decommission", "recommission"):
        raise CliError(f"servers {' '.join(words)}: expected `servers`, `servers decommission NAME` or "
                       "`servers recommission NAME`")
    action, name = words
    known = _view(args).placement.tier_of
    if name not in known:
        raise CliError(f"servers {action} {name}: no such server (joined: {', '.join(sorted(known)) or 'none'})")
    event = ServerDecommissioned(server=name) if action == "decommission" else ServerRecommissioned(server=name)
    return _submit(args, event, f"{action} {name}")


# -- load status, data sources, segments -------------------------------------------------
def cmd_loadstatus(args: argparse.Namespace) -> int:
    from coordinator.readmodel import placement

    view = _view(args)
    p, now = view.placement, view.now
    if args.simple:
        doc: Any = placement.load_status_simple(p, now)
    elif args.full:
        doc = placement.load_status_full(p, now)
    else:
        doc = {"loadStatus": placement.load_status(p, now), "tiers": placement.tier_health(p, now)}
    if args.json:
        _print_json(doc)
        return 0
    if args.simple:
        for ds, n in doc.items():
            print(f"{ds}: {n} segment(s) left to load")
    elif args.full:
        for tier, by_ds in doc.items():
            for ds, n in by_ds.items():
                print(f"{tier} {ds}: {n} replica(s) left to load")
    else:
        for ds, pct in doc["loadStatus"].items():
            print(f"{ds}: {pct:.1f}% loaded")
        for tier, h in doc["tiers"].items():
            print(f"tier {tier}: {h['segments']} segments, {h['unavailable']} unavailable, "
                  f"{h['underReplicated']} under-replicated")
    if not doc or (not args.simple and not args.full and not doc["loadStatus"]):
        print("no used segments to load")
    return 0


def cmd_datasources(args: argparse.Namespace) -> int:
    from coordinator.readmodel import placement

    view = _view(args)
    rows = placement.data_source_summary(view.placement, view.now)
    if args.json:
        _print_json(rows)
        return 0
    for r in rows:
        print(f"{r['name']:20s} {r['segments']:6d} segments {r['size']:14d} bytes {r['replicas']:6d} replicas "
              f"{r['loaded']:6.1f}% loaded")
    if not rows:
        print("no data source has used segments")
    return 0


def cmd_segments(args: argparse.Namespace) -> int:
    from coordinator.readmodel import timeline

    words = list(args.words)
    if words and words[0] in ("mark-unused", "mark-used"):
        return _mark(args, words[0], words[1:])
    if words and words[0] == "import":
        return _import(args, words[1:])
    if len(words) != 1:
        raise CliError("segments: expected `segments DATASOURCE [--interval I] [--state S]` or "
                       "`segments mark-unused|mark-used ID...`")
    interval = _interval(args.interval) if args.interval else None
    view = _view(args)
    rows = timeline.segments(view.timelines, view.placement, words[0], interval, args.state)
    if args.json:
        _print_json(rows)
        return 0
    for r in rows:
        print(f"{r['state']:12s} {r['segment']}  {r['size']} bytes  on {', '.join(r['servers']) or '-'}")
    if not rows:
        print(f"no segments of {words[0]}" + (f" in state {args.state}" if args.state else "")
              + (f" overlapping {interval.iso()}" if interval else ""))
    return 0


def _import(args: argparse.Namespace, files: list[str]) -> int:
    """``segments import FILE.json``: Druid segment metadata (a JSON array of DataSegment objects, or an object
    with a ``segments`` array) checked here field by field, then imported through the lockbox, one
    ``segments_import_requested`` per data source and per :data:`~events.limits.MAX_SEGMENTS_PER_REQUEST`."""
    import json
    from pathlib import Path

    from events.limits import MAX_SEGMENTS_PER_REQUEST
    from events.schema import EventValidationError, decode_record
    from events.segment import SegmentDescriptor
    from events.tasks import SegmentsImportRequested

    if len(files) != 1:
        raise CliError("segments import: expected `segments import FILE.json`")
    path = Path(files[0])
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise CliError(f"segments import: {path}: {e}") from None
    items = doc.get("segments") if isinstance(doc, dict) else doc
    if not isinstance(items, list) or not items:
        raise CliError(f"segments import: {path}: expected a non-empty JSON array of segments "
                       "(or an object with a `segments` array)")
    segments: list[SegmentDescriptor] = []
    for i, obj in enumerate(items):
        try:
            segments.append(decode_record(SegmentDescriptor, obj, f"segments[{i}]"))
        except EventValidationError as e:
            raise CliError(f"segments import: {path}: {e}") from None
    by_source: dict[str, list[SegmentDescriptor]] = {}
    for seg in segments:
        by_source.setdefault(seg.data_source, []).append(seg)
    code = 0
    for ds, segs in sorted(by_source.items()):
        for start in range(0, len(segs), MAX_SEGMENTS_PER_REQUEST):
            chunk = tuple(segs[start:start + MAX_SEGMENTS_PER_REQUEST])
            request = SegmentsImportRequested(request_id=f"import-{uuid.uuid4().hex}", segments=chunk,
                                              source=str(path.name))
            code = max(code, _submit(args, request, f"import {len(chunk)} segment(s) of {ds} "
                                                    f"(request {request.request_id})"))
    return code


def _interval(text: str, name: str = "--interval") -> Any:
    from events.interval import Interval, IntervalError

    try:
        return Interval.parse(text)
    except IntervalError as e:
        raise CliError(f"{name} {text!r}: {e}") from None


def _mark(args: argparse.Namespace, action: str, ids: list[str]) -> int:
    """A mark request on ``lock-requests``: the lockbox writes the sealed mark (operators hold no publish key;
    an unsealed mark written straight to ``segments`` is dead-lettered, docs/security.md)."""
    from events.segment import SegmentId, SegmentIdError
    from events.tasks import SegmentsMarkUnusedRequested, SegmentsMarkUsedRequested

    if not ids:
        raise CliError(f"segments {action}: give at least one segment id")
    for i, text in enumerate(ids):
        try:
            SegmentId.parse(text)
        except SegmentIdError as e:
            raise CliError(f"segments {action}: ID[{i}]: {e}") from None
    view = _view(args)
    used = {str(s) for s in view.placement.used}
    if action == "mark-unused":
        wrong = [t for t in ids if t not in used]
        why = "not a used segment"
    else:
        wrong = [t for t in ids if t in used or t not in view.descriptors]
        why = "already used or never published"
    if wrong:
        raise CliError(f"segments {action}: {why}: {', '.join(wrong)}")
    sources = {SegmentId.parse(t).data_source for t in ids}
    if len(sources) > 1:
        raise CliError(f"segments {action}: one data source at a time, got {', '.join(sorted(sources))}")
    ds = sources.pop()
    reason = args.reason or f"{'marked unused' if action == 'mark-unused' else 'marked used'} by the operator"
    request_id = f"mark-{uuid.uuid4().hex}"
    if action == "mark-unused":
        return _submit(args, SegmentsMarkUnusedRequested(request_id=request_id, data_source=ds,
                                                         segment_ids=tuple(ids), reason=reason),
                       f"mark-unused {len(ids)} segment(s) (request {request_id}, through the lockbox)")
    return _submit(args, SegmentsMarkUsedRequested(request_id=request_id, data_source=ds,
                                                   segments=tuple(view.descriptors[t] for t in ids), reason=reason),
                   f"mark-used {len(ids)} segment(s) (request {request_id}, through the lockbox)")


# -- tasks, locks, lookup ------------------------------------------------------------------
def cmd_tasks(args: argparse.Namespace) -> int:
    from coordinator.readmodel import locks

    rows = locks.tasks(_view(args).lockbox)
    if args.json:
        _print_json(rows)
        return 0
    for t in rows:
        print(f"{t['taskId']:30s} {t['type']:16s} {t['dataSource']:16s} p{t['priority']:<4d} "
              f"{len(t['locks'])} lock(s)")
    if not rows:
        print("no running tasks")
    return 0


def cmd_locks_live(args: argparse.Namespace) -> int:
    from coordinator.readmodel import locks

    box = _view(args).lockbox
    doc = {"locks": locks.locks(box), "waiting": locks.waiters(box)}
    if args.json:
        _print_json(doc)
        return 0
    for lk in doc["locks"]:
        print(f"lock {lk['lockId']}  {lk['dataSource']} {lk['interval']} {lk['type']}/{lk['granularity']} "
              f"v{lk['version']} p{lk['priority']}  held by {', '.join(lk['holders'])}"
              f"{'  REVOKED' if lk['revoked'] else ''}")
    for w in doc["waiting"]:
        print(f"waiting {w['requestId']}  {w['taskId']}  {w['dataSource']} {w['interval']} {w['type']} "
              f"since {_when(w['since'])}")
    print(f"{len(doc['locks'])} live lock(s), {len(doc['waiting'])} waiting request(s)")
    return 0


def cmd_lookup(args: argparse.Namespace) -> int:
    from coordinator.readmodel import timeline

    interval = _interval(args.interval, "START/END")
    rows = timeline.lookup(_view(args).timelines, args.datasource, interval)
    if args.json:
        _print_json(rows)
        return 0
    for r in rows:
        print(f"{r['segment']}  {', '.join(r['intervals'])}")
    if not rows:
        print(f"nothing of {args.datasource} is queryable in {interval.iso()}")
    return 0


def register(sub: Any) -> None:
    rules = sub.add_parser("rules", help="load/drop rules per data source (Druid's retention rules)")
    rsub = rules.add_subparsers(dest="action", metavar="ACTION", required=True)
    get = rsub.add_parser("get", help="every data source's rules, or one's")
    get.add_argument("datasource", nargs="?", metavar="DATASOURCE")
    add_json(get)
    add_kafka(get)
    get.set_defaults(func=cmd_rules_get)
    rset = rsub.add_parser("set", help="replace a data source's rules (_default: the cluster's) from FILE.json or -")
    rset.add_argument("datasource", metavar="DATASOURCE")
    rset.add_argument("file", metavar="FILE.json|-")
    _add_write(rset)
    rset.set_defaults(func=cmd_rules_set)
    hist = rsub.add_parser("history", help="every rules change of a data source, oldest first")
    hist.add_argument("datasource", metavar="DATASOURCE")
    add_json(hist)
    add_kafka(hist)
    hist.set_defaults(func=cmd_rules_history)

    cfg = sub.add_parser("config", help="the coordinator's dynamic configuration")
    csub = cfg.add_subparsers(dest="action", metavar="ACTION", required=True)
    cget = csub.add_parser("get", help="every key with its value (defaults filled in)")
    add_json(cget)
    add_kafka(cget)
    cget.set_defaults(func=cmd_config_get)
    cset = csub.add_parser("set", help="merge KEY=VALUE pairs into the config (VALUE is JSON or a string)")
    cset.add_argument("assignments", nargs="+", metavar="KEY=VALUE")
    _add_write(cset)
    cset.set_defaults(func=cmd_config_set)

    srv = sub.add_parser("servers", help="servers (tier, size, used, queue, decommissioning, last heard); "
                                         "`servers decommission|recommission NAME`")
    srv.add_argument("words", nargs="*", metavar="[decommission|recommission NAME]")
    _add_write(srv)
    srv.set_defaults(func=cmd_servers)

    ls = sub.add_parser("loadstatus", help="percent loaded per data source, unavailable and under-replicated per "
                                           "tier (Druid's loadstatus)")
    mode = ls.add_mutually_exclusive_group()
    mode.add_argument("--simple", action="store_true", help="segments left to load per data source")
    mode.add_argument("--full", action="store_true", help="replicas left to load per tier and data source")
    add_json(ls)
    add_kafka(ls)
    ls.set_defaults(func=cmd_loadstatus)

    dss = sub.add_parser("datasources", help="data sources with used segments: counts, bytes, percent loaded")
    add_json(dss)
    add_kafka(dss)
    dss.set_defaults(func=cmd_datasources)

    segs = sub.add_parser("segments", help="`segments DATASOURCE`: segments with their timeline state; "
                                           "`segments mark-unused|mark-used ID...`: asks the lockbox, which writes "
                                           "the sealed mark (no publish key needed; operator role); "
                                           "`segments import FILE.json`: "
                                           "Druid segment metadata, imported through the lockbox")
    segs.add_argument("words", nargs="+",
                      metavar="DATASOURCE | mark-unused ID... | mark-used ID... | import FILE.json")
    segs.add_argument("--interval", metavar="START/END", help="only segments overlapping it")
    segs.add_argument("--state", choices=("visible", "standby", "overshadowed", "offline"))
    segs.add_argument("--reason", help="with mark-unused / mark-used: why (recorded in the event)")
    _add_write(segs)
    segs.set_defaults(func=cmd_segments)

    tsk = sub.add_parser("tasks", help="registered tasks with their locks")
    add_json(tsk)
    add_kafka(tsk)
    tsk.set_defaults(func=cmd_tasks)

    lk = sub.add_parser("lookup", help="the queryable view: visible segments serving an interval")
    lk.add_argument("datasource", metavar="DATASOURCE")
    lk.add_argument("interval", metavar="START/END")
    add_json(lk)
    add_kafka(lk)
    lk.set_defaults(func=cmd_lookup)


def register_locks_live(locks_parser: argparse.ArgumentParser) -> None:
    """``segcoord locks`` with no action: the live locks and waiting requests."""
    add_json(locks_parser, '{"locks": [...], "waiting": [...]}')
    add_kafka(locks_parser)
    locks_parser.set_defaults(func=cmd_locks_live)


# -- tail, status ------------------------------------------------------------------------
TAIL_TOPICS = ("timeline", "commands", "deadletter", "cluster", "segments", "locks", "lock-requests", "metrics")


def cmd_tail(args: argparse.Namespace) -> int:
    from streaming.watch import WatchError, tail

    if args.max_messages is not None and args.max_messages <= 0:
        raise CliError(f"--max-messages: must be > 0, got {args.max_messages}")
    try:
        tail(bootstrap(args), topics(args), args.topic, from_beginning=args.from_beginning, as_json=args.json,
             max_messages=args.max_messages, timeout_s=None if args.timeout_ms is None else args.timeout_ms / 1000,
             out=lambda line: print(line, flush=True))
    except WatchError as e:
        raise CliError(str(e)) from None
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from streaming.watch import WatchError, status

    try:
        st = status(bootstrap(args), topics(args))
    except WatchError as e:
        raise CliError(str(e)) from None
    if args.json:
        _print_json(st.to_json())
        return 0 if st.worker_alive else 1
    print(f"worker: {'alive' if st.worker_alive else 'NOT RUNNING'} ({st.members} consumer(s) in its group)")
    for agent, n in st.lag.items():
        print(f"  {agent:9s} lag {n} record(s)")
    if st.last_plan:
        print(f"last plan: {st.last_plan['at']}, {st.last_plan['durationMs']} ms")
    else:
        print("last plan: none on the metrics topic")
    print(f"Spark balancer: {st.balancer}")
    print(f"dead letters in the last hour: {st.dead_letters_last_hour}")
    return 0 if st.worker_alive else 1


def register_watch(sub: Any) -> None:
    tl = sub.add_parser("tail", help="print a topic's events decoded, one line each (like kafka-console-consumer)")
    tl.add_argument("topic", choices=TAIL_TOPICS)
    tl.add_argument("--from-beginning", action="store_true")
    tl.add_argument("--max-messages", type=int, metavar="N", help="stop after N events")
    tl.add_argument("--timeout-ms", type=int, metavar="MS", help="stop when no event came for MS milliseconds")
    add_json(tl, "the envelope as JSON")
    add_kafka(tl)
    tl.set_defaults(func=cmd_tail)
    st = sub.add_parser("status", help="worker alive, each agent's lag, last plan, dead letters in the last hour "
                                       "(exit 1 when no worker runs)")
    add_json(st)
    add_kafka(st)
    st.set_defaults(func=cmd_status)
