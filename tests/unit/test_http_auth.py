"""The HTTP API's authentication, on the aiohttp app itself (no worker): who may write, who may read.

What a user would notice when this fails: anyone who reaches the port changes the rules or the dynamic
config, or reads the cluster when reads were meant to be private.
"""

from __future__ import annotations

import asyncio
import base64

from aiohttp.test_utils import TestClient, TestServer

from coordinator.placement.state import PlacementState
from events.registry import Event
from streaming.http import HttpAuth, PlacementSource, build_web_app, parse_address

RULES = [{"type": "loadForever", "tieredReplicants": {"hot": 1}}]


def statuses(auth: HttpAuth, calls: list[tuple[str, str, str | None]]) -> tuple[list[int], list[Event]]:
    sent: list[Event] = []
    app = build_web_app(PlacementSource(PlacementState, None), sent.append, auth=auth)

    async def go() -> list[int]:
        async with TestClient(TestServer(app)) as client:
            out = []
            for method, path, header in calls:
                headers = {"Authorization": header} if header else {}
                body = RULES if method == "POST" else None
                resp = await client.request(method, path, json=body, headers=headers)
                out.append(resp.status)
            return out
    return asyncio.run(go()), sent


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


POST = ("POST", "/druid/coordinator/v1/rules/wiki")
GET = ("GET", "/druid/coordinator/v1/rules")


def test_writes_need_a_token_or_basic_auth_and_nothing_is_written_without() -> None:
    auth = HttpAuth(token="t0k", basic=("ops", "pw"))
    got, sent = statuses(auth, [(*POST, None), (*POST, "Bearer nope"), (*POST, basic("ops", "bad")),
                                (*POST, "Bearer t0k"), (*POST, basic("ops", "pw")), (*GET, None),
                                ("GET", "/status/health", None)])
    assert got == [401, 401, 401, 200, 200, 200, 200]
    assert len(sent) == 2


def test_without_credentials_configured_writes_are_refused_not_open() -> None:
    got, sent = statuses(HttpAuth(), [(*POST, None), (*POST, "Bearer anything"), (*GET, None)])
    assert got == [403, 403, 200] and sent == []


def test_reads_need_credentials_when_configured_health_never_does() -> None:
    got, _ = statuses(HttpAuth(token="t0k", reads=True), [(*GET, None), (*GET, "Bearer t0k"),
                                                        ("GET", "/metrics", None), ("GET", "/status/health", None)])
    assert got == [401, 200, 401, 200]


def test_the_default_bind_is_loopback() -> None:
    assert parse_address(":8081") == ("127.0.0.1", 8081)
    assert parse_address("8081") == ("127.0.0.1", 8081)
    assert parse_address("0.0.0.0:8081") == ("0.0.0.0", 8081)
