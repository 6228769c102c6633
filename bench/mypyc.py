"""Benchmark: the timeline core compiled with mypyc against the same code as pure Python, in the same run.

``coordinator/`` is mypy-strict, so mypyc can compile it to C extensions. This
builds a copy of the source tree (the checkout itself is never touched: no
``.so`` can shadow the pure modules the tests and the service run), compiles
``coordinator/timeline`` there with mypyc, then runs ``bench.timeline`` on one
data source both ways, in turn, and prints each figure with its ratio
compiled / pure. ``--tests`` also runs ``tests/unit/timeline`` against the
compiled copy (the pure path is what the normal suite runs).

Falls back to saying why when mypyc or a C compiler is missing; nothing else
depends on the compiled build. Run:
``.venv/bin/python -m bench.mypyc [--segments 100000] [--ops 40000] [--tests]``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULES = ["chunk", "coverage", "index", "overwrite", "timeline"]
FIGURES = {
    "churn ops/s": r"incremental: .* = ([\d,]+) ops/s",
    "churn ops/s (CPU time)": r"incremental: .*CPU time ([\d,]+) ops/s",
    "publish+announce ops/s": r"publish\+announce of new data: ([\d,]+) ops/s",
    "publish+announce ops/s (CPU time)": r"publish\+announce of new data: .*CPU time ([\d,]+) ops/s",
    "lookup 1-day p50 us": r"lookup  1-day: p50 ([\d,.]+) us",
    "lookup 30-day p50 us": r"lookup 30-day: p50 ([\d,.]+) us",
}


def compiler_missing() -> str | None:
    try:
        import mypyc  # noqa: F401
    except ImportError:
        return "mypyc is not installed (it comes with mypy: pip install mypy)"
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        return f"no C compiler ({cc}) on PATH"
    return None


def build(into: Path) -> float:
    """Copy the source tree and compile coordinator/timeline in the copy; seconds taken."""
    for name in ("events", "coordinator", "streaming", "bench", "tests", "examples", "pyproject.toml"):
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, into / name, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
        elif src.exists():
            shutil.copy(src, into / name)
    started = time.perf_counter()
    files = [f"coordinator/timeline/{m}.py" for m in MODULES]
    subprocess.run([sys.executable, "-m", "mypyc", *files], cwd=into, check=True, capture_output=True,
                   env={**os.environ, "PYTHONPATH": str(into)})
    return time.perf_counter() - started


def run_bench(path: Path, segments: int, ops: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-m", "bench.timeline", "--segments", str(segments), "--sources", "1", "--ops", str(ops)],
        cwd=path, check=True, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(path)}).stdout
    figures = {}
    for name, pattern in FIGURES.items():
        m = re.search(pattern, out)
        if m:
            figures[name] = float(m.group(1).replace(",", ""))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--segments", type=int, default=100_000)
    parser.add_argument("--ops", type=int, default=40_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tests", action="store_true", help="run tests/unit/timeline on the compiled copy")
    args = parser.parse_args()
    why = compiler_missing()
    if why is not None:
        print(f"mypyc build skipped: {why}; the pure-Python timeline is the only one")
        return
    with tempfile.TemporaryDirectory(prefix="segcoord-mypyc-") as tmp:
        compiled = Path(tmp)
        seconds = build(compiled)
        print(f"mypyc build of coordinator/timeline ({len(MODULES)} modules): {seconds:.0f} s")
        pure: dict[str, float] = {}
        fast: dict[str, float] = {}
        for _ in range(args.rounds):  # alternate, keep the best of each
            for into, path in ((pure, ROOT), (fast, compiled)):
                for name, value in run_bench(path, args.segments, args.ops).items():
                    better = max if name.endswith("ops/s") else min
                    into[name] = better(into.get(name, value), value)
        print(f"bench.timeline --segments {args.segments} --sources 1 --ops {args.ops}, best of {args.rounds}:")
        for name in FIGURES:
            if name in pure and name in fast:
                gain = fast[name] / pure[name] if name.endswith("ops/s") else pure[name] / fast[name]
                print(f"  {name:24s} pure {pure[name]:12,.1f}   mypyc {fast[name]:12,.1f}   speedup {gain:.2f}x")
        if args.tests:
            started = time.perf_counter()
            result = subprocess.run([sys.executable, "-m", "pytest", "tests/unit/timeline", "-q", "-p",
                                     "no:cacheprovider"], cwd=compiled, env={**os.environ, "PYTHONPATH": str(compiled)},
                                    capture_output=True, text=True)
            last = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else result.stderr[-300:]
            print(f"tests/unit/timeline on the compiled copy: {last} ({time.perf_counter() - started:.0f} s)")
            if result.returncode:
                sys.exit(result.returncode)


if __name__ == "__main__":
    main()
