"""Fetching Java jars from Maven Central with ``mvn`` into a local cache folder.

Two bundles, each its own Maven resolution (so the broker's kafka-clients and
the Spark connector's never merge):

- ``kafka-broker``: Apache Kafka's broker and its runtime closure, plus a
  log4j2 binding for SLF4J 1.7 (without one the broker logs nothing).
- ``spark-kafka``: Spark's Kafka source/sink for the installed pyspark version,
  its token provider, kafka-clients and commons-pool2 only (pyspark ships the rest).

A bundle is fetched once into ``<cache>/<bundle>-<version>/`` (written to a
temporary folder and renamed when complete, so an interrupted fetch never looks
finished); later calls return the cached jars without running Maven.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from streaming.config import cache_dir

JARS_DIR = Path(__file__).parent / "jars"
KAFKA_VERSION = "4.1.1"


class JarFetchError(RuntimeError):
    """Maven could not fetch a bundle; the message carries Maven's own error lines."""


@dataclass(frozen=True, slots=True)
class JarBundle:
    name: str
    pom: str
    version_property: str
    version: str
    include_artifacts: tuple[str, ...] = ()

    @property
    def folder_name(self) -> str:
        return f"{self.name}-{self.version}"


def kafka_broker_bundle(version: str = KAFKA_VERSION) -> JarBundle:
    return JarBundle("kafka-broker", "kafka-broker.pom.xml", "kafka.version", version)


def spark_kafka_bundle(spark_version: str | None = None) -> JarBundle:
    """The connector matching the installed pyspark exactly (``spark_version`` overrides)."""
    if spark_version is None:
        import pyspark

        spark_version = pyspark.__version__
    return JarBundle(
        "spark-kafka",
        "spark-kafka.pom.xml",
        "spark.version",
        spark_version,
        include_artifacts=(
            "spark-sql-kafka-0-10_2.13",
            "spark-token-provider-kafka-0-10_2.13",
            "kafka-clients",
            "commons-pool2",
        ),
    )


def jar_folder(bundle: JarBundle, cache: Path | None = None) -> Path:
    return (cache or cache_dir() / "jars") / bundle.folder_name


def fetch(bundle: JarBundle, cache: Path | None = None, *, quiet: bool = True) -> list[Path]:
    """Return the bundle's jars, running Maven once if they are not cached yet."""
    target = jar_folder(bundle, cache)
    if (target / ".complete").exists():
        return sorted(target.glob("*.jar"))
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarFetchError("Maven (mvn) is not on PATH; install it (apt-get install maven) to fetch the jars")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{bundle.folder_name}-", dir=target.parent))
    settings = os.environ.get("SEGCOORD_MAVEN_SETTINGS", str(JARS_DIR / "maven-settings.xml"))
    cmd = [
        mvn, "-B", "-s", settings, "-f", str(JARS_DIR / bundle.pom),
        "dependency:copy-dependencies",
        f"-D{bundle.version_property}={bundle.version}",
        f"-DoutputDirectory={staging}",
        "-DincludeScope=runtime",
    ]
    if quiet:
        cmd.insert(2, "-q")
    if bundle.include_artifacts:
        cmd.append("-DincludeArtifactIds=" + ",".join(bundle.include_artifacts))
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        errors = [line for line in (proc.stdout + proc.stderr).splitlines() if "ERROR" in line][:3]
        raise JarFetchError(f"mvn could not fetch {bundle.folder_name}: " + " | ".join(errors or ["(no output)"]))
    jars = sorted(staging.glob("*.jar"))
    if not jars:
        shutil.rmtree(staging, ignore_errors=True)
        raise JarFetchError(f"mvn fetched no jars for {bundle.folder_name}")
    (staging / ".complete").write_text(f"fetched in {time.monotonic() - started:.1f}s\n")
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)
    return sorted(target.glob("*.jar"))
