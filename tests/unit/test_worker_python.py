"""streaming.spark.worker_python: Spark's Python workers import pyspark from the installed package, not its zip.

Spark 4.0 gives a Python worker it starts on the driver (transformWithStateInPandas) a fixed 10 s to connect
back, and the worker imports pyspark before it connects; from ``pyspark.zip`` that import is compiled from
source every time. These tests run the wrapper the way Spark runs a worker (``PYTHONPATH`` with the zips first).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyspark

from streaming.spark import spark_zips, worker_python

PROBE = "import os, pyspark, py4j; print(pyspark.__file__); print(py4j.__file__); print(os.environ.get('PYTHONPATH'))"


def run(wrapper: str, pythonpath: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    out = subprocess.run([wrapper, "-c", PROBE], env=env, capture_output=True, text=True, check=True, timeout=300)
    return out.stdout.splitlines()


def test_the_zips_are_the_installed_packages_own() -> None:
    names = sorted(z.name for z in spark_zips())
    assert names[-1] == "pyspark.zip" and names[0].startswith("py4j-")
    assert all(z.parent.parent.parent.resolve() == Path(pyspark.__file__).resolve().parent for z in spark_zips())


def test_a_worker_imports_pyspark_from_the_package_and_keeps_the_rest_of_its_path(tmp_path: Path) -> None:
    wrapper = worker_python(folder=tmp_path)
    zips = [str(z) for z in spark_zips()]
    other = [str(tmp_path / "with space"), "/nowhere/else"]
    pyspark_file, py4j_file, path = run(wrapper, os.pathsep.join([*zips, other[0], *zips, other[1]]))
    assert ".zip" not in pyspark_file and ".zip" not in py4j_file
    assert Path(pyspark_file).resolve() == Path(pyspark.__file__).resolve()
    assert path == os.pathsep.join(other)  # every other entry, in order


def test_without_other_entries_the_variable_is_unset(tmp_path: Path) -> None:
    wrapper = worker_python(folder=tmp_path)
    assert run(wrapper, os.pathsep.join(str(z) for z in spark_zips()))[2] == "None"
    assert run(wrapper, None)[2] == "None"


def test_the_same_interpreter_gets_the_same_wrapper(tmp_path: Path) -> None:
    first = worker_python(folder=tmp_path)
    assert worker_python(folder=tmp_path) == first
    assert os.access(first, os.X_OK)
    assert worker_python(sys.executable + "-other", folder=tmp_path) != first
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".partial")] == []
