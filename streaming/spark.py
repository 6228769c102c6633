"""A local SparkSession with Spark's Kafka connector jars, passed as local files.

The jars match the installed pyspark version exactly (:func:`streaming.maven.spark_kafka_bundle`)
and must be given with ``spark.jars`` before the first SparkSession of the
process. Settings suit a 2-core machine: ``local[2]``, two shuffle partitions,
no UI, the driver bound to 127.0.0.1, RocksDB as the streaming state store with changelog
checkpointing (:data:`STATE_STORE_CONF`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from streaming import maven

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


def local_spark(
    app_name: str = "segcoord",
    *,
    master: str = "local[2]",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Build (or return the running) SparkSession with the Kafka connector on its classpath."""
    from pyspark.sql import SparkSession

    jars = maven.fetch(maven.spark_kafka_bundle())
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
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
    for key, value in STATE_STORE_CONF.items():
        builder = builder.config(key, value)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
