"""``segcoord upserts replay`` (offline, pinned JSON names) and ``define``'s input errors; the broker-backed
commands are exercised by tests/integration/test_upserts_end_to_end.py."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from events import encode
from streaming.cli import main
from tests.unit.upserts.builders import APPEND, part
from tests.unit.upserts.test_upserts_given import seed_003


def test_replay_json_pins_the_names_scripts_rely_on(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = seed_003()
    old = log.reingest("2021-01-01", part("Facebook", "2021-01-01", "ver0"))
    path = tmp_path / "log.jsonl"
    path.write_bytes(b"".join(encode(e) + b"\n" for e in log.envelopes))
    assert main(["upserts", "replay", str(path), "--json"]) == 0
    doc = orjson.loads(capsys.readouterr().out)
    table = doc["tables"]["ads"]
    assert set(table) >= {"latest", "stale", "filter"}
    facebook = {"key": {"date": "2021-01-01", "source": "Facebook"}, "version": "ver1", "tombstone": False}
    assert facebook in table["latest"]
    assert table["stale"] == [str(old.id)] and str(old.id).startswith(APPEND)
    kinds = set()

    def walk(f: dict) -> None:  # type: ignore[type-arg]
        kinds.add(f["type"])
        for x in f.get("fields", []):
            walk(x)
        if "field" in f:
            walk(f["field"])

    walk(table["filter"])
    assert kinds <= {"and", "or", "not", "selector", "in"}
    assert main(["upserts", "replay", str(path)]) == 0
    assert "upsert table ads: 6 keys, 1 segments cleanup would mark unused" in capsys.readouterr().out


def test_define_names_the_option_at_fault(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["upserts", "define", "x", "--append", "a", "--primary", "a", "--key", "s,d",
                 "--version-column", "v", "--bootstrap", "127.0.0.1:1"]) == 2
    assert "--primary: must differ from --append" in capsys.readouterr().err
    assert main(["upserts", "define", "x", "--append", "a", "--primary", "b", "--key", "s,,d",
                 "--version-column", "v", "--bootstrap", "127.0.0.1:1"]) == 2
    assert "--key: expected comma-separated column names" in capsys.readouterr().err
    assert main(["upserts", "define", "x", "--append", "a", "--primary", "b", "--key", "s,v",
                 "--version-column", "v", "--bootstrap", "127.0.0.1:1"]) == 2
    assert "--version-column: 'v' is also a key column" in capsys.readouterr().err


def test_replay_of_a_bad_file_names_the_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"event_type": "upsert_table_set"}\n')
    assert main(["upserts", "replay", str(path)]) == 2
    assert f"{path}:1:" in capsys.readouterr().err
