"""Logging set-up for applications and the CLI: the one place sharedesk configures structlog.

Library code never configures logging: every module only calls
``structlog.get_logger()`` and logs dotted event names (``turn.committed``) with figures as
key/values. An application either configures structlog itself or calls
:func:`configure_logging` once at start-up (``sharedesk.cli`` does).

What is logged, by level:

- ``error``: an actor's handler failed unexpectedly (``actor.crashed``, with the
  traceback) or a session exceeded its restart intensity (``session.failed``).
- ``warning``: an actor that did not stop in time when the Hub closed.
- ``info``: hub lifecycle (``hub.opened``, ``hub.closed``) and committed turns
  (``turn.committed``, with counts, never message content).
- ``debug``: actor start and stop, passivation, projector rebuilds.

Each line logged while an actor handles a message carries ``session_id``, ``actor``,
``msg`` and, where known, ``viewer`` and ``run_id`` (bound with
``structlog.contextvars.bound_contextvars``; :func:`configure_logging` puts
``merge_contextvars`` first in the chain so they appear).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

import structlog

from sharedesk.protocol.errors import ValidationError

__all__ = ["configure_logging"]

_LEVELS: Final[Mapping[str, int]] = MappingProxyType(
    {
        "critical": logging.CRITICAL,
        "error": logging.ERROR,
        "warning": logging.WARNING,
        "info": logging.INFO,
        "debug": logging.DEBUG,
    }
)


def _level_number(level: str | int) -> int:
    if isinstance(level, bool):
        raise ValidationError(f"level must be a level name or number, got {level!r}")
    if isinstance(level, int):
        return level
    if isinstance(level, str) and level.lower() in _LEVELS:
        return _LEVELS[level.lower()]
    raise ValidationError(f"level must be one of {sorted(_LEVELS)} or an int, got {level!r}")


def configure_logging(json: bool = False, level: str | int = "info") -> None:
    """Configure structlog for an application that uses sharedesk.

    Lines go to standard error, filtered at ``level``, each with an ISO timestamp, the
    level and the context bound by the actors (``session_id``, ``viewer``, ``run_id``,
    ...). Calling it again replaces the previous configuration.

    Args:
        json: Render one JSON object per line (for log collectors) instead of the
            human-readable console format.
        level: The lowest level logged: ``"debug"``, ``"info"``, ``"warning"``,
            ``"error"``, ``"critical"`` (any case) or a :mod:`logging` level number.

    Raises:
        ValidationError: ``level`` is not a known level name or an int.

    Cost: O(1); no I/O until something is logged. Not thread-safe with concurrent
    logging (configure once, at start-up, as structlog recommends).
    """
    number = _level_number(level)
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info if json else structlog.dev.set_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(number),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
