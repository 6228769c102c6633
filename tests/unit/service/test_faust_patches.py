"""The Faust and aiokafka internals the service patches all exist in the installed build (the pinned versions).

An upgrade that renames or removes one (say ``seek_to_committed``) fails here, not in production, where the
patch would silently stop positioning partitions from the state stores.
"""

from __future__ import annotations

import pytest

from streaming.service import faust_patches


def test_every_patched_internal_exists() -> None:
    assert faust_patches.missing_internals() == []


def test_a_missing_internal_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(faust_patches, "INTERNALS",
                        (*faust_patches.INTERNALS, ("faust.transport.drivers.aiokafka", "Consumer", "seek_gone")))
    assert faust_patches.missing_internals() == ["faust.transport.drivers.aiokafka.Consumer.seek_gone"]


def test_another_version_is_refused_with_a_clear_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(faust_patches, "PINNED", {**faust_patches.PINNED, "aiokafka": "0.0.1"})
    with pytest.raises(faust_patches.UnsupportedVersion, match=r"aiokafka 0\.14\.0 \(patched for 0\.0\.1\)"):
        faust_patches.check_versions()
