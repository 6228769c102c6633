"""A local SparkSession with Spark's Kafka connector jars, passed as local files.

The jars match the installed pyspark version exactly (:func:`streaming.maven.spark_kafka_bundle`)
and must be given with ``spark.jars`` before the first SparkSession of the
process. Settings suit a 2-core machine: ``local[2]``, two shuffle partitions,
no UI, the driver bound to 127.0.0.1, RocksDB as the streaming state store with changelog
checkpointing (:data:`STATE_STORE_CONF`), and Python workers that import pyspark from the installed
package's cached bytecode (:func:`worker_python`).

**Why the Python workers need their own interpreter path.** ``transformWithStateInPandas`` starts a
Python worker on the driver when a query starts (``StreamingPythonRunner`` ->
``PythonWorkerFactory.createSimpleWorker``) and gives it 10 s to connect back, a constant in Spark 4.0
(SPARK-45245), not a setting: ``spark.python.use.daemon``, ``spark.python.worker.reuse`` and
``spark.python.authenticate.socketTimeout`` do not reach it. The worker imports pyspark (and pandas,
pyarrow) before it connects, and Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on its
``PYTHONPATH``: modules imported from a zip are compiled from source on every start (zipimport caches no
bytecode), 3x slower than the same imports from the installed package (4.3 s against 1.3 s at load 7;
29-31 s against 11-12 s at load 40-85, where every query start failed). With a pip-installed pyspark,
``SPARK_HOME`` *is* the installed package, so the zip holds the same files as the package beside it:
the workers run :func:`worker_python`, a wrapper that drops exactly that zip (and py4j's) from
``PYTHONPATH`` and runs this interpreter, so they import the installed package's bytecode.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from streaming import maven
from streaming.config import cache_dir

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ROCKSDB_STATE_STORE = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
# The state store of every streaming query: RocksDB, and a micro-batch's commit writes only the entries the batch
# changed (a changelog file per version) instead of snapshotting the database and uploading its new files, work
# that grows with the state; a background maintenance task snapshots every few versions, and a restart loads the
# last snapshot and replays the changelogs after it. Spark reads checkpoints written either way.
STATE_STORE_CONF = {
    "spark.sql.streaming.stateStore.providerClass": ROCKSDB_STATE_STORE,
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
}


# The Python side's socket timeout while it authenticates to the JVM after connecting (default 15 s; the
# connect-back wait itself is fixed, see the module docstring). Generous: on a machine loaded far past its
# cores a worker that has connected can still be descheduled for seconds.
PYTHON_CONF = {"spark.python.authenticate.socketTimeout": "120s"}


def spark_zips() -> list[Path]:
    """The zips Spark puts first on its Python workers' ``PYTHONPATH`` when ``SPARK_HOME`` is the installed
    pyspark package (pip's layout): ``python/lib/pyspark.zip`` and py4j's source zip beside it."""
    import pyspark

    package = Path(pyspark.__file__).parent
    libs = {package / "python" / "lib", package.resolve() / "python" / "lib"}  # Spark names the real path
    return sorted({z for lib in libs for z in (*lib.glob("pyspark.zip"), *lib.glob("py4j-*-src.zip"))})


def worker_python(python: str = sys.executable, folder: Path | None = None) -> str:
    """An executable that runs ``python`` with :func:`spark_zips` removed from ``PYTHONPATH`` (every other entry
    kept, in order; the variable unset if nothing is left): Spark's Python workers then import pyspark and py4j
    from the installed packages, whose bytecode is cached, instead of compiling them out of the zips on every
    start. Written once per (interpreter, zips) under ``folder`` (default ``<cache>/spark``), atomically; the
    same arguments always return the same path. Only those exact files are dropped: a ``SPARK_HOME`` elsewhere
    (another Spark's zips) is left alone."""
    drop = "|".join(shlex.quote(str(z)) for z in spark_zips()) or "''"
    script = f"""#!/bin/sh
# Written by streaming.spark.worker_python: runs {python} for Spark's Python workers without pyspark's zips
# on PYTHONPATH, so pyspark is imported from the installed package with its cached bytecode (Spark gives a
# worker it starts on the driver 10 s to connect back; compiling pyspark from the zip can take longer).
set -f
kept=
IFS=:
for entry in ${{PYTHONPATH-}}; do
  case "$entry" in
    {drop}) ;;
    *) kept="${{kept:+$kept:}}$entry" ;;
  esac
done
unset IFS
if [ -n "$kept" ]; then export PYTHONPATH="$kept"; else unset PYTHONPATH; fi
exec {shlex.quote(python)} "$@"
"""
    target = (folder or cache_dir() / "spark") / f"python-{hashlib.sha256(script.encode()).hexdigest()[:16]}"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
        partial.write_text(script)
        partial.chmod(0o755)
        os.replace(partial, target)
    return str(target)


def local_spark(
    app_name: str = "segcoord",
    *,
    master: str = "local[2]",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Build (or return the running) SparkSession with the Kafka connector on its classpath."""
    from pyspark.sql import SparkSession

    jars = maven.fetch(maven.spark_kafka_bundle())
    os.environ.setdefault("PYSPARK_PYTHON", worker_python())  # read when the SparkContext starts
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.jars", ",".join(str(j) for j in jars))
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")  # its progress bars are escape codes in log files
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
    )
    for key, value in {**STATE_STORE_CONF, **PYTHON_CONF}.items():
        builder = builder.config(key, value)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
