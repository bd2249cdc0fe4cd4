"""The web server's event stream, over HTTP against uvicorn on 127.0.0.1."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.scenarios.web import RunningServer
from sharedesk import Event, Hub, Person, Text
from tests.servers.webserver import SseEvent, require_web, sse_events

require_web()

import httpx  # noqa: E402

from sharedesk.servers.web import create_app  # noqa: E402

ANA = Person(id="ana", label="Ana")
TIMEOUT = httpx.Timeout(20.0)


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[Hub]:
    with Hub.open(tmp_path / "store") as hub:
        yield hub


@pytest.fixture
def server(hub: Hub) -> Iterator[RunningServer]:
    running = RunningServer(create_app(hub, keepalive=0.2))
    try:
        yield running
    finally:
        running.stop()


def take(
    server: RunningServer, count: int, *, after: int | None = None, **headers: str
) -> list[SseEvent]:
    """Open the stream of desk ``d``, read ``count`` events, close it."""
    params = {} if after is None else {"after": str(after)}
    url = f"{server.url}/api/desks/d/events"
    with httpx.stream("GET", url, params=params, headers=headers, timeout=TIMEOUT) as response:
        assert 200 == response.status_code
        assert response.headers["content-type"].startswith("text/event-stream")
        events = sse_events(response.iter_lines())
        return [next(events) for _ in range(count)]


def sequences(events: list[SseEvent]) -> list[int]:
    return [json.loads(e.data)["sequence"] for e in events]


class TestEventStream:
    def test_each_row_is_an_event_whose_id_is_its_sequence(
        self, hub: Hub, server: RunningServer
    ) -> None:
        hub.session("d").post(ANA, "one")
        hub.session("d").post(ANA, "two")

        events = take(server, 2, after=0)

        assert [("1", "row"), ("2", "row")] == [(e.id, e.event) for e in events]
        assert "two" == json.loads(events[1].data)["content"]

    def test_a_stream_resumes_after_last_event_id_with_nothing_missed_or_repeated(
        self, hub: Hub, server: RunningServer
    ) -> None:
        hub.append("d", [Event(ANA, Text(f"row {n}")) for n in range(1, 6)])
        first = take(server, 2, after=0)
        hub.append("d", [Event(ANA, Text(f"row {n}")) for n in range(6, 9)])

        rest = take(server, 6, after=0, **{"last-event-id": str(first[-1].id)})

        assert [1, 2, 3, 4, 5, 6, 7, 8] == sequences(first + rest)

    def test_last_event_id_wins_over_the_after_parameter(
        self, hub: Hub, server: RunningServer
    ) -> None:
        hub.append("d", [Event(ANA, Text(f"row {n}")) for n in range(1, 4)])

        events = take(server, 1, after=0, **{"last-event-id": "2"})

        assert [3] == sequences(events)

    def test_a_backlog_longer_than_a_page_arrives_whole_and_in_order(
        self, hub: Hub, server: RunningServer
    ) -> None:
        hub.append("d", [Event(ANA, Text(f"row {n}")) for n in range(1, 1201)])

        events = take(server, 1200, after=0)

        assert list(range(1, 1201)) == sequences(events)

    def test_rows_committed_while_the_stream_is_open_arrive_live_in_order(
        self, hub: Hub, server: RunningServer
    ) -> None:
        hub.session("d").post(ANA, "before")
        url = f"{server.url}/api/desks/d/events?after=0"
        with httpx.stream("GET", url, timeout=TIMEOUT) as response:
            events = sse_events(response.iter_lines())
            got = [next(events)]  # the backlog is read: the feed listens now
            for n in range(3):
                hub.session("d").post(ANA, f"live {n}")
            got += [next(events) for _ in range(3)]

        assert [1, 2, 3, 4] == sequences(got)
        assert "live 2" == json.loads(got[-1].data)["content"]

    def test_a_page_opened_behind_the_rows_an_open_page_was_pushed_reads_them_first(
        self, hub: Hub, server: RunningServer
    ) -> None:
        hub.session("d").post(ANA, "one")
        url = f"{server.url}/api/desks/d/events"
        with httpx.stream("GET", f"{url}?after=1", timeout=TIMEOUT) as first:
            live = sse_events(first.iter_lines())
            hub.session("d").post(ANA, "two")
            pushed = [next(live)]  # the desk's broadcast pushes from row 2 on
            second = take(server, 2, after=0)
            hub.session("d").post(ANA, "three")
            pushed.append(next(live))

        assert ([2, 3], [1, 2]) == (sequences(pushed), sequences(second))

    def test_a_page_opened_at_the_newest_row_while_another_follows_gets_each_new_row(
        self, hub: Hub, server: RunningServer
    ) -> None:
        hub.session("d").post(ANA, "one")
        url = f"{server.url}/api/desks/d/events?after=1"
        with (
            httpx.stream("GET", url, timeout=TIMEOUT) as first,
            httpx.stream("GET", url, timeout=TIMEOUT) as second,
        ):
            one, two = sse_events(first.iter_lines()), sse_events(second.iter_lines())
            hub.session("d").post(ANA, "two")
            got = [next(one), next(two)]
            hub.append("d", [Event(ANA, Text(f"row {n}")) for n in range(3, 6)])
            got += [next(one) for _ in range(3)] + [next(two) for _ in range(3)]

        assert [2, 2, 3, 4, 5, 3, 4, 5] == sequences(got)

    def test_without_a_cursor_the_stream_starts_at_the_newest_row(
        self, hub: Hub, server: RunningServer
    ) -> None:
        hub.session("d").post(ANA, "old")
        url = f"{server.url}/api/desks/d/events"
        with httpx.stream("GET", url, timeout=TIMEOUT) as response:
            lines = response.iter_lines()
            assert "retry: 1000" == next(lines)  # the stream is open
            hub.session("d").post(ANA, "new")
            (event,) = [next(sse_events(lines))]

        assert [2] == sequences([event])

    def test_a_quiet_stream_sends_keepalive_comments(self, server: RunningServer) -> None:
        url = f"{server.url}/api/desks/d/events"
        with httpx.stream("GET", url, timeout=TIMEOUT) as response:
            lines = (line for line in response.iter_lines() if line)
            seen = [next(lines), next(lines)]

        assert ["retry: 1000", ": alive"] == seen

    def test_a_row_another_process_wrote_arrives(
        self, hub: Hub, server: RunningServer, tmp_path: Path
    ) -> None:
        hub.session("d").post(ANA, "here")
        writer = (
            "import sys\n"
            "from sharedesk import Hub, Person\n"
            "with Hub.open(sys.argv[1]) as hub:\n"
            "    hub.session('d').post(Person(id='pat', label='Pat'), 'from elsewhere')\n"
        )
        url = f"{server.url}/api/desks/d/events?after=1"
        with httpx.stream("GET", url, timeout=TIMEOUT) as response:
            lines = response.iter_lines()
            assert "retry: 1000" == next(lines)
            subprocess.run([sys.executable, "-c", writer, str(tmp_path / "store")], check=True)
            event = next(sse_events(lines))

        row = json.loads(event.data)
        assert (2, "from elsewhere", "Pat") == (
            row["sequence"],
            row["content"],
            row["author"]["label"],
        )

    def test_a_malformed_last_event_id_is_a_400(self, server: RunningServer) -> None:
        response = httpx.get(
            f"{server.url}/api/desks/d/events", headers={"last-event-id": "x"}, timeout=TIMEOUT
        )

        assert 400 == response.status_code


class TestOnPostgres:
    def test_a_row_another_hub_wrote_is_pushed_without_polling(self, postgres_dsn: str) -> None:
        with Hub.open(postgres_dsn) as served, Hub.open(postgres_dsn) as writer:
            assert served.following
            writer.session("d").post(ANA, "first")
            running = RunningServer(create_app(served, keepalive=3600))
            try:
                url = f"{running.url}/api/desks/d/events?after=0"
                with httpx.stream("GET", url, timeout=TIMEOUT) as response:
                    events = sse_events(response.iter_lines())
                    got = [next(events)]
                    writer.session("d").post(ANA, "second")
                    got.append(next(events))
                rows = httpx.get(f"{running.url}/api/desks/d/rows", timeout=TIMEOUT).json()
                desks = httpx.get(f"{running.url}/api/desks", timeout=TIMEOUT).json()
            finally:
                running.stop()

        assert [1, 2] == sequences(got)
        assert ["first", "second"] == [r["content"] for r in rows["rows"]]
        assert [("d", 2)] == [(d["id"], d["last_sequence"]) for d in desks["desks"]]
