"""The role principals and their ACLs on any Kafka cluster (``segcoord kafka setup-roles``).

``segcoord kafka start --secure`` sets up its own broker (:mod:`streaming.local_sasl`); this module does
the same for a cluster started elsewhere (docker-compose.secure.yml, a managed cluster), given only a
bootstrap address and the admin's client settings (from the environment, :mod:`streaming.credentials`,
never the command line).

A credentials folder (mode 0700) holds, per principal of :data:`PRINCIPALS`:

- ``<principal>.password``: a random password, created once (mode 0600) and never changed after;
- ``<principal>.properties`` (``admin`` and the roles): the client settings for ``SEGCOORD_KAFKA_CONFIG``
  (mode 0600), ``SASL_SSL`` with ``ssl.ca.location`` when a CA path is given, else ``SASL_PLAINTEXT``.

**Invariants.** An existing password file is never overwritten, and a file whose contents would not
change is not written (the folder may be mounted read-only once made). :func:`setup_roles` is
idempotent: it upserts one SCRAM-SHA-512 credential per role (:data:`streaming.local_sasl.ROLES`) with
the folder's password and grants exactly :func:`streaming.local_sasl.role_acls` for the topic prefix.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from events.topics import Topics
from streaming.credentials import KafkaSecurity, client_config
from streaming.local_sasl import MECHANISM, ROLES, SUPER, grant_acls

#: Every principal a deployment needs a password for: the super users, then one per role.
PRINCIPALS: tuple[str, ...] = (*SUPER, *(r.name for r in ROLES))


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` with mode 0600 unless the file already holds exactly it."""
    if path.exists() and path.read_text() == text:
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)


def role_security(name: str, password: str, ca_location: str | None) -> KafkaSecurity:
    """A principal's client settings: SCRAM-SHA-512, over TLS when a CA is given."""
    return KafkaSecurity("SASL_SSL" if ca_location else "SASL_PLAINTEXT", MECHANISM, name, password, ca_location)


def ensure_passwords(folder: Path, ca_location: str | None = None) -> dict[str, str]:
    """Create the folder's missing passwords and (re)write the properties files; returns name -> password."""
    if not folder.exists():
        folder.mkdir(mode=0o700, parents=True)
    out: dict[str, str] = {}
    for name in PRINCIPALS:
        path = folder / f"{name}.password"
        if not path.exists():
            _write_private(path, secrets.token_urlsafe(24) + "\n")
        out[name] = path.read_text().strip()
        if not out[name]:
            raise ValueError(f"{path} is empty: delete it to have a new password made")
        if name != "controller":  # the nodes' own PLAIN user on the controller listener: no client uses it
            settings = role_security(name, out[name], ca_location).librdkafka()
            _write_private(folder / f"{name}.properties", "".join(f"{k}={v}\n" for k, v in settings.items()))
    return out


def upsert_role_users(bootstrap: str, passwords: dict[str, str], timeout: float = 30.0) -> list[str]:
    """Upsert one SCRAM-SHA-512 credential per role (idempotent), as the admin of the environment's
    credentials (:func:`streaming.credentials.client_config`); returns the role names."""
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    admin = AdminClient(client_config(bootstrap))
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    names = [r.name for r in ROLES]
    upserts = [UserScramCredentialUpsertion(n, info, passwords[n].encode()) for n in names]
    for future in admin.alter_user_scram_credentials(upserts, request_timeout=timeout).values():
        future.result()
    return names


def setup_roles(bootstrap: str, folder: Path, topics: Topics, ca_location: str | None = None,
                timeout: float = 30.0) -> int:
    """Passwords in ``folder``, a SCRAM user per role, the role ACLs for ``topics``, as the admin of the
    environment's credentials; returns the ACL count."""
    admin = {k: v for k, v in client_config(bootstrap).items() if k != "bootstrap.servers"}
    passwords = ensure_passwords(folder, ca_location)
    upsert_role_users(bootstrap, passwords, timeout)
    return grant_acls(bootstrap, admin, topics, timeout)
