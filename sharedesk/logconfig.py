"""Logging: sharedesk logs through the standard library logger ``sharedesk``, silently by default.

Library code never configures logging, neither :mod:`logging` nor structlog's global
configuration: every module logs through :func:`logger`, a structlog logger wrapping
``logging.getLogger("sharedesk")`` with its own fixed processor chain (structlog's stdlib
integration, passed to ``structlog.wrap_logger``, so the application's structlog set-up
is neither used nor changed). The package adds a ``NullHandler`` to that logger, so until
the application configures logging nothing is printed: a level below the logger's
effective level (``WARNING`` by default) is dropped first, and nothing that passes goes
to standard output or standard error. An application that configures :mod:`logging`
(``logging.basicConfig``, ``dictConfig``, ...) gets sharedesk's lines in its handlers,
filtered by its levels; one that wants sharedesk's own format calls
:func:`configure_logging` once at start-up (``sharedesk.cli`` does).

Each record's message is the event and its key/values (``turn.committed watermark=3``),
so any :class:`logging.Formatter` shows it readably; the message is also the event
dictionary itself, so a :class:`structlog.stdlib.ProcessorFormatter` (as
:func:`configure_logging` installs) renders it as structured data.

What is logged, by level:

- ``error``: an actor's handler failed unexpectedly (``actor.crashed``, with the
  traceback; ``actor.tell_failed`` for a told message, which has no caller to hand the
  error to) or a session exceeded its restart intensity (``session.failed``).
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

from sharedesk.protocol._log import LOGGER_NAME, logger
from sharedesk.protocol.errors import ValidationError

__all__ = ["LOGGER_NAME", "configure_logging", "logger"]


class _Handler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler :func:`configure_logging` puts on the ``sharedesk`` logger."""


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
    """Configure structlog and the ``sharedesk`` logger for an application that uses sharedesk.

    Lines go to standard error, filtered at ``level``, each with an ISO timestamp, the
    level and the context bound by the actors (``session_id``, ``viewer``, ``run_id``,
    ...): sharedesk's own (the ``sharedesk`` logger gets a handler of its own and no
    longer propagates, so they are not printed twice) and the application's structlog
    lines. Calling it again replaces the previous configuration. In the console format
    string values are shown as Python literals, so control characters in them (a stored
    id or label) are escaped.

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
        # repr of strings: a stored id or label in a value never reaches the terminal raw
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty(), repr_native_str=True)
    )
    decorate: list[structlog.typing.Processor] = [
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
        structlog.processors.format_exc_info if json else structlog.dev.set_exc_info,
    ]
    handler = _Handler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                *decorate,
                renderer,
            ],
            foreign_pre_chain=[structlog.contextvars.merge_contextvars],
        )
    )
    ours = logging.getLogger(LOGGER_NAME)
    for old in [h for h in ours.handlers if isinstance(h, _Handler)]:
        ours.removeHandler(old)
    ours.addHandler(handler)
    ours.setLevel(number)
    ours.propagate = False
    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, *decorate, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(number),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
