"""A pytest plugin that runs the OpenAI Agents SDK's own tests on ``DeskSession``.

Loaded into a pytest run of the SDK's source distribution (``-p sharedesk_sdk_plugin``),
by ``tests/integrations/test_sdk_session_suite.py``. Options:

* ``--sharedesk-mode=sqlite`` leaves ``SQLiteSession`` as it is (the baseline);
  ``--sharedesk-mode=desk`` replaces the name ``SQLiteSession`` in every test module
  (and in ``agents``/``agents.memory``, for imports inside test functions) by a factory
  that builds a ``DeskSession`` on a fresh in-memory ``AsyncHub``. Sessions built with the
  same ``db_path`` in one test share one hub (as they share one SQLite file);
  ``":memory:"`` gets a hub of its own, as it gets a database of its own.
* ``--sharedesk-report=PATH`` writes ``{nodeid: {"outcome", "built", "desk"}}`` as
  JSON: ``built`` says whether the test constructed a real ``SQLiteSession`` (exactly
  that class, not a subclass), ``desk`` whether it constructed a replaced one.
* ``--sharedesk-select=PATH`` runs only the node ids listed in that JSON file.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import agents
import agents.memory
import pytest
from agents.memory import SessionSettings, SQLiteSession
from agents.memory.session_settings import coerce_session_settings

from sharedesk.actors.aio import AsyncHub
from sharedesk.actors.hub import Hub
from sharedesk.integrations.openai_agents import DeskSession
from sharedesk.protocol.authors import Agent

#: The agent every replaced session speaks for (the SDK's tests use one agent a session).
SESSION_AGENT = Agent(id="assistant", label="assistant")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sharedesk")
    group.addoption("--sharedesk-mode", choices=("sqlite", "desk"), default="sqlite")
    group.addoption("--sharedesk-report", default=None)
    group.addoption("--sharedesk-select", default=None)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_Suite(config), "sharedesk-suite")


def _open_hub() -> AsyncHub:
    """A fresh in-memory async hub (closed after the test)."""
    return AsyncHub(Hub.open(None))


class _Suite:
    """The plugin's state for one pytest run."""

    def __init__(self, config: pytest.Config) -> None:
        self.mode: str = config.getoption("--sharedesk-mode")
        self.report_path: str | None = config.getoption("--sharedesk-report")
        select: str | None = config.getoption("--sharedesk-select")
        self.selected: set[str] | None = (
            None if select is None else set(json.loads(Path(select).read_text()))
        )
        self.results: dict[str, dict[str, Any]] = {}
        self.current: str | None = None
        self.hubs: dict[str, AsyncHub] = {}
        self.anonymous: list[AsyncHub] = []
        self._patch_init()

    # -- building sessions --------------------------------------------------------------

    def _patch_init(self) -> None:
        """Note every ``SQLiteSession`` construction (without changing its type)."""
        real_init = SQLiteSession.__init__
        suite = self

        def init(session: SQLiteSession, *args: Any, **kwargs: Any) -> None:
            if type(session) is SQLiteSession:  # subclasses are other sessions
                suite.note("built")
            real_init(session, *args, **kwargs)

        SQLiteSession.__init__ = init  # type: ignore[method-assign,assignment]

    def note(self, what: str) -> None:
        """Mark the running test: ``"built"`` a real SQLiteSession, or a ``"desk"`` one."""
        if self.current is not None:
            self.results.setdefault(self.current, {})[what] = True

    def hub_for(self, db_path: str | Path, sessions_table: str, messages_table: str) -> AsyncHub:
        """The hub a replaced session with these SQLite arguments uses in this test."""
        if str(db_path) == ":memory:":
            fresh = _open_hub()
            self.anonymous.append(fresh)
            return fresh
        key = f"{Path(db_path).resolve()}|{sessions_table}|{messages_table}"
        if key not in self.hubs:
            self.hubs[key] = _open_hub()
        return self.hubs[key]

    def _factory(self) -> type[DeskSession]:
        suite = self

        class SQLiteDeskSession(DeskSession):
            """What ``SQLiteSession(...)`` builds in desk mode (a class, so tests may patch it)."""

            def __init__(
                self,
                session_id: str,
                db_path: str | Path = ":memory:",
                sessions_table: str = "agent_sessions",
                messages_table: str = "agent_messages",
                session_settings: SessionSettings | dict[str, Any] | None = None,
            ) -> None:
                suite.note("desk")
                settings = (
                    None if session_settings is None else coerce_session_settings(session_settings)
                )
                super().__init__(
                    suite.hub_for(db_path, sessions_table, messages_table),
                    session_id,
                    SESSION_AGENT,
                    session_settings=settings,
                )

        return SQLiteDeskSession

    # -- hooks --------------------------------------------------------------------------

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        if self.selected is not None:
            keep = [item for item in items if item.nodeid in self.selected]
            config.hook.pytest_deselected(items=[i for i in items if i not in keep])
            items[:] = keep
        if self.mode != "desk":
            return
        factory = self._factory()
        for module in {id(m): m for m in (getattr(i, "module", None) for i in items) if m}.values():
            if getattr(module, "SQLiteSession", None) is SQLiteSession:
                module.SQLiteSession = factory
        for package in (agents, agents.memory):  # for imports inside test functions
            vars(package)["SQLiteSession"] = factory

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        self.current = item.nodeid
        self.results.setdefault(item.nodeid, {})
        yield
        self.current = None
        self._close_hubs()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        entry = self.results.setdefault(report.nodeid, {})
        if report.failed:
            entry["outcome"] = "failed"
        elif report.skipped and entry.get("outcome") != "failed":
            entry["outcome"] = "skipped"
        elif report.when == "call" and "outcome" not in entry:
            entry["outcome"] = "passed"

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.report_path is None:
            return
        report = {
            nodeid: {
                "outcome": entry.get("outcome", "failed"),
                "built": entry.get("built", False),
                "desk": entry.get("desk", False),
            }
            for nodeid, entry in self.results.items()
        }
        Path(self.report_path).write_text(json.dumps(report, indent=1, sort_keys=True))

    def _close_hubs(self) -> None:
        hubs = [*self.hubs.values(), *self.anonymous]
        self.hubs.clear()
        self.anonymous.clear()
        for hub in hubs:
            try:
                asyncio.run(hub.close())
            except Exception as exc:  # a test left its loop in a state we cannot reuse
                sys.stderr.write(f"sharedesk plugin: closing a hub failed: {exc!r}\n")
