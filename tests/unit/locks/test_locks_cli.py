"""``segcoord locks replay`` on a JSON-lines file of task requests."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from streaming.cli import main

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "locks-priorities.jsonl"


def test_replay_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["locks", "replay", str(EXAMPLE), "--json"]) == 0
    out = orjson.loads(capsys.readouterr().out)
    assert [(d["requestId"], d["outcome"]) for d in out["decisions"]] == [
        ("batch-lock", "granted"), ("batch-alloc", "granted"), ("compact-lock", "waiting"),
        ("kafka-lock", "granted"), ("batch-publish", "rejected"), ("compact-lock", "granted"),
    ]
    kafka = out["decisions"][3]
    assert kafka["revokedLockIds"] == ["wiki#0"] and kafka["lockId"] == "wiki#1"
    assert set(kafka) == {"requestId", "outcome", "lockId", "version", "revokedLockIds", "reason", "segmentId",
                          "absorbedLockIds", "releasedLockIds", "kind", "segmentIds", "upgradedSegmentIds",
                          "alreadyPublished"}
    assert out["decisions"][1]["segmentId"].startswith("wiki_2026-01-01T00:00:00.000Z_2026-01-02")
    assert "revoked" in out["decisions"][4]["reason"]
    assert out["locks"] == [{
        "lockId": "wiki#2", "taskId": "compact_wiki", "groupId": "compact_wiki", "dataSource": "wiki",
        "interval": "2026-01-01T00:00:00.000Z/2026-01-02T00:00:00.000Z", "granularity": "timeChunk",
        "type": "exclusive", "version": "2026-01-10T00:00:04.000Z", "priority": 25, "revoked": False,
        "partitionIds": [],
    }]


def test_replay_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["locks", "replay", str(EXAMPLE)]) == 0
    text = capsys.readouterr().out
    assert "kafka-lock   granted" in text and "locks: 1" in text


def test_bad_line_names_line_and_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = EXAMPLE.read_bytes().splitlines()
    bad = orjson.loads(lines[1])
    bad["payload"]["lockType"] = "exclusiv"
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\n".join([lines[0], orjson.dumps(bad)]) + b"\n")
    assert main(["locks", "replay", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{path}:2: payload.lockType: must be one of" in err[0]


APPEND_REPLACE = EXAMPLE.parent / "locks-append-replace.jsonl"


def test_replay_shows_the_new_requests_and_outcomes(capsys: pytest.CaptureFixture[str]) -> None:
    """Try-lock, publish kinds, a re-sent publish, replace upgrades, one lock released."""
    assert main(["locks", "replay", str(APPEND_REPLACE), "--json"]) == 0
    out = {d["requestId"]: d for d in orjson.loads(capsys.readouterr().out)["decisions"]}
    assert out["compact-try"]["outcome"] == "denied" and "try-lock" in out["compact-try"]["reason"]
    assert out["kafka-alloc"]["version"] == "1970-01-01T00:00:00.000Z"
    assert (out["kafka-publish"]["outcome"], out["kafka-publish"]["kind"]) == ("accepted", "append")
    assert out["kafka-publish-again"]["alreadyPublished"] is True
    assert out["compact-publish"]["kind"] == "replace" and len(out["compact-publish"]["upgradedSegmentIds"]) == 1
    assert len(out["kafka-publish-late"]["upgradedSegmentIds"]) == 1  # after the replace: into its version too
    assert out["kafka-release"]["outcome"] == "released" and out["kafka-release"]["releasedLockIds"] == ["wiki#0"]
    assert main(["locks", "replay", str(APPEND_REPLACE)]) == 0
    text = capsys.readouterr().out
    assert "kafka-release released" in text and "(already published)" in text
