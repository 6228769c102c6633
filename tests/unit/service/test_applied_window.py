"""The applied-id set of an agent's store keeps a bounded window (issue 16: the dedupe id sets grew for ever).

A long run (many batches of fresh ids, on a real RocksDB store) keeps the number of stored ids flat at the
window's ``max_ids``; ids older than ``max_age_ms`` (log time) are forgotten; recent ids are still recognised
as duplicates; the window survives a reopen. Counted by stored keys, never by time.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from streaming.service.state import (
    APPLIED_PREFIX,
    KEEP_LOG_FILES,
    MAX_LOG_FILE_BYTES,
    WRITE_BUFFER_ENV,
    AgentStateStore,
    AppliedWindow,
    write_buffer_bytes,
)


def _stored(store: AgentStateStore) -> int:
    return len(store.scan_raw(APPLIED_PREFIX))


def test_a_long_run_keeps_the_store_flat_at_the_count_window(tmp_path: Path) -> None:
    window = AppliedWindow(max_ids=500, max_age_ms=10**12)
    sizes = []
    with AgentStateStore(tmp_path / "s", "test/1", window) as store:
        for b in range(200):  # 20 000 ids, 40 times the window
            batch = store.batch()
            for i in range(100):
                batch.mark_applied(f"e{b}-{i}", 1_000 + b)
            batch.set_offset("t", 0, (b + 1) * 100)
            store.commit(batch)
            sizes.append(_stored(store))
        assert max(sizes) <= 500 and min(sizes[10:]) >= 300  # flat: between 3/5 and all of the window
        assert store.applied("e199-99") and store.applied("e197-0") and not store.applied("e0-0")
        assert store.applied_count == sizes[-1]
    with AgentStateStore(tmp_path / "s", "test/1", window) as store:  # the window survives a reopen
        assert store.applied_count == sizes[-1] == _stored(store)
        assert store.offsets() == {("t", 0): 20_000}


def test_generations_older_than_the_time_window_are_forgotten_recent_ones_kept(tmp_path: Path) -> None:
    window = AppliedWindow(max_ids=3, max_age_ms=60_000)  # one id per generation, never too many: age decides
    with AgentStateStore(tmp_path / "s", "test/1", window) as store:
        for at, name in ((1_000_000, "old"), (1_070_000, "mid"), (1_100_000, "new")):
            batch = store.batch()
            batch.mark_applied(name, at)
            store.commit(batch)
        assert not store.applied("old") and store.applied("mid") and store.applied("new")
        batch = store.batch()
        batch.mark_applied("untimed")  # no timestamp: counted at the newest time known
        store.commit(batch)
        assert store.applied("untimed") and store.newest_applied_at == 1_100_000


def test_marking_an_id_twice_in_one_batch_counts_it_once(tmp_path: Path) -> None:
    with AgentStateStore(tmp_path / "s", "test/1", AppliedWindow(max_ids=3)) as store:
        batch = store.batch()
        batch.mark_applied("same", 5)
        batch.mark_applied("same", 6)
        store.commit(batch)
        assert store.applied_count == 1 and _stored(store) == 1


def test_a_window_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_ids and max_age_ms must be positive"):
        AppliedWindow(max_ids=0)


def test_reopening_a_store_many_times_keeps_only_a_few_rocksdb_info_logs(tmp_path: Path) -> None:
    """RocksDB starts a new info LOG at every open and kept up to 1000 old ones: a worker restarted often (a
    soak's kills) grew its store by one file per restart. Now at most ``KEEP_LOG_FILES`` are kept."""
    for restart in range(KEEP_LOG_FILES + 5):
        with AgentStateStore(tmp_path / "s", "test/1") as store:
            batch = store.batch()
            batch.mark_applied(f"e{restart}", 1_000 + restart)
            store.commit(batch)
    logs = [f.name for f in (tmp_path / "s").iterdir() if f.name.startswith("LOG")]
    assert 1 <= len(logs) <= KEEP_LOG_FILES, logs


def test_a_long_run_with_many_flushes_keeps_rocksdb_info_logs_bounded(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Every memtable flush and compaction appends to RocksDB's info LOG: with no size limit one process's LOG
    grew for as long as it ran (a soak's store grew by it). 8 MB through 64 kB memtables: over 100 flushes."""
    monkeypatch.setenv(WRITE_BUFFER_ENV, str(64 / 1024))
    with AgentStateStore(tmp_path / "s", "test/1") as store:
        for b in range(400):
            batch = store.batch()
            for i in range(100):
                batch.put(f"k{i}".encode(), bytes([b % 256]) * 200)
            batch.mark_applied(f"e{b}", 1_000 + b)
            store.commit(batch)
    logs = {f.name: f.stat().st_size for f in (tmp_path / "s").iterdir() if f.name.startswith("LOG")}
    slack = 64 * 1024  # the lines written after the size check that rolls the file
    assert max(logs.values()) <= MAX_LOG_FILE_BYTES + slack, logs
    assert sum(logs.values()) <= KEEP_LOG_FILES * (MAX_LOG_FILE_BYTES + slack), logs


def test_the_memtable_size_comes_from_the_environment_and_must_be_positive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(WRITE_BUFFER_ENV, raising=False)
    assert write_buffer_bytes() == 16 * 1024 * 1024
    monkeypatch.setenv(WRITE_BUFFER_ENV, "1")
    assert write_buffer_bytes() == 1024 * 1024
    for bad in ("0", "-2", "lots"):
        monkeypatch.setenv(WRITE_BUFFER_ENV, bad)
        with pytest.raises(ValueError, match=f"{WRITE_BUFFER_ENV}: must be a positive number of MB, got '{bad}'"):
            write_buffer_bytes()
