"""``segcoord balance simulate``: seed 000's experiment, its pictures and an HTML page that puts them together.

Three placements of the same hourly segments (random, cost-based greedy, random
then rebalanced by cost) are scored by query spread and segments per server; the
pictures are :mod:`streaming.balance_plots`'. The long parts (greedy placement,
rebalancing, the total costs) draw a ``rich`` progress bar on stderr when it is a
terminal; in a file or a pipe they print nothing (no escape codes in logs).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from coordinator.balancer.cost import CostModel
from coordinator.balancer.simulation import (
    Cluster,
    SpreadReport,
    hourly_segments,
    place_greedy,
    place_random,
    query_spreads,
    rebalance,
    report,
    segments_per_server,
)
from events.instant import parse_instant
from streaming.balance_plots import StrategyResult, html_page, write_pictures

START = parse_instant("2026-01-01T00:00:00Z")
STRATEGIES = ("random", "greedy", "random+rebalanced")
Step = Callable[[int], None]


class Progress:
    """Progress bars for the long steps; silent unless ``enabled`` (default: stderr is a terminal)."""

    def __init__(self, enabled: bool | None = None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._bars: Any = None

    def __enter__(self) -> Progress:
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
            from rich.progress import Progress as Bars

            self._bars = Bars(
                TextColumn("{task.description:34s}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                TextColumn("eta"), TimeRemainingColumn(), console=Console(stderr=True), transient=False)
            self._bars.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bars is not None:
            self._bars.stop()

    @contextmanager
    def step(self, description: str, total: int) -> Iterator[Step]:
        if self._bars is None:
            yield lambda _done: None
            return
        task = self._bars.add_task(description, total=total)
        yield lambda done: self._bars.update(task, completed=done)
        self._bars.update(task, completed=total)


def _row(name: str, r: SpreadReport, seconds: float) -> dict[str, Any]:
    return {"placement": name, "segmentsPerServerMax": r.max_per_server, "segmentsPerServerMin": r.min_per_server,
            "querySpreadMean": round(r.mean_spread, 4), "querySpreadP5": round(r.p5_spread, 4),
            "totalCost": r.total_cost, "seconds": round(seconds, 2)}


def simulate(servers: int, datasources: int, days: int, seed: int, moves: int, out: Path,
             half_life_hours: float = 24.0, progress: Progress | None = None) -> dict[str, Any]:
    """Run the three placements, write the pictures and ``index.html`` to ``out``; the figures as JSON."""
    if servers < 1 or datasources < 1 or days < 1 or moves < 0:
        raise ValueError("--servers, --datasources and --days must be at least 1, --moves at least 0")
    bars = progress or Progress(enabled=False)
    model = CostModel(half_life_hours)
    segments = hourly_segments(datasources, days, START)
    names = [f"historical-{i:02d}" for i in range(servers)]
    first = np.flatnonzero(np.array([s.data_source == "ds0" for s in segments]))[:48]
    rows: list[dict[str, Any]] = []
    results: list[StrategyResult] = []
    rng = np.random.default_rng(seed)
    for name in STRATEGIES:
        cluster = Cluster(segments, names, model)
        started = time.monotonic()
        made = None
        if name == "greedy":
            with bars.step("placing by cost (greedy)", len(segments)) as step:
                place_greedy(cluster, step)
        else:
            place_random(cluster, np.random.default_rng(seed))
            if name == "random+rebalanced":
                with bars.step(f"rebalancing ({moves:,} moves)", moves) as step:
                    made = rebalance(cluster, moves, rng, progress=step)
        with bars.step(f"scoring {name}", 1) as step:
            row = _row(name, report(cluster), time.monotonic() - started)
            step(1)
        if made is not None:
            row["moves"] = made
        rows.append(row)
        results.append(StrategyResult(name, query_spreads(cluster), segments_per_server(cluster),
                                      cluster.server_of[first].copy()))
    pictures = write_pictures(results, names, "ds0", out)
    result: dict[str, Any] = {
        "segments": len(segments), "servers": servers, "dataSources": datasources, "days": days, "seed": seed,
        "halfLifeHours": half_life_hours, "placements": rows,
        "querySpreads": {r.name: {f"{v:.4f}": int(c) for v, c in zip(*np.unique(r.spreads, return_counts=True),
                                                                      strict=True)} for r in results},
        "pictures": [str(p) for p in pictures.values()]}
    result["html"] = str(html_page(result, pictures, out))
    return result


def text(result: dict[str, Any]) -> str:
    lines = [f"{result['segments']:,} hourly segments of {result['dataSources']} data sources over "
             f"{result['days']} days on {result['servers']} servers (seed {result['seed']})"]
    for r in result["placements"]:
        moves = f", {r['moves']} moves" if "moves" in r else ""
        lines.append(f"  {r['placement']:18s} segments/server {r['segmentsPerServerMin']}-{r['segmentsPerServerMax']}"
                     f"  query spread mean {r['querySpreadMean']:.3f} p5 {r['querySpreadP5']:.3f}"
                     f"  total cost {r['totalCost']:,.0f}{moves}")
    lines += [f"  picture: {p}" for p in result["pictures"]]
    lines.append(f"  page:    {result['html']}")
    return "\n".join(lines)
