"""The processes of ``segcoord demo``: the coordinator service and the simulated historicals, each a child.

Each child is ``python -m streaming.cli ...`` (so it runs this checkout's code),
in its own process group, with its output in ``<logs>/<name>.log``. ``stop``
sends SIGTERM (a historical then says ``ServerLeft``; the service shuts its
agents and the Spark balancer down) and waits; ``kill`` sends SIGKILL, as a
crashed machine would. Only processes started here are ever signalled.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from events.topics import Topics


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 90.0) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def tail(self, chars: int = 2000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


class Processes:
    """Start and stop the demo's children; all of them are stopped by :meth:`stop_all`."""

    def __init__(self, bootstrap: str, topics: Topics, logs: Path) -> None:
        self.bootstrap, self.topics, self.logs = bootstrap, topics, logs
        self.children: dict[str, Child] = {}
        logs.mkdir(parents=True, exist_ok=True)

    def _start(self, name: str, args: list[str]) -> Child:
        log = self.logs / f"{name}.log"
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "SEGCOORD_TOPIC_PREFIX": self.topics.prefix}
        with log.open("ab") as out:
            proc = subprocess.Popen([sys.executable, "-m", "streaming.cli", *args], stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                    start_new_session=True)
        child = Child(name, proc, log)
        self.children[name] = child
        return child

    def service(self, state_dir: Path, balancer: str, tiers: list[str], plan_every: float,
                http: str | None = None) -> Child:
        args = ["run", "--bootstrap", self.bootstrap, "--topic-prefix", self.topics.prefix,
                "--state-dir", str(state_dir), "--balancer", balancer, "--plan-every", str(plan_every)]
        if http is not None:
            args += ["--http", http]
        if balancer == "spark":
            for tier in tiers:
                args += ["--balancer-tier", tier]
        return self._start("coordinator", args)

    def historical(self, name: str, tier: str, max_size: str, load_ms: int) -> Child:
        return self._start(name, ["historical", "--name", name, "--tier", tier, "--max-size", max_size,
                                  "--load-ms", str(load_ms), "--bootstrap", self.bootstrap,
                                  "--topic-prefix", self.topics.prefix])

    def stop_all(self) -> dict[str, int | None]:
        """Historicals first (they say ServerLeft), the service last."""
        codes = {}
        for name in sorted(self.children, key=lambda n: n == "coordinator"):
            codes[name] = self.children[name].stop()
        return codes
