"""``segcoord balance simulate``: seed 000's experiment with its pictures (matplotlib, PNG)."""

from __future__ import annotations

import time
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
    rebalance,
    report,
)
from events.instant import parse_instant

START = parse_instant("2026-01-01T00:00:00Z")


def picture(cluster: Cluster, title: str, path: Path, seed: int) -> None:
    """The blog's picture: server on x (jittered), segment start time on y, one color per data source."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    rng = np.random.default_rng(seed)
    x = cluster.server_of + rng.uniform(-0.35, 0.35, len(cluster.server_of))
    y = (cluster.starts / 86_400_000.0).astype("float64")  # days since the epoch: matplotlib's date unit
    fig, ax = plt.subplots(figsize=(10, 5.6), dpi=96)
    ax.scatter(x, y, c=cluster.sources, cmap="tab10", s=5, alpha=0.6, linewidths=0)
    ax.yaxis.set_major_formatter(mdates.DateFormatter("%Y-%m-%d"))
    ax.set_xticks([])
    ax.set_xlabel(f"{len(cluster.servers)} servers")
    ax.set_ylabel("segment interval start")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _row(name: str, r: SpreadReport, seconds: float) -> dict[str, Any]:
    return {"placement": name, "segmentsPerServerMax": r.max_per_server, "segmentsPerServerMin": r.min_per_server,
            "querySpreadMean": round(r.mean_spread, 4), "querySpreadP5": round(r.p5_spread, 4),
            "totalCost": r.total_cost, "seconds": round(seconds, 2)}


def simulate(servers: int, datasources: int, days: int, seed: int, moves: int, out: Path,
             half_life_hours: float = 24.0) -> dict[str, Any]:
    if servers < 1 or datasources < 1 or days < 1 or moves < 0:
        raise ValueError("--servers, --datasources and --days must be at least 1, --moves at least 0")
    model = CostModel(half_life_hours)
    segments = hourly_segments(datasources, days, START)
    names = [f"historical-{i:02d}" for i in range(servers)]
    out.mkdir(parents=True, exist_ok=True)
    rows, pictures = [], []
    rng = np.random.default_rng(seed)
    for name in ("random", "greedy", "random+rebalanced"):
        cluster = Cluster(segments, names, model)
        started = time.monotonic()
        made = None
        if name == "greedy":
            place_greedy(cluster)
        else:
            place_random(cluster, np.random.default_rng(seed))
            if name == "random+rebalanced":
                made = rebalance(cluster, moves, rng)
        row = _row(name, report(cluster), time.monotonic() - started)
        if made is not None:
            row["moves"] = made
        rows.append(row)
        path = out / f"placement-{name.replace('+', '-')}.png"
        picture(cluster, f"{name}: {len(segments):,} hourly segments, {datasources} data sources", path, seed)
        pictures.append(str(path))
    return {"segments": len(segments), "servers": servers, "dataSources": datasources, "days": days, "seed": seed,
            "placements": rows, "pictures": pictures}


def text(result: dict[str, Any]) -> str:
    lines = [f"{result['segments']:,} hourly segments of {result['dataSources']} data sources over "
             f"{result['days']} days on {result['servers']} servers (seed {result['seed']})"]
    for r in result["placements"]:
        moves = f", {r['moves']} moves" if "moves" in r else ""
        lines.append(f"  {r['placement']:18s} segments/server {r['segmentsPerServerMin']}-{r['segmentsPerServerMax']}"
                     f"  query spread mean {r['querySpreadMean']:.3f} p5 {r['querySpreadP5']:.3f}"
                     f"  total cost {r['totalCost']:,.0f}{moves}")
    lines += [f"  picture: {p}" for p in result["pictures"]]
    return "\n".join(lines)
