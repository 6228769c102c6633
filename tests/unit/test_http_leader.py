"""The HTTP API of a worker that does not run the planner redirects to the leader's, as Druid's coordinators do.

On the aiohttp app itself (no worker, no broker); the leadership is a plain value. What a user would notice when
this fails: a load balancer or a script that reaches a worker which does not lead reads a stale planner view
(rules, load queues, load status from when it last led), or cannot tell which worker leads.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from aiohttp.test_utils import TestClient, TestServer

from coordinator.placement.state import PlacementState
from streaming.http import HttpAuth, PlacementSource, build_web_app
from streaming.http_leader import LEADER_HEADER, add_leader_routes, advertised_url, leader_middleware
from streaming.service.election import Claim


@dataclass
class Fixed:
    """A leadership that does not change: this worker, whether it leads, and the latest claim."""

    worker_id: str
    leading: bool
    claim: Claim | None
    caught_up: bool = True

    def leads(self) -> bool:
        return self.leading

    def ready(self) -> bool:
        return self.caught_up

    def leader(self) -> Claim | None:
        return self.claim


def answers(leadership: Fixed, calls: list[tuple[str, str]]) -> list[tuple[int, str | None, str | None, str]]:
    """(status, Location, leader header, body) of each call."""
    app = build_web_app(PlacementSource(PlacementState, None), lambda _e: None, auth=HttpAuth(token="t"))
    app.middlewares.append(leader_middleware(leadership))
    add_leader_routes(app, leadership)

    async def go() -> list[tuple[int, str | None, str | None, str]]:
        async with TestClient(TestServer(app)) as client:
            out = []
            for method, path in calls:
                resp = await client.request(method, path, allow_redirects=False, json=[] if method == "POST" else None,
                                            headers={"Authorization": "Bearer t"})
                out.append((resp.status, resp.headers.get("Location"), resp.headers.get(LEADER_HEADER),
                            await resp.text()))
            return out
    return asyncio.run(go())


LOADSTATUS = ("GET", "/druid/coordinator/v1/loadstatus?simple")
LEADER_URL = "http://10.0.0.2:8081"


def test_a_worker_that_does_not_lead_redirects_planner_requests_to_the_leader_with_307() -> None:
    got = answers(Fixed("w1", False, Claim("w2", 7, LEADER_URL)),
                  [LOADSTATUS, ("POST", "/druid/coordinator/v1/rules/wiki"), ("GET", "/"),
                   ("GET", "/druid/coordinator/v1/isLeader"), ("GET", "/druid/coordinator/v1/leader"),
                   ("GET", "/status/health")])
    assert [g[0] for g in got] == [307, 307, 307, 404, 200, 200]
    assert got[0][1] == LEADER_URL + "/druid/coordinator/v1/loadstatus?simple"
    assert got[1][1] == LEADER_URL + "/druid/coordinator/v1/rules/wiki"  # 307: the POST is repeated there
    assert got[0][2] == "w2@7"
    assert '"leader":false' in got[3][3].replace(" ", "")
    assert got[4][3] == LEADER_URL


def test_the_leader_answers_itself() -> None:
    got = answers(Fixed("w2", True, Claim("w2", 7, LEADER_URL)),
                  [LOADSTATUS, ("GET", "/druid/coordinator/v1/isLeader"), ("GET", "/druid/coordinator/v1/leader")])
    assert [g[0] for g in got] == [200, 200, 200]
    assert got[0][1] is None and '"leader":true' in got[1][3].replace(" ", "")
    assert got[2][3] == LEADER_URL


def test_no_leader_known_or_a_leader_without_http_is_503_naming_what_is_known() -> None:
    none = answers(Fixed("w1", False, None), [LOADSTATUS, ("GET", "/druid/coordinator/v1/leader")])
    assert [g[0] for g in none] == [503, 503]
    assert "no other leader is known" in none[0][3]
    own = answers(Fixed("w1", False, Claim("w1", 3, "http://me:1")), [LOADSTATUS])  # its own claim ended
    assert own[0][0] == 503 and own[0][1] is None
    bare = answers(Fixed("w1", False, Claim("w2", 9, None)), [LOADSTATUS])
    assert bare[0][0] == 503 and "'w2'" in bare[0][3] and "--http" in bare[0][3] and bare[0][2] == "w2@9"


def test_claims_round_trip_and_an_older_builds_text_claim_still_names_the_worker() -> None:
    assert Claim.decode(Claim.encode("w2", LEADER_URL), 4) == Claim("w2", 4, LEADER_URL)
    assert Claim.decode(Claim.encode("w2", None), 4) == Claim("w2", 4, None)
    assert Claim.decode(b"w-old", 1) == Claim("w-old", 1, None)
    assert Claim.decode(b"", 1) is None


def test_the_advertised_url_is_the_bound_address_or_the_one_given() -> None:
    assert advertised_url("127.0.0.1", 8081) == "http://127.0.0.1:8081"
    assert advertised_url("::1", 8081) == "http://[::1]:8081"
    assert advertised_url("0.0.0.0", 8081, "http://coord-1:8081/") == "http://coord-1:8081"
    assert not advertised_url("0.0.0.0", 8081).startswith("http://0.0.0.0")


def test_a_leader_still_reading_the_log_answers_503_not_a_stale_view() -> None:
    got = answers(Fixed("w2", True, Claim("w2", 7, LEADER_URL), caught_up=False),
                  [LOADSTATUS, ("GET", "/druid/coordinator/v1/isLeader"), ("GET", "/status/health")])
    assert [g[0] for g in got] == [503, 404, 200]
    assert "still reading the log" in got[0][3]
