"""Benchmark: Python opcodes the timeline agent executes per input event, against its pure fold.

A count, not a time: ``sys.settrace`` with ``f_trace_opcodes`` counts every
bytecode instruction executed in Python frames while the fold (decode +
``Timelines.apply``, as ``bench.service`` folds) and then the agent (in-process,
a real RocksDB store, batches of 1000, as ``bench.service --only agent``) take
the same events. Work in C (orjson, RocksDB, hmac) is not counted. On a machine
shared with other jobs the CPU-time figures of ``bench.service --only agent``
moved +-10% between runs; this count repeats to the opcode with the same
``PYTHONHASHSEED``, so it shows changes of a few percent in the agent's own
Python work. Run: ``PYTHONHASHSEED=0 .venv/bin/python -m bench.agent_opcodes
[--segments 3000]`` (tracing runs about 30x slower than the agent).
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

from bench.service import BytesSink, segment_events
from coordinator.timeline.timelines import Timelines
from events import Topics, decode, encode
from events.topics import SEGMENTS


def main() -> None:
    from streaming.service import timeline_agent
    from streaming.service.intake import InputRecord
    from streaming.service.state import AgentStateStore

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--segments", type=int, default=3000)
    args = parser.parse_args()
    values = [encode(e) for e in segment_events(args.segments)]
    for v in values[:50]:  # the generated decoders are compiled outside the count
        decode(v)
    count = [0]

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        if event == "opcode":
            count[0] += 1
        return tracer

    def fold() -> None:
        timelines, seen = Timelines(), set()
        for v in values:
            e = decode(v)
            if e.event_id in seen:
                continue
            seen.add(e.event_id)
            timelines.apply(e.event)

    gc.disable()  # the collector's callbacks are not the agent's work
    sys.settrace(tracer)
    fold()
    sys.settrace(None)
    fold_ops, count[0] = count[0], 0
    topics = Topics("bench.")
    with tempfile.TemporaryDirectory(prefix="bench-opcodes-") as tmp, \
            AgentStateStore(Path(tmp) / "timeline", timeline_agent.FORMAT_VERSION) as store:
        agent = timeline_agent.TimelineAgent(store, topics, BytesSink())
        records = [InputRecord(topics.name(SEGMENTS), 0, i, None, v, 1000 + i) for i, v in enumerate(values)]
        sys.settrace(tracer)
        for i in range(0, len(records), 1000):
            agent.process(records[i:i + 1000])
        sys.settrace(None)
    n = len(values)
    print(f"Python opcodes per event: pure fold {fold_ops / n:,.0f}, timeline agent {count[0] / n:,.0f} "
          f"(agent/fold {count[0] / fold_ops:.2f}; the agent's own work {(count[0] - fold_ops) / n:,.0f})")


if __name__ == "__main__":
    main()
