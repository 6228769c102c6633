"""Strict readers for JSON scalars, shared by the rules and the dynamic configuration.

Each reader names the path of the value in its error, e.g. ``rules.wiki[1].includeFuture:
expected true or false, got 'yes'``. They are stricter than Druid's Jackson, which coerces
scalars (``"2"`` to 2, ``"true"`` to true): here a number must be a JSON number and a flag a
JSON boolean, and ``bool`` never counts as an integer.

>>> read_int(3, "x", ValueError)
3
>>> read_int(True, "x", ValueError)
Traceback (most recent call last):
...
ValueError: x: expected an integer, got True
"""

from __future__ import annotations

#: Java's Integer.MAX_VALUE: the largest value of Druid's ``int`` settings.
JAVA_INT_MAX = 2_147_483_647
#: Java's Long.MAX_VALUE: the largest value of Druid's ``long`` settings.
JAVA_LONG_MAX = 9_223_372_036_854_775_807


def read_int(
    value: object, path: str, error: type[ValueError], *, minimum: int = 0, maximum: int = JAVA_INT_MAX
) -> int:
    """``value`` as an integer within ``[minimum, maximum]``, or ``error`` naming ``path``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise error(f"{path}: expected an integer, got {value!r}")
    if value < minimum:
        what = "a non-negative integer" if minimum == 0 else f"an integer of at least {minimum}"
        raise error(f"{path}: expected {what}, got {value}")
    if value > maximum:
        raise error(f"{path}: {value} exceeds the maximum {maximum}")
    return value


def read_bool(value: object, path: str, error: type[ValueError]) -> bool:
    """``value`` as a JSON boolean, or ``error`` naming ``path``."""
    if not isinstance(value, bool):
        raise error(f"{path}: expected true or false, got {value!r}")
    return value


def read_str(value: object, path: str, error: type[ValueError]) -> str:
    """``value`` as a non-empty string, or ``error`` naming ``path``."""
    if not isinstance(value, str):
        raise error(f"{path}: expected a string, got {value!r}")
    if not value:
        raise error(f"{path}: must not be empty")
    return value
