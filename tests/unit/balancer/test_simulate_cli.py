"""``segcoord balance simulate`` writes the report and the three pictures."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from streaming.cli import main


def test_simulate_json_and_pictures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sim"
    assert main(["balance", "simulate", "--servers", "6", "--datasources", "3", "--days", "3", "--seed", "7",
                 "--moves", "50", "--out", str(out), "--json"]) == 0
    result = orjson.loads(capsys.readouterr().out)
    names = [p["placement"] for p in result["placements"]]
    assert names == ["random", "greedy", "random+rebalanced"]
    random, greedy, rebalanced = result["placements"]
    assert greedy["querySpreadMean"] >= random["querySpreadMean"]
    assert rebalanced["totalCost"] < random["totalCost"] and rebalanced["moves"] > 0
    for path in result["pictures"]:
        assert Path(path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_simulate_rejects_bad_sizes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["balance", "simulate", "--servers", "0", "--out", str(tmp_path)]) == 2
    assert "--servers" in capsys.readouterr().err
