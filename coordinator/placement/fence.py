"""Fencing a deposed planner: commands from an epoch older than one a server was already commanded in are void.

The planner runs on the worker elected through the election topic; each leadership has an **epoch** (the
offset of its claim there, so epochs only grow) and every command it sends carries it (``plannerEpoch``).
A leader cut off from the group (paused, partitioned) does not know at once that it was deposed, and may
send commands after its successor began. This module is the one decision of what they are worth:

**Rule.** Along the commands of one server (all on one partition of ``commands``, keyed by server name, so
they are totally ordered in the log), a command is *admitted* unless a command with a higher epoch was read
before it; an admitted command with an epoch raises that server's mark. Commands without an epoch (the Spark
balancer's, logs older than epochs) are admitted and raise nothing.

**Invariants.**
- Deterministic: the decision depends on the log alone (the server's partition, in order), not on how the
  partitions of ``commands`` interleave, nor on the clock; every reader (the planner, historicals, replay,
  audit, the read model) folds the same decision through :class:`~coordinator.placement.state.PlacementState`.
- Once a server has read a command of epoch *e*, nothing of an epoch below *e* is acted on by anyone for that
  server: the new leader's first command to a server ends the old leader's say over it.
- A deposed planner's own fold sees the later epoch (it reads ``commands``) and stops deciding
  (:func:`superseded`).

Example:

>>> marks: dict[str, int] = {}
>>> admit(marks, "h1", 7), admit(marks, "h1", 3), admit(marks, "h2", 3), admit(marks, "h1", None)
(True, False, True, True)
>>> marks, superseded(marks, 3), superseded(marks, 7)
({'h1': 7, 'h2': 3}, True, False)
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping


def admits(marks: Mapping[str, int], server: str, epoch: int | None) -> bool:
    """Whether a command of ``epoch`` to ``server`` is acted on, given the marks read so far (no change)."""
    return epoch is None or epoch >= marks.get(server, -1)


def admit(marks: MutableMapping[str, int], server: str, epoch: int | None) -> bool:
    """:func:`admits`, and an admitted command's epoch raises the server's mark."""
    if not admits(marks, server, epoch):
        return False
    if epoch is not None and epoch > marks.get(server, -1):
        marks[server] = epoch
    return True


def highest(marks: Mapping[str, int]) -> int | None:
    """The latest epoch any server was commanded in (None: no command carried one)."""
    return max(marks.values(), default=None)


def superseded(marks: Mapping[str, int], epoch: int | None) -> bool:
    """Whether a planner of ``epoch`` has been deposed, as far as the commands read show (a later epoch commanded
    some server). A planner that is superseded decides nothing more."""
    latest = highest(marks)
    return epoch is not None and latest is not None and latest > epoch
