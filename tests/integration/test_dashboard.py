"""The live dashboard at ``/`` of ``segcoord run --http``, looked at in a real headless browser (chromium).

Real broker, ``segcoord run --http`` on a free port, two ``segcoord historical`` processes; segments are
published and the page must show them loaded and visible (and a replaced one overshadowed) within a deadline,
with the commands that loaded them and their visibility changes. The screenshot is a test artifact: under the
test's tmp dir, and copied to ``test-artifacts/dashboard.png`` at the repository root (both paths printed).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from events import Interval, SegmentDescriptor, Topics
from events.segments import SegmentsPublished
from tests.integration.browser import BrowserMissing, Chromium, Elements, chromium_path
from tests.integration.test_http_api import free_port
from tests.integration.test_service_planner import PlanService, send
from tests.integration.test_service_timeline import SEGCOORD, T0, wait_for

pytestmark = pytest.mark.integration
DAY = 86_400_000
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


@pytest.fixture(scope="session")
def chromium() -> Iterator[Chromium]:
    try:
        browser = Chromium(chromium_path())
    except BrowserMissing as e:
        pytest.fail(str(e))
    try:
        yield browser
    finally:
        browser.close()


def seg(day: int, version: str = "v1", size: int = 2_000_000) -> SegmentDescriptor:
    return SegmentDescriptor("wiki", Interval(T0 + day * DAY, T0 + (day + 1) * DAY), version, 0, size)


class HistoricalProcs:
    """``segcoord historical`` processes, stopped with SIGTERM at the end."""

    def __init__(self, bootstrap: str, topics: Topics, names: list[str], log: Path) -> None:
        self.procs = []
        with log.open("ab") as out:
            for name in names:
                self.procs.append(subprocess.Popen(
                    [SEGCOORD, "historical", "--name", name, "--max-size", "20MB", "--load-ms", "20",
                     "--bootstrap", bootstrap, "--topic-prefix", topics.prefix],
                    stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"}))

    def stop(self) -> None:
        for p in self.procs:
            p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()


def get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def segment_row(page: Elements, segment: SegmentDescriptor) -> dict[str, str] | None:
    rows = page.find("tr", data_segment=str(segment.id))
    return rows[0][0] if rows else None


def test_published_segments_appear_loaded_and_visible(kafka_bootstrap: str, topics: Topics, tmp_path: Path,
                                                      chromium: Chromium, capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    service = PlanService(kafka_bootstrap, topics, tmp_path / "state", tmp_path / "run.log", plan_every=1)
    service.args += ["--http", f"127.0.0.1:{port}"]
    service.start()
    historicals = HistoricalProcs(kafka_bootstrap, topics, ["historical-1", "historical-2"], tmp_path / "hist.log")

    def alive() -> str | None:
        return None if service.alive() else f"segcoord run exited; log:\n{service.log.read_text()[-3000:]}"

    try:
        def api_up() -> bool:
            try:
                with urllib.request.urlopen(f"{url}segcoord/v1/dashboard/overview", timeout=10) as resp:
                    return len(json.loads(resp.read())["tiers"][0]["servers"]) == 2
            except (OSError, IndexError, KeyError):
                return False
        wait_for("the dashboard's answers with both historicals", api_up, service, 90)

        # the page's own answers refuse bad parameters as the Druid API does, and serve only their files
        assert get(f"{url}segcoord/v1/datasources/wiki/timeline?limit=0")[0] == 400
        status, doc = get(f"{url}segcoord/v1/dashboard/recent?since=x")
        assert status == 400 and doc["errorMessage"] == "since: expected an integer, got 'x'"
        assert get(f"{url}dashboard/static/..%2Fhttp.py")[0] == 404
        assert get(f"{url}segcoord/v1/datasources/nope/timeline")[1]["segments"] == []

        # the empty page already names its sections, and shows the servers (no segment yet)
        first = Elements.of(chromium.dom(url))
        assert [t for _a, t in first.find("h2")][:2] == ["Servers by tier", "Data sources"]
        assert {a["data-server"] for a, _t in first.find("div", class_="server")} == {"historical-1", "historical-2"}

        v1 = [seg(d) for d in range(3)]
        send(kafka_bootstrap, topics, SegmentsPublished(task_id="index-1", segments=tuple(v1)), "wiki")

        def loaded_and_visible(page: Elements) -> bool | None:
            rows = [segment_row(page, s) for s in v1]
            if not all(r and r["data-state"] == "visible" and r["data-servers"] == "historical-1,historical-2"
                       for r in rows):
                return None
            source = page.find("tr", data_datasource="wiki")
            return True if source and source[0][0]["data-loaded"] == "100.0" else None
        chromium.wait_for("the 3 published segments loaded (2 replicas) and visible, wiki 100 % loaded", url,
                          loaded_and_visible, 90, alive)

        # a newer version of day 2 replaces the old one: visible, and the old one overshadowed
        v2 = seg(2, "v2", 3_000_000)
        send(kafka_bootstrap, topics, SegmentsPublished(task_id="compact-1", segments=(v2,)), "wiki")

        def replaced(page: Elements) -> Elements | None:
            new, old = segment_row(page, v2), segment_row(page, v1[2])
            ok = new and new["data-state"] == "visible" and old and old["data-state"] == "overshadowed"
            return page if ok else None
        page = chromium.wait_for("v2 of day 2 visible and v1 of it overshadowed", url, replaced, 90, alive)

        # the feeds: the loads that did it, and the visibility changes
        loads = {a["data-server"] for a, _t in page.find("li", data_action="load", data_segment=str(v2.id))}
        assert loads == {"historical-1", "historical-2"}, page.find("li", data_action="load")
        assert page.find("li", data_segment=str(v2.id), data_to="visible")
        assert page.find("li", data_segment=str(v1[2].id), data_to="overshadowed")
        legend = {a["data-count"]: t for a, t in page.find("span") if "data-count" in a}
        assert legend == {"visible": "visible 3", "standby": "standby 0", "overshadowed": "overshadowed 1",
                          "offline": "offline 0"}

        shot = chromium.screenshot(url + "#wiki", tmp_path / "dashboard.png")
        ARTIFACTS.mkdir(exist_ok=True)
        copy = shutil.copy(shot, ARTIFACTS / "dashboard.png")
        with capsys.disabled():  # shown whatever pytest's capture mode
            print(f"\ndashboard screenshot: {shot} (copied to {copy})")
    finally:
        historicals.stop()
        assert service.stop() == 0
