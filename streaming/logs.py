"""Logs people can read: INFO for the service's own lines, libraries kept quiet, broker outages summarized.

:func:`setup` is called once the worker has configured logging: the service's loggers (``segcoord.*``)
log at the chosen level (INFO by default), Faust's, mode's and aiokafka's at WARNING or above (their
INFO is start-up chatter), and every handler gets a :class:`ConnectionErrors` filter.

:class:`ConnectionErrors` turns a broker outage's flood of connection errors (aiokafka and librdkafka
log one per attempt per connection: thousands in 20 s) into two lines: ``broker unreachable since
<time>: <first error>`` when the first one is seen, and ``broker reconnected after N s (M connection
errors suppressed)`` when :meth:`ConnectionErrors.healthy` is called after it (an agent batch went
through, or a probe of the broker answered). While it lasts, a reminder at most every
``remind_s`` seconds. No escape codes: every message is made plain text (``strip_escapes``). A message it
rewrites is left with empty arguments, ``()``, never ``None``: Faust's formatter (mode's
``ExtensionFormatter``) turns a non-tuple into a one-element tuple, and ``None`` became ``(None,)``, which
the ``%`` formatting then refused ("not all arguments converted").
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable

log = logging.getLogger("segcoord.service")

#: Substrings of the connection errors aiokafka, Faust and librdkafka log on every failed attempt.
CONNECTION_MARKERS = ("Unable connect", "Unable to connect", "Connection refused", "connection refused",
                      "Connect to ipv4", "Failed to connect", "ConnectionError", "KafkaConnectionError",
                      "Broker transport failure", "all brokers down", "Disconnected", "NodeNotReady",
                      "Unable to update metadata", "Coordinator load in progress", "GroupCoordinatorNotAvailable",
                      "Connection reset")
_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\r")
QUIET = ("faust", "mode", "aiokafka", "kafka", "aiohttp.access")
LIBRDKAFKA_LOGGER = "kafka.librdkafka"  # the service's confluent-kafka clients log here (at warn or above)


def strip_escapes(text: str) -> str:
    """Text without ANSI escape sequences and carriage returns.

    >>> strip_escapes("\\x1b[31mred\\x1b[0m\\r")
    'red'
    """
    return _ESCAPES.sub("", text)


class ConnectionErrors(logging.Filter):
    """Rate-limits connection errors into 'unreachable since' and 'reconnected after' lines (see module)."""

    def __init__(self, remind_s: float = 60.0, clock: Callable[[], float] = time.time) -> None:
        super().__init__()
        self.remind_s = remind_s
        self.clock = clock
        self.since: float | None = None
        self.suppressed = 0
        self._last_reminder = 0.0
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:
            return True
        plain = strip_escapes(message)
        if plain != message:
            record.msg, record.args = plain, ()
        if record.name.startswith("segcoord") or record.levelno < logging.WARNING \
                or not any(m in plain for m in CONNECTION_MARKERS):
            return True
        with self._lock:
            now = self.clock()
            if self.since is None:
                self.since, self._last_reminder, self.suppressed = now, now, 0
                record.msg, record.args = (f"broker unreachable since {_hms(now)}: {plain.splitlines()[0][:200]}",
                                           ())
                return True
            if now - self._last_reminder >= self.remind_s:
                self._last_reminder = now
                record.msg, record.args = (f"broker unreachable since {_hms(self.since)} ({now - self.since:.0f} s, "
                                           f"{self.suppressed} connection errors suppressed)", ())
                return True
            self.suppressed += 1
            return False

    @property
    def unreachable(self) -> bool:
        return self.since is not None

    def healthy(self) -> None:
        """The broker answered: end an outage with one 'reconnected after' line."""
        with self._lock:
            if self.since is None:
                return
            took, suppressed, self.since = self.clock() - self.since, self.suppressed, None
        log.warning("broker reconnected after %.0f s (%d connection errors suppressed)", took, suppressed)


def _hms(t: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(t)) + "Z"


LEVELS = {"crit": logging.CRITICAL, "error": logging.ERROR, "warn": logging.WARNING, "info": logging.INFO,
          "debug": logging.DEBUG}


def setup(level: str, errors: ConnectionErrors | None = None) -> None:
    """The levels of the module docstring; with ``errors``, that filter on every root handler (adding one
    plain handler when logging was never configured)."""
    numeric = LEVELS.get(level, logging.INFO)
    logging.getLogger("segcoord").setLevel(numeric)
    for name in QUIET:
        logging.getLogger(name).setLevel(max(numeric, logging.WARNING))
    if errors is None:
        return
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
    for existing in root.handlers:
        existing.setLevel(min(existing.level or numeric, numeric))  # the libraries' loggers stay at warn
        if errors not in existing.filters:
            existing.addFilter(errors)
