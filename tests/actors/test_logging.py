"""Logging: dotted events with the actor's context bound, no content at INFO; configure_logging."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from sharedesk.actors import Hub, HubOptions
from sharedesk.logconfig import configure_logging
from sharedesk.protocol import Agent, Person, ValidationError
from sharedesk.protocol.errors import ActorCrashed
from tests.actors.conftest import HubFactory
from tests.actors.faults import FaultyStore
from tests.logs import capture_logs

ANA = Person(id="ana", label="Ana")
BOT = Agent(id="bot", label="Bot")
EVE = Agent(id="eve", label="Eve")
SECRET = "the secret plan"


@pytest.fixture
def fresh_structlog() -> Iterator[None]:
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()


class TestActorLogs:
    def test_a_committed_turn_logs_turn_committed_with_its_context(
        self, open_hub: HubFactory
    ) -> None:
        hub = open_hub()
        hub.session("desk").post(ANA, "question")
        with capture_logs() as logs:
            hub.turn("desk", BOT).commit(SECRET)

        committed = [e for e in logs if e["event"] == "turn.committed"]
        assert [("info", "desk", "agent:bot", 2)] == [
            (e["log_level"], e["session_id"], e["viewer"], e["reply_sequence"]) for e in committed
        ]

    def test_no_message_content_is_logged_at_info_or_above(self, open_hub: HubFactory) -> None:
        hub = open_hub()
        with capture_logs() as logs:
            hub.session("desk").post(ANA, SECRET)
            hub.view("desk", BOT)
            hub.turn("desk", BOT).commit(SECRET)

        loud = [e for e in logs if e["log_level"] not in ("debug",)]
        assert [] == [e for e in loud if SECRET in repr(e)]

    def test_each_message_logs_with_its_own_viewer(self, open_hub: HubFactory) -> None:
        hub = open_hub()
        with capture_logs() as logs:
            hub.turn("desk", BOT)
            hub.turn("desk", EVE)

        planned = [e["viewer"] for e in logs if e["event"] == "turn.planned"]
        assert ["agent:bot", "agent:eve"] == planned

    def test_a_crash_logs_actor_crashed_with_the_viewer_of_the_request(self) -> None:
        store = FaultyStore()
        store.fail["get_sharing_state"] = 1
        hub = Hub(store, HubOptions())
        try:
            with capture_logs() as logs, pytest.raises(ActorCrashed):
                hub.turn("desk", BOT)
        finally:
            hub.close()

        crashed = [e for e in logs if e["event"] == "actor.crashed"]
        assert [("error", "desk", "sharing", "agent:bot")] == [
            (e["log_level"], e["session_id"], e["actor"], e["viewer"]) for e in crashed
        ]

    def test_context_bound_for_one_message_does_not_leak_into_the_caller(
        self, open_hub: HubFactory
    ) -> None:
        hub = open_hub()
        hub.turn("desk", BOT).commit()

        assert {} == structlog.contextvars.get_contextvars()


@pytest.mark.usefixtures("fresh_structlog")
class TestConfigureLogging:
    def test_json_lines_go_to_stderr_with_level_and_timestamp(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        configure_logging(json=True, level="info")
        structlog.get_logger().info("turn.committed", watermark=3)

        line = json.loads(capsys.readouterr().err.strip().splitlines()[-1])

        assert ("turn.committed", "info", 3, True) == (
            line["event"],
            line["level"],
            line["watermark"],
            "timestamp" in line,
        )

    def test_events_below_the_level_are_dropped(self, capsys: pytest.CaptureFixture[str]) -> None:
        configure_logging(json=True, level="warning")
        structlog.get_logger().info("turn.committed")

        assert "" == capsys.readouterr().err

    def test_bound_context_appears_in_every_line(self, capsys: pytest.CaptureFixture[str]) -> None:
        configure_logging(json=True, level="debug")
        with structlog.contextvars.bound_contextvars(session_id="desk"):
            structlog.get_logger().debug("actor.started")

        assert "desk" == json.loads(capsys.readouterr().err.strip())["session_id"]

    def test_console_format_is_human_readable(self, capsys: pytest.CaptureFixture[str]) -> None:
        configure_logging(level=20)
        structlog.get_logger().info("hub.opened", path="x")

        assert "hub.opened" in capsys.readouterr().err

    @pytest.mark.parametrize("level", ["loud", True, None])
    def test_an_unknown_level_is_refused(self, level: object) -> None:
        with pytest.raises(ValidationError):
            configure_logging(level=level)  # type: ignore[arg-type]


USE_A_HUB = """
import logging, sys
import structlog
{setup}
from sharedesk import Agent, Event, Hub, HubOptions, Person, Text
from sharedesk.protocol.errors import ActorCrashed
from tests.actors.faults import FaultyStore

ana, bot = Person(id="ana", label="Ana"), Agent(id="bot", label="Bot")
with Hub.open() as hub:
    hub.session("desk").post(ana, "hello")
    hub.view("desk", bot)
    hub.turn("desk", bot).commit("hi")
store = FaultyStore()
store.fail["get_sharing_state"] = 1
with Hub(store, HubOptions()) as hub:
    try:
        hub.turn("desk", bot)  # logs actor.crashed at error level
    except ActorCrashed:
        pass
print(structlog.is_configured(), file=sys.stderr if {to_stderr} else sys.stdout)
"""


def run_child(setup: str = "", *, to_stderr: bool = True) -> tuple[str, str]:
    root = Path(__file__).resolve().parents[2]
    script = USE_A_HUB.format(setup=setup, to_stderr=to_stderr)
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout, done.stderr


class TestSilentByDefault:
    def test_nothing_reaches_stdout_or_stderr_until_the_application_configures_logging(
        self,
    ) -> None:
        out, err = run_child()

        assert ("", "False\n") == (out, err)

    def test_an_application_at_warning_gets_no_debug_or_info_line_and_nothing_on_stdout(
        self,
    ) -> None:
        out, err = run_child("logging.basicConfig(level=logging.WARNING)")
        lines = err.splitlines()

        assert ("", [], True) == (
            out,
            [line for line in lines if line.startswith(("DEBUG", "INFO"))],
            any(line.startswith("ERROR:sharedesk:actor.crashed") for line in lines),
        )

    def test_an_application_at_debug_gets_readable_lines_with_their_context(self) -> None:
        _, err = run_child("logging.basicConfig(level=logging.DEBUG)")

        assert any(
            line.startswith("INFO:sharedesk:turn.committed") and "session_id='desk'" in line
            for line in err.splitlines()
        )

    def test_the_applications_structlog_configuration_is_left_alone(self) -> None:
        setup = "structlog.configure(processors=[structlog.processors.KeyValueRenderer()])"
        out, err = run_child(setup, to_stderr=False)

        assert ("True\n", "") == (out, err)
