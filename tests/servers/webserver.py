"""Helpers of the web server's tests: a uvicorn server on 127.0.0.1, SSE parsing, Chromium.

The web tests need the ``web`` extra, ``playwright`` and Debian's ``chromium``; outside CI
a missing piece skips them with the reason, and with ``CI=true`` it fails them (as the
PostgreSQL tests do, tests/conftest.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tests.ci import unavailable

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def require_web() -> None:
    """Skip (fail under CI) unless the ``web`` extra is installed."""
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        unavailable(f"the web extra is not installed ({exc})")


@dataclass(frozen=True)
class SseEvent:
    """One server-sent event as a client sees it."""

    id: str | None
    event: str | None
    data: str


def sse_events(lines: Iterator[str]) -> Iterator[SseEvent]:
    """Parse server-sent events from a stream's lines (comments and retry skipped)."""
    fields: dict[str, str] = {}
    for line in lines:
        if line == "":
            if "data" in fields:
                yield SseEvent(fields.get("id"), fields.get("event"), fields["data"])
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")


def launch_chromium(playwright: Any) -> Any:
    """Launch Debian's chromium through playwright (skip, or fail under CI, if absent)."""
    if not os.path.exists(CHROMIUM):
        unavailable(f"{CHROMIUM} is not installed (apt-get install chromium)")
    try:
        return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    except Exception as exc:
        unavailable(f"chromium does not start: {exc}")
        raise
