"""Where the shell keeps things, and the environment variables that move them.

| variable | default | what |
| --- | --- | --- |
| ``SEGCOORD_CACHE`` | ``~/.cache/segcoord`` | fetched jars (shared by every checkout) |
| ``SEGCOORD_HOME`` | ``~/.local/state/segcoord`` | the local broker's data, logs, pid and address |
| ``SEGCOORD_BOOTSTRAP`` | (the local broker's recorded address) | Kafka bootstrap servers to use |
| ``SEGCOORD_TOPIC_PREFIX`` | ``segcoord.`` | prefix of every topic name |
"""

from __future__ import annotations

import os
from pathlib import Path

from events.topics import DEFAULT_PREFIX, Topics


def cache_dir() -> Path:
    return Path(os.environ.get("SEGCOORD_CACHE", Path.home() / ".cache" / "segcoord"))


def home_dir() -> Path:
    return Path(os.environ.get("SEGCOORD_HOME", Path.home() / ".local" / "state" / "segcoord"))


def topics() -> Topics:
    return Topics(os.environ.get("SEGCOORD_TOPIC_PREFIX", DEFAULT_PREFIX))
