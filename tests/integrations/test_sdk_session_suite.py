"""Acceptance: the OpenAI Agents SDK's own session tests pass on ``DeskSession``.

The source distribution of the installed ``openai-agents`` (it ships ``tests/``) is
downloaded from the package index once and cached (``.venv/sharedesk-sdk-suite``, or
``$SHAREDESK_SDK_CACHE``). Its ``tests/memory/`` and every other test file that builds a
``SQLiteSession`` run twice in a child pytest with ``sharedesk_sdk_plugin``:

1. as they are (the baseline), recording which tests construct a real ``SQLiteSession``
   (the *reachable* tests) and which pass; the baseline's report is cached with the
   download, keyed by the SDK version, the plugin's source and the installed packages;
2. with ``SQLiteSession`` replaced by ``DeskSession`` on a fresh in-memory async hub,
   running only the reachable tests that passed in the baseline (never cached).

Every reachable test that passed in the baseline must pass on ``DeskSession``, except
those in :data:`EXCLUDED`, each with the reason it reaches into SQLite internals; an
exclusion that names no reachable test, or a test that passes after all, fails too, so
the list stays exact. The figures of the last run are written to ``summary.json`` in the
cache directory. Nothing here skips: without the index (or a cached download) it fails.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any, Final

import pytest

REPO: Final = Path(__file__).resolve().parents[2]
PLUGIN_DIR: Final = Path(__file__).resolve().parent / "sdk_suite"
SDK_VERSION: Final = importlib.metadata.version("openai-agents")
_RUN_TIMEOUT_S: Final = 900

_CONNECTIONS = "inspects SQLiteSession's per-thread sqlite3 connection bookkeeping"
_CORRUPT = "writes corrupt JSON rows into the agent_messages table with sqlite3"
_FAILED_TXN = "injects failures into SQLiteSession's sqlite3 transaction and connection"
_SNAPSHOT = (
    "exercises SQLiteSession._get_compaction_snapshot, the SDK's private atomic "
    "suffix replacement that only SQLiteSession provides"
)
_SUFFIX = (
    "compacts a suffix of the history: OpenAIResponsesCompactionSession does that only "
    "through SQLiteSession._get_compaction_snapshot (private; None for any other class), "
    "and without it skips automatic compaction unless the whole stored history matches "
    "the latest model exchange (some of these tests also open backend.db_path with "
    "sqlite3 or patch backend._insert_items)"
)
_POP_TXN = (
    "EncryptedSession authenticates a pop inside SQLiteSession's DELETE transaction "
    "(_pop_item_with_validation), a private path only SQLiteSession provides"
)

#: Reachable tests that cannot pass on another backend, each with its reason (node ids
#: without parameters).
EXCLUDED: Final[dict[str, str]] = {
    "tests/memory/test_session.py::test_sqlite_session_close_closes_worker_thread_connections": (
        _CONNECTIONS
    ),
    "tests/memory/test_session.py::test_sqlite_session_close_retries_quarantined_connection": (
        _CONNECTIONS
    ),
    "tests/memory/test_session.py::test_sqlite_session_closes_retired_connections_before_the_next_allocation": (  # noqa: E501
        _CONNECTIONS
    ),
    "tests/memory/test_session.py::test_sqlite_session_keeps_connections_of_live_worker_threads": (
        _CONNECTIONS
    ),
    "tests/memory/test_session.py::test_sqlite_session_reaps_connections_from_exited_worker_threads": (  # noqa: E501
        _CONNECTIONS
    ),
    "tests/memory/test_session.py::test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome": (  # noqa: E501
        _CONNECTIONS
    ),
    "tests/memory/test_session.py::test_sqlite_session_file_lock_is_shared_across_instances": (
        "inspects SQLiteSession's class-level file lock table"
    ),
    "tests/memory/test_session.py::test_sqlite_session_closed_rejects_empty_add_items": (
        "matches SQLiteSession's message text 'SQLiteSession is closed' (DeskSession raises "
        "the same RuntimeError, saying 'DeskSession is closed')"
    ),
    "tests/memory/test_session.py::test_sqlite_session_get_items_limit_skips_corrupt_newest_rows": (
        _CORRUPT
    ),
    "tests/memory/test_session.py::test_sqlite_session_get_items_session_settings_limit_skips_corrupt_rows": (  # noqa: E501
        _CORRUPT
    ),
    "tests/memory/test_session.py::test_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows": (  # noqa: E501
        _CORRUPT
    ),
    "tests/memory/test_session.py::test_sqlite_session_pop_item_skips_corrupt_most_recent": (
        _CORRUPT
    ),
    "tests/memory/test_session.py::test_sqlite_session_failed_add_items_releases_write_lock": (
        _FAILED_TXN
    ),
    "tests/memory/test_session.py::test_sqlite_session_failed_clear_session_rolls_back": (
        _FAILED_TXN
    ),
    "tests/memory/test_session.py::test_sqlite_session_failed_pop_item_releases_write_lock": (
        _FAILED_TXN
    ),
    "tests/memory/test_session.py::test_sqlite_session_rollback_failure_evicts_connection": (
        _FAILED_TXN
    ),
    "tests/memory/test_openai_responses_compaction_session.py::TestOpenAIResponsesCompactionSession::test_settled_clear_failure_invalidates_response_chain": (  # noqa: E501
        _FAILED_TXN
    ),
    "tests/memory/test_openai_responses_compaction_session.py::TestOpenAIResponsesCompactionSession::test_settled_pop_failure_invalidates_response_chain": (  # noqa: E501
        _FAILED_TXN
    ),
    "tests/test_run_impl_resume_paths.py::test_handoff_resume_after_cancelled_compaction_commits": (
        "patches SQLiteSession._insert_items to fail inside its transaction"
    ),
    "tests/memory/test_openai_responses_compaction_session.py::TestOpenAIResponsesCompactionSession::test_automatic_compaction_rollback_budget": (  # noqa: E501
        _SNAPSHOT
    ),
    "tests/memory/test_compaction_model_visibility.py::test_automatic_compaction_does_not_reload_unbounded_hidden_history": (  # noqa: E501
        _SNAPSHOT
    ),
    "tests/memory/test_compaction_model_visibility.py::test_backend_read_limit_cannot_hide_retained_history_from_compaction": (  # noqa: E501
        _SNAPSHOT
    ),
    "tests/memory/test_compaction_model_visibility.py::test_expired_read_overhead_does_not_authorize_hidden_history": (  # noqa: E501
        _SNAPSHOT
    ),
    "tests/extensions/memory/test_encrypt_session.py::test_encrypted_compaction_skips_unencrypted_stored_history": (  # noqa: E501
        _SNAPSHOT
    ),
    # Reachable since aiosqlite is installed (the adk extra brings it); the file's
    # test_partial_previous_response_mode_preserves_history passes on the desk.
    "tests/memory/test_compaction_suffix.py::test_cancelled_suffix_transaction_settles_before_newer_append": _SUFFIX,  # noqa: E501
    "tests/memory/test_compaction_suffix.py::test_expired_prefix_does_not_block_full_live_window": _SUFFIX,  # noqa: E501
    "tests/memory/test_compaction_suffix.py::test_failed_encrypted_suffix_transaction_preserves_original_tokens": _SUFFIX,  # noqa: E501
    "tests/memory/test_compaction_suffix.py::test_new_backend_write_invalidates_snapshot": _SUFFIX,
    "tests/memory/test_compaction_suffix.py::test_partial_compaction_does_not_split_tool_call_and_output": _SUFFIX,  # noqa: E501
    "tests/memory/test_compaction_suffix.py::test_partial_compaction_preserves_reasoning_and_its_follower": _SUFFIX,  # noqa: E501
    "tests/memory/test_compaction_suffix.py::test_prefix_cleanup_stops_before_retained_history": _SUFFIX,  # noqa: E501
    "tests/memory/test_compaction_suffix.py::test_repeated_ttl_bursts_do_not_accumulate_expired_rows": _SUFFIX,  # noqa: E501
    "tests/memory/test_compaction_suffix.py::test_suffix_transaction_rolls_back_failed_insert": _SUFFIX,  # noqa: E501
    "tests/memory/test_compaction_suffix.py::test_unverifiable_rows_inside_snapshot_are_retained": _SUFFIX,  # noqa: E501
    "tests/extensions/memory/test_encrypt_session.py::test_encrypted_pop_authentication_is_atomic_with_concurrent_mutations": (  # noqa: E501
        _POP_TXN
    ),
    "tests/extensions/memory/test_encrypt_session.py::test_encrypted_pop_cancellation_waits_for_authentication_rollback": (  # noqa: E501
        _POP_TXN
    ),
    "tests/extensions/memory/test_encrypt_session.py::test_encrypted_pop_rechecks_authentication_after_expired_tail": (  # noqa: E501
        _POP_TXN
    ),
    "tests/extensions/memory/test_encrypt_session.py::test_encrypted_pop_wrong_key_preserves_recoverable_history": (  # noqa: E501
        _POP_TXN
    ),
    "tests/extensions/memory/test_encrypt_session.py::test_encrypted_pop_wrong_key_preserves_row_identity": (  # noqa: E501
        _POP_TXN
    ),
}


def base_id(nodeid: str) -> str:
    """A node id without its parameters (``test_x[a-b]`` -> ``test_x``)."""
    return re.sub(r"\[.*\]$", "", nodeid)


def cache_dir() -> Path:
    """Where the download, the extracted sources and the baseline report are kept."""
    configured = os.environ.get("SHAREDESK_SDK_CACHE")
    path = Path(configured) if configured else REPO / ".venv" / "sharedesk-sdk-suite"
    path.mkdir(parents=True, exist_ok=True)
    return path


def sdk_sources(cache: Path) -> Path:
    """Download (once) and extract the sdist of the installed SDK; return its root."""
    root = cache / f"openai_agents-{SDK_VERSION}"
    if (root / "tests" / "memory").is_dir():
        return root
    archive = cache / f"openai_agents-{SDK_VERSION}.tar.gz"
    if not archive.exists():
        subprocess.run(
            [
                *(sys.executable, "-m", "pip", "download", "--quiet"),
                *("--no-binary", ":all:", "--no-deps", "--dest", str(cache)),
                f"openai-agents=={SDK_VERSION}",
            ],
            check=True,
            timeout=_RUN_TIMEOUT_S,
        )
    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):  # Python 3.11.4+: refuse unsafe members
            tar.extractall(cache, filter="data")
        else:  # pragma: no cover - older 3.11 patch releases
            tar.extractall(cache)
    return root


def suite_files(root: Path) -> list[str]:
    """``tests/memory/`` and every other test file of the sdist that builds a SQLiteSession."""
    files = {"tests/memory"}
    for path in sorted((root / "tests").rglob("test_*.py")):
        if "SQLiteSession(" in path.read_text(encoding="utf-8"):
            relative = path.relative_to(root).as_posix()
            if not relative.startswith("tests/memory/"):
                files.add(relative)
    return sorted(files)


def run_sdk_tests(
    root: Path, mode: str, report: Path, select: list[str] | None = None
) -> dict[str, dict[str, Any]]:
    """Run the suite's files in a child pytest with the plugin; return its report."""
    args = [
        *(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"),
        *("-p", "sharedesk_sdk_plugin", f"--sharedesk-mode={mode}"),
        f"--sharedesk-report={report}",
    ]
    if select is not None:
        selection = report.with_suffix(".select.json")
        selection.write_text(json.dumps(select))
        args.append(f"--sharedesk-select={selection}")
    env = {**os.environ, "PYTHONPATH": str(PLUGIN_DIR), "OPENAI_AGENTS_DISABLE_TRACING": "1"}
    env.pop("PYTEST_ADDOPTS", None)
    subprocess.run(
        [*args, *suite_files(root)],
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=_RUN_TIMEOUT_S,
        check=False,  # failing tests are read from the report
    )
    result: dict[str, dict[str, Any]] = json.loads(report.read_text())
    return result


def baseline(root: Path, cache: Path) -> dict[str, dict[str, Any]]:
    """The baseline report, cached by SDK version, plugin source and installed packages.

    The packages count because the SDK's tests skip themselves when an optional one is
    missing (``aiosqlite``, ``cryptography``): a venv that gains one has more reachable tests.
    """
    plugin = (PLUGIN_DIR / "sharedesk_sdk_plugin.py").read_bytes()
    installed = sorted(
        f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions()
    )
    key = hashlib.sha256(SDK_VERSION.encode() + plugin + "\n".join(installed).encode()).hexdigest()[
        :16
    ]
    report = cache / f"baseline-{key}.json"
    if report.exists():
        cached: dict[str, dict[str, Any]] = json.loads(report.read_text())
        return cached
    for stale in cache.glob("baseline-*.json"):
        stale.unlink()
    partial = cache / f"baseline-{key}.partial"
    result = run_sdk_tests(root, "sqlite", partial)
    partial.replace(report)
    return result


class SuiteRun:
    """Both runs' reports and what follows from them."""

    def __init__(self, base: dict[str, dict[str, Any]], desk: dict[str, dict[str, Any]]) -> None:
        self.base = base
        self.desk = desk
        self.reachable = sorted(
            nodeid
            for nodeid, entry in base.items()
            if entry["built"] and entry["outcome"] == "passed"
        )
        self.passed = [n for n in self.reachable if self.outcome(n) == "passed"]

    def outcome(self, nodeid: str) -> str:
        entry = self.desk.get(nodeid)
        if entry is None or not entry["desk"]:
            return "not run on DeskSession"
        return str(entry["outcome"])


@pytest.fixture(scope="module")
def suite() -> SuiteRun:
    """The SDK's session tests, run on SQLiteSession (cached) and on DeskSession."""
    cache = cache_dir()
    root = sdk_sources(cache)
    base = baseline(root, cache)
    reachable = sorted(n for n, e in base.items() if e["built"] and e["outcome"] == "passed")
    desk = run_sdk_tests(root, "desk", cache / "desk.json", select=reachable)
    run = SuiteRun(base, desk)
    summary = {
        "sdk_version": SDK_VERSION,
        "reachable": len(run.reachable),
        "passed_on_desk_session": len(run.passed),
        "excluded": sum(1 for n in run.reachable if base_id(n) in EXCLUDED),
    }
    (cache / "summary.json").write_text(json.dumps(summary, indent=1))
    return run


class TestSdkSessionSuite:
    def test_the_sdk_ships_session_tests_that_build_a_sqlite_session(self, suite: SuiteRun) -> None:
        assert len(suite.reachable) >= 100

    def test_every_reachable_sdk_test_passes_on_desk_session_unless_excluded(
        self, suite: SuiteRun
    ) -> None:
        failing = {
            nodeid: suite.outcome(nodeid)
            for nodeid in suite.reachable
            if base_id(nodeid) not in EXCLUDED and suite.outcome(nodeid) != "passed"
        }

        assert {} == failing

    def test_every_exclusion_names_a_reachable_test_that_fails_on_desk_session(
        self, suite: SuiteRun
    ) -> None:
        reachable = {base_id(n) for n in suite.reachable}
        failing = {base_id(n) for n in suite.reachable if suite.outcome(n) != "passed"}
        stale = sorted(name for name in EXCLUDED if name not in reachable)
        passing = sorted(name for name in EXCLUDED if name in reachable and name not in failing)

        assert ([], []) == (stale, passing)
