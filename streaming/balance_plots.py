"""The pictures of ``segcoord balance simulate`` and the HTML page that puts them together (matplotlib, PNG).

Each picture answers one question of seed 000's finding, with labelled axes and a
legend, the same colour for a strategy in every picture:

- ``query-spread.png``: how many of the servers it could use does one day's query
  of one data source reach? One bar group per spread value, one bar per strategy
  (share of the data-source days), the mean of each strategy marked. Random
  placement leaves most days on ~70 % of the servers; cost-based placement and
  rebalancing push nearly every day to 100 %.
- ``segments-per-server.png``: segments held by each server, one bar per strategy:
  the cost function's spread does not cost balance in counts.
- ``one-day.png``: one data source's first two days, hour by hour, on which server
  each hourly segment sits, one panel per strategy: what the spread looks like.

``index.html`` is self-contained apart from the PNG files beside it (relative links).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

# one colour per strategy, the same in every picture (colour-blind-safe Okabe-Ito)
COLOURS = {"random": "#999999", "greedy": "#0072B2", "random+rebalanced": "#E69F00"}
LABELS = {"random": "random placement", "greedy": "cost-based (greedy) placement",
          "random+rebalanced": "random, then rebalanced by cost"}


@dataclass(frozen=True, slots=True)
class StrategyResult:
    """What the pictures need of one placement."""

    name: str
    spreads: npt.NDArray[np.float64]  # per (data source, day)
    per_server: npt.NDArray[np.int64]  # segments per server, in server order
    first_days: npt.NDArray[np.int64]  # server index of the first data source's first hours


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def spread_picture(results: Sequence[StrategyResult], servers: int, path: Path) -> None:
    plt = _pyplot()
    values = sorted({round(float(v), 6) for r in results for v in r.spreads})
    shown = [v for v in values if any(np.isclose(r.spreads, v).mean() >= 0.002 for r in results)] or values
    x = np.arange(len(shown))
    width = 0.8 / len(results)
    fig, ax = plt.subplots(figsize=(10, 5), dpi=100)
    for k, r in enumerate(results):
        shares = [100.0 * float(np.isclose(r.spreads, v).mean()) for v in shown]
        ax.bar(x + (k - (len(results) - 1) / 2) * width, shares, width, color=COLOURS.get(r.name),
               label=f"{LABELS.get(r.name, r.name)}: mean {r.spreads.mean():.3f}")
    ax.set_xticks(x, [f"{v:.2f}" for v in shown], rotation=60 if len(shown) > 12 else 0)
    ax.set_xlabel(f"query spread of one data source's day (distinct servers / the {servers} it could use)")
    ax.set_ylabel("share of data-source days (%)")
    ax.set_title("How widely one day's query is spread over the servers (1.0 = every server it could use)")
    ax.legend(loc="upper left", frameon=False)
    ax.grid(axis="y", alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def per_server_picture(results: Sequence[StrategyResult], server_names: Sequence[str], path: Path) -> None:
    plt = _pyplot()
    x = np.arange(len(server_names))
    width = 0.8 / len(results)
    fig, ax = plt.subplots(figsize=(10, 4.5), dpi=100)
    for k, r in enumerate(results):
        ax.bar(x + (k - (len(results) - 1) / 2) * width, r.per_server, width, color=COLOURS.get(r.name),
               label=f"{LABELS.get(r.name, r.name)} ({int(r.per_server.min())}-{int(r.per_server.max())})")
    ax.set_xticks(x, [n.rsplit("-", 1)[-1] for n in server_names])
    ax.set_xlabel("server (historical-NN)")
    ax.set_ylabel("segments held")
    lo = min(int(r.per_server.min()) for r in results)
    hi = max(int(r.per_server.max()) for r in results)
    ax.set_ylim(max(0, lo - (hi - lo) - 5), hi + (hi - lo) * 0.6 + 5)
    ax.set_title("Segments per server (min-max in the legend)")
    ax.legend(loc="upper left", frameon=False, ncols=1)
    ax.grid(axis="y", alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def one_day_picture(results: Sequence[StrategyResult], servers: int, data_source: str, path: Path) -> None:
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(results), figsize=(12, 4.2), dpi=100, sharey=True)
    for ax, r in zip(np.atleast_1d(axes), results, strict=True):
        hours = np.arange(len(r.first_days))
        ax.scatter(hours, r.first_days, color=COLOURS.get(r.name), s=28)
        ax.plot(hours, r.first_days, color=COLOURS.get(r.name), alpha=0.25, linewidth=1)
        for day_start in range(24, len(hours), 24):
            ax.axvline(day_start - 0.5, color="black", alpha=0.3, linewidth=0.8)
        distinct = [len(set(r.first_days[d:d + 24].tolist())) for d in range(0, len(hours), 24)]
        ax.set_title(f"{LABELS.get(r.name, r.name)}\nservers per day: {', '.join(map(str, distinct))}", fontsize=9)
        ax.set_xlabel(f"hour of {data_source} since the start")
        ax.set_ylim(-0.5, servers - 0.5)
        ax.grid(alpha=0.2)
    from matplotlib.ticker import MaxNLocator

    np.atleast_1d(axes)[0].yaxis.set_major_locator(MaxNLocator(integer=True))  # servers are whole numbers
    np.atleast_1d(axes)[0].set_ylabel("server holding the hour's segment (historical-NN)")
    fig.suptitle(f"Where the hourly segments of {data_source}'s first days go")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_pictures(results: Sequence[StrategyResult], server_names: Sequence[str], data_source: str,
                   out: Path) -> dict[str, Path]:
    """The three pictures in ``out``; returns them by role."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"querySpread": out / "query-spread.png", "segmentsPerServer": out / "segments-per-server.png",
             "oneDataSource": out / "one-day.png"}
    spread_picture(results, len(server_names), paths["querySpread"])
    per_server_picture(results, server_names, paths["segmentsPerServer"])
    one_day_picture(results, len(server_names), data_source, paths["oneDataSource"])
    return paths


def html_page(result: Mapping[str, Any], pictures: Mapping[str, Path], out: Path) -> Path:
    """``out/index.html``: the finding in one sentence, the table of figures, the pictures (relative links)."""
    rows = result["placements"]
    by = {r["placement"]: r for r in rows}
    finding = ""
    if "random" in by and "greedy" in by:
        finding = (f"<p class=finding>A day's query reaches {by['random']['querySpreadMean']:.3f} of the servers "
                   f"it could on average with random placement, {by['greedy']['querySpreadMean']:.3f} with "
                   "cost-based placement")
        if "random+rebalanced" in by:
            finding += (f" and {by['random+rebalanced']['querySpreadMean']:.3f} after "
                        f"{by['random+rebalanced'].get('moves', 0):,} rebalancing moves")
        finding += ", with the same number of segments per server.</p>"
    head = ["placement", "segments/server", "query spread mean", "p5", "total cost", "moves", "seconds"]
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in (
            LABELS.get(r["placement"], r["placement"]), f"{r['segmentsPerServerMin']}-{r['segmentsPerServerMax']}",
            f"{r['querySpreadMean']:.3f}", f"{r['querySpreadP5']:.3f}", f"{r['totalCost']:,.0f}",
            f"{r.get('moves', '')}", f"{r['seconds']:.1f}")) + "</tr>" for r in rows)
    captions = {"querySpread": "Query spread per strategy", "segmentsPerServer": "Segments per server",
                "oneDataSource": "One data source, hour by hour"}
    figures = "".join(
        f"<figure><img src=\"{html.escape(p.name)}\" alt=\"{html.escape(captions.get(k, k))}\">"
        f"<figcaption>{html.escape(captions.get(k, k))}</figcaption></figure>" for k, p in pictures.items())
    page = f"""<!doctype html>
<html lang=en><head><meta charset=utf-8><title>segcoord balance simulate</title>
<style>body{{font:15px/1.45 system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}}
table{{border-collapse:collapse}}td,th{{border-bottom:1px solid #ddd;padding:.3em .8em;text-align:right}}
td:first-child,th:first-child{{text-align:left}}.finding{{font-size:1.15em;background:#f4f7fb;padding:.8em}}
figure{{margin:2em 0}}img{{max-width:100%;border:1px solid #eee}}figcaption{{color:#555}}</style></head>
<body><h1>Random vs cost-based segment placement</h1>
<p>{result['segments']:,} hourly segments of {result['dataSources']} data sources over {result['days']} days on
{result['servers']} servers (seed {result['seed']}); the cost function is Druid's CostBalancerStrategy
(exponential decay, half-life {result.get('halfLifeHours', 24)} h, same data source counted twice).</p>
{finding}
<table><thead><tr>{''.join(f'<th>{h}</th>' for h in head)}</tr></thead><tbody>{body}</tbody></table>
{figures}
</body></html>
"""
    path = out / "index.html"
    path.write_text(page)
    return path
