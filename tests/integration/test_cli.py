"""The user-facing commands, run as a user runs them (subprocesses of the installed console script)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from events.topics import TOPIC_SPECS

pytestmark = pytest.mark.integration
SEGCOORD = str(Path(sys.executable).parent / "segcoord")


def run(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SEGCOORD, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def test_kafka_start_status_stop(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    status = run("kafka", "status", "--home", home)
    assert status.returncode == 1 and "not running" in status.stdout

    # A cluster id may start with '-' (1 in 64 random ids did before new_cluster_id avoided them); the storage
    # tool's parser must still take it as the id, not as an option. Seed one so every run covers that case.
    (tmp_path / "home" / "kafka").mkdir(parents=True)
    (tmp_path / "home" / "kafka" / "cluster.id").write_text("-" + "A" * 21 + "\n")
    start = run("kafka", "start", "--home", home, "--heap-mb", "256")
    assert start.returncode == 0, start.stderr
    bootstrap = start.stdout.split(" at ")[1].split()[0]
    assert bootstrap.startswith("127.0.0.1:")
    try:
        status = run("kafka", "status", "--home", home)
        assert status.returncode == 0 and bootstrap in status.stdout
        # a second start finds the running broker instead of starting another
        again = run("kafka", "start", "--home", home)
        assert again.returncode == 0 and bootstrap in again.stdout
        assert AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).brokers
        # other commands find the recorded address
        created = run("topics", "create", "--prefix", "cli.", env={"SEGCOORD_HOME": home})
        assert created.returncode == 0, created.stderr
        assert created.stdout.count("created") == len(TOPIC_SPECS)
    finally:
        stop = run("kafka", "stop", "--home", home)
    assert stop.returncode == 0 and "stopped" in stop.stdout
    assert run("kafka", "status", "--home", home).returncode == 1
    assert run("kafka", "stop", "--home", home).stdout.strip() == "kafka was not running"

    # restart keeps the data and the port
    restart = run("kafka", "start", "--home", home)
    try:
        assert restart.returncode == 0 and bootstrap in restart.stdout
        topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
        assert "cli.segments" in topics
    finally:
        run("kafka", "stop", "--home", home)


def test_stop_never_signals_a_process_it_did_not_start(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "kafka").mkdir(parents=True)
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        (home / "kafka" / "broker.pid").write_text(f"{stranger.pid}\n")
        result = run("kafka", "stop", "--home", str(home))
        assert result.returncode == 0 and "not running" in result.stdout
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


def test_topics_create_applies_partitions_and_policies(kafka_bootstrap: str) -> None:
    prefix = f"c{uuid.uuid4().hex[:8]}."
    result = run("topics", "create", "--bootstrap", kafka_bootstrap, "--prefix", prefix,
                 "--partitions", "2", "--partitions-for", "commands=4")
    assert result.returncode == 0, result.stderr
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    md = admin.list_topics(timeout=10).topics
    assert len(md[prefix + "segments"].partitions) == 2
    assert len(md[prefix + "commands"].partitions) == 4
    resources = [ConfigResource(ConfigResource.Type.TOPIC, prefix + n) for n in ("segments", "snapshots")]
    configs = {r.name: f.result(timeout=10) for r, f in admin.describe_configs(resources).items()}
    assert configs[prefix + "segments"]["cleanup.policy"].value == "delete"
    assert configs[prefix + "segments"]["retention.ms"].value == "-1"
    assert configs[prefix + "snapshots"]["cleanup.policy"].value == "compact"
    again = run("topics", "create", "--bootstrap", kafka_bootstrap, "--prefix", prefix)
    assert again.returncode == 0 and again.stdout.count("exists") == len(TOPIC_SPECS)
