"""Option helpers shared by the scenarios.

Option defaults are ``None`` in argparse and resolved by :func:`pick`, so a scenario can
give a normal default and a ``--quick`` one, and an option given on the command line
always wins.
"""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


def pick(given: T | None, default: T, quick: T, is_quick: bool) -> T:
    """Return the option as given, else the quick or normal default."""
    if given is not None:
        return given
    return quick if is_quick else default


def int_list(text: str) -> list[int]:
    """Parse ``"1,4,16"`` (``_`` allowed as a digit separator) into ``[1, 4, 16]``."""
    values = [int(part.strip().replace("_", "")) for part in text.split(",") if part.strip()]
    if not values or any(v <= 0 for v in values):
        raise ValueError(f"expected a comma-separated list of positive ints, got {text!r}")
    return values
