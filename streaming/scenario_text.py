"""Human-readable output of ``segcoord simulate``: per run, the commands, each server, the used flags, metrics."""

from __future__ import annotations

from collections.abc import Sequence

from coordinator.planner.simulator import RunReport


def render(reports: Sequence[RunReport]) -> str:
    lines: list[str] = []
    for r in reports:
        doc = r.to_json()
        lines.append(f"== run {r.run} at {doc['now']}: {len(r.plan.commands)} commands, "
                     f"{len(r.plan.mark_unused)} marked unused")
        for c in doc["commands"]:
            where = f"{c['from']} -> {c['to']} ({c['moveId']})" if c["type"] == "move" else c["server"]
            replica = " replica" if c["replica"] else ""
            lines.append(f"  {c['type']:6s} {c['segment']}  {where}  [{c['tier']}] stage {c['stage']}{replica}: "
                         f"{c['reason']}")
        for m in doc["markedUnused"]:
            lines.append(f"  unused {m['segment']}: {m['reason']}")
        for name, s in doc["servers"].items():
            flag = " (decommissioning)" if s["decommissioning"] else ""
            queue = ", ".join(f"{q['type']} {q['segment']}" for q in s["queue"]) or "-"
            lines.append(f"  {name} [{s['tier']}]{flag}: {len(s['loaded'])} loaded; queue: {queue}")
        unused = sorted(k for k, v in doc["used"].items() if not v)
        lines.append(f"  used: {sum(1 for v in doc['used'].values() if v)} of {len(doc['used'])}"
                     + (f"; unused: {', '.join(unused)}" if unused and len(unused) <= 20 else ""))
        for key, value in doc["metrics"].items():
            lines.append(f"  {key}: {value}")
        if doc["unknownTiers"]:
            lines.append(f"  unknown tiers in rules: {', '.join(doc['unknownTiers'])}")
    return "\n".join(lines)
