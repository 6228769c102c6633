"""Benchmark: envelope encode/decode with full validation, against bare orjson on the same bytes.

Prints events per second for each event type family and the ratio to the
baseline measured in the same run (bare ``orjson.loads``/``dumps``, no
validation, no typed values). Run: ``.venv/bin/python -m bench.codec``.
"""

from __future__ import annotations

import time

import orjson

from events import decode, encode
from streaming.examples import example_envelopes


def _rate(fn, items, repeat: int) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeat):
            for item in items:
                fn(item)
        best = min(best, time.perf_counter() - start)
    return repeat * len(items) / best


def main() -> None:
    envs = example_envelopes(1_795_219_200_000)
    raw = [encode(e) for e in envs]
    parsed = [orjson.loads(r) for r in raw]
    repeat = 400
    decode_rate = _rate(decode, raw, repeat)
    loads_rate = _rate(orjson.loads, raw, repeat)
    encode_rate = _rate(encode, envs, repeat)
    dumps_rate = _rate(orjson.dumps, parsed, repeat)
    print(f"events: {len(envs)} types, mean {sum(map(len, raw)) / len(raw):.0f} bytes")
    print(f"decode+validate: {decode_rate:10,.0f} events/s   bare orjson.loads: {loads_rate:12,.0f}/s   "
          f"ratio {decode_rate / loads_rate:.3f}")
    print(f"encode:          {encode_rate:10,.0f} events/s   bare orjson.dumps: {dumps_rate:12,.0f}/s   "
          f"ratio {encode_rate / dumps_rate:.3f}")
    heavy = [r for r, e in zip(raw, envs, strict=True) if e.event_type == "segments_published"]
    print(f"segments_published decode: {_rate(decode, heavy, 5000):,.0f} events/s")


if __name__ == "__main__":
    main()
