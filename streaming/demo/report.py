"""The demo's report: ``index.html`` (self-contained: the plots are embedded), the PNGs, ``report.json``.

Plots, each with labelled axes, a legend and the workload's steps marked on the
time axis (the same numbers as the story printed live):

- ``segments-per-server.png``: segments each server holds over time;
- ``balancing-cost.png``: each tier's total cost (Druid's cost function over the
  segments on each server) over time: what the balancer lowers;
- ``timeline.png``: one data source's segments (one row per segment, oldest
  interval at the bottom, the compacted day's version on top of its hours) coloured
  by state over time: standby, visible, overshadowed, absent;
- ``latency.png``: histograms of publish -> load (first announce) and announce ->
  visible, with medians and 95th percentiles.
"""

from __future__ import annotations

import base64
import html
import itertools
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from streaming.demo.watch import Watch

STATE_COLOURS = {"standby": "#E69F00", "visible": "#009E73", "overshadowed": "#56B4E9", "offline": "#D55E00",
                 "absent": "#DDDDDD"}
TIER_COLOURS = {"hot": ["#D55E00", "#CC79A7", "#E69F00"], "_default_tier": ["#0072B2", "#009E73", "#56B4E9",
                                                                            "#000000"]}


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _mark_steps(ax: Any, steps: list[Any]) -> None:
    for i, step in enumerate(steps, 1):
        ax.axvline(step.started, color="black", alpha=0.25, linewidth=0.8, linestyle="--")
        ax.text(step.started, 1.0, f" {i}", transform=ax.get_xaxis_transform(), fontsize=8, va="bottom", alpha=0.7)


def _finish(fig: Any, ax: Any, path: Path) -> None:
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    fig.savefig(path)
    _plt().close(fig)


def segments_per_server(watch: Watch, steps: list[Any], path: Path) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10, 4.5), dpi=100)
    tiers = {}
    for s in watch.samples:
        tiers.update(s.tier_of)
    names = sorted({n for s in watch.samples for n in s.per_server} | set(tiers))
    colour_index: dict[str, int] = {}
    for name in names:
        tier = tiers.get(name, "_default_tier")
        k = colour_index.setdefault(tier, 0)
        colour_index[tier] = k + 1
        palette = TIER_COLOURS.get(tier, TIER_COLOURS["_default_tier"])
        xs = [s.at for s in watch.samples]
        ys = [s.per_server.get(name, np.nan) for s in watch.samples]
        ax.plot(xs, ys, label=f"{name} ({tier})", color=palette[k % len(palette)], linewidth=1.8,
                linestyle="-" if tier == "hot" else "-.")
    _mark_steps(ax, steps)
    ax.set_xlabel("seconds since the demo started (dashed lines: the steps)")
    ax.set_ylabel("segments held")
    ax.set_title("Segments per server", pad=14)
    ax.legend(loc="upper left", frameon=False, fontsize=8, ncols=2)
    ax.grid(alpha=0.3)
    _finish(fig, ax, path)


def balancing_cost(watch: Watch, steps: list[Any], path: Path) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10, 4), dpi=100)
    for tier in sorted({t for s in watch.samples for t in s.cost_by_tier}):
        xs = [s.at for s in watch.samples if tier in s.cost_by_tier]
        ys = [s.cost_by_tier[tier] for s in watch.samples if tier in s.cost_by_tier]
        # "tier X": matplotlib leaves labels starting with "_" (as _default_tier) out of the legend
        ax.plot(xs, ys, label=f"tier {tier}", color=TIER_COLOURS.get(tier, ["#444"])[0], linewidth=1.8)
    _mark_steps(ax, steps)
    ax.set_xlabel("seconds since the demo started (dashed lines: the steps)")
    ax.set_ylabel("total cost (hours²)")
    ax.set_title("Balancing cost per tier (sum over servers of the joint cost of the segments each holds)",
                 pad=14)
    ax.legend(loc="upper left", frameon=False)
    ax.grid(alpha=0.3)
    _finish(fig, ax, path)


def timeline(watch: Watch, steps: list[Any], path: Path) -> None:
    plt = _plt()
    from matplotlib.patches import Patch

    ids = sorted({sid for s in watch.samples for sid in s.states},
                 key=lambda sid: (watch.segments[sid].interval.end - watch.segments[sid].interval.start
                                  > 3_600_000, watch.segments[sid].interval.start, watch.segments[sid].version))
    fig, ax = plt.subplots(figsize=(10, max(4.0, 0.09 * len(ids) + 2.2)), dpi=100)
    row = {sid: i for i, sid in enumerate(ids)}
    samples = watch.samples
    for a, b in itertools.pairwise(samples):
        for sid, state in a.states.items():
            ax.barh(row[sid], b.at - a.at, left=a.at, height=0.85, color=STATE_COLOURS.get(state, "#999"),
                    linewidth=0)
    _mark_steps(ax, steps)
    ticks = [i for i, sid in enumerate(ids) if i % 6 == 0 or watch.segments[sid].interval.end
             - watch.segments[sid].interval.start > 3_600_000]
    def label(sid: str) -> str:
        seg = watch.segments[sid]
        span = "day " if seg.interval.end - seg.interval.start > 3_600_000 else "hour"
        return f"{span} {seg.interval.iso()[:13]} v{seg.version[11:19]}"

    ax.set_yticks(ticks, [label(ids[i]) for i in ticks], fontsize=7)
    ax.set_xlabel("seconds since the demo started (dashed lines: the steps)")
    ax.set_ylabel(f"{watch.data_source}'s segments (interval, version)")
    ax.set_title(f"{watch.data_source}'s timeline: each segment's state over time", pad=14)
    ax.legend(handles=[Patch(color=c, label=s) for s, c in STATE_COLOURS.items()], loc="upper center",
              bbox_to_anchor=(0.5, -0.14), frameon=False, fontsize=8, ncols=5)
    _finish(fig, ax, path)


def latency(watch: Watch, path: Path) -> None:
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), dpi=100)
    for ax, values, title, colour in (
            (axes[0], watch.load_latency, "publish -> loaded (first announce)", "#0072B2"),
            (axes[1], watch.visible_latency, "announce -> visible (timeline agent)", "#009E73")):
        arr = np.array(values or [0.0]) * 1000
        ax.hist(arr, bins=min(30, max(5, len(arr) // 4)), color=colour, alpha=0.85)
        med, p95 = float(np.median(arr)), float(np.percentile(arr, 95))
        ax.axvline(med, color="black", linewidth=1, label=f"median {med:.0f} ms")
        ax.axvline(p95, color="black", linewidth=1, linestyle=":", label=f"p95 {p95:.0f} ms")
        ax.set_title(f"{title}, {len(values)} segments", fontsize=10)
        ax.set_xlabel("milliseconds")
        ax.set_ylabel("segments")
        ax.legend(frameon=False, fontsize=8)
        ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def figures(watch: Watch) -> dict[str, Any]:
    def q(values: list[float]) -> dict[str, float | int]:
        if not values:
            return {"count": 0}
        arr = np.array(values) * 1000
        return {"count": len(values), "medianMs": round(float(np.median(arr)), 1),
                "p95Ms": round(float(np.percentile(arr, 95)), 1), "maxMs": round(float(arr.max()), 1)}

    costs = [s.cost_by_tier for s in watch.samples]
    return {"publishToLoad": q(watch.load_latency), "announceToVisible": q(watch.visible_latency),
            "costFirst": costs[0] if costs else {}, "costLast": costs[-1] if costs else {},
            **watch.summary()}


def write_report(watch: Watch, steps: list[Any], result: dict[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    plots = {"segments-per-server.png": "Segments per server over time",
             "balancing-cost.png": "Balancing cost over time",
             "timeline.png": f"{watch.data_source}'s timeline: versions and states over time",
             "latency.png": "Latencies: publish -> load, announce -> visible"}
    segments_per_server(watch, steps, out / "segments-per-server.png")
    balancing_cost(watch, steps, out / "balancing-cost.png")
    timeline(watch, steps, out / "timeline.png")
    latency(watch, out / "latency.png")
    doc = {**result, "steps": [{"n": i, "name": s.name, "startedS": round(s.started, 1),
                                "endedS": None if s.ended is None else round(s.ended, 1), "outcome": s.outcome}
                               for i, s in enumerate(steps, 1)],
           "figures": figures(watch), "plots": sorted(plots)}
    (out / "report.json").write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    audit = result.get("audit", [])
    audit_html = ("<p class=ok>segcoord audit: clean (0 violations) over the whole log.</p>" if not audit else
                  "<p class=bad>segcoord audit: " + str(len(audit)) + " violation(s)</p><ul>"
                  + "".join(f"<li>{html.escape(v)}</li>" for v in audit) + "</ul>")
    fig = doc["figures"]
    rows = "".join(f"<tr><td>{s['n']}</td><td>{html.escape(s['name'])}</td><td>{s['startedS']}</td>"
                   f"<td>{'-' if s['endedS'] is None else s['endedS']}</td><td>{html.escape(s['outcome'])}</td></tr>"
                   for s in doc["steps"])
    servers = "".join(f"<tr><td>{html.escape(n)}</td><td>{html.escape(str(s['tier']))}</td><td>{s['segments']}</td>"
                      f"<td>{s['usedBytes'] / 1e9:.2f} GB</td></tr>" for n, s in fig["servers"].items())

    def img(name: str) -> str:
        data = base64.b64encode((out / name).read_bytes()).decode()
        return (f"<figure><img src=\"data:image/png;base64,{data}\" alt=\"{html.escape(plots[name])}\">"
                f"<figcaption>{html.escape(plots[name])} ({html.escape(name)})</figcaption></figure>")

    lat = (f"publish -> load: median {fig['publishToLoad'].get('medianMs', '-')} ms, p95 "
           f"{fig['publishToLoad'].get('p95Ms', '-')} ms over {fig['publishToLoad']['count']} segments; "
           f"announce -> visible: median {fig['announceToVisible'].get('medianMs', '-')} ms, p95 "
           f"{fig['announceToVisible'].get('p95Ms', '-')} ms")
    notes = "".join(f"<p class=note>{html.escape(n)}</p>" for n in result.get("notes", []))
    failure = f"<p class=bad>FAILED: {html.escape(result['failure'])}</p>" if result.get("failure") else ""
    page = f"""<!doctype html>
<html lang=en><head><meta charset=utf-8><title>segcoord demo report</title>
<style>body{{font:15px/1.45 system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}}
table{{border-collapse:collapse;margin:1em 0}}td,th{{border-bottom:1px solid #ddd;padding:.3em .7em;text-align:left}}
.ok{{background:#e8f6ee;padding:.6em}}.bad{{background:#fde8e4;padding:.6em}}.note{{color:#555;font-style:italic}}
figure{{margin:2em 0}}img{{max-width:100%;border:1px solid #eee}}figcaption{{color:#555}}</style></head>
<body><h1>segcoord demo</h1>
<p>Topics <code>{html.escape(result.get('topicPrefix', ''))}*</code> on {html.escape(str(result.get('bootstrap')))};
{result.get('seconds', 0)} s{' (quick)' if result.get('quick') else ''}; {fig['events']} events.</p>
{failure}{audit_html}
<h2>What happened</h2><table><tr><th>#</th><th>step</th><th>start (s)</th><th>end (s)</th><th>outcome</th></tr>
{rows}</table>{notes}
<p>{lat}.</p>
<h2>Servers at the end</h2><table><tr><th>server</th><th>tier</th><th>segments</th><th>used</th></tr>{servers}</table>
{''.join(img(name) for name in plots)}
</body></html>
"""
    path = out / "index.html"
    path.write_text(page)
    return path
