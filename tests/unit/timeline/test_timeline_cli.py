"""``segcoord timeline replay|lookup`` on JSON-lines files, including bad input."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from streaming.cli import main

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "timeline-proposal.jsonl"
PREFIX = "wiki_edits_2026-01-01T00:00:00.000Z_2026-01-02T00:00:00.000Z_2026-01-01T12:00:00.000Z"


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> object:
    assert main(list(args)) == 0
    return orjson.loads(capsys.readouterr().out)


def test_replay_json_after_every_step(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, "timeline", "replay", str(EXAMPLE), "--json")
    assert out == {
        "segments": {f"{PREFIX}_{p}": s for p, s in [(1, "visible"), (2, "overshadowed"), (3, "overshadowed"),
                                                      (4, "visible"), (5, "visible"), (6, "standby"),
                                                      (7, "offline"), (8, "visible")]},
        "visible": {"wiki_edits": [f"{PREFIX}_{p}" for p in (1, 4, 5, 8)]},
    }
    before_removal = run_json(capsys, "timeline", "replay", str(EXAMPLE), "--json", "--at", "13")
    assert before_removal["visible"] == {"wiki_edits": [f"{PREFIX}_{p}" for p in (1, 6, 7, 8)]}  # type: ignore[index]
    first = run_json(capsys, "timeline", "replay", str(EXAMPLE), "--json", "--at", "1")
    assert set(first["segments"].values()) == {"offline"} and first["visible"] == {}  # type: ignore[index]


def test_lookup(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, "timeline", "lookup", str(EXAMPLE), "--datasource", "wiki_edits",
                   "--interval", "2026-01-01T06/2026-01-02T06", "--json")
    assert out == [{"segment": f"{PREFIX}_{p}", "intervals": ["2026-01-01T06:00:00.000Z/2026-01-02T00:00:00.000Z"]}
                   for p in (1, 4, 5, 8)]
    assert run_json(capsys, "timeline", "lookup", str(EXAMPLE), "--datasource", "wiki_edits",
                    "--interval", "2026-01-01T06/2026-01-01T06", "--json") == []
    assert run_json(capsys, "timeline", "lookup", str(EXAMPLE), "--datasource", "other",
                    "--interval", "2026-01-01/P1D", "--json") == []


def _error(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(list(args)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    return err[0]


def test_bad_input_names_line_and_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = EXAMPLE.read_bytes().splitlines()
    bad = tmp_path / "bad.jsonl"
    unannounce = orjson.loads(lines[-1])
    unannounce["payload"]["segmentId"] = "not-a-segment-id"
    bad.write_bytes(b"\n".join([*lines[:3], orjson.dumps(unannounce)]) + b"\n")
    assert f"{bad}:4: payload.segmentId: " in _error(capsys, "timeline", "replay", str(bad))

    announce = orjson.loads(lines[1])
    announce["payload"]["segment"]["interval"] = "2026-01-02/2026-01-01"
    bad.write_bytes(b"\n".join([lines[0], orjson.dumps(announce)]) + b"\n")
    assert f"{bad}:2: payload.segment.interval: " in _error(capsys, "timeline", "replay", str(bad), "--json")

    assert "--interval: " in _error(capsys, "timeline", "lookup", str(EXAMPLE), "--datasource", "wiki_edits",
                                    "--interval", "yesterday")
    assert "--at -1" in _error(capsys, "timeline", "replay", str(EXAMPLE), "--at", "-1")
