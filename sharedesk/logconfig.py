"""Logging: sharedesk logs through the standard library logger ``sharedesk``, silently by default.

Library code logs through :func:`logger`, a structlog logger over that logger with its own
processors (structlog's global configuration is neither used nor changed); what is logged
at each level is ``docs/logging.md``'s. :func:`configure_logging` is for applications (and
``sharedesk.cli``) that want sharedesk's own format.
"""

from __future__ import annotations

import logging
import sys
from typing import Final

import structlog

from sharedesk.protocol._log import LOGGER_NAME, logger
from sharedesk.protocol.errors import ValidationError

__all__ = ["LOGGER_NAME", "configure_logging", "logger"]


class _Handler(logging.StreamHandler):  # type: ignore[type-arg]
    pass  # the handler configure_logging puts on the sharedesk logger (and replaces)


#: The level names :func:`configure_logging` takes (in any case).
_LEVELS: Final = ("critical", "error", "warning", "info", "debug")


def configure_logging(json: bool = False, level: str | int = "info") -> None:
    """Configure structlog and the ``sharedesk`` logger for an application that uses sharedesk.

    Sharedesk's lines (its logger stops propagating, so none is printed twice) and the
    application's structlog lines go to standard error, filtered at ``level``, each with
    an ISO timestamp, the level and the bound context. Calling it again replaces the
    configuration. The console format shows strings as Python literals (escaped).

    Args:
        json: Render one JSON object per line (for log collectors) instead of the
            human-readable console format.
        level: The lowest level logged: ``"debug"``, ``"info"``, ``"warning"``,
            ``"error"``, ``"critical"`` (any case) or a :mod:`logging` level number.

    Raises:
        ValidationError: ``level`` is not a known level name or an int.

    Not thread-safe with concurrent logging: configure once, at start-up.
    """
    known = isinstance(level, str) and level.lower() in _LEVELS
    if isinstance(level, bool) or not (known or isinstance(level, int)):
        raise ValidationError(f"level must be one of {sorted(_LEVELS)} or an int, got {level!r}")
    number = level if isinstance(level, int) else logging.getLevelNamesMapping()[level.upper()]
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
