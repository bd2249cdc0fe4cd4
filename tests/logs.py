"""Capture what sharedesk logs, as structlog's ``capture_logs`` does for structlog's own loggers.

sharedesk logs through the standard library logger ``sharedesk`` with a fixed processor
chain (see ``sharedesk.logconfig``), so structlog's ``capture_logs`` (which swaps the
global processors) does not see it; this helper listens on the logger instead.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sharedesk.logconfig import LOGGER_NAME


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.entries: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.msg
        entry = dict(message) if isinstance(message, dict) else {"event": record.getMessage()}
        entry["log_level"] = record.levelname.lower()
        self.entries.append(entry)


@contextmanager
def capture_logs() -> Iterator[list[dict[str, Any]]]:
    """Yield the event dicts sharedesk logs inside the block, at every level.

    Each holds the event, its key/values, the bound context and ``log_level``.
    """
    log = logging.getLogger(LOGGER_NAME)
    handler = _Capture()
    level = log.level
    log.setLevel(logging.DEBUG)
    log.addHandler(handler)
    try:
        yield handler.entries
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
