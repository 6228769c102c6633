"""An agent's local state on RocksDB (rocksdict): facts, applied input offsets and applied event ids, together.

Invariants:

- **One write batch.** An agent's state changes, the next input offset of every
  topic-partition it applied and the ids of the input events it applied are
  written by :meth:`AgentStateStore.commit` as ONE RocksDB ``WriteBatch``:
  after a crash at any point the store holds either all of a batch or none of
  it, so the stored offsets always describe exactly the stored state. (Writes
  go to the WAL without fsync: a killed process loses nothing; after a power
  loss RocksDB recovers to an earlier *whole* batch, whose offsets say where to
  resume, which is still correct.)
- **Format-version marker.** ``meta/format`` names the layout. A store holding
  data under another (or no) marker is wiped on open: local state is a
  rebuildable cache and the agent replays the log instead of migrating.
- **Clean close.** Every iterator is exhausted and released inside the call
  that made it (a live iterator or snapshot keeps the database locked after
  ``close``), so :meth:`close` always releases the lock. ``close`` may come from
  another thread (a stop during a broker outage): it waits for a commit in
  progress, and a commit after it raises :class:`StoreClosedError`, so a closed
  store holds its last whole batch. ``close`` twice is a no-op.

Key layout (bytes): ``meta/format``; ``offset/<topic>\\x00<partition>`` -> next
offset to read (decimal text); ``applied/<event id>`` -> empty; agent data under
``data/``, laid out by the agent.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

from rocksdict import BlockBasedOptions, Cache, Options, Rdict, WriteBatch

FORMAT_KEY = b"meta/format"
OFFSET_PREFIX = b"offset/"
APPLIED_PREFIX = b"applied/"
DATA_PREFIX = b"data/"

TopicPartition = tuple[str, int]


class StateStoreError(RuntimeError):
    """The state folder cannot be opened (in use by another process, unreadable)."""


class StoreClosedError(RuntimeError):
    """A commit to a store closed by a stop (the batch is not written; a restart re-reads it)."""


def _options() -> Options:
    """Small RocksDB settings for a 2-core machine: one background job, 16 MB memtables, 16 MB block cache."""
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.set_max_background_jobs(1)
    opts.set_write_buffer_size(16 * 1024 * 1024)
    opts.set_max_write_buffer_number(2)
    table = BlockBasedOptions()
    table.set_block_cache(Cache(16 * 1024 * 1024))
    opts.set_block_based_table_factory(table)
    return opts


def _offset_key(topic: str, partition: int) -> bytes:
    return OFFSET_PREFIX + topic.encode() + b"\x00" + str(partition).encode()


class StoreBatch:
    """What one commit writes: data puts/deletes, next offsets, applied ids (nothing touches the DB until commit)."""

    def __init__(self) -> None:
        self._batch = WriteBatch(raw_mode=True)
        self._applied: set[str] = set()
        self.offsets: dict[TopicPartition, int] = {}

    def put(self, key: bytes, value: bytes) -> None:
        self._batch.put(DATA_PREFIX + key, value)

    def delete(self, key: bytes) -> None:
        self._batch.delete(DATA_PREFIX + key)

    def set_offset(self, topic: str, partition: int, next_offset: int) -> None:
        """Record that everything of ``topic[partition]`` below ``next_offset`` is applied."""
        self.offsets[(topic, partition)] = next_offset

    def mark_applied(self, event_id: str) -> None:
        self._applied.add(event_id)

    def applied(self, event_id: str) -> bool:
        return event_id in self._applied

    def _write_batch(self) -> WriteBatch:
        for event_id in sorted(self._applied):
            self._batch.put(APPLIED_PREFIX + event_id.encode(), b"")
        for (topic, partition), offset in sorted(self.offsets.items()):
            self._batch.put(_offset_key(topic, partition), str(offset).encode())
        return self._batch


class AgentStateStore:
    """One agent's RocksDB database under ``path``; open it once per process (RocksDB locks the folder)."""

    def __init__(self, path: Path, format_version: str) -> None:
        self.path = Path(path)
        self.format_version = format_version
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.wiped = False
        self._lock = threading.Lock()
        self._closed = False
        self._db = self._open()
        found = self._db.get(FORMAT_KEY)
        if found != format_version.encode():
            if found is not None or self._has_keys():
                self._db.close()
                Rdict.destroy(str(self.path), _options())
                self.wiped = True
                self._db = self._open()
            self._db.put(FORMAT_KEY, format_version.encode())

    def _open(self) -> Rdict:
        try:
            return Rdict(str(self.path), _options())
        except Exception as e:  # rocksdict raises plain Exception for a held LOCK
            raise StateStoreError(f"cannot open state store {self.path}: {e}") from None

    def _has_keys(self) -> bool:
        it = self._db.iter()
        try:
            it.seek_to_first()
            return bool(it.valid())
        finally:
            del it

    # -- reads --------------------------------------------------------------------
    def offsets(self) -> dict[TopicPartition, int]:
        """The next offset to read of every topic-partition applied so far."""
        out: dict[TopicPartition, int] = {}
        for key, value in self.scan_raw(OFFSET_PREFIX):
            topic, _, partition = key[len(OFFSET_PREFIX):].rpartition(b"\x00")
            out[(topic.decode(), int(partition))] = int(value)
        return out

    def applied(self, event_id: str) -> bool:
        """Whether an input event with this id was applied by a committed batch."""
        return self._db.get(APPLIED_PREFIX + event_id.encode()) is not None

    def applied_ids(self) -> set[str]:
        return {k[len(APPLIED_PREFIX):].decode() for k, _ in self.scan_raw(APPLIED_PREFIX)}

    def get(self, key: bytes) -> bytes | None:
        value = self._db.get(DATA_PREFIX + key)
        return None if value is None else bytes(value)

    def scan(self, prefix: bytes) -> list[tuple[bytes, bytes]]:
        """Every data entry under ``prefix`` (prefix stripped of ``data/`` only), in key order."""
        return [(k[len(DATA_PREFIX):], v) for k, v in self.scan_raw(DATA_PREFIX + prefix)]

    def scan_raw(self, prefix: bytes) -> list[tuple[bytes, bytes]]:
        """Every entry whose full key starts with ``prefix``; the iterator is released before returning."""
        out: list[tuple[bytes, bytes]] = []
        it = self._db.iter()
        try:
            it.seek(prefix)
            while it.valid():
                key = bytes(it.key())
                if not key.startswith(prefix):
                    break
                out.append((key, bytes(it.value())))
                it.next()
        finally:
            del it
        return out

    # -- writes -------------------------------------------------------------------
    def batch(self) -> StoreBatch:
        return StoreBatch()

    def commit(self, batch: StoreBatch) -> None:
        """Write the whole batch atomically (state, offsets and applied ids together)."""
        with self._lock:
            if self._closed:
                raise StoreClosedError(f"state store {self.path} is closed (the worker is stopping)")
            self._db.write(batch._write_batch())

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            with contextlib.suppress(Exception):
                self._db.flush_wal(True)
            self._db.close()

    def __enter__(self) -> AgentStateStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
