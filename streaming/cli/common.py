"""What every command group shares: the user-facing error, and the shared options declared once.

The shared options have one name and one meaning everywhere:

| option | dest | meaning |
| --- | --- | --- |
| ``--bootstrap HOST:PORT`` | ``bootstrap`` | Kafka; default ``$SEGCOORD_BOOTSTRAP``, else the local broker |
| ``--topic-prefix P`` | ``topic_prefix`` | topic name prefix; default ``$SEGCOORD_TOPIC_PREFIX`` or ``segcoord.`` |
| ``--json`` | ``json`` | one JSON document (or JSON lines) on stdout, for scripts |
| ``--home DIR`` | ``home`` | the local broker's home; default ``$SEGCOORD_HOME`` |
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from streaming import config

if TYPE_CHECKING:
    from events.topics import Topics
    from streaming.local_broker import LocalBroker


class CliError(Exception):
    """A user-facing error: printed as one line, exit code 2."""


def add_bootstrap(p: argparse.ArgumentParser, helptext: str | None = None) -> None:
    p.add_argument("--bootstrap", metavar="HOST:PORT",
                   help=helptext or "Kafka (default $SEGCOORD_BOOTSTRAP, else the local broker)")


def add_topic_prefix(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topic-prefix", "--prefix", dest="topic_prefix", default=None,
                   help="topic name prefix (default $SEGCOORD_TOPIC_PREFIX or 'segcoord.')")


def add_json(p: argparse.ArgumentParser, helptext: str | None = None) -> None:
    p.add_argument("--json", action="store_true", help=helptext or "JSON output, for scripts")


def add_home(p: argparse.ArgumentParser, helptext: str | None = None) -> None:
    p.add_argument("--home", help=helptext or "local broker home (default $SEGCOORD_HOME, ~/.local/state/segcoord)")


def add_kafka(p: argparse.ArgumentParser) -> None:
    """``--bootstrap`` and ``--topic-prefix``: where the topics of this coordinator are."""
    add_bootstrap(p)
    add_topic_prefix(p)


def bootstrap(args: argparse.Namespace) -> str:
    """``--bootstrap``, else ``$SEGCOORD_BOOTSTRAP``, else the running local broker; a clear error otherwise."""
    if getattr(args, "bootstrap", None):
        return str(args.bootstrap)
    env = os.environ.get("SEGCOORD_BOOTSTRAP")
    if env:
        return env
    from streaming.local_broker import LocalBroker

    status = LocalBroker(config.home_dir()).status()
    if status.running and status.bootstrap:
        return status.bootstrap
    raise CliError("no Kafka broker: pass --bootstrap HOST:PORT, set SEGCOORD_BOOTSTRAP, or run `segcoord kafka start`")


def topics(args: argparse.Namespace) -> Topics:
    """``--topic-prefix``, else the environment's."""
    from events.topics import Topics

    prefix = getattr(args, "topic_prefix", None)
    return Topics(prefix) if prefix is not None else config.topics()


def broker(args: argparse.Namespace) -> LocalBroker:
    from streaming.local_broker import LocalBroker

    home = Path(args.home) if getattr(args, "home", None) else config.home_dir()
    return LocalBroker(home, heap_mb=getattr(args, "heap_mb", 512))


def json_arg(name: str, text: str | None) -> object:
    """A JSON option's value, or a clear error naming the option."""
    import orjson

    if text is None:
        return None
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise CliError(f"{name}: not JSON: {e}") from None
