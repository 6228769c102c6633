"""Event ids.

Events an agent emits in response to an input carry ids derived from the
input's position, so a replay or a retried batch emits identical ids and a
consumer can drop the duplicates. Fresh ids for events that start a causal
chain come from the shell (``uuid4().hex``); this module draws no randomness.

>>> derived_event_id("segcoord.segments", 0, 42, 1) == derived_event_id("segcoord.segments", 0, 42, 1)
True
>>> len(derived_event_id("segcoord.segments", 0, 42, 1))
32
"""

from __future__ import annotations

import hashlib


def derived_event_id(topic: str, partition: int, offset: int, index: int) -> str:
    """A 32-hex-digit id, a pure function of (input topic, partition, offset, output index)."""
    text = f"{topic}\x00{partition}\x00{offset}\x00{index}".encode()
    return hashlib.blake2b(text, digest_size=16).hexdigest()
