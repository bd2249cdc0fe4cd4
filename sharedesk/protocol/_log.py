"""The library's logger: structlog over the standard library logger ``sharedesk``.

Every module of sharedesk logs through :func:`logger` (see :mod:`sharedesk.logconfig`
for what that means for an application). It lives in ``protocol`` so that every layer
(``runs`` included, which imports only ``protocol`` and ``projection``) may log; the
pure folds in ``projection`` never do.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any, Final

import structlog

__all__ = ["LOGGER_NAME", "logger"]

#: The standard library logger every line of sharedesk goes through.
LOGGER_NAME: Final = "sharedesk"


class _EventMessage(dict[str, Any]):
    """A record's message: the event dictionary, shown as ``event key=value ...``."""

    def __str__(self) -> str:
        figures = " ".join(
            f"{key}={value!r}" for key, value in self.items() if key not in ("event", "exc_info")
        )
        event = str(self.get("event", ""))
        return f"{event} {figures}" if figures else event


def _to_record(
    logger: Any, method_name: str, event_dict: MutableMapping[str, Any]
) -> tuple[tuple[_EventMessage], dict[str, Any]]:
    """Last processor: hand the event to :mod:`logging` (as ``wrap_for_formatter`` does).

    The extras are those :class:`structlog.stdlib.ProcessorFormatter` looks for; an
    ``exc_info`` goes on the record too, so a plain formatter prints the traceback.
    """
    kwargs: dict[str, Any] = {"extra": {"_logger": logger, "_name": method_name}}
    exc_info = event_dict.get("exc_info")
    if exc_info:
        if exc_info is True:
            exc_info = sys.exc_info()
            event_dict["exc_info"] = exc_info
        kwargs["exc_info"] = exc_info
    return (_EventMessage(event_dict),), kwargs


_PROCESSORS: Final = (
    structlog.stdlib.filter_by_level,  # first: a dropped level costs one level check
    structlog.contextvars.merge_contextvars,
    _to_record,
)


def logger() -> structlog.stdlib.BoundLogger:
    """Return a structlog logger over the standard library logger ``sharedesk``.

    Its processors are fixed here (level filter, the context bound with
    ``bound_contextvars``, hand-off to :mod:`logging`); structlog's global
    configuration is not consulted, so the application's set-up never changes what
    sharedesk logs, nor sharedesk the application's.

    Cost: O(1); nothing is resolved until the first line is logged.
    """
    wrapped: structlog.stdlib.BoundLogger = structlog.wrap_logger(
        logging.getLogger(LOGGER_NAME),
        processors=list(_PROCESSORS),
        wrapper_class=structlog.stdlib.BoundLogger,
        context_class=dict,
        cache_logger_on_first_use=True,
    )
    return wrapped
