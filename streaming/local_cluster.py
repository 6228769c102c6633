"""A replicated local Kafka cluster: N KRaft nodes (each broker + controller) on loopback, from the Maven jars.

``segcoord kafka start --brokers 3``. Files under ``<home>/kafka-cluster/``::

    cluster.id   ports ("<client> <controller>" per node, one line each)   bootstrap   credentials/ (--secure)
    node<i>/server.properties   log4j2.properties   data/   logs/server.log   broker.pid

Every node is a voter of the controller quorum (``controller.quorum.voters``), so the cluster keeps a
controller while a majority runs (2 of 3). Topics are created with replication N and
``min.insync.replicas = N - 1`` (``topics create --replication 3`` sets 2), producers use ``acks=all``
(:mod:`streaming.producer`): an acknowledged record is on at least two nodes, and one node may be down
without stopping writes. Internal topics (offsets, transactions) are replicated the same way.

Invariants: as :class:`~streaming.local_broker.LocalBroker`: ``stop``/``kill`` only signal processes this
home started (the pid file's process runs ``kafka.Kafka`` with that node's config); a restarted node keeps
its data folder and its ports.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

from streaming import local_sasl as sasl
from streaming import maven
from streaming.local_broker import LOG4J2, BrokerError, _metadata_answers, free_port, new_cluster_id, port_free


class LocalCluster:
    """``nodes`` KRaft nodes under ``<home>/kafka-cluster`` (see the module docstring)."""

    def __init__(self, home: Path, nodes: int = 3, *, heap_mb: int = 384, secure: bool | None = None,
                 log_level: str = "INFO") -> None:
        if nodes < 1:
            raise ValueError("a cluster has at least one node")
        self.home = Path(home)
        self.dir = self.home / "kafka-cluster"
        self.nodes = nodes
        self.heap_mb = heap_mb
        self.log_level = log_level
        self.secure = secure if secure is not None else sasl.credentials_dir(self.dir).exists()
        self._procs: dict[int, subprocess.Popen[bytes]] = {}

    # -- files ---------------------------------------------------------------------------
    def node_dir(self, node: int) -> Path:
        return self.dir / f"node{node}"

    def config_path(self, node: int) -> Path:
        return self.node_dir(node) / "server.properties"

    @property
    def bootstrap_path(self) -> Path:
        return self.dir / "bootstrap"

    def _ports(self) -> list[tuple[int, int]]:
        path = self.dir / "ports"
        if path.exists():
            ports = [tuple(int(p) for p in line.split()) for line in path.read_text().splitlines() if line.strip()]
            if len(ports) == self.nodes:
                return ports  # type: ignore[return-value]
        chosen: set[int] = set()
        out = []
        for _ in range(self.nodes):
            pair = []
            while len(pair) < 2:
                p = free_port()
                if p not in chosen:
                    chosen.add(p)
                    pair.append(p)
            out.append((pair[0], pair[1]))
        self.dir.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"{a} {b}\n" for a, b in out))
        return out

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p, _ in self._ports())

    def admin_config(self) -> dict[str, str]:
        return sasl.client_settings(self.dir, "admin") if self.secure else {}

    # -- status ----------------------------------------------------------------------------
    def pid(self, node: int) -> int | None:
        try:
            pid = int((self.node_dir(node) / "broker.pid").read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        return pid if self._alive(node, pid) else None

    def _alive(self, node: int, pid: int) -> bool:
        proc = self._procs.get(node)
        if proc is not None and proc.pid == pid:
            return proc.poll() is None
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, PermissionError, IndexError):
            return False
        return state != "Z" and b"kafka.Kafka" in cmdline and str(self.config_path(node)).encode() in cmdline

    def running(self) -> list[int]:
        return [n for n in range(1, self.nodes + 1) if self.pid(n) is not None]

    def controller(self, timeout: float = 30.0) -> int:
        """The node id of the active controller."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, **self.admin_config()})
        return int(admin.describe_cluster(request_timeout=timeout).result().controller.id)

    # -- start -------------------------------------------------------------------------------
    def start(self, *, timeout: float = 180.0) -> str:
        """Start every node that is not running; return the bootstrap list once all of them are brokers."""
        jars = maven.fetch(maven.kafka_broker_bundle())
        classpath = os.pathsep.join(str(j) for j in jars)
        ports = self._ports()
        cid_path = self.dir / "cluster.id"
        if not cid_path.exists():
            cid_path.write_text(new_cluster_id() + "\n")
        if self.secure:
            sasl.ensure_credentials(self.dir)
        for node in range(1, self.nodes + 1):
            if self.pid(node) is None:
                self._launch(node, ports, classpath, cid_path.read_text().strip())
        bootstrap = self.bootstrap
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for node, proc in self._procs.items():
                if proc.poll() is not None:
                    raise BrokerError(f"node {node} exited with code {proc.returncode} while starting; see "
                                      f"{self.node_dir(node) / 'logs' / 'server.log'}")
            if self._brokers_answer(bootstrap) >= self.nodes:
                self.bootstrap_path.write_text(bootstrap + "\n")
                if self.secure:
                    sasl.create_role_users(bootstrap, self.dir)
                return bootstrap
            time.sleep(0.3)
        raise BrokerError(f"the cluster did not answer with {self.nodes} brokers within {timeout:.0f}s; see "
                          f"{self.dir}/node*/logs/server.log")

    def start_node(self, node: int, *, timeout: float = 120.0) -> None:
        """Restart one node (after :meth:`kill`), waiting until the cluster lists it again."""
        jars = maven.fetch(maven.kafka_broker_bundle())
        self._launch(node, self._ports(), os.pathsep.join(str(j) for j in jars),
                     (self.dir / "cluster.id").read_text().strip())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._brokers_answer(self.bootstrap) >= len(self.running()):
                return
            time.sleep(0.3)
        raise BrokerError(f"node {node} did not rejoin within {timeout:.0f}s")

    def _brokers_answer(self, bootstrap: str) -> int:
        from confluent_kafka.admin import AdminClient

        if not _metadata_answers(bootstrap, self.admin_config()):
            return 0
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0, **self.admin_config()})
        try:
            return len(admin.list_topics(timeout=3).brokers)
        except Exception:
            return 0

    def _launch(self, node: int, ports: list[tuple[int, int]], classpath: str, cluster_id: str) -> None:
        d = self.node_dir(node)
        for sub in ("data", "logs"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        port, cport = ports[node - 1]
        if not (port_free(port) and port_free(cport)):
            raise BrokerError(f"node {node}: port {port} or {cport} is taken; stop what holds it")
        self._write_config(node, ports)
        java = os.environ.get("JAVA", "java")
        jvm = [java, f"-Xms{min(256, self.heap_mb)}m", f"-Xmx{self.heap_mb}m", "-XX:+UseG1GC",
               "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile=file:{d / 'log4j2.properties'}",
               f"-Dkafka.logs.dir={d / 'logs'}", "-cp", classpath]
        # the admin's SCRAM credential on the storage tool's command line only before the first format
        # (Kafka takes it nowhere else; see streaming.local_broker)
        scram = sasl.format_args(self.dir) if self.secure and not (d / "data" / "meta.properties").exists() \
            else []
        fmt = subprocess.run([*jvm, "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", "-c",
                              str(self.config_path(node)), "--ignore-formatted", *scram],
                             capture_output=True, text=True)
        if fmt.returncode != 0:
            raise BrokerError(f"node {node}: formatting failed: {(fmt.stderr or fmt.stdout).strip()[-500:]}")
        with open(d / "logs" / "stdout.log", "ab") as out:
            proc = subprocess.Popen([*jvm, "kafka.Kafka", str(self.config_path(node))], stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                    close_fds=True)
        self._procs[node] = proc
        (d / "broker.pid").write_text(f"{proc.pid}\n")

    def _write_config(self, node: int, ports: list[tuple[int, int]]) -> None:
        d = self.node_dir(node)
        port, cport = ports[node - 1]
        n = self.nodes
        isr = str(max(1, n - 1))
        props = {
            "process.roles": "broker,controller",
            "node.id": str(node),
            "controller.quorum.voters": ",".join(f"{i + 1}@127.0.0.1:{c}" for i, (_, c) in enumerate(ports)),
            "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(d / "data"),
            "num.partitions": "1",
            "default.replication.factor": str(n),
            "min.insync.replicas": isr,
            "offsets.topic.replication.factor": str(n),
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": str(n),
            "transaction.state.log.min.isr": isr,
            "transaction.state.log.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": str(n),
            "share.coordinator.state.topic.min.isr": isr,
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
            "unclean.leader.election.enable": "false",
        }
        if self.secure:
            props |= sasl.broker_props(self.dir, port, cport)
        fd = os.open(self.config_path(node), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write("".join(f"{k}={v}\n" for k, v in props.items()))
        (d / "log4j2.properties").write_text(LOG4J2.format(log=d / "logs" / "server.log", level=self.log_level))

    # -- stop ----------------------------------------------------------------------------------
    def kill(self, node: int) -> None:
        """SIGKILL one node (fault tests); its data stays for :meth:`start_node`."""
        pid = self.pid(node)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            while self._alive(node, pid):
                time.sleep(0.05)

    def stop(self, *, timeout: float = 30.0) -> bool:
        """Stop every node this home started (SIGTERM, then SIGKILL after ``timeout``); data is kept."""
        pids = {n: p for n in range(1, self.nodes + 1) if (p := self.pid(n)) is not None}
        for pid in pids.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(self._alive(n, p) for n, p in pids.items()):
            time.sleep(0.1)
        for n, pid in pids.items():
            if self._alive(n, pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                while self._alive(n, pid):
                    time.sleep(0.05)
        for n in range(1, self.nodes + 1):
            (self.node_dir(n) / "broker.pid").unlink(missing_ok=True)
        self.bootstrap_path.unlink(missing_ok=True)
        return bool(pids)
