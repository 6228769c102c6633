"""The credentials folder of ``segcoord kafka setup-roles`` (no broker: ``--generate-only``)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from streaming import kafka_roles, local_sasl
from streaming.cli import main
from streaming.credentials import CONFIG_ENV, kafka_security


def test_generate_only_makes_private_files_once_and_keeps_the_passwords(tmp_path: Path) -> None:
    folder = tmp_path / "creds"
    assert main(["kafka", "setup-roles", "--credentials-dir", str(folder), "--generate-only"]) == 0
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    files = sorted(p.name for p in folder.iterdir())
    expected = sorted([f"{n}.password" for n in kafka_roles.PRINCIPALS]
                      + [f"{n}.properties" for n in kafka_roles.PRINCIPALS if n != "controller"])
    assert files == expected
    assert all(stat.S_IMODE((folder / f).stat().st_mode) == 0o600 for f in files)
    before = {f: (folder / f).read_text() for f in files}
    assert len({before[f"{n}.password"] for n in kafka_roles.PRINCIPALS}) == len(kafka_roles.PRINCIPALS)
    assert main(["kafka", "setup-roles", "--credentials-dir", str(folder), "--generate-only"]) == 0
    assert {f: (folder / f).read_text() for f in files} == before


def test_a_ca_makes_the_role_files_tls_and_they_load_as_client_settings(tmp_path: Path) -> None:
    folder = tmp_path / "creds"
    passwords = kafka_roles.ensure_passwords(folder, "/run/secrets/kafka-ca")
    for role in local_sasl.ROLES:
        sec = kafka_security({CONFIG_ENV: str(folder / f"{role.name}.properties")})
        assert (sec.protocol, sec.mechanism, sec.username) == ("SASL_SSL", "SCRAM-SHA-512", role.name)
        assert sec.password == passwords[role.name] and sec.ca_location == "/run/secrets/kafka-ca"
        sec.check_bootstrap("kafka-1:9092")  # TLS: credentials may go to a non-loopback node
    plain = kafka_roles.ensure_passwords(tmp_path / "plain")
    sec = kafka_security({CONFIG_ENV: str(tmp_path / "plain" / "task.properties")})
    assert sec.protocol == "SASL_PLAINTEXT" and sec.password == plain["task"]


def test_a_made_folder_is_not_written_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """So it can be mounted read-only once made (docker-compose.secure.yml's kafka-setup)."""
    folder = tmp_path / "creds"
    made = kafka_roles.ensure_passwords(folder, "/ca.pem")

    def refuse(*args: object, **kwargs: object) -> None:
        raise PermissionError(f"read-only: {args}")

    monkeypatch.setattr(kafka_roles.os, "open", refuse)
    monkeypatch.setattr(kafka_roles.os, "chmod", refuse)
    assert kafka_roles.ensure_passwords(folder, "/ca.pem") == made
    with pytest.raises(PermissionError):
        kafka_roles.ensure_passwords(folder, "/another/ca.pem")  # a change is written (here: refused)


def test_setup_roles_without_admin_credentials_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("SEGCOORD_KAFKA_CONFIG", "SEGCOORD_KAFKA_USERNAME", "SEGCOORD_KAFKA_PASSWORD", "SEGCOORD_KAFKA_CA"):
        monkeypatch.delenv(name, raising=False)
    folder = tmp_path / "creds"
    assert main(["kafka", "setup-roles", "--bootstrap", "127.0.0.1:1", "--credentials-dir", str(folder)]) != 0
    assert "no admin credentials" in capsys.readouterr().err
    assert not folder.exists()
