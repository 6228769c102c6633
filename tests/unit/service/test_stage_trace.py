"""The stage trace (streaming/service/stage_trace.py) and how bench.stages finds a record's stage in it."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from bench.stages import _Index, read_trace
from streaming.service import stage_trace
from streaming.service.intake import InputRecord


def test_off_by_default_writes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stage_trace, "_out", None)
    assert not stage_trace.enabled()
    stage_trace.records("fetched", [InputRecord("t", 0, 1, None, b"x")])  # no file, no error
    stage_trace.mark("flush-begin:lockbox", n=3)


def test_one_line_per_partition_with_its_offset_span_and_the_records_found_again(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    out = io.StringIO()
    monkeypatch.setattr(stage_trace, "_out", out)
    recs = [InputRecord("a", 0, o, None, b"x") for o in (5, 6, 9)] + [InputRecord("b", 1, 40, None, b"y")]
    stage_trace.records("fetched", recs)
    stage_trace.records("fetched", [InputRecord("a", 0, 10, None, b"x"), InputRecord("a", 0, 12, None, b"x")])
    stage_trace.mark("flush-done:lockbox")
    path = tmp_path / "trace.txt"
    path.write_text(out.getvalue())
    lines = read_trace(path)
    assert [(ln.stage, ln.topic, ln.partition, ln.first, ln.last, ln.n) for ln in lines] == [
        ("fetched", "a", 0, 5, 9, 3), ("fetched", "b", 1, 40, 40, 1), ("fetched", "a", 0, 10, 12, 2),
        ("flush-done:lockbox", "-", -1, -1, -1, 0)]
    index = _Index(ln for ln in lines if ln.stage == "fetched")
    assert index.at("a", 6) == lines[0].at and index.at("a", 11) == lines[2].at and index.at("b", 40) == lines[1].at
    assert index.at("a", 4) is None and index.at("a", 13) is None and index.at("c", 1) is None


def test_a_held_block_is_marked_when_it_ends_with_how_long_it_held(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    import time

    out = io.StringIO()
    monkeypatch.setattr(stage_trace, "_out", out)
    began = time.perf_counter()
    with pytest.raises(RuntimeError), stage_trace.held("recount"):
        inside = time.perf_counter()
        while time.perf_counter() - inside < 0.002:  # the block's own 2 ms of work, measured below
            pass
        raise RuntimeError("a failing job is marked too")
    spent_us = (time.perf_counter() - began) * 1e6
    path = tmp_path / "trace.txt"
    path.write_text(out.getvalue())
    [line] = read_trace(path)
    assert line.stage == "hold:recount" and 2000 <= line.n <= spent_us
    monkeypatch.setattr(stage_trace, "_out", None)
    with stage_trace.held("recount"):  # off: nothing written, nothing timed
        pass
    assert out.getvalue().count("\n") == 1
