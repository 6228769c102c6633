"""``segcoord balance simulate`` writes the report, the three pictures and the HTML page that shows them."""

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
    pictures = [Path(p) for p in result["pictures"]]
    assert sorted(p.name for p in pictures) == ["one-day.png", "query-spread.png", "segments-per-server.png"]
    for path in pictures:
        assert path.parent == out and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = Path(result["html"])
    assert page == out / "index.html"
    text = page.read_text()
    for path in pictures:  # relative links: the folder can be moved or served as is
        assert f'src="{path.name}"' in text
    # the distribution behind the spread picture: one count per (data source, day), 3 x 3 of them
    for name in names:
        assert sum(result["querySpreads"][name].values()) == 9
    assert f"{greedy['querySpreadMean']:.3f}" in text and f"{random['querySpreadMean']:.3f}" in text


def test_simulate_rejects_bad_sizes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["balance", "simulate", "--servers", "0", "--out", str(tmp_path)]) == 2
    assert "--servers" in capsys.readouterr().err


def test_progress_reports_every_greedy_placement_and_move() -> None:
    """The callbacks the progress bars hang on: the last call says all the work was done."""
    import numpy as np

    from coordinator.balancer.cost import CostModel
    from coordinator.balancer.simulation import Cluster, hourly_segments, place_greedy, place_random, rebalance
    from streaming.balance_sim import START

    segments = hourly_segments(2, 2, START)
    placed: list[int] = []
    greedy = Cluster(segments, ["a", "b", "c"], CostModel())
    place_greedy(greedy, placed.append)
    assert placed[-1] == len(segments) and placed == sorted(placed)
    moved: list[int] = []
    rand = Cluster(segments, ["a", "b", "c"], CostModel())
    place_random(rand, np.random.default_rng(1))
    made = rebalance(rand, 5, np.random.default_rng(2), progress=moved.append)
    assert moved == list(range(1, made + 1))
