"""A real single-node Kafka broker (KRaft, broker + controller in one JVM) run from Maven jars.

No Docker needed: the broker's jars come from Maven Central (:mod:`streaming.maven`),
storage is formatted with ``kafka.tools.StorageTool`` and ``kafka.Kafka`` runs as a
child process in its own session, listening on 127.0.0.1 only.

Everything lives under one home folder::

    <home>/kafka/server.properties   log4j2.properties   cluster.id
    <home>/kafka/data/                (log.dirs; kept across restarts)
    <home>/kafka/logs/server.log      stdout.log
    <home>/kafka/broker.pid           bootstrap (host:port, written once it answers)

Invariants: ``stop`` only ever signals the process this module started (the pid
file's process must be ``kafka.Kafka`` with this home's config on its command
line); a restart reuses the data folder and, when it is still free, the port,
so clients and stored offsets survive a broker restart.

``secure=True`` (``segcoord kafka start --secure``): SASL/SCRAM-SHA-512 on the client listener, KRaft's
``StandardAuthorizer``, one principal per role with its password under ``<home>/kafka/credentials/``
(:mod:`streaming.local_sasl`, docs/security.md). A home keeps the mode it was first formatted in.
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from streaming import local_sasl as sasl
from streaming import maven

LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = {level}
logger.apache.name = org.apache.kafka
logger.apache.level = {level}
"""


class BrokerError(RuntimeError):
    """The broker could not be started or stopped; the message says why and where its log is."""


@dataclass(frozen=True, slots=True)
class BrokerStatus:
    running: bool
    pid: int | None
    bootstrap: str | None
    home: Path

    def describe(self) -> str:
        if self.running:
            return f"running: pid {self.pid}, bootstrap {self.bootstrap}, home {self.home}"
        return f"not running (home {self.home})"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_free(port: int) -> bool:
    """Whether the broker could bind the port. SO_REUSEADDR as the JVM binds: a port held only by TIME_WAIT
    leftovers of a killed broker's connections is free (else a restart would move to another port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def port_answers(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def new_cluster_id(uuid4: Callable[[], uuid.UUID] = uuid.uuid4) -> str:
    """A random KRaft cluster id: 22 url-safe base64 characters of a UUID, never starting with '-'."""
    while True:
        cid = base64.urlsafe_b64encode(uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


class LocalBroker:
    """The local broker under ``home``; see the module docstring for its files."""

    def __init__(self, home: Path, *, heap_mb: int = 512, log_level: str = "INFO", secure: bool | None = None) -> None:
        self.home = Path(home)
        self.dir = self.home / "kafka"
        self.heap_mb = heap_mb
        self.log_level = log_level
        self._proc: subprocess.Popen[bytes] | None = None
        # None: as this home was first started (secure when its credentials folder exists)
        self.secure = secure if secure is not None else sasl.credentials_dir(self.dir).exists()

    # -- files -----------------------------------------------------------------
    @property
    def config_path(self) -> Path:
        return self.dir / "server.properties"

    @property
    def pid_path(self) -> Path:
        return self.dir / "broker.pid"

    @property
    def bootstrap_path(self) -> Path:
        return self.dir / "bootstrap"

    @property
    def server_log(self) -> Path:
        return self.dir / "logs" / "server.log"

    def _recorded_ports(self) -> tuple[int, int] | None:
        ports = self.dir / "ports"
        if not ports.exists():
            return None
        broker, controller = ports.read_text().split()
        return int(broker), int(controller)

    # -- status ------------------------------------------------------------------
    def _pid(self) -> int | None:
        try:
            pid = int(self.pid_path.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        return pid if self._is_our_broker(pid) else None

    def _is_our_broker(self, pid: int) -> bool:
        if self._proc is not None and self._proc.pid == pid and self._proc.poll() is not None:
            return False
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, PermissionError, IndexError):
            return False
        return state != "Z" and b"kafka.Kafka" in cmdline and str(self.config_path).encode() in cmdline

    def status(self) -> BrokerStatus:
        pid = self._pid()
        bootstrap = None
        if pid is not None and self.bootstrap_path.exists():
            bootstrap = self.bootstrap_path.read_text().strip() or None
        return BrokerStatus(pid is not None and bootstrap is not None, pid, bootstrap, self.home)

    # -- start -------------------------------------------------------------------
    def start(self, *, timeout: float = 120.0) -> str:
        """Start the broker (or find it running) and return its bootstrap address once it answers."""
        current = self.status()
        if current.running and current.bootstrap:
            return current.bootstrap
        if current.pid is not None:
            self.stop()
        jars = maven.fetch(maven.kafka_broker_bundle())
        classpath = os.pathsep.join(str(j) for j in jars)
        for sub in ("data", "logs"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        port, cport = self._choose_ports()
        self._check_mode()
        self._write_config(port, cport)
        cluster_id = self._cluster_id()
        java = os.environ.get("JAVA", "java")
        jvm = [
            java, f"-Xms{min(256, self.heap_mb)}m", f"-Xmx{self.heap_mb}m", "-XX:+UseG1GC",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile=file:{self.dir / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.dir / 'logs'}",
            "-cp", classpath,
        ]
        # the admin's SCRAM credential goes on the storage tool's command line (Kafka takes it nowhere else):
        # only when the storage is not formatted yet, so a restart shows no password to `ps`
        formatted = (self.dir / "data" / "meta.properties").exists()
        scram = sasl.format_args(self.dir) if self.secure and not formatted else []
        fmt = subprocess.run(
            [*jvm, "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", "-c", str(self.config_path),
             "--ignore-formatted", *scram],
            capture_output=True, text=True,
        )
        if fmt.returncode != 0:
            raise BrokerError(f"formatting KRaft storage failed: {(fmt.stderr or fmt.stdout).strip()[-500:]}")
        self.bootstrap_path.unlink(missing_ok=True)
        with open(self.dir / "logs" / "stdout.log", "ab") as out:
            self._proc = subprocess.Popen(
                [*jvm, "kafka.Kafka", str(self.config_path)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, close_fds=True,
            )
        self.pid_path.write_text(f"{self._proc.pid}\n")
        bootstrap = f"127.0.0.1:{port}"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise BrokerError(
                    f"the broker exited with code {self._proc.returncode} while starting; see {self.server_log}"
                )
            if port_answers(port) and _metadata_answers(bootstrap, self.admin_config()):
                self.bootstrap_path.write_text(bootstrap + "\n")
                if self.secure:
                    sasl.create_role_users(bootstrap, self.dir)
                return bootstrap
            time.sleep(0.2)
        self.stop()
        raise BrokerError(f"the broker did not answer on {bootstrap} within {timeout:.0f}s; see {self.server_log}")

    def admin_config(self) -> dict[str, str]:
        """The super user's client settings (librdkafka names): empty for the open broker."""
        return sasl.client_settings(self.dir, "admin") if self.secure else {}

    def _check_mode(self) -> None:
        """A home keeps the mode it was formatted in: its storage holds (or lacks) the admin's SCRAM credential."""
        formatted = (self.dir / "data" / "meta.properties").exists()
        has_credentials = sasl.credentials_dir(self.dir).exists()
        if formatted and self.secure != has_credentials:
            was = "with --secure" if has_credentials else "without --secure"
            raise BrokerError(f"the broker under {self.home} was formatted {was}; start it the same way, "
                              f"or use another --home")
        if self.secure:
            sasl.ensure_credentials(self.dir)

    def _choose_ports(self) -> tuple[int, int]:
        recorded = self._recorded_ports()
        if recorded and all(port_free(p) for p in recorded):
            return recorded
        port, cport = free_port(), free_port()
        while cport == port:
            cport = free_port()
        (self.dir / "ports").write_text(f"{port} {cport}\n")
        return port, cport

    def _cluster_id(self) -> str:
        """This home's KRaft cluster id, created once; like Kafka's own ids it never starts with '-'.

        (An id starting with '-' reads as an option to the storage tool's argument parser; it is also
        passed as ``--cluster-id=ID`` so that an old id file with one still works.)
        """
        path = self.dir / "cluster.id"
        if path.exists():
            return path.read_text().strip()
        cid = new_cluster_id()
        path.write_text(cid + "\n")
        return cid

    def _write_config(self, port: int, cport: int) -> None:
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{cport}",
            "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.dir / "data"),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "true",
        }
        if self.secure:
            props |= sasl.broker_props(self.dir, port, cport)
        fd = os.open(self.config_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it may hold passwords
        with os.fdopen(fd, "w") as f:
            f.write("".join(f"{k}={v}\n" for k, v in props.items()))
        (self.dir / "log4j2.properties").write_text(LOG4J2.format(log=self.server_log, level=self.log_level))

    # -- stop --------------------------------------------------------------------
    def stop(self, *, timeout: float = 30.0) -> bool:
        """Stop the broker this home started; True if one was running. Data is kept."""
        pid = self._pid()
        if pid is None:
            self.pid_path.unlink(missing_ok=True)
            self.bootstrap_path.unlink(missing_ok=True)
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self._alive(pid):
            time.sleep(0.1)
        if self._alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            while self._alive(pid):
                time.sleep(0.05)
        self.pid_path.unlink(missing_ok=True)
        self.bootstrap_path.unlink(missing_ok=True)
        return True

    def kill(self) -> None:
        """SIGKILL the broker (crash tests); the data folder stays for a restart."""
        pid = self._pid()
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            while self._alive(pid):
                time.sleep(0.05)

    def _alive(self, pid: int) -> bool:
        if self._proc is not None and self._proc.pid == pid:
            return self._proc.poll() is None
        return self._is_our_broker(pid)


def _metadata_answers(bootstrap: str, security: dict[str, str] | None = None) -> bool:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0, "socket.timeout.ms": 2000, **(security or {})})
    try:
        md = admin.list_topics(timeout=2)
    except Exception:
        return False
    return bool(md.brokers)
