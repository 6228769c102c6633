"""``segcoord run --http``: Druid's coordinator API and /metrics, on the real broker, one test per endpoint.

The examples below are written from Druid's API documentation (legacy metadata API, rules, dynamic
config); each answer must have the example's shape (same keys, same JSON types, recursively) and the
values the cluster state implies.
"""

from __future__ import annotations

import json
import os
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from events import Interval, SegmentDescriptor, Topics
from events.cluster import ServerJoined
from events.segments import SegmentsPublished
from events.topics import METRICS
from streaming.http import TOKEN_ENV
from tests.integration.test_service_planner import Historicals, PlanService, decoded, send
from tests.integration.test_service_timeline import T0, read_all, wait_for

pytestmark = pytest.mark.integration
DAY = 86_400_000
V1 = "/druid/coordinator/v1"

# -- Druid's documented shapes ---------------------------------------------------------------
class Keyed(dict):  # type: ignore[type-arg]
    """An example map keyed by names (data source, tier, server): the keys vary, the values' shape does not."""


LOADSTATUS = Keyed({"wikipedia": 100.0})
LOADSTATUS_SIMPLE = Keyed({"wikipedia": 0})
LOADSTATUS_FULL = Keyed({"_default_tier": Keyed({"wikipedia": 0})})
SERVERS = ["localhost:8083"]
SERVERS_SIMPLE = [{"host": "localhost:8083", "type": "historical", "tier": "_default_tier", "currSize": 1,
                   "maxSize": 1, "priority": 0}]
DATASOURCES = ["wikipedia"]
SEGMENT_IDS = ["wikipedia_2016-06-27T00:00:00.000Z_2016-06-28T00:00:00.000Z_2016-06-28T00:00:00.000Z"]
LOADQUEUE = Keyed({"localhost:8083": {"segmentsToLoad": ["x"], "segmentsToDrop": ["x"]}})
LOADQUEUE_SIMPLE = Keyed({"localhost:8083": {"segmentsToLoad": 0, "segmentsToDrop": 0, "segmentsToLoadSize": 0,
                                             "segmentsToDropSize": 0}})
RULES = [{"type": "loadForever", "tieredReplicants": Keyed({"_default_tier": 2}), "useDefaultTierForNull": True}]
ALL_RULES = Keyed({"_default": RULES})
DATA_SEGMENT = {"dataSource": "wikipedia", "interval": "2016-06-27T00:00:00.000Z/2016-06-28T00:00:00.000Z",
                "version": "v", "loadSpec": Keyed({"k": "v"}), "dimensions": "", "metrics": "",
                "shardSpec": {"type": "numbered", "partitionNum": 0, "partitions": 0}, "binaryVersion": 9,
                "size": 1, "identifier": "x"}
ERROR = {"error": "druidException", "errorCode": "invalidInput", "persona": "USER", "category": "INVALID_INPUT",
         "errorMessage": "x", "context": Keyed({"k": "v"})}
CONFIG_KEYS = {"millisToWaitBeforeDeleting", "maxSegmentsToMove", "replicationThrottleLimit",
               "maxSegmentsInNodeLoadingQueue", "pauseCoordination", "decommissioningNodes", "smartSegmentLoading",
               "replicateAfterLoadTimeout", "useRoundRobinSegmentAssignment", "maxNonPrimaryReplicantsToLoad",
               "decommissioningMaxPercentOfMaxSegmentsToMove"}
EMITTED = {"feed": "metrics", "timestamp": "2026-01-01T00:00:00.000Z", "service": "druid/coordinator",
           "host": "h", "version": "v", "metric": "segment/assigned/count", "value": 1}


def shaped(got: Any, example: Any, path: str = "$") -> None:
    """``got`` has the example's shape: the same JSON types, the same keys (where the example's keys are fixed
    names) and elements shaped like the example's first element."""
    numbers = (int, float)
    if isinstance(example, bool):
        assert isinstance(got, bool), f"{path}: {got!r} is not a boolean"
    elif isinstance(example, numbers):
        assert isinstance(got, numbers) and not isinstance(got, bool), f"{path}: {got!r} is not a number"
    elif isinstance(example, str):
        assert isinstance(got, str), f"{path}: {got!r} is not a string"
    elif isinstance(example, list):
        assert isinstance(got, list), f"{path}: {got!r} is not a list"
        for i, item in enumerate(got):
            shaped(item, example[0], f"{path}[{i}]")
    elif isinstance(example, dict):
        assert isinstance(got, dict), f"{path}: {got!r} is not an object"
        if not isinstance(example, Keyed):
            assert set(got) == set(example), f"{path}: keys {sorted(got)} != {sorted(example)}"
            for k, v in example.items():
                shaped(got[k], v, f"{path}.{k}")
        else:  # a map keyed by data source, tier or server
            template = next(iter(example.values()))
            for k, v in got.items():
                shaped(v, template, f"{path}.{k}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


TOKEN = "http-test-token-" + socket.gethostname()


class Api:
    def __init__(self, port: int, service: PlanService, token: str | None = TOKEN) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.service = service  # the worker serving it (a wait fails with its log if it exits)
        self.token = token  # sent with writes (the worker requires it: SEGCOORD_HTTP_TOKEN)

    def call(self, method: str, path: str, body: object = None, raw: bytes | None = None,
             authorization: str | None = None) -> tuple[int, Any]:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        headers = {"Content-Type": "application/json"}
        if authorization is not None:
            headers["Authorization"] = authorization
        elif self.token is not None and method != "GET":
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                text = resp.read()
                status = resp.status
        except urllib.error.HTTPError as e:
            text, status = e.read(), e.code
        if path == "/metrics":
            return status, text.decode()
        return status, json.loads(text) if text else None

    def get(self, path: str) -> Any:
        status, doc = self.call("GET", path)
        assert status == 200, (path, status, doc)
        return doc


@pytest.fixture(scope="module")
def cluster(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Api, Topics, str]]:
    """One service with the API, two historicals, rules of 2 replicas and three published segments, loaded."""
    from streaming.admin import create_topics

    topics = Topics(f"h{socket.gethostname()[:3]}{free_port()}.")
    create_topics(kafka_bootstrap, topics, partitions=1)
    tmp = tmp_path_factory.mktemp("http")
    port = free_port()
    svc = PlanService(kafka_bootstrap, topics, tmp / "state", tmp / "run.log", plan_every=1)
    svc.args += ["--http", f"127.0.0.1:{port}"]
    os.environ[TOKEN_ENV] = TOKEN  # the worker's write token (the subprocess inherits it)
    try:
        svc.start()
    finally:
        del os.environ[TOKEN_ENV]
    api = Api(port, svc)
    try:
        with Historicals(kafka_bootstrap, topics, ["h1", "h2"]):
            wait_for("both servers joined", lambda: {
                e.event.server for e in decoded(kafka_bootstrap, topics, "cluster")  # type: ignore[attr-defined]
                if isinstance(e.event, ServerJoined)} == {"h1", "h2"}, svc)

            def up() -> bool:  # serving, elected to run the planner and caught up (else it answers 503)
                try:
                    return api.call("GET", "/status/health")[1] is True and \
                        api.call("GET", f"{V1}/isLeader")[0] == 200
                except OSError:
                    return False
            wait_for("the HTTP API", up, svc, 60)
            status, _ = api.call("POST", f"{V1}/rules/wiki", [{"type": "loadForever", "tieredReplicants": {"hot": 2}}])
            assert status == 200
            segs = tuple(SegmentDescriptor("wiki", Interval(T0 + d * DAY, T0 + (d + 1) * DAY), "v1", 0, 1000)
                         for d in range(3))
            send(kafka_bootstrap, topics, SegmentsPublished(task_id="t1", segments=segs), "wiki")
            wait_for("all loaded", lambda: api.get(f"{V1}/loadstatus?full") == {"hot": {"wiki": 0}}, svc, 60)
            yield api, topics, kafka_bootstrap
    finally:
        assert svc.stop() == 0
        log = (tmp / "run.log").read_text()
        assert "\x1b" not in log and "\r" not in log, "escape codes in the service log"


def test_status_health(cluster: tuple[Api, Topics, str]) -> None:
    assert cluster[0].get("/status/health") is True


def test_loadstatus(cluster: tuple[Api, Topics, str]) -> None:
    api = cluster[0]
    doc = api.get(f"{V1}/loadstatus")
    shaped(doc, LOADSTATUS)
    assert doc == {"wiki": 100.0}
    shaped(api.get(f"{V1}/loadstatus?simple"), LOADSTATUS_SIMPLE)
    assert api.get(f"{V1}/loadstatus?simple") == {"wiki": 0}
    full = api.get(f"{V1}/loadstatus?full")
    shaped(full, LOADSTATUS_FULL)
    assert full == {"hot": {"wiki": 0}}


def test_servers(cluster: tuple[Api, Topics, str]) -> None:
    api = cluster[0]
    shaped(api.get(f"{V1}/servers"), SERVERS)
    assert api.get(f"{V1}/servers") == ["h1", "h2"]
    rows = api.get(f"{V1}/servers?simple")
    shaped(rows, SERVERS_SIMPLE)
    assert [(r["host"], r["tier"], r["currSize"], r["maxSize"]) for r in rows] == [
        ("h1", "hot", 3000, 10_000), ("h2", "hot", 3000, 10_000)]


def test_datasources_and_their_segments(cluster: tuple[Api, Topics, str]) -> None:
    api = cluster[0]
    shaped(api.get(f"{V1}/datasources"), DATASOURCES)
    assert api.get(f"{V1}/datasources") == ["wiki"]
    ids = api.get(f"{V1}/datasources/wiki/segments")
    shaped(ids, SEGMENT_IDS)
    assert len(ids) == 3 and all(i.startswith("wiki_") for i in ids)
    assert api.call("GET", f"{V1}/datasources/nope/segments") == (204, None)  # Druid: no content


def test_loadqueue(cluster: tuple[Api, Topics, str]) -> None:
    api = cluster[0]
    simple = api.get(f"{V1}/loadqueue?simple")
    shaped(simple, LOADQUEUE_SIMPLE)
    assert set(simple) == {"h1", "h2"} and all(v["segmentsToLoad"] == 0 for v in simple.values())
    full = api.get(f"{V1}/loadqueue")
    shaped(full, LOADQUEUE)
    assert full["h1"] == {"segmentsToLoad": [], "segmentsToDrop": []}


def test_writes_need_the_token_and_reads_do_not(cluster: tuple[Api, Topics, str]) -> None:
    api, _topics, _ = cluster
    rules = [{"type": "loadForever", "tieredReplicants": {"hot": 2}}]
    before = api.get(f"{V1}/rules/wiki")
    for authorization in ("", "Bearer wrong", f"Basic {TOKEN}", f"Bearer {TOKEN}x"):
        status, err = api.call("POST", f"{V1}/rules/wiki", [{"type": "dropForever"}], authorization=authorization)
        assert status == 401 and "authentication required" in err["errorMessage"], (authorization, status, err)
    assert api.get(f"{V1}/rules/wiki") == before  # nothing was written
    assert api.call("POST", f"{V1}/rules/wiki", rules)[0] == 200  # with the token
    assert api.call("GET", f"{V1}/servers", authorization="")[0] == 200  # reads are open unless configured


def test_rules_get_and_post(cluster: tuple[Api, Topics, str]) -> None:
    api = cluster[0]
    rules = api.get(f"{V1}/rules/wiki")
    shaped(rules, RULES)
    assert rules[0]["tieredReplicants"] == {"hot": 2}
    everything = api.get(f"{V1}/rules")
    shaped(everything, ALL_RULES)
    assert set(everything) == {"_default", "wiki"}
    status, err = api.call("POST", f"{V1}/rules/wiki", [{"type": "loadForever", "tieredReplicants": {"hot": -1}}])
    assert status == 400
    shaped(err, ERROR)
    assert "rules[0].tieredReplicants.hot: expected a non-negative integer" in err["errorMessage"]
    status, err = api.call("POST", f"{V1}/rules/wiki", raw=b"[{")
    assert status == 400 and "not JSON" in err["errorMessage"]
    assert api.call("POST", f"{V1}/rules/_default", [])[0] == 400
    # a good write is an event the planner applies
    assert api.call("POST", f"{V1}/rules/other", [{"type": "dropForever"}])[0] == 200
    wait_for("the rules of other applied", lambda: api.get(f"{V1}/rules/other") == [{"type": "dropForever"}],
             api.service)


def test_config_get_and_post_merges(cluster: tuple[Api, Topics, str]) -> None:
    api = cluster[0]
    conf = api.get(f"{V1}/config")
    assert set(conf) >= CONFIG_KEYS
    assert api.call("POST", f"{V1}/config", {"maxSegmentsToMove": 11})[0] == 200
    wait_for("maxSegmentsToMove applied", lambda: api.get(f"{V1}/config")["maxSegmentsToMove"] == 11, api.service)
    assert api.call("POST", f"{V1}/config", {"replicationThrottleLimit": 12})[0] == 200
    wait_for("replicationThrottleLimit applied", lambda: api.get(f"{V1}/config")["replicationThrottleLimit"] == 12,
             api.service)
    assert api.get(f"{V1}/config")["maxSegmentsToMove"] == 11  # merged, as Druid merges a POST
    status, err = api.call("POST", f"{V1}/config", {"maxSegmentsToMove": "many"})
    assert status == 400 and err["errorMessage"].startswith("config.maxSegmentsToMove: expected an integer")
    shaped(err, ERROR)


def test_metadata_segments(cluster: tuple[Api, Topics, str]) -> None:
    api = cluster[0]
    assert api.get(f"{V1}/metadata/datasources") == ["wiki"]
    ids = api.get(f"{V1}/metadata/datasources/wiki/segments")
    shaped(ids, SEGMENT_IDS)
    assert len(ids) == 3
    full = api.get(f"{V1}/metadata/datasources/wiki/segments?full")
    shaped(full, [DATA_SEGMENT])
    assert sorted(s["identifier"] for s in full) == sorted(ids) and full[0]["size"] == 1000
    assert api.call("GET", f"{V1}/metadata/datasources/nope/segments")[0] == 404


def test_errors_are_druid_json(cluster: tuple[Api, Topics, str]) -> None:
    api = cluster[0]
    status, err = api.call("GET", f"{V1}/no/such/thing")
    assert status == 404
    shaped(err, ERROR)
    status, err = api.call("DELETE", f"{V1}/config")
    assert status == 405
    shaped(err, ERROR)


def test_metrics_prometheus_and_topic(cluster: tuple[Api, Topics, str]) -> None:
    api, topics, bootstrap = cluster
    text = api.get("/metrics")
    for name in ('druid_segment_assigned_count{tier="hot"}', "druid_coordinator_time",
                 'druid_segment_loadQueue_count{server="h1"}', 'druid_segment_loadQueue_size{server="h1"}',
                 'druid_segcoord_agent_events_total{agent="planner"}',
                 'druid_segcoord_agent_batch_time_count{agent="timeline"}',
                 'druid_segcoord_agent_lag{agent="planner"}'):
        assert name in text, name
    assigned = [line for line in text.splitlines() if line.startswith('druid_segment_assigned_count{tier="hot"}')]
    assert assigned
    docs = [json.loads(r.value) for r in read_all(bootstrap, topics.name(METRICS))]
    assert docs
    for doc in docs:
        shaped({k: doc[k] for k in EMITTED}, EMITTED)
    assert any(d["metric"] == "segment/assigned/count" and d.get("tier") == "hot" and d["value"] >= 1 for d in docs)
    assert any(d["metric"] == "coordinator/time" for d in docs)
