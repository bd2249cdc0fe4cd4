"""Counts the cases each fault test module ran, for the README's Reliability table.

Every fault test calls ``fault_counter.count(label)`` once per case it ran (a
hypothesis test: once per generated example). At the end of the session pytest prints
one line per module and label in its terminal summary, under "fault cases".
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator

import pytest


class FaultCounter:
    """Cases run, by (test module, label)."""

    def __init__(self) -> None:
        self.cases: Counter[tuple[str, str]] = Counter()

    def count(self, label: str, cases: int = 1) -> None:
        """Record ``cases`` cases of ``label`` for the module of the running test."""
        current = os.environ.get("PYTEST_CURRENT_TEST", "?")
        self.cases[(current.split("::", 1)[0], label)] += cases


_KEY = pytest.StashKey[FaultCounter]()


@pytest.fixture(scope="session")
def fault_counter(request: pytest.FixtureRequest) -> Iterator[FaultCounter]:
    counter = request.config.stash.setdefault(_KEY, FaultCounter())
    yield counter


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    counter = terminalreporter.config.stash.get(_KEY, None)
    if counter is None or not counter.cases:
        return
    terminalreporter.section("fault cases")
    for (module, label), cases in sorted(counter.cases.items()):
        terminalreporter.write_line(f"{module}: {label}: {cases}")
