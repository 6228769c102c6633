"""``segcoord run --balancer spark`` watches its balancer: a dead job is restarted with backoff, and after too
many failures in a row the planner agent takes balancing back. Real child processes (a Python that exits, one
that keeps running); the supervisor is stepped with :meth:`check`, no timer thread, no sleeps asserted."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from streaming.balancer.supervisor import GAVE_UP, RESTARTING, RUNNING, BalancerSupervisor

DIES = [sys.executable, "-c", "import sys; sys.exit(3)"]
LIVES = [sys.executable, "-c", "import time; time.sleep(600)"]


def _until(check: Callable[[], bool], step: Callable[[], None], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        step()
        time.sleep(0.01)


def test_a_dying_job_is_restarted_then_balancing_goes_back_to_the_planner() -> None:
    handed_back: list[bool] = []
    sup = BalancerSupervisor(DIES, max_failures=3, base_backoff_s=0.01, max_backoff_s=0.05,
                             on_give_up=lambda: handed_back.append(True))
    sup._spawn()
    try:
        _until(lambda: sup.restarts >= 1, sup.check)
        assert sup.last_exit == 3 and not sup.gave_up
        _until(lambda: sup.gave_up, sup.check)
        assert sup.restarts == 3 and sup.failures == 4 and handed_back == [True]
        assert sup.health() == GAVE_UP
        sup.check()  # nothing more happens once it gave up
        assert sup.restarts == 3 and handed_back == [True]
    finally:
        sup.stop()


def test_a_running_job_is_left_alone_and_stopped_on_stop() -> None:
    sup = BalancerSupervisor(LIVES, base_backoff_s=0.01)
    sup._spawn()
    try:
        sup.check()
        assert sup.health() == RUNNING and sup.restarts == 0
    finally:
        sup.stop(timeout_s=10)
    assert sup.proc is not None and sup.proc.poll() is not None
    assert sup.health() == RESTARTING  # ended (by us): no longer running
