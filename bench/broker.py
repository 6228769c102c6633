"""The broker a benchmark runs against: ``$SEGCOORD_BOOTSTRAP`` when set, else a local broker of its own."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def bench_broker(work: Path) -> Iterator[str]:
    """Yield a bootstrap address: ``$SEGCOORD_BOOTSTRAP``, or a local broker under ``work`` that is stopped on the
    way out (whatever the benchmark raised)."""
    bootstrap = os.environ.get("SEGCOORD_BOOTSTRAP")
    if bootstrap:
        yield bootstrap
        return
    from streaming.local_broker import LocalBroker

    broker = LocalBroker(work / "kafka-home", log_level="WARN")
    bootstrap = broker.start()
    print(f"local broker at {bootstrap} (stopped at the end)")
    try:
        yield bootstrap
    finally:
        broker.stop()
