"""A real headless browser for the dashboard test: Debian's ``chromium``, driven from its command line.

``--dump-dom`` prints the DOM after the page's scripts ran for ``--virtual-time-budget`` ms of virtual time
(timers fire without waiting for the wall clock, fetches pause it until they answer), so one call is one
look at the page as a user would see it after a few polls; :meth:`Chromium.wait_for` looks again until a
condition on the DOM holds. ``--screenshot`` saves what the page looks like. No selenium, no driver.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars"]


class BrowserMissing(RuntimeError):
    pass


def chromium_path(install: bool = True) -> str:
    """Debian's chromium, installed with apt-get when missing and we are root (as CI runs ``make test``)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    how = "apt-get install -y chromium (Debian's package), as root"
    if not install or os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise BrowserMissing(f"the dashboard's browser test needs chromium and cannot install it here: {how}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "install", "-y", "-qq", "chromium"],
                ["sh", "-c", "apt-get update -qq && apt-get install -y -qq chromium"]):  # a fresh machine: no lists
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        found = shutil.which("chromium")
        if found:
            return found
    raise BrowserMissing(f"installing chromium failed ({how}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")


class Chromium:
    def __init__(self, path: str) -> None:
        self.path = path
        self.profile = Path(tempfile.mkdtemp(prefix="segcoord-chromium-"))

    def _run(self, url: str, *extra: str, budget_ms: int) -> str:
        args = [self.path, *FLAGS, f"--user-data-dir={self.profile}", f"--virtual-time-budget={budget_ms}",
                *extra, url]
        done = subprocess.run(args, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise AssertionError(f"chromium exited {done.returncode}: {done.stderr[-2000:]}")
        return done.stdout

    def dom(self, url: str, budget_ms: int = 5000) -> str:
        """The page's DOM after ``budget_ms`` of virtual time."""
        return self._run(url, "--dump-dom", budget_ms=budget_ms)

    def screenshot(self, url: str, path: Path, width: int = 1280, height: int = 900, budget_ms: int = 5000) -> Path:
        self._run(url, f"--screenshot={path}", f"--window-size={width},{height}", budget_ms=budget_ms)
        assert path.exists() and path.stat().st_size > 0, f"no screenshot at {path}"
        return path

    def wait_for(self, what: str, url: str, check: Callable[[Elements], T | None], timeout: float = 60.0,
                 alive: Callable[[], str | None] = lambda: None) -> T:
        """Look at the page until ``check(elements)`` returns something; fail with the last DOM after ``timeout``
        (or at once when ``alive`` reports the service gone)."""
        deadline = time.monotonic() + timeout
        dom = ""
        while time.monotonic() < deadline:
            gone = alive()
            assert gone is None, gone
            dom = self.dom(url)
            got = check(Elements.of(dom))
            if got is not None:
                return got
        raise AssertionError(f"the page shows no {what} after {timeout}s; last DOM:\n{dom[-4000:]}")

    def close(self) -> None:
        shutil.rmtree(self.profile, ignore_errors=True)


class Elements(HTMLParser):
    """Every element of a DOM as (tag, attributes, text directly inside it and its children)."""

    def __init__(self) -> None:
        super().__init__()
        self.items: list[tuple[str, dict[str, str], list[str]]] = []
        self._open: list[int] = []

    @classmethod
    def of(cls, html: str) -> Elements:
        parser = cls()
        parser.feed(html)
        return parser

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.items.append((tag, {k: v or "" for k, v in attrs}, []))
        if tag not in ("meta", "link", "br", "img", "input"):
            self._open.append(len(self.items) - 1)

    def handle_endtag(self, tag: str) -> None:
        while self._open:
            if self.items[self._open.pop()][0] == tag:
                break

    def handle_data(self, data: str) -> None:
        for i in self._open:
            self.items[i][2].append(data)

    def find(self, tag: str, **attrs: str) -> list[tuple[dict[str, str], str]]:
        """Elements with the tag and (``data_x`` = ``data-x``) attribute values: their attributes and text."""
        want = {k.rstrip("_").replace("_", "-"): v for k, v in attrs.items()}
        return [(a, "".join(t).strip()) for tg, a, t in self.items
                if tg == tag and all(a.get(k) == v for k, v in want.items())]
