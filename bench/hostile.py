"""Benchmark: the worst per-event time of every agent on hostile input (size and shape), in process.

Each case of :mod:`streaming.hostile` goes through every agent that reads its topic (real RocksDB stores,
one record per batch, so each time is one whole batch: decode, check, fold, emit, commit). Printed per
case: records, worst and total time, dead-lettered and applied; and the worst as a ratio to the worst
plain case of the same agent (a normal publish + announce, task + lock, server join) measured in the
same run.

Run: ``.venv/bin/python -m bench.hostile``.
"""

from __future__ import annotations

from streaming import hostile


def main() -> None:
    figures = list(hostile.run(b"bench-hostile-key"))
    plain = {t.agent: t.worst_s for t in figures if t.name.startswith("plain")}
    print(f"{'agent':9s} {'case':52s} {'records':>7s} {'worst ms':>9s} {'x plain':>8s} {'total s':>8s} "
          f"{'dead':>5s} {'applied':>7s}")
    for t in figures:
        ratio = t.worst_s / plain[t.agent] if plain[t.agent] else float("nan")
        print(f"{t.agent:9s} {t.name:52s} {t.events:7d} {t.worst_s * 1000:9.1f} {ratio:8.0f} {t.total_s:8.2f} "
              f"{t.dead_lettered:5d} {t.applied:7d}")
    for agent in sorted(plain):
        worst = max((t for t in figures if t.agent == agent), key=lambda t: t.worst_s)
        print(f"worst per-event time, {agent}: {worst.worst_s * 1000:.0f} ms ({worst.name})")


if __name__ == "__main__":
    main()
