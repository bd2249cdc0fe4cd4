"""The web server's JSON API, its tokens and its refusals, through Starlette's TestClient."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sharedesk import (
    Agent,
    Event,
    Hub,
    Person,
    RetentionPolicy,
    ScriptedAdapter,
    SessionManager,
    Text,
    ValidationError,
)
from tests.servers.webserver import require_web

require_web()

from starlette.testclient import TestClient  # noqa: E402

from sharedesk.cli import main  # noqa: E402
from sharedesk.servers._web_auth import Tokens, parse_participant  # noqa: E402
from sharedesk.servers.web import COOKIE, ROWS_LIMIT, create_app, serve  # noqa: E402

ANA = Person(id="ana", label="Ana")
PAT = Person(id="pat", label="Pat")
BOT = Agent(id="bot", label="Bot")
TOKENS = Tokens.parse("pat-secret person:pat:Pat\nbot-secret agent:bot:Bot  # the agent\n")
POST = {"x-sharedesk-request": "1"}


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[Hub]:
    with Hub.open(tmp_path / "store") as hub:
        yield hub


@pytest.fixture
def reader(hub: Hub) -> Iterator[TestClient]:
    """A client of a server without tokens (read-only)."""
    with TestClient(create_app(hub)) as client:
        yield client


@pytest.fixture
def guarded(hub: Hub) -> Iterator[TestClient]:
    """A client of a server with tokens, holding none."""
    with TestClient(create_app(hub, TOKENS)) as client:
        yield client


def as_pat(client: TestClient) -> dict[str, str]:
    return {"authorization": "Bearer pat-secret"}


def author(kind: str, ident: str, label: str) -> dict[str, str]:
    return {"kind": kind, "id": ident, "label": label}


class TestReading:
    def test_desks_are_listed_newest_activity_first(self, hub: Hub, reader: TestClient) -> None:
        hub.session("old").post(ANA, "first")
        hub.session("new").post(ANA, "second")
        hub.session("old").post(ANA, "third")

        desks = reader.get("/api/desks").json()["desks"]

        assert ["old", "new"] == [d["id"] for d in desks]
        assert [2, 1] == [d["last_sequence"] for d in desks]

    def test_rows_come_a_page_at_a_time_oldest_first_with_a_cursor(
        self, hub: Hub, reader: TestClient
    ) -> None:
        desk = hub.session("d")
        for n in range(5):
            desk.post(ANA, f"row {n}")

        first = reader.get("/api/desks/d/rows?limit=2").json()
        second = reader.get(f"/api/desks/d/rows?limit=2&before={first['next_before']}").json()
        last = reader.get(f"/api/desks/d/rows?limit=2&before={second['next_before']}").json()

        assert [4, 5] == [r["sequence"] for r in first["rows"]]
        assert [2, 3] == [r["sequence"] for r in second["rows"]]
        assert ([1], None) == ([r["sequence"] for r in last["rows"]], last["next_before"])

    def test_a_row_carries_its_author_content_and_parent(
        self, hub: Hub, reader: TestClient
    ) -> None:
        root = hub.session("d").post(ANA, "question")
        hub.session("d").post(BOT, "answer", parent=root.sequence)

        rows = reader.get("/api/desks/d/rows").json()["rows"]

        assert {
            "sequence": 2,
            "type": "text",
            "author": author("agent", "bot", "Bot"),
            "content": "answer",
            "parent": 1,
        } == {k: rows[1][k] for k in ("sequence", "type", "author", "content", "parent")}

    def test_a_page_never_holds_more_than_the_rows_limit(
        self, hub: Hub, reader: TestClient
    ) -> None:
        hub.append("d", [Event(ANA, Text(f"row {n}")) for n in range(ROWS_LIMIT + 1)])

        page = reader.get("/api/desks/d/rows?limit=100000").json()

        assert (ROWS_LIMIT, 2) == (len(page["rows"]), page["next_before"])

    def test_an_empty_desk_has_no_rows_and_no_cursor(self, reader: TestClient) -> None:
        page = reader.get("/api/desks/d/rows").json()

        assert ([], None) == (page["rows"], page["next_before"])

    def test_a_lens_shows_the_participants_view_and_watermark(
        self, hub: Hub, reader: TestClient
    ) -> None:
        hub.session("d").post(ANA, "hello")
        hub.turn("d", BOT).commit("hi Ana")
        hub.session("d").post(ANA, "are you there?")

        lens = reader.get("/api/desks/d/view", params={"as": "agent:bot"}).json()

        assert [1, 2, 3] == [m["sequence"] for m in lens["messages"]]
        assert (1, [2]) == (lens["watermark"], lens["present"])

    def test_a_participant_who_never_took_a_turn_has_no_watermark(
        self, hub: Hub, reader: TestClient
    ) -> None:
        hub.session("d").post(ANA, "hello")

        lens = reader.get("/api/desks/d/view", params={"as": "person:ana"}).json()

        assert lens["watermark"] is None

    def test_a_thread_lens_holds_the_root_and_its_replies(
        self, hub: Hub, reader: TestClient
    ) -> None:
        root = hub.session("d").post(ANA, "root")
        hub.session("d").post(ANA, "elsewhere")
        hub.session("d").post(BOT, "reply", parent=root.sequence)

        lens = reader.get("/api/desks/d/view?as=agent:bot&thread=1").json()

        assert [1, 3] == [m["sequence"] for m in lens["messages"]]

    def test_participants_are_the_authors_of_the_newest_rows_with_watermarks(
        self, hub: Hub, reader: TestClient
    ) -> None:
        hub.session("d").post(ANA, "hello")
        hub.turn("d", BOT).commit("hi")

        found = reader.get("/api/desks/d/participants").json()["participants"]

        assert [
            {"author": author("agent", "bot", "Bot"), "watermark": 1},
            {"author": author("person", "ana", "Ana"), "watermark": None},
        ] == found

    def test_a_malformed_participant_or_cursor_is_a_400(self, reader: TestClient) -> None:
        assert 400 == reader.get("/api/desks/d/view?as=robot:x").status_code
        assert 400 == reader.get("/api/desks/d/rows?before=-1").status_code
        assert 400 == reader.get("/api/desks/d/rows?before=9223372036854775808").status_code

    def test_the_page_and_its_two_files_are_served_and_nothing_else(
        self, reader: TestClient
    ) -> None:
        assert 200 == reader.get("/").status_code
        assert 200 == reader.get("/static/app.js").status_code
        assert 200 == reader.get("/static/app.css").status_code
        assert 404 == reader.get("/static/../web.py").status_code
        assert 404 == reader.get("/static/index.html").status_code

    def test_every_response_forbids_inline_script_and_framing(self, reader: TestClient) -> None:
        headers = reader.get("/").headers

        assert "script-src 'self'" in headers["content-security-policy"]
        assert "frame-ancestors 'none'" in headers["content-security-policy"]
        assert "nosniff" == headers["x-content-type-options"]


class TestReadOnly:
    def test_without_tokens_posting_is_refused_and_writes_nothing(
        self, hub: Hub, reader: TestClient
    ) -> None:
        response = reader.post("/api/desks/d/messages", json={"content": "hi"}, headers=POST)

        assert 403 == response.status_code
        assert 0 == hub.last_sequence("d")

    def test_without_tokens_nobody_is_signed_in(self, reader: TestClient) -> None:
        assert {"participant": None, "can_post": False} == reader.get("/api/me").json()

    def test_without_tokens_serve_refuses_a_host_that_is_not_loopback(self, tmp_path: Path) -> None:
        with pytest.raises(ValidationError, match=r"127\.0\.0\.1"):
            serve(str(tmp_path), host="0.0.0.0")

    def test_the_serve_command_refuses_it_with_one_line_and_status_2(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        status = main(["serve", str(tmp_path), "--host", "0.0.0.0"])

        assert 2 == status
        assert "binds only to 127.0.0.1" in capsys.readouterr().err

    def test_serve_refuses_a_path_that_holds_no_store(self, tmp_path: Path) -> None:
        with pytest.raises(ValidationError, match="not a store"):
            serve(str(tmp_path / "nothing"))


class TestTokens:
    @pytest.mark.parametrize(
        "path",
        [
            "/",
            "/static/app.js",
            "/api/me",
            "/api/desks",
            "/api/desks/d/rows",
            "/api/desks/d/view?as=agent:bot",
            "/api/desks/d/participants",
            "/api/desks/d/events",
        ],
    )
    def test_a_request_without_a_known_token_gets_401(self, guarded: TestClient, path: str) -> None:
        assert 401 == guarded.get(path).status_code
        assert 401 == guarded.get(path, headers={"authorization": "Bearer nope"}).status_code

    def test_a_post_without_a_known_token_gets_401_and_writes_nothing(
        self, hub: Hub, guarded: TestClient
    ) -> None:
        response = guarded.post(
            "/api/desks/d/messages",
            json={"content": "hi"},
            headers={**POST, "authorization": "Bearer nope"},
        )

        assert 401 == response.status_code
        assert 0 == hub.last_sequence("d")

    def test_a_bearer_token_names_its_participant(self, guarded: TestClient) -> None:
        me = guarded.get("/api/me", headers=as_pat(guarded)).json()

        assert {"participant": author("person", "pat", "Pat"), "can_post": True} == me

    def test_login_sets_a_strict_http_only_cookie_that_then_admits(
        self, guarded: TestClient
    ) -> None:
        response = guarded.get("/login?token=pat-secret", follow_redirects=False)

        assert 303 == response.status_code
        cookie = response.headers["set-cookie"]
        assert f"{COOKIE}=pat-secret" in cookie
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie
        assert 200 == guarded.get("/api/desks").status_code

    def test_login_with_an_unknown_token_gets_401_and_no_cookie(self, guarded: TestClient) -> None:
        response = guarded.get("/login?token=nope", follow_redirects=False)

        assert 401 == response.status_code
        assert "set-cookie" not in response.headers

    def test_a_post_is_written_as_the_tokens_participant_whatever_the_body_says(
        self, hub: Hub, guarded: TestClient
    ) -> None:
        body: dict[str, Any] = {"content": "hi", "author": {"kind": "agent", "id": "bot"}}
        response = guarded.post(
            "/api/desks/d/messages", json=body, headers={**POST, **as_pat(guarded)}
        )

        assert (201, {"sequence": 1}) == (response.status_code, response.json())
        assert PAT == hub.read("d")[0].author

    def test_a_reply_lands_in_its_thread(self, hub: Hub, guarded: TestClient) -> None:
        root = hub.session("d").post(ANA, "question")
        guarded.post(
            "/api/desks/d/messages",
            json={"content": "answer", "parent": root.sequence},
            headers={**POST, **as_pat(guarded)},
        )

        assert root.sequence == hub.read("d")[-1].parent

    def test_a_reply_to_a_row_that_is_not_a_root_is_a_400_and_writes_nothing(
        self, hub: Hub, guarded: TestClient
    ) -> None:
        response = guarded.post(
            "/api/desks/d/messages",
            json={"content": "answer", "parent": 7},
            headers={**POST, **as_pat(guarded)},
        )

        assert 400 == response.status_code
        assert 0 == hub.last_sequence("d")

    @pytest.mark.parametrize(
        "body", [b"not json", b"[]", b'{"content": 3}', b'{"content": "x", "parent": true}']
    )
    def test_a_malformed_body_is_a_400(self, guarded: TestClient, body: bytes) -> None:
        headers = {**POST, **as_pat(guarded), "content-type": "application/json"}
        response = guarded.post("/api/desks/d/messages", content=body, headers=headers)

        assert 400 == response.status_code


class TestCrossSite:
    def test_a_post_without_the_request_header_is_refused(
        self, hub: Hub, guarded: TestClient
    ) -> None:
        response = guarded.post(
            "/api/desks/d/messages", json={"content": "hi"}, headers=as_pat(guarded)
        )

        assert 403 == response.status_code
        assert 0 == hub.last_sequence("d")

    def test_a_form_post_carrying_the_cookie_is_refused(
        self, hub: Hub, guarded: TestClient
    ) -> None:
        guarded.get("/login?token=pat-secret")
        response = guarded.post(
            "/api/desks/d/messages",
            content=b"content=hi",
            headers={**POST, "content-type": "application/x-www-form-urlencoded"},
        )

        assert 403 == response.status_code
        assert 0 == hub.last_sequence("d")

    def test_a_post_from_another_origin_is_refused(self, hub: Hub, guarded: TestClient) -> None:
        guarded.get("/login?token=pat-secret")
        response = guarded.post(
            "/api/desks/d/messages",
            json={"content": "hi"},
            headers={**POST, "origin": "https://evil.example"},
        )

        assert 403 == response.status_code
        assert 0 == hub.last_sequence("d")

    def test_a_post_from_the_pages_own_origin_is_accepted(
        self, hub: Hub, guarded: TestClient
    ) -> None:
        guarded.get("/login?token=pat-secret")
        response = guarded.post(
            "/api/desks/d/messages",
            json={"content": "hi"},
            headers={**POST, "origin": "http://testserver"},
        )

        assert 201 == response.status_code


class TestTokensFile:
    def test_a_line_names_a_token_and_its_participant(self) -> None:
        assert PAT == TOKENS.holder("pat-secret")
        assert BOT == TOKENS.holder("bot-secret")
        assert TOKENS.holder("pat") is None
        assert TOKENS.holder(None) is None

    @pytest.mark.parametrize(
        "text",
        [
            "",
            "# only a comment\n",
            "t1\n",
            "t1 robot:x\n",
            "t1 person:\n",
            "t1 person:a\nt1 agent:b\n",
        ],
    )
    def test_a_malformed_file_is_refused(self, text: str) -> None:
        with pytest.raises(ValidationError):
            Tokens.parse(text)

    def test_an_error_names_the_line_but_never_the_token(self) -> None:
        with pytest.raises(ValidationError) as caught:
            Tokens.parse("sekrit person:a\nsekrit2 robot:b\n")

        assert "line 2" in str(caught.value)
        assert "sekrit" not in str(caught.value)

    def test_a_view_participant_may_hold_colons_in_its_id(self) -> None:
        assert Agent(id="a:b", label="a:b") == parse_participant("agent:a:b", label=False)


class TestRuns:
    def test_a_run_shows_its_status_rows_and_the_transcript_its_adapter_received(
        self, hub: Hub, reader: TestClient
    ) -> None:
        adapter = ScriptedAdapter(["first answer", "second answer"], name="helper")
        SessionManager.run_once(hub, adapter, "first question", session_id="d")
        second = SessionManager.run_once(
            hub, adapter, "second question", session_id="d", continuation="replay"
        )

        run = reader.get(f"/api/desks/d/runs/{second.run_id}").json()

        assert ("completed", "helper") == (run["status"], run["provider"])
        assert "second question" in [r["content"] for r in run["rows"]]
        assert [
            ("user", "first question"),
            ("assistant", "first answer"),
        ] == [(m["role"], m["content"]) for m in run["transcript"]]
        assert adapter.calls[1].transcript is not None
        assert [m.content for m in adapter.calls[1].transcript.messages] == [
            m["content"] for m in run["transcript"]
        ]

    def test_an_unknown_run_is_a_404(self, hub: Hub, reader: TestClient) -> None:
        hub.session("d").post(ANA, "hello")

        assert 404 == reader.get("/api/desks/d/runs/nope@d").status_code


def retained(hub: Hub) -> str:
    """Run on desk ``d`` (rows 1-4), post two rows, compact through 5 and retain; the run id."""
    result = SessionManager.run_once(hub, ScriptedAdapter(["done"]), "go", session_id="d")
    hub.session("d").post(ANA, "after the run")
    hub.session("d").post(ANA, "and more")
    hub.compact("d", "what was said", through=5, author=BOT)
    hub.apply_retention(RetentionPolicy())
    return result.run_id


class TestRetained:
    def test_a_run_whose_rows_retention_removed_is_a_410_naming_archived_through(
        self, hub: Hub, reader: TestClient
    ) -> None:
        run_id = retained(hub)

        response = reader.get(f"/api/desks/d/runs/{run_id}")

        assert (410, 5) == (response.status_code, response.json()["archived_through"])

    def test_a_reply_to_a_root_retention_removed_is_a_410_and_writes_nothing(
        self, hub: Hub, guarded: TestClient
    ) -> None:
        retained(hub)
        last = hub.last_sequence("d")

        response = guarded.post(
            "/api/desks/d/messages",
            json={"content": "late", "parent": 5},
            headers={**POST, **as_pat(guarded)},
        )

        assert (410, 5, last) == (
            response.status_code,
            response.json()["archived_through"],
            hub.last_sequence("d"),
        )

    def test_an_event_stream_from_below_archived_through_is_a_410(
        self, hub: Hub, reader: TestClient
    ) -> None:
        retained(hub)

        response = reader.get("/api/desks/d/events?after=2")

        assert (410, 5) == (response.status_code, response.json()["archived_through"])

    def test_an_event_stream_resumed_below_archived_through_is_a_410(
        self, hub: Hub, reader: TestClient
    ) -> None:
        retained(hub)

        response = reader.get("/api/desks/d/events", headers={"last-event-id": "4"})

        assert (410, 5) == (response.status_code, response.json()["archived_through"])


class TestDeskIds:
    def test_a_desk_id_holding_slashes_is_served(self, hub: Hub, reader: TestClient) -> None:
        hub.session("team/billing").post(ANA, "hello")

        rows = reader.get("/api/desks/team%2Fbilling/rows").json()["rows"]
        lens = reader.get("/api/desks/team%2Fbilling/view?as=person:ana").json()

        assert ["hello"] == [r["content"] for r in rows]
        assert ["hello"] == [m["content"] for m in lens["messages"]]

    def test_a_desk_id_holding_markup_is_served(self, hub: Hub, reader: TestClient) -> None:
        hub.session("<img src=x>").post(ANA, "hello")

        rows = reader.get("/api/desks/%3Cimg%20src%3Dx%3E/rows").json()["rows"]

        assert ["hello"] == [r["content"] for r in rows]
