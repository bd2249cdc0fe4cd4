"""Hub calls that name a session or a conversation refuse bad ones before any actor."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sharedesk.actors import Hub
from sharedesk.protocol import Agent, Conversation, ValidationError

BOT = Agent(id="bot", label="Bot")


@pytest.fixture
def hub() -> Iterator[Hub]:
    with Hub.open() as opened:
        yield opened


class TestHubRefusesBadNames:
    @pytest.mark.parametrize("session_id", ["", 7, "x" * 257])
    def test_status_refuses_a_bad_session_id(self, hub: Hub, session_id: object) -> None:
        with pytest.raises(ValidationError, match="session_id"):
            hub.status(session_id)  # type: ignore[arg-type]

    @pytest.mark.parametrize("session_id", ["", 7, "x" * 257])
    def test_recover_refuses_a_bad_session_id(self, hub: Hub, session_id: object) -> None:
        with pytest.raises(ValidationError, match="session_id"):
            hub.recover(session_id)  # type: ignore[arg-type]

    def test_view_refuses_a_thread_root_of_zero(self, hub: Hub) -> None:
        with pytest.raises(ValidationError, match="thread_root"):
            hub.view("s", BOT, Conversation("s", 0))
        assert [] == hub.active()

    def test_turn_refuses_a_thread_root_of_zero(self, hub: Hub) -> None:
        with pytest.raises(ValidationError, match="thread_root"):
            hub.turn("s", BOT, Conversation("s", 0))
        assert [] == hub.active()

    def test_read_refuses_an_order_that_is_not_a_bool(self, hub: Hub) -> None:
        with pytest.raises(ValidationError, match="newest_first"):
            hub.read("s", newest_first="yes")  # type: ignore[arg-type]
