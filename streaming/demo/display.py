"""Live progress of ``segcoord demo``: a ``rich`` live table on a terminal, a compact status line otherwise.

The table lists the servers (tier, segments, used bytes, moves onto it,
decommissioning / dead), the segment states, commands in flight and the
coordinator's lag; under it the current step. Without a terminal (CI, a file) one
plain status line is printed every few seconds and at each step: no escape codes.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from streaming.demo.watch import Watch


class Display:
    def __init__(self, live: bool | None = None, every_s: float = 5.0) -> None:
        self.live = sys.stdout.isatty() if live is None else live
        self.every_s = every_s
        self.step = "starting"
        self.dead: set[str] = set()
        self._last_line = 0.0
        self._live: Any = None

    def __enter__(self) -> Display:
        if self.live:
            from rich.live import Live

            self._live = Live(refresh_per_second=2, transient=False)
            self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.stop()

    def say(self, text: str) -> None:
        """A line of the story (kept above the live table)."""
        if self._live is not None:
            self._live.console.print(text, markup=False, highlight=False)
        else:
            print(text, flush=True)

    def status_line(self, watch: Watch, lag: int | None) -> str:
        summary = watch.summary()
        states = summary["segmentStates"]
        servers = " ".join(f"{name}={s['segments']}" for name, s in summary["servers"].items())
        return (f"[{watch.now():6.1f}s] {self.step} | segments visible={states.get('visible', 0)} "
                f"standby={states.get('standby', 0)} overshadowed={states.get('overshadowed', 0)} | "
                f"servers {servers or '-'} | in flight {summary['commandsInFlight']} | "
                f"lag {'-' if lag is None else lag}")

    def update(self, watch: Watch, lag: int | None) -> None:
        if self._live is not None:
            self._live.update(self._table(watch, lag))
            return
        if time.monotonic() - self._last_line >= self.every_s:
            self._last_line = time.monotonic()
            print(self.status_line(watch, lag), flush=True)

    def _table(self, watch: Watch, lag: int | None) -> Any:
        from rich.console import Group
        from rich.table import Table

        summary = watch.summary()
        table = Table(title=f"segcoord demo  {watch.now():.0f}s  step: {self.step}", title_justify="left")
        for col in ("server", "tier", "segments", "used", "moves onto", "state"):
            table.add_column(col, justify="right" if col in ("segments", "used", "moves onto") else "left")
        names = sorted(set(summary["servers"]) | self.dead)
        for name in names:
            s = summary["servers"].get(name)
            state = "killed" if name in self.dead else ("decommissioning" if name in watch.decommissioning
                                                         else "serving")
            table.add_row(name, (s or {}).get("tier") or "-", str((s or {}).get("segments", 0)),
                          f"{(s or {}).get('usedBytes', 0) / 1e9:.2f} GB", str(summary["movesOnto"].get(name, 0)),
                          state)
        states = summary["segmentStates"]
        foot = Table.grid(padding=(0, 2))
        foot.add_row(*(f"{k}: {v}" for k, v in states.items()), f"commands in flight: {summary['commandsInFlight']}",
                     f"coordinator lag: {'-' if lag is None else lag}", f"events: {summary['events']}")
        return Group(table, foot)
