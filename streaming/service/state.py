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

- **Bounded dedupe window.** The applied event ids are kept for a window, not for
  ever: at most ``AppliedWindow.max_ids`` (default 1,000,000), and not past
  ``AppliedWindow.max_age_ms`` (default 7 days) of log time (the record's Kafka
  timestamp: the producers' clock, never an event's own ``occurred_at``, which a
  backfill may set to any time) behind the newest applied. Ids are written into
  *generations* of ``max_ids / GENERATIONS`` ids each (two); when the ids stored exceed
  ``max_ids``, or the newest id of the oldest generation is older than the age, that
  whole generation goes with one range delete in the commit's own write batch. So a
  commit writes one key per id (as before the window) and forgetting costs O(1); a
  lookup asks each live generation (at most ``GENERATIONS + 1``; a bloom filter keeps
  misses cheap). *Why forgetting is safe:* an id is looked up only for a record at or above the stored offset of its
  partition (records below it are skipped by offset, whatever their id), so the set
  only has to catch the same event arriving again at a *new* position: a producer
  retry, or a writer re-sending after its own crash. Both follow the original within
  seconds to minutes, far inside 7 days and a million newer events; an id older than
  the window can only come back from a replay that the stored offsets already cover.

Key layout (bytes): ``meta/format``; ``offset/<topic>\\x00<partition>`` -> next
offset to read (decimal text); ``applied/<generation, 8 digits>/<event id>`` -> empty;
``meta/applied-window`` -> JSON ``[[generation, ids, newest log time], ...]``, oldest
first; agent data under ``data/``, laid out by the agent. The stored format marker is
the agent's format plus :data:`LAYOUT` (a store of another layout is rebuilt).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from rocksdict import BlockBasedOptions, Cache, Options, Rdict, WriteBatch

FORMAT_KEY = b"meta/format"
OFFSET_PREFIX = b"offset/"
APPLIED_PREFIX = b"applied/"
WINDOW_KEY = b"meta/applied-window"
LAYOUT = "+applied-window/2"
GENERATIONS = 2
DATA_PREFIX = b"data/"

log = logging.getLogger("segcoord.service")
VIEW_CLOSE_WAIT_S = 30.0  # how long a close waits for the open StoreViews (a snapshot being built) to be closed

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class AppliedWindow:
    """How many applied ids a store keeps, and for how long (event time); see the module docstring."""

    max_ids: int = 1_000_000
    max_age_ms: int = 7 * 24 * 3600 * 1000

    def __post_init__(self) -> None:
        if self.max_ids < 1 or self.max_age_ms < 1:
            raise ValueError(f"applied-id window: max_ids and max_age_ms must be positive, got {self}")


def _gen_prefix(gen: int) -> bytes:
    return APPLIED_PREFIX + f"{gen:08d}/".encode()


class StateStoreError(RuntimeError):
    """The state folder cannot be opened (in use by another process, unreadable)."""


class StoreClosedError(RuntimeError):
    """A commit to a store closed by a stop (the batch is not written; a restart re-reads it)."""


WRITE_BUFFER_ENV = "SEGCOORD_STORE_WRITE_BUFFER_MB"
KEEP_LOG_FILES = 3
MAX_LOG_FILE_BYTES = 256 * 1024


def write_buffer_bytes() -> int:
    """The memtable size of every store: ``$SEGCOORD_STORE_WRITE_BUFFER_MB`` (a positive number of MB), 16 MB by
    default. It bounds what a store holds beyond its live data: up to two memtables in memory, and their
    write-ahead log on disk until a memtable is flushed (docs/workers.md, "Soak results")."""
    raw = os.environ.get(WRITE_BUFFER_ENV, "16")
    try:
        mb = float(raw)
    except ValueError:
        mb = 0.0
    if not mb > 0:
        raise ValueError(f"{WRITE_BUFFER_ENV}: must be a positive number of MB, got {raw!r}")
    return max(64 * 1024, int(mb * 1024 * 1024))


def _options() -> Options:
    """Small RocksDB settings for a 2-core machine: one background job, 16 MB memtables (:func:`write_buffer_bytes`),
    16 MB block cache, and RocksDB's own info log bounded: a new file past :data:`MAX_LOG_FILE_BYTES` (every
    flush, compaction and the 10-minute statistics dump append to it, so one process's log grew for as long as
    it ran) and :data:`KEEP_LOG_FILES` files kept (a new one starts at every open: a worker restarted many
    times kept up to a thousand)."""
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.set_max_background_jobs(1)
    opts.set_write_buffer_size(write_buffer_bytes())
    opts.set_max_write_buffer_number(2)
    opts.set_keep_log_file_num(KEEP_LOG_FILES)
    opts.set_max_log_file_size(MAX_LOG_FILE_BYTES)
    table = BlockBasedOptions()
    table.set_block_cache(Cache(16 * 1024 * 1024))
    table.set_bloom_filter(10, False)  # a duplicate check of a fresh id asks every generation: misses stay cheap
    opts.set_block_based_table_factory(table)
    return opts


def _offset_key(topic: str, partition: int) -> bytes:
    return OFFSET_PREFIX + topic.encode() + b"\x00" + str(partition).encode()


_offset_keys: dict[TopicPartition, bytes] = {}  # _offset_key of every partition committed in this process


def _offset_key_of(tp: TopicPartition) -> bytes:
    """:func:`_offset_key`, built once per partition (every commit writes the offsets of its partitions)."""
    key = _offset_keys.get(tp)
    if key is None:
        key = _offset_keys[tp] = _offset_key(*tp)
    return key


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

    def _write_batch(self, prefix: bytes) -> WriteBatch:
        """The write batch with the applied ids (under the generation ``prefix``) and the offsets added."""
        put = self._batch.put
        applied = self._applied
        for event_id in (sorted(applied) if len(applied) > 1 else applied):
            put(prefix + event_id.encode(), b"")
        offsets = self.offsets
        for tp in (sorted(offsets) if len(offsets) > 1 else offsets):
            put(_offset_key_of(tp), str(offsets[tp]).encode())
        return self._batch


class StoreView:
    """A read-only view of an :class:`AgentStateStore`'s committed entries as they were when it was taken:
    commits made after it are not seen. One thread at a time reads it, which need not be the one that took it or
    the one that commits.

    It is one RocksDB iterator, taken with the view: an iterator reads the database as it was when it was
    created, and may seek anywhere in it. (Not a ``Rdict.snapshot()``: rocksdict 0.3.29's snapshot answers a
    ``get`` as of the snapshot, but its ``iter``/``items`` read the live database.)

    **Invariant:** the store is not closed while a view of it is open (:meth:`AgentStateStore.close` waits for
    :meth:`close`, up to :data:`VIEW_CLOSE_WAIT_S`), so a reader never holds the database past its close."""

    def __init__(self, store: AgentStateStore, it: Any) -> None:
        self._store: AgentStateStore | None = store
        self._it = it

    def scan(self, prefix: bytes) -> list[tuple[bytes, bytes]]:
        """Every data entry under ``prefix`` in key order, as :meth:`AgentStateStore.scan` (``data/`` stripped)."""
        it = self._it
        if it is None:
            raise StoreClosedError("the store view is closed")
        return [(k[len(DATA_PREFIX):], v) for k, v in _scan(it, DATA_PREFIX + prefix)]

    def close(self) -> None:
        """Release the iterator (idempotent)."""
        store, self._store, self._it = self._store, None, None
        if store is not None:
            store._view_closed()

    def __enter__(self) -> StoreView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _scan(it: Any, prefix: bytes) -> list[tuple[bytes, bytes]]:
    """Every entry of the iterator ``it`` whose key starts with ``prefix``, in key order (it seeks ``it``: one
    iterator serves any number of scans; one made for the call is released with it)."""
    out: list[tuple[bytes, bytes]] = []
    it.seek(prefix)
    while it.valid():
        key = bytes(it.key())
        if not key.startswith(prefix):
            break
        out.append((key, bytes(it.value())))
        it.next()
    return out


class AgentStateStore:
    """One agent's RocksDB database under ``path``; open it once per process (RocksDB locks the folder)."""

    def __init__(self, path: Path, format_version: str, window: AppliedWindow | None = None) -> None:
        self.path = Path(path)
        self.format_version = format_version + LAYOUT
        format_version = self.format_version
        self.window = window or AppliedWindow()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.wiped = False
        self._lock = threading.Lock()
        self._views_done = threading.Condition(self._lock)
        self._views = 0  # open StoreViews: close() waits for them
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
        window_meta = self._db.get(WINDOW_KEY)  # kept by every commit
        # [generation, ids, newest log time], oldest first; the last one is written to
        self._gens: list[list[int]] = [[0, 0, 0]] if window_meta is None else orjson.loads(bytes(window_meta))
        self._prefixes = [_gen_prefix(g) for g, _, _ in reversed(self._gens)]  # newest first
        self._newest = max(at for _, _, at in self._gens)  # newest_applied_at, kept by every commit

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
        """Whether an input event with this id was applied by a committed batch (and is still in the window)."""
        raw = event_id.encode()
        get = self._db.get
        return any(get(p + raw) is not None for p in self._prefixes)

    def applied_among(self, event_ids: Iterable[str]) -> set[str]:
        """The ids among ``event_ids`` that a committed batch applied: :meth:`applied` for a whole batch of inputs,
        one multi-get per live generation instead of one get per id and generation."""
        ids = list(dict.fromkeys(event_ids))
        found: set[str] = set()
        if not ids:
            return found
        raw = [i.encode() for i in ids]
        for p in self._prefixes:
            values = self._db.get([p + r for r in raw])
            found.update(i for i, v in zip(ids, values, strict=True) if v is not None)
        return found

    def applied_ids(self) -> set[str]:
        return {k[len(APPLIED_PREFIX) + 9:].decode() for k, _ in self.scan_raw(APPLIED_PREFIX)}

    @property
    def applied_count(self) -> int:
        """Ids in the window now."""
        return sum(n for _, n, _ in self._gens)

    @property
    def newest_applied_at(self) -> int:
        return self._newest

    def get(self, key: bytes) -> bytes | None:
        value = self._db.get(DATA_PREFIX + key)
        return None if value is None else bytes(value)

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """:meth:`get` of every key, in order, in one multi-get."""
        if not keys:
            return []
        return [None if v is None else bytes(v) for v in self._db.get([DATA_PREFIX + k for k in keys])]

    def scan(self, prefix: bytes) -> list[tuple[bytes, bytes]]:
        """Every data entry under ``prefix`` (prefix stripped of ``data/`` only), in key order."""
        return [(k[len(DATA_PREFIX):], v) for k, v in self.scan_raw(DATA_PREFIX + prefix)]

    def scan_raw(self, prefix: bytes) -> list[tuple[bytes, bytes]]:
        """Every entry whose full key starts with ``prefix``; the iterator is released before returning."""
        return _scan(self._db.iter(), prefix)

    def view(self) -> StoreView:
        """A :class:`StoreView` of what is committed now; close it when done (the store's close waits for it)."""
        with self._lock:
            if self._closed:
                raise StoreClosedError(f"state store {self.path} is closed (the worker is stopping)")
            self._views += 1
            return StoreView(self, self._db.iter())

    def _view_closed(self) -> None:
        with self._lock:
            self._views -= 1
            self._views_done.notify_all()

    # -- writes -------------------------------------------------------------------
    def batch(self) -> StoreBatch:
        return StoreBatch()

    def commit(self, batch: StoreBatch) -> None:
        """Write the whole batch atomically (state, offsets and applied ids together, and the generations of ids
        that fell out of the window deleted)."""
        with self._lock:
            if self._closed:
                raise StoreClosedError(f"state store {self.path} is closed (the worker is stopping)")
            gens = [list(g) for g in self._gens]
            newest = self._newest
            for at in batch._applied.values():
                if at is not None and at > newest:
                    newest = at
            current = gens[-1]
            write = batch._write_batch(self._prefixes[0])  # the newest generation's (current[0])
            changed = False  # the generations themselves (not only the newest one's counts)
            if batch._applied:  # callers mark only ids not applied yet (intake.seen)
                current[1] += len(batch._applied)
                current[2] = newest
                if current[1] >= max(1, self.window.max_ids // GENERATIONS):
                    gens.append([current[0] + 1, 0, newest])
                    changed = True
            while len(gens) > 1 and (sum(n for _, n, _ in gens) > self.window.max_ids
                                     or gens[0][2] < newest - self.window.max_age_ms):
                gone = gens.pop(0)[0]
                write.delete_range(_gen_prefix(gone), _gen_prefix(gone + 1))
                changed = True
            write.put(WINDOW_KEY, orjson.dumps(gens))
            self._db.write(write)
            self._gens = gens
            self._newest = newest
            if changed:
                self._prefixes = [_gen_prefix(g) for g, _, _ in reversed(gens)]

    def close(self) -> None:
        """Close the database, once every open :class:`StoreView` is closed (no new one is given out meanwhile)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if not self._views_done.wait_for(lambda: self._views == 0, VIEW_CLOSE_WAIT_S):
                log.warning("state store %s: closing with %d views still open", self.path, self._views)
            with contextlib.suppress(Exception):
                self._db.flush_wal(True)
            self._db.close()

    def __enter__(self) -> AgentStateStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
