"""A store view: the committed entries as they were when it was taken, readable on another thread, and a store
that is not closed under it (real RocksDB)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from streaming.service.state import AgentStateStore, StoreClosedError


def commit(store: AgentStateStore, puts: dict[bytes, bytes], deletes: tuple[bytes, ...] = ()) -> None:
    batch = store.batch()
    for k, v in puts.items():
        batch.put(k, v)
    for k in deletes:
        batch.delete(k)
    store.commit(batch)


def test_a_view_sees_the_commits_before_it_and_none_after_even_read_on_another_thread(tmp_path: Path) -> None:
    with AgentStateStore(tmp_path / "s", "test/1") as store:
        commit(store, {b"a/1": b"one", b"a/2": b"two", b"b/1": b"other"})
        view = store.view()
        commit(store, {b"a/1": b"ONE", b"a/3": b"three"}, deletes=(b"a/2",))
        read: dict[bytes, list[tuple[bytes, bytes]]] = {}

        def reader() -> None:
            with view:
                read[b"a/"] = view.scan(b"a/")
                read[b"b/"] = view.scan(b"b/")  # a second scan seeks the same view again

        t = threading.Thread(target=reader)
        t.start()
        t.join(30)
        assert read == {b"a/": [(b"a/1", b"one"), (b"a/2", b"two")], b"b/": [(b"b/1", b"other")]}
        assert store.scan(b"a/") == [(b"a/1", b"ONE"), (b"a/3", b"three")]
        with pytest.raises(StoreClosedError):
            view.scan(b"a/")


def test_closing_the_store_waits_for_its_open_views(tmp_path: Path) -> None:
    store = AgentStateStore(tmp_path / "s", "test/1")
    commit(store, {b"k": b"v"})
    view = store.view()
    closer = threading.Thread(target=store.close)
    closer.start()
    while not store._closed:  # the closer has marked the store closed: it now waits for the view
        closer.join(0.01)
    assert view.scan(b"k") == [(b"k", b"v")]  # the database is still open under the view
    with pytest.raises(StoreClosedError):
        store.view()  # no new view of a closing store
    view.close()
    closer.join(30)
    assert not closer.is_alive()
    with AgentStateStore(tmp_path / "s", "test/1") as again:  # closed for real: the folder's lock is free
        assert again.scan(b"k") == [(b"k", b"v")]
