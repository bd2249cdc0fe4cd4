"""``python -m bench mcp --quick``: every figure of the MCP scenario is measured."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.pgserver import ThrowawayPostgres
from tests.bench.test_scenarios import _restore_logging, labels, run_bench

pytestmark = pytest.mark.slow

__all__ = ["_restore_logging"]  # the fixture, used here too


class TestMcpScenario:
    def test_a_quick_run_measures_round_trips_agents_wakes_and_the_idle_cost(
        self, tmp_path: Path, postgres_server: ThrowawayPostgres
    ) -> None:
        report = run_bench(tmp_path, "mcp", "--agents", "2", "--dsn", postgres_server.dsn)

        assert (
            {
                "sharedesk mcp turn+commit",
                "AsyncHub turn+commit",
                "mcp 2 agents",
                "wake lmdb",
                "wake lmdb quiet",
                "wake postgres",
            },
            {
                "mcp-turn-commit-median",
                "wake-lmdb-median",
                "wake-lmdb-quiet-median",
                "wake-postgres-median",
                "lmdb-follow-idle-cpu",
            },
        ) == (labels(report), {t.name for t in report.targets})
