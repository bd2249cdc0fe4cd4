"""How a Hub runs its actors (:class:`HubOptions`) and what it reports (:class:`HubStats`)."""

from __future__ import annotations

import math

import msgspec

from sharedesk.protocol.errors import ValidationError
from sharedesk.protocol.validation import check_int


class HubOptions(msgspec.Struct, frozen=True, kw_only=True):
    """How a Hub runs its actors.

    Attributes:
        ask_timeout: Longest wait for an actor's answer, in seconds (``ActorTimeout``).
        idle_timeout: Stop actors unused for this many seconds (``None``: never).
        max_active: Most actors running at once (least recently used stop first).
        max_restarts: Restarts of a session's actors allowed within ``restart_period``;
            one more marks the session failed.
        restart_period: The period of the restart intensity, in seconds.
        max_concurrent_runs: Passed to the run queue.
        max_queued_runs: Passed to the run queue.

    Raises:
        ValidationError: A value out of range.
    """

    ask_timeout: float = 30.0
    idle_timeout: float | None = None
    max_active: int = 1024
    max_restarts: int = 5
    restart_period: float = 10.0
    max_concurrent_runs: int = 1
    max_queued_runs: int = 100

    def __post_init__(self) -> None:
        for name in ("ask_timeout", "restart_period", "idle_timeout"):
            value = getattr(self, name)
            if (value is not None or name != "idle_timeout") and (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not (value > 0 and math.isfinite(value))  # NaN and infinity too
            ):
                raise ValidationError(f"{name} must be a positive, finite number, got {value!r}")
        check_int("max_active", self.max_active, minimum=3)
        check_int("max_concurrent_runs", self.max_concurrent_runs, minimum=1)
        check_int("max_queued_runs", self.max_queued_runs, minimum=1)
        check_int("max_restarts", self.max_restarts)


class HubStats(msgspec.Struct, frozen=True):
    """A snapshot of a Hub's actors.

    Attributes:
        active: Actors running.
        sessions: Session actors running.
        projectors: Projector actors running.
        sharing: Sharing actors running.
        failed: Sessions marked failed, sorted.
        restarts: Actor restarts since the Hub opened.
        passivated: Actors stopped by passivation since the Hub opened.
    """

    active: int
    sessions: int
    projectors: int
    sharing: int
    failed: list[str]
    restarts: int
    passivated: int
