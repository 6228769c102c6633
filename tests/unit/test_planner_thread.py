"""The planner process's :class:`PlannerThread`: the feed's calls on its own thread and the pool's jobs never
overlap, and a job that waits goes before the feed's next call."""

from __future__ import annotations

import threading
from types import TracebackType

from streaming.service.planner_feed import PlannerThread, _call


class OwnedLock:
    """A lock that knows which thread holds it (``threading.Lock`` does not say)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.owner: int | None = None

    def __enter__(self) -> None:
        self._lock.acquire()
        self.owner = threading.get_ident()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.owner = None
        self._lock.release()


def test_feed_calls_run_on_the_callers_thread_and_never_beside_a_job() -> None:
    pool = PlannerThread()
    lock = OwnedLock()
    pool.lock = lock  # type: ignore[assignment]
    inside: list[str] = []
    overlaps: list[tuple[str, str]] = []
    unlocked: list[str] = []
    guard = threading.Lock()

    def work(who: str) -> str:
        if lock.owner != threading.get_ident():  # every call runs holding the planner's lock: none beside another
            unlocked.append(who)
        with guard:
            if inside:
                overlaps.append((inside[0], who))
            inside.append(who)
        with guard:
            inside.remove(who)
        return threading.current_thread().name

    try:
        jobs = [pool.submit(work, f"job{i}") for i in range(50)]
        threads = {_call(pool, work, f"feed{i}") for i in range(50)}
        assert all(j.result(timeout=30).startswith("planner") for j in jobs)
        # the feed's calls ran on this thread unless a job was waiting (then on the pool, behind it)
        assert threading.current_thread().name in threads or threads <= {j.result() for j in jobs}
        assert not unlocked and not overlaps
        assert not pool.waiting
    finally:
        pool.shutdown()


def test_a_waiting_job_goes_before_the_feeds_next_call() -> None:
    pool = PlannerThread()
    order: list[str] = []
    try:
        with pool.lock:  # the feed in the middle of a batch
            job = pool.submit(order.append, "job")
            assert pool.waiting
        _call(pool, order.append, "feed")  # on the pool behind the job, or here once the job took the lock
        job.result(timeout=30)
        assert order == ["job", "feed"]
        assert not pool.waiting
        assert _call(pool, lambda: threading.current_thread().name) == threading.current_thread().name
    finally:
        pool.shutdown()
