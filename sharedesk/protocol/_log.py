"""The library's logger: structlog over the standard library logger ``sharedesk``.

What that means for an application: :mod:`sharedesk.logconfig`. It lives in ``protocol``
so that every layer may log; the pure folds in ``projection`` never do.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any, Final

import structlog

#: The standard library logger every line of sharedesk goes through.
LOGGER_NAME: Final = "sharedesk"


class _EventMessage(dict[str, Any]):
    # A record's message: the event dictionary, shown as ``event key=value ...``.

    def __str__(self) -> str:
        figures = " ".join(
            f"{key}={value!r}" for key, value in self.items() if key not in ("event", "exc_info")
        )
        event = str(self.get("event", ""))
        return f"{event} {figures}" if figures else event


def _to_record(
    logger: Any, method_name: str, event_dict: MutableMapping[str, Any]
) -> tuple[tuple[_EventMessage], dict[str, Any]]:
    # Last processor: hand the event to logging, as structlog's wrap_for_formatter does,
    # and put any exc_info on the record too, so a plain formatter prints the traceback.
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

    Its processors are fixed here (level filter, bound context, hand-off to :mod:`logging`):
    structlog's global configuration is not consulted, nor changed.
    """
    wrapped: structlog.stdlib.BoundLogger = structlog.wrap_logger(
        logging.getLogger(LOGGER_NAME),
        processors=list(_PROCESSORS),
        wrapper_class=structlog.stdlib.BoundLogger,
        context_class=dict,
        cache_logger_on_first_use=True,
    )
    return wrapped
