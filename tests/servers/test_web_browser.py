"""The desk page in a real browser: Debian's chromium driven by playwright.

Under ``CI=true`` these tests never skip: a missing chromium or playwright fails them.
With ``SHAREDESK_SCREENSHOT=PATH`` the screenshot test also writes its picture to PATH
(``docs/web-desk.png`` is made that way).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.scenarios.web import RunningServer
from sharedesk import Agent, Event, Hub, Person, ScriptedAdapter, SessionManager, Text
from tests.ci import unavailable
from tests.servers.webserver import launch_chromium, require_web

require_web()
try:
    from playwright.sync_api import Page, expect, sync_playwright
except ImportError as exc:  # pragma: no cover - only without the dev extra
    unavailable(f"playwright is not installed ({exc})")
    raise

from sharedesk.servers._web_auth import Tokens  # noqa: E402
from sharedesk.servers.web import create_app  # noqa: E402

ANA = Person(id="ana", label="Ana")
PAT = Person(id="pat", label="Pat")
BOT = Agent(id="bot", label="Billing bot")
TOKENS = Tokens.parse("pat-secret person:pat:Pat\n")
WAIT_MS = 15_000
#: What hostile content may not create anywhere on the page.
FORBIDDEN = (
    "main img, main script, main iframe, main object, main embed, main a[href^='javascript']"
)

expect.set_options(timeout=WAIT_MS)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[Hub]:
    with Hub.open(tmp_path / "store") as hub:
        yield hub


@pytest.fixture
def server(hub: Hub) -> Iterator[RunningServer]:
    running = RunningServer(create_app(hub, TOKENS))
    try:
        yield running
    finally:
        running.stop()


class Dialogs:
    """Every dialog a page opened (each dismissed at once)."""

    def __init__(self) -> None:
        self.opened: list[str] = []

    def __call__(self, dialog: Any) -> None:
        self.opened.append(dialog.message)
        dialog.dismiss()


@pytest.fixture
def dialogs() -> Dialogs:
    return Dialogs()


@pytest.fixture
def page(browser: Any, server: RunningServer, dialogs: Dialogs) -> Iterator[Page]:
    """A page signed in as Pat (through ``/login``), on the desks list."""
    context = browser.new_context(viewport={"width": 1200, "height": 720})
    page = context.new_page()
    page.on("dialog", dialogs)
    page.goto(f"{server.url}/login?token=pat-secret")
    expect(page.locator("body[data-ready='1']")).to_have_count(1)
    try:
        yield page
    finally:
        context.close()


def open_desk(page: Page, desk: str) -> None:
    page.evaluate("desk => { location.hash = 'desk=' + encodeURIComponent(desk); }", desk)
    expect(page.locator("#desk-page")).to_be_visible()


def row(page: Page, sequence: int) -> Any:
    return page.locator(f"#channel li[data-seq='{sequence}']")


class TestLive:
    def test_a_row_another_process_posted_appears_without_a_reload(
        self, hub: Hub, page: Page, tmp_path: Path
    ) -> None:
        hub.session("d").post(ANA, "first")
        open_desk(page, "d")
        expect(row(page, 1)).to_be_visible()
        page.evaluate("window.__sameDocument = true")
        writer = (
            "import sys\n"
            "from sharedesk import Hub, Agent\n"
            "with Hub.open(sys.argv[1]) as hub:\n"
            "    hub.session('d').post(Agent(id='qa', label='QA'), 'from another process')\n"
        )
        subprocess.run([sys.executable, "-c", writer, str(tmp_path / "store")], check=True)

        expect(row(page, 2).locator(".content")).to_have_text("from another process")
        expect(row(page, 2).locator(".author")).to_have_text("QA (agent)")
        assert page.evaluate("window.__sameDocument") is True

    def test_the_lens_watermark_line_moves_after_a_commit(self, hub: Hub, page: Page) -> None:
        hub.session("d").post(ANA, "is the invoice sent?")
        hub.turn("d", BOT).commit("sending it now")  # watermark 1, reply 2 present
        open_desk(page, "d")
        page.select_option("#lens-who", "agent:bot")
        seen = page.locator("#lens .seen")
        expect(seen).to_have_text("seen up to here (#1)")
        expect(page.locator("#lens li.msg[data-seq='1'] + li.seen")).to_have_count(1)

        hub.session("d").post(ANA, "thanks, and the refund?")  # 3
        hub.turn("d", BOT).commit("refund done")  # watermark 3, reply 4 present

        expect(seen).to_have_text("seen up to here (#3)")
        expect(page.locator("#lens li.msg[data-seq='3'] + li.seen")).to_have_count(1)
        expect(page.locator("#lens .msg")).to_have_count(4)
        expect(page.locator("#lens-state")).to_have_text("Billing bot (agent) has seen up to #3")


class TestLens:
    def test_a_participant_not_among_the_newest_authors_is_opened_by_name(
        self, hub: Hub, page: Page
    ) -> None:
        hub.session("d").post(ANA, "QA's note on the refund")
        hub.turn("d", Agent(id="billing", label="Billing")).commit()  # read, wrote nothing
        open_desk(page, "d")

        page.fill("#lens-as", "agent:billing")
        page.press("#lens-as", "Enter")

        expect(page.locator("#lens-state")).to_have_text("billing (agent) has seen up to #1")
        expect(page.locator("#lens li.msg[data-seq='1'] + li.seen")).to_have_count(1)


class TestRuns:
    def test_a_run_shows_its_status_and_opens_to_the_transcript_its_adapter_received(
        self, hub: Hub, page: Page
    ) -> None:
        adapter = ScriptedAdapter(["first answer", "second answer"], name="helper")
        SessionManager.run_once(hub, adapter, "first question", session_id="d")
        SessionManager.run_once(
            hub, adapter, "second question", session_id="d", continuation="replay"
        )
        open_desk(page, "d")
        expect(page.locator("#channel .event .content", has_text="run completed")).to_have_count(2)

        page.locator("#channel button.run-open").last.click()

        expect(page.locator("#run-state")).to_have_text("run completed for helper (agent)")
        expect(page.locator("#run-transcript .content")).to_have_text(
            ["first question", "first answer"]
        )


class TestLongDesk:
    def test_a_desk_of_100000_rows_opens_on_its_newest_page_and_pages_back(
        self, hub: Hub, page: Page
    ) -> None:
        for start in range(0, 100_000, 10_000):
            hub.append("long", [Event(ANA, Text(f"row {n}")) for n in range(start, start + 10_000)])
        open_desk(page, "long")

        expect(page.locator("#channel .row")).to_have_count(50)
        expect(row(page, 100_000).locator(".content")).to_have_text("row 99999")
        page.click("#older")

        expect(page.locator("#channel .row")).to_have_count(100)
        expect(page.locator("#channel .row").first.locator(".content")).to_have_text("row 99900")


class TestSignedIn:
    def test_a_person_signed_in_with_a_token_posts_and_replies_as_themself(
        self, hub: Hub, page: Page
    ) -> None:
        hub.session("d").post(ANA, "who can review?")
        open_desk(page, "d")
        expect(page.locator("#me")).to_have_text("signed in as Pat (person)")

        page.fill("#content", "a new thread from Pat")
        page.click("#send")
        expect(row(page, 2).locator(".author")).to_have_text("Pat (person)")
        row(page, 1).locator("> button.reply").click()
        page.fill("#content", "I can")
        page.click("#send")

        reply = page.locator("#channel li[data-seq='1'] > .replies > li[data-seq='3']")
        expect(reply.locator(".content")).to_have_text("I can")
        expect(reply.locator(".author")).to_have_text("Pat (person)")
        stored = hub.read("d")
        assert [(PAT, None), (PAT, 1)] == [(e.author, e.parent) for e in stored[1:]]


HOSTILE = [
    "<script>window.__pwned = 1</script>",
    '<img src=x onerror="window.__pwned = 1; alert(1)">',
    '<a href="javascript:alert(1)">click me</a>',
    "javascript:alert(1)",
    "invoice \u202egnp.exe\u202c paid",
    "\u2067isolate\u2069 and \u200fmark",
]
SHOWN = [
    HOSTILE[0],
    HOSTILE[1],
    HOSTILE[2],
    HOSTILE[3],
    "invoice \\u202egnp.exe\\u202c paid",
    "\\u2067isolate\\u2069 and \\u200fmark",
]
HOSTILE_DESK = "<img src=x onerror=alert(1)>"


class TestHostileContent:
    def test_hostile_rows_are_shown_as_text_creating_no_element_and_no_dialog(
        self, hub: Hub, page: Page, dialogs: Dialogs
    ) -> None:
        evil = Person(id="mallory", label="<b onmouseover=alert(1)>Mallory</b>")
        for content in HOSTILE:
            hub.session(HOSTILE_DESK).post(evil, content)
        hub.turn(HOSTILE_DESK, BOT).commit(HOSTILE[1])
        page.reload()  # the desks list, read again
        expect(page.locator("#desks a")).to_have_text(HOSTILE_DESK)
        assert 0 == page.locator(FORBIDDEN).count()

        open_desk(page, HOSTILE_DESK)
        expect(page.locator("#channel .row")).to_have_count(len(HOSTILE) + 1)
        page.select_option("#lens-who", "person:mallory")
        expect(page.locator("#lens .msg")).to_have_count(len(HOSTILE) + 1)
        page.hover("#channel .author >> nth=0")

        contents = page.locator("#channel .row .content").all_text_contents()
        assert [*SHOWN, HOSTILE[1]] == contents
        expect(page.locator("#channel .author").first).to_have_text(f"{evil.label} (person)")
        assert 0 == page.locator(FORBIDDEN).count()
        assert 0 == page.locator("main b, main [onerror], main [onmouseover]").count()
        assert [] == dialogs.opened
        assert page.evaluate("typeof window.__pwned") == "undefined"


class TestScreenshot:
    def test_a_desk_page_with_a_thread_and_a_lens_is_pictured(
        self, hub: Hub, page: Page, tmp_path: Path
    ) -> None:
        desk = hub.session("billing")
        qa = Agent(id="qa", label="QA")
        root = desk.post(ANA, "Customer 4711 was charged twice in March.")
        hub.turn("billing", BOT).commit("I see two charges of 49.00 EUR; refunding one.")
        desk.post(qa, "Refund test passed on staging.", parent=root.sequence)
        desk.post(PAT, "Please note the refund in the ticket too.")
        hub.turn("billing", BOT).commit("Noted in the ticket; the refund is on its way.")
        open_desk(page, "billing")
        page.select_option("#lens-who", "agent:bot")
        expect(page.locator("#lens .seen")).to_have_text("seen up to here (#4)")
        expect(page.locator("#channel li[data-seq='1'] .replies .row")).to_have_count(1)

        picture = tmp_path / "web-desk.png"
        page.screenshot(path=str(picture), full_page=True)

        assert picture.read_bytes().startswith(b"\x89PNG")
        if target := os.environ.get("SHAREDESK_SCREENSHOT"):
            shutil.copyfile(picture, target)
