"""The Spark balancer's health, as ``segcoord run --balancer spark`` watches it.

The worker starts the balancer job (``segcoord balancer run``, one Spark driver process) and checks it
every ``check_every_s``. When the process has ended (the streaming query died: the job exits non-zero
when its query fails, or the driver was killed) the supervisor logs it with the exit status and starts it
again after a backoff (``base_backoff_s`` doubled per consecutive failure, at most ``max_backoff_s``); a
run that lasted ``healthy_after_s`` resets the count. After ``max_failures`` consecutive failures it gives
up and calls ``on_give_up``: the service hands balancing back to the planner agent, so the cluster keeps
being balanced (by the planner's own stages) instead of by nobody. The job restarts from its checkpoint, so
a restart re-sends nothing new (its command ids are deterministic: docs/spark-balancer.md).

:meth:`BalancerSupervisor.health` is what the worker reports (``segcoord/balancer/alive``: 1 running,
0 restarting, -1 given up), which ``segcoord status`` shows.
"""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from collections.abc import Callable, Sequence

log = logging.getLogger("segcoord.balancer")

RUNNING, RESTARTING, GAVE_UP = 1.0, 0.0, -1.0


class BalancerSupervisor:
    def __init__(self, command: Sequence[str], *, max_failures: int = 5, base_backoff_s: float = 2.0,
                 max_backoff_s: float = 60.0, healthy_after_s: float = 120.0, check_every_s: float = 1.0,
                 on_give_up: Callable[[], None] | None = None) -> None:
        self.command = list(command)
        self.max_failures, self.base_backoff_s, self.max_backoff_s = max_failures, base_backoff_s, max_backoff_s
        self.healthy_after_s, self.check_every_s = healthy_after_s, check_every_s
        self.on_give_up = on_give_up
        self.proc: subprocess.Popen[bytes] | None = None
        self.failures = 0  # consecutive
        self.restarts = 0
        self.last_exit: int | None = None
        self.gave_up = False
        self._started_at = 0.0
        self._restart_at: float | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._watch, name="balancer-supervisor", daemon=True)

    def start(self) -> BalancerSupervisor:
        self._spawn()
        self._thread.start()
        return self

    def health(self) -> float:
        """1 running, 0 ended and about to restart, -1 given up (the planner balances)."""
        with self._lock:
            if self.gave_up:
                return GAVE_UP
            return RUNNING if self.proc is not None and self.proc.poll() is None else RESTARTING

    def alive(self) -> bool:
        return self.health() == RUNNING

    def check(self) -> None:
        """One look at the process: note an exit, restart when the backoff has passed, give up after too many."""
        with self._lock:
            if self.gave_up or self.proc is None:
                return
            now = time.monotonic()
            code = self.proc.poll()
            if code is None:
                if self.failures and now - self._started_at >= self.healthy_after_s:
                    self.failures = 0
                return
            if self._restart_at is None:
                self.last_exit = code
                self.failures = 0 if now - self._started_at >= self.healthy_after_s else self.failures
                self.failures += 1
                if self.failures > self.max_failures:
                    self.gave_up = True
                    log.error("Spark balancer exited with status %s, %d times in a row: giving up; the planner "
                              "agent takes balancing back", code, self.failures)
                    print("segcoord run: the Spark balancer failed repeatedly; the planner agent balances now",
                          flush=True)
                    if self.on_give_up is not None:
                        self.on_give_up()
                    return
                backoff = min(self.max_backoff_s, self.base_backoff_s * 2 ** (self.failures - 1))
                self._restart_at = now + backoff
                log.error("Spark balancer exited with status %s; restarting in %.1fs (failure %d of %d allowed)",
                          code, backoff, self.failures, self.max_failures)
                print(f"segcoord run: the Spark balancer exited (status {code}); restarting in {backoff:.1f}s",
                      flush=True)
            if now >= self._restart_at:
                self._restart_at = None
                self.restarts += 1
                self._spawn()
                assert self.proc is not None
                print(f"segcoord run: Spark balancer restarted (pid {self.proc.pid})", flush=True)

    def _spawn(self) -> None:
        self.proc = subprocess.Popen(self.command, stdin=subprocess.DEVNULL)
        self._started_at = time.monotonic()
        log.info("Spark balancer started (pid %d)", self.proc.pid)

    def _watch(self) -> None:
        while not self._stop.wait(self.check_every_s):
            try:
                self.check()
            except Exception:  # a failed spawn (fork limits): counted as a failure at the next look
                log.exception("Spark balancer supervision failed")

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop watching, then SIGTERM the process (SIGKILL after ``timeout_s``)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
        with self._lock:
            child = self.proc
        if child is not None and child.poll() is None:
            child.terminate()
            try:
                child.wait(timeout_s)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait(10)
