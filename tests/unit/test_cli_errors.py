"""Bad input to the command line: one clear line naming what is wrong, and a non-zero exit."""

from __future__ import annotations

from pathlib import Path

import pytest

from streaming.cli import main


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    return err[0]


def test_events_validate_names_line_and_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = ('{"event_type":"segment_unannounced","schema_version":1,"event_id":"e1",'
            '"occurred_at":"2026-11-21T10:00:00Z","key":"wiki","causation_id":null,'
            '"payload":{"server":"h1","segmentId":"wiki_2026-11-20T00:00:00.000Z_2026-11-21T00:00:00.000Z_v1"}}')
    bad = good.replace('"server":"h1"', '"server":""')
    path = tmp_path / "events.jsonl"
    path.write_text(good + "\n\n" + good + "\n" + bad + "\n")
    assert main(["events", "validate", str(path)]) == 2
    line = _one_error_line(capsys)
    assert f"{path}:4: payload.server: must not be empty" in line

    path.write_text(good + "\n{oops\n")
    assert main(["events", "validate", str(path)]) == 2
    assert ":2: not valid JSON" in _one_error_line(capsys)

    path.write_text(good + "\n" + good + "\n")
    assert main(["events", "validate", str(path)]) == 0
    assert "2 valid events" in capsys.readouterr().out


def test_missing_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["events", "validate", "/nonexistent/file.jsonl"]) == 2
    assert "/nonexistent/file.jsonl" in _one_error_line(capsys)


def test_bad_partition_override(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topics", "create", "--bootstrap", "127.0.0.1:1", "--partitions-for", "commands"]) == 2
    assert "--partitions-for 'commands': expected TOPIC=COUNT" in _one_error_line(capsys)


def test_no_broker_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SEGCOORD_HOME", str(tmp_path))
    monkeypatch.delenv("SEGCOORD_BOOTSTRAP", raising=False)
    assert main(["topics", "create"]) == 2
    assert "no Kafka broker" in _one_error_line(capsys)


def test_help_lists_the_subcommands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for name in ("demo", "kafka", "topics", "jars", "events"):
        assert name in out


def test_new_cluster_ids_never_start_with_a_dash() -> None:
    import uuid

    from streaming.local_broker import new_cluster_id

    # 0xF8.. encodes to '-' first in url-safe base64; the generator draws again until the id cannot read as an option
    draws = iter([uuid.UUID(bytes=b"\xf8" + b"\x00" * 15), uuid.UUID(bytes=b"\x04" + b"\x00" * 15)])
    cid = new_cluster_id(lambda: next(draws))
    assert cid == "BAAAAAAAAAAAAAAAAAAAAA" and len(cid) == 22
    assert all(not new_cluster_id().startswith("-") for _ in range(2000))


def test_events_validate_checks_payloads_as_the_planner_parses_them(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    rules = ('{"event_type":"rules_set","schema_version":1,"event_id":"r1","occurred_at":"2026-11-21T10:00:00Z",'
             '"key":"rules/wiki","causation_id":null,"payload":{"dataSource":"wiki","rules":'
             '[{"type":"loadForever","tieredReplicants":{"hot":2}}]}}')
    config = ('{"event_type":"dynamic_config_set","schema_version":1,"event_id":"c1",'
              '"occurred_at":"2026-11-21T10:00:00Z","key":"config","causation_id":null,'
              '"payload":{"config":{"maxSegmentsToMove":5}}}')
    path = tmp_path / "events.jsonl"
    path.write_text(rules + "\n" + config + "\n")
    assert main(["events", "validate", str(path)]) == 0
    assert "2 valid events" in capsys.readouterr().out

    path.write_text(rules + "\n" + rules.replace('"hot":2', '"hot":-1') + "\n")
    assert main(["events", "validate", str(path)]) == 2
    assert f"{path}:2: payload.rules[0].tieredReplicants.hot: expected a non-negative integer, got -1" \
        in _one_error_line(capsys)

    path.write_text(config.replace('"maxSegmentsToMove":5', '"maxSegmentsToMove":"5"') + "\n")
    assert main(["events", "validate", str(path)]) == 2
    assert f"{path}:1: payload.config.maxSegmentsToMove: expected an integer" in _one_error_line(capsys)


def test_operator_commands_refuse_bad_input_before_any_broker(capsys: pytest.CaptureFixture[str]) -> None:
    # validated locally: no broker at 127.0.0.1:1 is ever asked
    assert main(["config", "set", "maxSegmentsToMove=x", "--bootstrap", "127.0.0.1:1"]) == 2
    assert "config.maxSegmentsToMove: expected an integer" in _one_error_line(capsys)
    assert main(["config", "set", "replicationThrottleLimit", "--bootstrap", "127.0.0.1:1"]) == 2
    assert "expected KEY=VALUE" in _one_error_line(capsys)
    assert main(["segments", "mark-unused", "--bootstrap", "127.0.0.1:1"]) == 2
    assert "at least one segment id" in _one_error_line(capsys)
    assert main(["run", "--http", "localhost", "--bootstrap", "127.0.0.1:1"]) == 2
    assert "--http: 'localhost': expected HOST:PORT" in _one_error_line(capsys)
    assert main(["run", "--coordinator-period", "0", "--bootstrap", "127.0.0.1:1"]) == 2
    assert "--coordinator-period: must be a positive number of seconds, got 0.0" in _one_error_line(capsys)
    assert main(["tail", "timeline", "--max-messages", "0", "--bootstrap", "127.0.0.1:1"]) == 2
    assert "--max-messages: must be > 0" in _one_error_line(capsys)


def test_run_refuses_a_bad_memtable_size_before_it_starts(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SEGCOORD_STORE_WRITE_BUFFER_MB", "0")
    assert main(["run", "--bootstrap", "127.0.0.1:1"]) == 2
    assert "SEGCOORD_STORE_WRITE_BUFFER_MB: must be a positive number of MB, got '0'" in _one_error_line(capsys)
