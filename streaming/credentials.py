"""Secrets of the shell, from the environment or files, never from the command line (docs/security.md).

**Kafka client credentials.** Every client of the project (confluent-kafka producers, consumers and
admin clients, aiokafka under Faust, Spark's Kafka source and sink) takes its security settings from
:func:`kafka_security`, read from, in order:

- ``SEGCOORD_KAFKA_CONFIG``: a properties file (``key=value`` lines, librdkafka names):
  ``security.protocol``, ``sasl.mechanism``, ``sasl.username``, ``sasl.password``, ``ssl.ca.location``;
- ``SEGCOORD_KAFKA_USERNAME`` and ``SEGCOORD_KAFKA_PASSWORD``: SCRAM-SHA-512 credentials
  (``SASL_PLAINTEXT``, or ``SASL_SSL`` when a CA is given), over the file's;
- ``SEGCOORD_KAFKA_CA``: a CA file (PEM): TLS to the broker (``SASL_SSL``).

Nothing set: plaintext without authentication (the open local broker).

**Invariant:** credentials are never sent in plaintext to a non-loopback address. A SASL
configuration without TLS whose bootstrap names a host other than 127.0.0.0/8, ``::1`` or
``localhost`` is refused with :class:`CredentialsError` before any connection is made.

**The publish key.** The coordinator's HMAC key that seals ``segments_published``
(:mod:`coordinator.locks.seal`): ``SEGCOORD_PUBLISH_KEY`` (the key itself), else the file named by
``SEGCOORD_PUBLISH_KEY_FILE``, else ``$SEGCOORD_HOME/publish.key``, created once (32 random bytes,
hex, mode 0600). Every coordinator process (worker, replay, audit) of one deployment must use the same key.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streaming.config import home_dir

CONFIG_ENV = "SEGCOORD_KAFKA_CONFIG"
USERNAME_ENV = "SEGCOORD_KAFKA_USERNAME"
PASSWORD_ENV = "SEGCOORD_KAFKA_PASSWORD"
CA_ENV = "SEGCOORD_KAFKA_CA"
PUBLISH_KEY_ENV = "SEGCOORD_PUBLISH_KEY"
PUBLISH_KEY_FILE_ENV = "SEGCOORD_PUBLISH_KEY_FILE"
MECHANISM = "SCRAM-SHA-512"
_KNOWN = ("security.protocol", "sasl.mechanism", "sasl.username", "sasl.password", "ssl.ca.location")


class CredentialsError(ValueError):
    """Credentials that cannot be used as configured; the message says which setting and why."""


@dataclass(frozen=True, slots=True)
class KafkaSecurity:
    """A client's security settings. ``protocol`` is Kafka's ``security.protocol``."""

    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    ca_location: str | None = None

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL")

    def librdkafka(self) -> dict[str, str]:
        """The confluent-kafka (librdkafka) settings; empty for plaintext without authentication."""
        if self.protocol == "PLAINTEXT":
            return {}
        out = {"security.protocol": self.protocol}
        if self.sasl:
            out |= {"sasl.mechanism": self.mechanism or MECHANISM, "sasl.username": self.username or "",
                    "sasl.password": self.password or ""}
        if self.ca_location:
            out["ssl.ca.location"] = self.ca_location
        return out

    def java(self) -> dict[str, str]:
        """The Java client's settings (Spark's Kafka source and sink take them with a ``kafka.`` prefix)."""
        if self.protocol == "PLAINTEXT":
            return {}
        out = {"security.protocol": self.protocol}
        if self.sasl:
            user, pw = _jaas_quote(self.username or ""), _jaas_quote(self.password or "")
            module = "org.apache.kafka.common.security.scram.ScramLoginModule"
            if (self.mechanism or MECHANISM) == "PLAIN":
                module = "org.apache.kafka.common.security.plain.PlainLoginModule"
            out |= {"sasl.mechanism": self.mechanism or MECHANISM,
                    "sasl.jaas.config": f'{module} required username="{user}" password="{pw}";'}
        if self.ca_location:
            out |= {"ssl.truststore.type": "PEM", "ssl.truststore.location": self.ca_location}
        return out

    def check_bootstrap(self, bootstrap: str) -> None:
        """Refuse plaintext credentials to a non-loopback address (see the module docstring)."""
        if not self.sasl or self.protocol == "SASL_SSL":
            return
        for host in _hosts(bootstrap):
            if not _loopback(host):
                raise CredentialsError(
                    f"refusing to send Kafka credentials in plaintext to {host} (not a loopback address): "
                    f"configure TLS ({CA_ENV}, or security.protocol=SASL_SSL and ssl.ca.location in {CONFIG_ENV})")


def kafka_security(environ: Mapping[str, str] | None = None) -> KafkaSecurity:
    """The client security settings from the environment (see the module docstring)."""
    env = os.environ if environ is None else environ
    props: dict[str, str] = {}
    path = env.get(CONFIG_ENV)
    if path:
        props = read_properties(Path(path))
    if env.get(USERNAME_ENV) or env.get(PASSWORD_ENV):
        if not (env.get(USERNAME_ENV) and env.get(PASSWORD_ENV)):
            raise CredentialsError(f"set both {USERNAME_ENV} and {PASSWORD_ENV}, or neither")
        props |= {"sasl.username": env[USERNAME_ENV], "sasl.password": env[PASSWORD_ENV]}
    if env.get(CA_ENV):
        props["ssl.ca.location"] = env[CA_ENV]
    if not props:
        return KafkaSecurity()
    tls = "ssl.ca.location" in props
    default = ("SASL_SSL" if tls else "SASL_PLAINTEXT") if "sasl.username" in props else ("SSL" if tls else "PLAINTEXT")
    protocol = props.get("security.protocol", default).upper()
    if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        raise CredentialsError(f"security.protocol: {protocol!r} is not PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL")
    sec = KafkaSecurity(protocol, props.get("sasl.mechanism", MECHANISM) if protocol.startswith("SASL") else None,
                        props.get("sasl.username"), props.get("sasl.password"), props.get("ssl.ca.location"))
    if sec.sasl and not (sec.username and sec.password):
        raise CredentialsError(f"{protocol} needs sasl.username and sasl.password ({USERNAME_ENV}/{PASSWORD_ENV} "
                               f"or {CONFIG_ENV})")
    return sec


def client_config(bootstrap: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``bootstrap.servers`` plus the security settings, checked against the bootstrap (librdkafka names)."""
    sec = kafka_security(environ)
    sec.check_bootstrap(bootstrap)
    return {"bootstrap.servers": bootstrap, **sec.librdkafka()}


def faust_credentials(bootstrap: str, environ: Mapping[str, str] | None = None) -> Any:
    """Faust's ``broker_credentials`` (aiokafka underneath): SASL and/or TLS, or None for plaintext."""
    sec = kafka_security(environ)
    sec.check_bootstrap(bootstrap)
    if sec.protocol == "PLAINTEXT":
        return None
    import ssl

    import faust

    context = ssl.create_default_context(cafile=sec.ca_location) if sec.ca_location else None
    if not sec.sasl:
        return faust.SSLCredentials(context)
    return faust.SASLCredentials(username=sec.username, password=sec.password, ssl_context=context,
                                 mechanism=sec.mechanism or MECHANISM)


def read_properties(path: Path) -> dict[str, str]:
    """``key=value`` lines (``#`` comments, blank lines); only the known security keys are taken."""
    try:
        text = path.read_text()
    except OSError as e:
        raise CredentialsError(f"{CONFIG_ENV}={path}: cannot read it ({e.strerror})") from None
    out: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise CredentialsError(f"{path}:{n}: expected key=value")
        key = key.strip()
        if key not in _KNOWN:
            raise CredentialsError(f"{path}:{n}: unknown key {key!r} (known: {', '.join(_KNOWN)})")
        out[key] = value.strip()
    return out


def write_properties(path: Path, sec: KafkaSecurity) -> None:
    """A client properties file for ``SEGCOORD_KAFKA_CONFIG`` (mode 0600: it holds a password)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("".join(f"{k}={v}\n" for k, v in sec.librdkafka().items()))


def publish_key(environ: Mapping[str, str] | None = None) -> bytes:
    """The coordinator's publish key (see the module docstring); created under the home on first use."""
    env = os.environ if environ is None else environ
    if env.get(PUBLISH_KEY_ENV):
        return env[PUBLISH_KEY_ENV].encode()
    path = Path(env[PUBLISH_KEY_FILE_ENV]) if env.get(PUBLISH_KEY_FILE_ENV) else home_dir() / "publish.key"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # another process made it first
        else:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32) + "\n")
    key = path.read_text().strip()
    if not key:
        raise CredentialsError(f"the publish key file {path} is empty")
    return key.encode()


def _jaas_quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _hosts(bootstrap: str) -> list[str]:
    out = []
    for item in bootstrap.split(","):
        item = item.strip()
        if "://" in item:
            item = item.split("://", 1)[1]
        if item.startswith("["):
            out.append(item[1:].split("]", 1)[0])
        else:
            out.append(item.rsplit(":", 1)[0] if item.count(":") == 1 else item)
    return [h for h in out if h]


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
