"""``segcoord`` commands as subprocesses for the integration tests, and a wait for a condition while they run.

One class for every long-running command a test starts (``segcoord run`` as a single service or as one of
several workers): its output is appended to one log file across restarts, so a failure shows the whole story.
:func:`wait_for` polls a condition, never a fixed pause, and fails with the processes' logs as soon as one of
them exits or the timeout passes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

SEGCOORD = str(Path(sys.executable).parent / "segcoord")


class SegcoordProcess:
    """A ``segcoord`` command (``args``) run as a subprocess, stdout and stderr appended to ``log``.

    ``name`` names it in failure messages; ``stop_timeout`` is how long :meth:`stop` waits after SIGTERM before it
    SIGKILLs and fails."""

    name = "segcoord"
    stop_timeout = 60.0

    def __init__(self, args: list[str], log: Path) -> None:
        self.args = args
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(self.args, stdout=out, stderr=subprocess.STDOUT,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL, and reap it."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> int:
        """SIGTERM; its exit status. Fails (after a SIGKILL) with its log if it ignores the signal."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(self.stop_timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(f"{self.name} ignored SIGTERM; log:\n{self.log.read_text()[-3000:]}") from None

    def tail(self) -> str:
        """The end of its log, headed by its name."""
        return f"--- {self.name}:\n{self.log.read_text()[-2500:]}"


def kill_alive(processes: Iterable[SegcoordProcess]) -> None:
    """A test's teardown: SIGKILL (and reap) each of ``processes`` still running, a paused one (SIGSTOP) too."""
    for p in processes:
        if p.alive():
            assert p.proc is not None
            p.proc.send_signal(signal.SIGCONT)
            p.kill()


def wait_for(what: str, check: Callable[[], Any], processes: SegcoordProcess | Sequence[SegcoordProcess],
             timeout: float = 30.0, poll: float = 0.3) -> Any:
    """Poll ``check`` until it returns something truthy (returned). Fails with the logs of ``processes`` as soon as
    one of them is not running, or when ``timeout`` seconds pass."""
    procs = [processes] if isinstance(processes, SegcoordProcess) else list(processes)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        dead = [p for p in procs if not p.alive()]
        assert not dead, f"{dead[0].name} exited:\n" + "\n".join(p.tail() for p in procs)
        got = check()
        if got:
            return got
        time.sleep(poll)  # the poll interval, not a wait for an outcome
    raise AssertionError(f"no {what} after {timeout}s:\n" + "\n".join(p.tail() for p in procs))

