"""``python -m bench adk`` runs in its tiny ``--quick`` configuration (the harness, not speed)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from tests.bench.test_scenarios import labels, run_bench


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """``main`` configures structlog as a program does; give other tests theirs back."""
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


def test_the_adk_bench_measures_the_desk_and_both_adk_services(tmp_path: Path) -> None:
    report = run_bench(tmp_path, "adk")

    assert {
        "adk desk append_event c=10",
        "adk sqlite append_event c=10",
        "adk database append_event c=10",
        "adk desk get_session long",
        "adk database get_session long",
        "adk desk list_sessions",
        "adk database list_sessions",
        "adk pydantic Event.model_validate x20",
    } <= labels(report)
    assert {
        "adk-append-vs-faster-adk-service",
        "adk-get-session-vs-database",
        "adk-list-sessions-vs-database",
        "adk-get-session-flat",
    } == {t.name for t in report.targets}
    assert all(t.value is not None for t in report.targets)
