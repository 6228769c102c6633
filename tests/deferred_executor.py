"""An executor for tests of work handed to another thread: it runs what it was given only when told."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any


class Deferred(Executor):
    """Queues each submitted call; :meth:`run_all` runs them in order. The test decides when the "other thread"
    runs: after whatever it does in between, as a busy thread would."""

    def __init__(self) -> None:
        self.queued: list[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        self.queued.append((future, fn, args))
        return future

    def run_all(self) -> None:
        queued, self.queued = self.queued, []
        for future, fn, args in queued:
            future.set_result(fn(*args))
