"""Reading JSON-lines files of envelopes (the replay CLIs' input), with errors naming line and field."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson

from events.envelope import Envelope, from_json
from events.registry import Event
from events.schema import EventValidationError


class JsonLinesError(ValueError):
    """``<file>:<line>: <field>: <problem>`` for the first bad line."""


def read_envelopes(path: Path, *, until_line: int | None = None) -> Iterator[Envelope[Event]]:
    """Decode every non-blank line (up to ``until_line`` inclusive) as an envelope, in file order."""
    for _lineno, env in read_numbered_envelopes(path, until_line=until_line):
        yield env


def read_numbered_envelopes(path: Path, *, until_line: int | None = None) -> Iterator[tuple[int, Envelope[Event]]]:
    """(line number, envelope) for every non-blank line up to ``until_line`` inclusive."""
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, start=1):
            if until_line is not None and lineno > until_line:
                return
            if not line.strip():
                continue
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError as e:
                raise JsonLinesError(f"{path}:{lineno}: not valid JSON ({e})") from None
            try:
                env = from_json(obj)
            except EventValidationError as e:
                raise JsonLinesError(f"{path}:{lineno}: {e}") from None
            yield lineno, env
