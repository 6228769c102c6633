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
  ``close``), so :meth:`close` always releases the lock.

- **Bounded dedupe window.** The applied event ids are kept for a window, not for
  ever: the newest ``AppliedWindow.max_ids`` (default 1,000,000) and, of those, the
  ones whose event time is within ``AppliedWindow.max_age_ms`` (default 7 days) of the
  newest applied (the time a record was written to the log, its Kafka timestamp: the
  producers' clock, never an event's own ``occurred_at``, which a backfill may set to
  any time). Older ids are deleted in the same write batch that adds new ones, so
  the store's id count never exceeds ``max_ids``. *Why that is safe:* an id is looked
  up only for a record at or above the stored offset of its partition (records below
  it are skipped by offset, whatever their id), so the set only has to catch the same
  event arriving again at a *new* position: a producer retry, or a writer re-sending
  after its own crash. Both follow the original within seconds to minutes (a writer's
  retry budget and restart time), far inside 7 days and far inside a million newer
  events; an id older than the window can only come back from a replay that the stored
  offsets already cover.

Key layout (bytes): ``meta/format``; ``offset/<topic>\\x00<partition>`` -> next
offset to read (decimal text); ``applied/<event id>`` -> its log time (decimal);
``appliedat/<log time, 16 digits>/<event id>`` -> empty (the window's index, oldest
first); ``meta/applied-window`` -> ``"<ids in the window> <newest log time>"``; agent
data under ``data/``, laid out by the agent. The stored format marker is the agent's format
plus :data:`LAYOUT` (a store of another layout is rebuilt).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

from rocksdict import BlockBasedOptions, Cache, Options, Rdict, WriteBatch

FORMAT_KEY = b"meta/format"
OFFSET_PREFIX = b"offset/"
APPLIED_PREFIX = b"applied/"
APPLIED_AT_PREFIX = b"appliedat/"
WINDOW_KEY = b"meta/applied-window"
LAYOUT = "+applied-window/1"


@dataclass(frozen=True, slots=True)
class AppliedWindow:
    """How many applied ids a store keeps, and for how long (event time); see the module docstring."""

    max_ids: int = 1_000_000
    max_age_ms: int = 7 * 24 * 3600 * 1000

    def __post_init__(self) -> None:
        if self.max_ids < 1 or self.max_age_ms < 1:
            raise ValueError(f"applied-id window: max_ids and max_age_ms must be positive, got {self}")


def _at_key(at: int, event_id: str) -> bytes:
    return APPLIED_AT_PREFIX + f"{max(at, 0):016d}/".encode() + event_id.encode()
DATA_PREFIX = b"data/"

TopicPartition = tuple[str, int]


class StateStoreError(RuntimeError):
    """The state folder cannot be opened (in use by another process, unreadable)."""


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
        self._applied: dict[str, int | None] = {}
        self.offsets: dict[TopicPartition, int] = {}

    def put(self, key: bytes, value: bytes) -> None:
        self._batch.put(DATA_PREFIX + key, value)

    def delete(self, key: bytes) -> None:
        self._batch.delete(DATA_PREFIX + key)

    def set_offset(self, topic: str, partition: int, next_offset: int) -> None:
        """Record that everything of ``topic[partition]`` below ``next_offset`` is applied."""
        self.offsets[(topic, partition)] = next_offset

    def mark_applied(self, event_id: str, at: int | None = None) -> None:
        """The input event ``event_id``, written to the log at ``at`` (the record's timestamp, ms; None or 0: the
        newest time the store knows) is applied."""
        self._applied.setdefault(event_id, at if at else None)

    def applied(self, event_id: str) -> bool:
        return event_id in self._applied

    def _write_batch(self, newest: int) -> WriteBatch:
        for event_id, at in sorted(self._applied.items()):
            when = newest if at is None else at
            self._batch.put(APPLIED_PREFIX + event_id.encode(), str(when).encode())
            self._batch.put(_at_key(when, event_id), b"")
        for (topic, partition), offset in sorted(self.offsets.items()):
            self._batch.put(_offset_key(topic, partition), str(offset).encode())
        return self._batch


class AgentStateStore:
    """One agent's RocksDB database under ``path``; open it once per process (RocksDB locks the folder)."""

    def __init__(self, path: Path, format_version: str, window: AppliedWindow | None = None) -> None:
        self.path = Path(path)
        self.format_version = format_version + LAYOUT
        format_version = self.format_version
        self.window = window or AppliedWindow()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.wiped = False
        self._db = self._open()
        found = self._db.get(FORMAT_KEY)
        if found != format_version.encode():
            if found is not None or self._has_keys():
                self._db.close()
                Rdict.destroy(str(self.path), _options())
                self.wiped = True
                self._db = self._open()
            self._db.put(FORMAT_KEY, format_version.encode())
        window_meta = self._db.get(WINDOW_KEY)  # "<ids in the window> <newest log time>", kept by every commit
        count, newest = (0, 0) if window_meta is None else map(int, bytes(window_meta).split())
        self.applied_count, self.newest_applied_at = count, newest

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
        """Write the whole batch atomically (state, offsets and applied ids together, and the ids that fell out of
        the window deleted)."""
        fresh = [(e, at) for e, at in batch._applied.items() if not self.applied(e)]
        batch._applied = dict(fresh)
        newest = max([self.newest_applied_at, *(at for _, at in fresh if at is not None)])
        write = batch._write_batch(newest)
        count = self.applied_count + len(fresh)
        count -= self._expire(write, count, newest - self.window.max_age_ms)
        write.put(WINDOW_KEY, f"{count} {newest}".encode())
        self._db.write(write)
        self.applied_count, self.newest_applied_at = count, newest

    def _expire(self, write: WriteBatch, count: int, older_than: int) -> int:
        """Delete (in ``write``) the oldest ids beyond ``max_ids`` and those older than ``older_than``; how many."""
        gone = 0
        it = self._db.iter()
        try:
            it.seek(APPLIED_AT_PREFIX)
            while it.valid():
                key = bytes(it.key())
                if not key.startswith(APPLIED_AT_PREFIX):
                    break
                at_text, _, event_id = key[len(APPLIED_AT_PREFIX):].partition(b"/")
                if count - gone <= self.window.max_ids and int(at_text) >= older_than:
                    break
                write.delete(key)
                write.delete(APPLIED_PREFIX + event_id)
                gone += 1
                it.next()
        finally:
            del it
        return gone

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._db.flush_wal(True)
        self._db.close()

    def __enter__(self) -> AgentStateStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
