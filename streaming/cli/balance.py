"""``segcoord balance`` (cost-based placement), ``segcoord simulate`` (the planner on a scenario) and
``segcoord balancer`` (the Spark Structured Streaming balancer)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from streaming.cli.common import CliError, add_json, bootstrap


def cmd_balance_cost(args: argparse.Namespace) -> int:
    from coordinator.balancer.cost import cost
    from events.interval import Interval, IntervalError

    intervals = []
    for name, text in (("X_INTERVAL", args.x), ("Y_INTERVAL", args.y)):
        try:
            intervals.append(Interval.parse(text))
        except IntervalError as e:
            raise CliError(f"{name}: {e}") from None
    try:
        value = cost(intervals[0], intervals[1], same_data_source=args.same_datasource,
                     half_life_hours=args.half_life_hours)
    except ValueError as e:
        raise CliError(f"--half-life-hours: {e}") from None
    print(repr(value))
    return 0


def cmd_balance_simulate(args: argparse.Namespace) -> int:
    import orjson

    from streaming.balance_sim import Progress, simulate, text

    try:
        with Progress() as bars:
            result = simulate(args.servers, args.datasources, args.days, args.seed, args.moves, Path(args.out),
                              args.half_life_hours, progress=bars)
    except ValueError as e:
        raise CliError(str(e)) from None
    print(orjson.dumps(result).decode() if args.json else text(result))
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    import orjson

    from coordinator.planner.simulator import Scenario, ScenarioError, Simulator
    from streaming.scenario_text import render

    path = Path(args.scenario)
    try:
        doc = orjson.loads(path.read_bytes())
    except OSError as e:
        raise CliError(f"{path}: {e.strerror or e}") from None
    except orjson.JSONDecodeError as e:
        raise CliError(f"{path}: not JSON: {e}") from None
    try:
        reports = Simulator(Scenario.parse(doc)).run(compute_cost=not args.no_cost, planner=args.planner)
    except ScenarioError as e:
        raise CliError(f"{path}: {e}") from None
    if args.json:
        print(orjson.dumps({"runs": [r.to_json() for r in reports]}).decode())
    else:
        print(render(reports))
    return 0


def register(sub: Any) -> None:
    bal = sub.add_parser("balance", help="cost-based placement (seed 000)")
    bsub = bal.add_subparsers(dest="action", metavar="ACTION", required=True)
    bc = bsub.add_parser("cost", help="the joint cost of two segments' intervals, in hours squared")
    bc.add_argument("x", metavar="X_INTERVAL", help="ISO-8601 start/end")
    bc.add_argument("y", metavar="Y_INTERVAL", help="ISO-8601 start/end")
    bc.add_argument("--same-datasource", action="store_true", help="both segments of one data source (factor 2)")
    bc.add_argument("--half-life-hours", type=float, default=24.0, help="decay half-life (default 24)")
    bc.set_defaults(func=cmd_balance_cost)
    bs = bsub.add_parser("simulate", help="seed 000's experiment: random vs cost-based placement and rebalancing")
    bs.add_argument("--servers", type=int, default=20)
    bs.add_argument("--datasources", type=int, default=10)
    bs.add_argument("--days", type=int, default=90)
    bs.add_argument("--seed", type=int, default=7)
    bs.add_argument("--moves", type=int, default=2000, help="greedy moves when rebalancing the random placement")
    bs.add_argument("--half-life-hours", type=float, default=24.0)
    bs.add_argument("--out", default="balance-simulation", help="folder for the pictures and index.html")
    add_json(bs)
    bs.set_defaults(func=cmd_balance_simulate)

    sim = sub.add_parser("simulate", help="run a cluster scenario through the rule-driven planner (seed 004)")
    sim.add_argument("scenario", metavar="SCENARIO.json")
    add_json(sim, 'one JSON document: {"runs": [...]}')
    sim.add_argument("--no-cost", action="store_true", help="skip the total-cost metrics (slow on big clusters)")
    mode = sim.add_mutually_exclusive_group()
    mode.add_argument("--incremental", dest="planner", action="store_const", const="incremental",
                      help="plan each run only the segments that changed, as the planner agent does (default)")
    mode.add_argument("--full", dest="planner", action="store_const", const="full",
                      help="every run looks at every segment (the reference)")
    sim.set_defaults(func=cmd_simulate, planner="incremental")

    from streaming.balancer import job as balancer_job

    balancer = sub.add_parser("balancer", help="the Spark Structured Streaming balancer (moves on commands)")
    bal_run = balancer.add_subparsers(dest="action", metavar="ACTION", required=True).add_parser(
        "run", help="run the balancer job (local Spark by default) until interrupted or --available-now ends")
    balancer_job.add_arguments(bal_run)
    bal_run.set_defaults(func=lambda args: balancer_job.run(args, bootstrap(args)))
