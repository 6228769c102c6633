"""A worker's identity: derived from its state folder unless given, validated, and distinct per folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from streaming.service.worker_identity import folder_digest, identity


def test_the_default_id_differs_per_state_folder_and_is_stable_for_one(tmp_path: Path) -> None:
    a, b = identity(tmp_path / "w1"), identity(tmp_path / "w2")
    assert a.worker_id != b.worker_id and a.client_id != b.client_id
    assert identity(tmp_path / "w1") == a
    assert a.worker_id.endswith(folder_digest(tmp_path / "w1"))
    assert a.instance_id("p.coordinator") == f"p.coordinator.{a.worker_id}"


def test_a_given_id_is_kept_and_the_folder_still_names_the_client(tmp_path: Path) -> None:
    a, b = identity(tmp_path / "w1", "w1"), identity(tmp_path / "other", "w1")
    assert a.worker_id == b.worker_id == "w1"
    assert a.instance_id("g") == b.instance_id("g") == "g.w1"
    assert a.client_id != b.client_id  # what tells two folders with one id apart in the group's member list


@pytest.mark.parametrize("bad", ["", "a b", "w/1", "x" * 101])
def test_a_bad_id_is_refused_with_the_rule(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ValueError, match=r"worker id .*letters, digits"):
        identity(tmp_path, bad)
