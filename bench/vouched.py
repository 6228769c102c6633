"""The seal's memory of envelopes this process sealed (``coordinator.locks.seal._Vouched``): CPU per ``add`` at
steady state (full at ``VOUCHED_MAX``, the oldest leaving on every add), against a plain-dict FIFO evicting with
``del d[next(iter(d))]`` in the same run, the form it had before: a dict skips every slot freed at its front.

Run: ``.venv/bin/python -m bench.vouched``
"""

from __future__ import annotations

import time
from typing import Any

from coordinator.locks.seal import VOUCHED_MAX, _Vouched

N = 200_000
KEY = b"k"


def _plain_fifo(envs: list[Any]) -> None:
    d: dict[int, tuple[Any, bytes]] = {}
    for env in envs:
        d[id(env)] = (env, KEY)
        if len(d) > VOUCHED_MAX:
            del d[next(iter(d))]


def _vouched(envs: list[Any]) -> None:
    v = _Vouched(VOUCHED_MAX)
    for env in envs:
        v.add(env, KEY)


def main() -> None:
    envs = [object() for _ in range(N)]  # identity is all add reads
    for r in range(3):
        t = time.process_time()
        _plain_fifo(envs)
        base = time.process_time() - t
        t = time.process_time()
        _vouched(envs)
        ours = time.process_time() - t
        print(f"round {r}: _Vouched.add {ours / N * 1e6:.2f} us; plain-dict FIFO baseline {base / N * 1e6:.2f} us; "
              f"ratio {ours / base:.2f}")


if __name__ == "__main__":
    main()
