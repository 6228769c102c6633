"""The pure core (coordinator/, events/) imports no I/O library and reads no clock."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = {"confluent_kafka", "aiokafka", "kafka", "faust", "mode", "pyspark", "rocksdict", "testcontainers",
             "socket", "requests", "docker", "subprocess", "asyncio", "time", "random", "os"}
CLOCK_CALLS = {("datetime", "now"), ("datetime", "utcnow"), ("datetime", "today"), ("date", "today")}


def _core_files() -> list[Path]:
    files = sorted((ROOT / "coordinator").rglob("*.py")) + sorted((ROOT / "events").rglob("*.py"))
    assert len(files) > 10
    return files


def test_no_forbidden_imports() -> None:
    offenders = []
    for path in _core_files():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                mods = [node.module]
            else:
                continue
            offenders += [f"{path.relative_to(ROOT)}:{node.lineno} {m}" for m in mods
                          if m.split(".")[0] in FORBIDDEN]
    assert offenders == []


def test_no_clock_reads() -> None:
    offenders = []
    for path in _core_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and (node.value.id, node.attr) in CLOCK_CALLS):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


def test_importing_the_core_loads_no_io_library() -> None:
    code = (
        "import sys, events, coordinator, pkgutil, importlib\n"
        "for pkg in (events, coordinator):\n"
        "    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "        importlib.import_module(m.name)\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {sorted(FORBIDDEN - {'os', 'time'})!r})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == ""
