"""`segcoord simulate SCENARIO.json [--json]`: the example scenario, the JSON shape, and bad files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streaming.cli import main

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "cluster-scenario.json"


def test_example_scenario_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(EXAMPLE), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    runs = doc["runs"]
    assert [r["run"] for r in runs] == [1, 2, 3, 4, 5]
    first = runs[0]
    assert {c["type"] for c in first["commands"]} <= {"load", "drop", "move", "cancel"}
    assert all({"server", "segment", "tier", "stage", "reason", "replica"} <= set(c) for c in first["commands"])
    assert set(first["servers"]["hot1"]) >= {"tier", "loaded", "queue"}
    assert "segment/assigned/count" in first["metrics"]
    # the broadcast lookup is everywhere, the decommissioned server is empty at the end
    lookup = next(s for s in first["used"] if s.startswith("lookups_"))
    assert all(lookup in s["loaded"] for s in first["servers"].values())
    assert [s for s in runs[-1]["servers"]["cold2"]["loaded"] if not s.startswith("lookups_")] == []
    # after the clock moves past the hot period, the wiki data leaves the hot tier
    hot = [s for n, srv in runs[-1]["servers"].items() if srv["tier"] == "hot" for s in srv["loaded"]]
    assert not any(s.startswith("wiki_") for s in hot)


def test_example_scenario_as_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "== run 1" in out and "hot1 [hot]" in out


def test_a_bad_file_gives_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"now": "2026-01-01", "servers": [{"name": "a", "maxSizeBytes": -5}]}))
    assert main(["simulate", str(bad)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "servers[0]" in err[0] and "maxSizeBytes" in err[0]
    missing = tmp_path / "nope.json"
    assert main(["simulate", str(missing)]) != 0
    assert "nope.json" in capsys.readouterr().err
