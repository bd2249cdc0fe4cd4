"""Capture what sharedesk logs, as structlog's ``capture_logs`` does for structlog's own loggers.

sharedesk logs through the standard library logger ``sharedesk`` with a fixed processor
chain (see ``sharedesk.logconfig``), so structlog's ``capture_logs`` (which swaps the
global processors) does not see it; this helper listens on the logger instead.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sharedesk.logconfig import LOGGER_NAME


class Logged(list[dict[str, Any]]):
    """The event dicts logged so far; a test may wait for them to say something."""

    def __init__(self) -> None:
        super().__init__()
        self._changed = threading.Condition()

    def add(self, entry: dict[str, Any]) -> None:
        """Append ``entry`` (from any thread) and wake the waiters."""
        with self._changed:
            self.append(entry)
            self._changed.notify_all()

    def wait_for(self, condition: Callable[[], bool], timeout: float = 10.0) -> bool:
        """Wait until ``condition()`` holds, checking it now and after each entry logged.

        For a condition that changes just before something is logged (the Hub's
        ``hub.passivated``). Returns whether it held within ``timeout`` seconds.
        """
        with self._changed:
            return self._changed.wait_for(condition, timeout)


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.entries = Logged()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.msg
        entry = dict(message) if isinstance(message, dict) else {"event": record.getMessage()}
        entry["log_level"] = record.levelname.lower()
        self.entries.add(entry)


@contextmanager
def capture_logs() -> Iterator[Logged]:
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
