"""The ``sharedesk`` command, end to end in subprocesses (plus its pure helpers in-process).

Every command that reads a store runs on both backends: an LMDB directory and a PostgreSQL
DSN (a fresh database on the test session's server on 127.0.0.1; under ``CI=true`` those
tests fail instead of skipping when no server starts).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from sharedesk import Agent, Event, Operator, Person, Text, ValidationError
from sharedesk.cli import EXIT_USAGE, describe, parse_viewer, safe_text
from sharedesk.store.lmdb import LmdbStore
from sharedesk.store.postgres import PostgresStore

CHECKOUT = Path(__file__).resolve().parents[2]
DESK = "desk/one"


def sharedesk(
    *args: str, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m sharedesk.cli ARGS`` and capture its output.

    Colour settings of the calling environment are dropped, so output is plain unless
    ``env`` asks for colour.
    """
    base = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "NO_COLOR")}
    return subprocess.run(
        [sys.executable, "-m", "sharedesk.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=CHECKOUT,
        env={**base, **(env or {})},
    )


@pytest.fixture(params=["lmdb", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a new store goes: an LMDB directory, or the DSN of an empty database."""
    if request.param == "lmdb":
        return str(tmp_path / "store")
    dsn: str = request.getfixturevalue("postgres_dsn")
    return dsn


def open_store(location: str) -> Any:
    """Open (creating) the store at ``location`` for a test to fill or check."""
    if location.startswith("postgresql://"):
        return PostgresStore(location)
    return LmdbStore(location, durability="relaxed")


def contents(location: str) -> dict[str, int]:
    """Every session of the store at ``location`` with its last sequence."""
    with open_store(location) as store:
        return {info.session_id: info.last_sequence for info in store.session_infos()}


@pytest.fixture
def store_path(location: str) -> str:
    """A store with a small desk: a channel post, a ticket (thread root) and a reply."""
    with open_store(location) as store:
        first = store.append(
            DESK,
            [
                Event(Operator(), Text("Welcome")),
                Event(Person(id="ana", label="Ana"), Text("Ticket: login fails")),
            ],
        )
        store.append(
            DESK,
            [Event(Agent(id="a1", label="Agent One"), Text("Looking"), parent=first[1].sequence)],
        )
        store.append("other", [Event(Operator(), Text("elsewhere"))])
    return location


WRITER = textwrap.dedent(
    """
    import sys
    from sharedesk import Operator
    from sharedesk.actors import Hub

    hub = Hub.open(sys.argv[1], durability="relaxed")
    desk = hub.session("live")
    desk.post(Operator(), "first")
    print("ready", flush=True)
    while True:  # paced by the pipe: blocked once the test falls behind reading it
        print("posted", desk.post(Operator(), "more").sequence, flush=True)
    """
)


class LiveWriter:
    """The store another process writes to, and what that process said it stored."""

    def __init__(self, path: Path, child: subprocess.Popen[str]) -> None:
        self.path = path
        self._child = child

    def wait_posted_beyond(self, sequence: int) -> int:
        """Read the writer's lines until it stored a post after ``sequence``; return it."""
        assert self._child.stdout is not None
        for line in self._child.stdout:
            words = line.split()
            if words[:1] == ["posted"] and int(words[1]) > sequence:
                return int(words[1])
        raise AssertionError("the writer stopped before it posted again")


@pytest.fixture
def live_writer(tmp_path: Path) -> Iterator[LiveWriter]:
    """Another process with a Hub open on the store, posting to session ``live``."""
    path = tmp_path / "live-store"
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=CHECKOUT,
    )
    try:
        assert child.stdout is not None
        # Unconfigured structlog in the child logs to stdout too: skip to our line.
        for line in child.stdout:
            if line.strip() == "ready":
                break
        yield LiveWriter(path, child)
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()


class TestDemo:
    def test_demo_runs_and_shows_every_participant_view(self, tmp_path: Path) -> None:
        result = sharedesk("demo", "--path", str(tmp_path / "data"), timeout=120)

        assert 0 == result.returncode, result.stderr
        for name in ("operator", "Ana (person)", "Triage (agent)", "Researcher (agent)"):
            assert name in result.stdout
        assert "round 1" in result.stdout

    def test_demo_rerun_continues_the_same_desk_with_only_new_rows_in_deltas(
        self, tmp_path: Path
    ) -> None:
        data = tmp_path / "data"
        first = sharedesk("demo", "--path", str(data), timeout=120)
        second = sharedesk("demo", "--path", str(data), timeout=120)

        assert 0 == first.returncode, first.stderr
        assert 0 == second.returncode, second.stderr
        assert "round 2" in second.stdout
        deltas = second.stdout.split("what each participant sees")[0]
        # Round 1's rows each agent was offered are not offered again; the Researcher's
        # first reply in round 1's thread came after Triage's channel turn, and the
        # channel view shows it, so round 2's channel delta offers it once.
        assert "Ticket #101: checkout" not in deltas
        assert 1 == deltas.count("Ticket #101: the EU gateway")
        assert "new since last turn" in second.stdout

    def test_demo_output_is_plain_when_not_on_a_terminal(self, tmp_path: Path) -> None:
        result = sharedesk("demo", "--path", str(tmp_path / "data"), timeout=120)

        assert 0 == result.returncode, result.stderr
        assert "\x1b[" not in result.stdout

    def test_demo_output_is_coloured_when_colour_is_forced(self, tmp_path: Path) -> None:
        result = sharedesk(
            "demo", "--path", str(tmp_path / "data"), timeout=120, env={"FORCE_COLOR": "1"}
        )

        assert 0 == result.returncode, result.stderr
        assert "\x1b[" in result.stdout

    def test_demo_on_a_file_path_is_one_line_error(self, tmp_path: Path) -> None:
        file = tmp_path / "file"
        file.write_text("not a directory")

        result = sharedesk("demo", "--path", str(file))

        assert EXIT_USAGE == result.returncode
        assert 1 == len(result.stderr.strip().splitlines())
        assert "Traceback" not in result.stderr


class TestInspect:
    def test_inspect_into_a_pipe_nobody_reads_exits_0_without_an_error(
        self, store_path: str
    ) -> None:
        """Like `sharedesk inspect PATH | head -0`: a closed pipe is not an error."""
        read_end, write_end = os.pipe()
        os.close(read_end)  # closed before the child writes: its first write breaks
        try:
            result = subprocess.run(
                [sys.executable, "-m", "sharedesk.cli", "inspect", store_path, "--json"],
                stdout=write_end,
                stderr=subprocess.PIPE,
                text=True,
                timeout=60,
                cwd=CHECKOUT,
            )
        finally:
            os.close(write_end)

        assert (0, "") == (result.returncode, result.stderr)

    def test_inspect_lists_sessions_with_event_counts(self, store_path: str) -> None:
        result = sharedesk("inspect", store_path, "--json")

        rows = [json.loads(line) for line in result.stdout.splitlines()]
        assert 0 == result.returncode, result.stderr
        assert {DESK: 3, "other": 1} == {row["session"]: row["events"] for row in rows}
        assert all(row["last_activity"] for row in rows)

    def test_inspect_lists_sessions_sorted_by_id(self, store_path: str) -> None:
        result = sharedesk("inspect", store_path, "--json")

        assert [DESK, "other"] == [
            json.loads(line)["session"] for line in result.stdout.splitlines()
        ]

    def test_inspect_table_names_each_session(self, store_path: str) -> None:
        result = sharedesk("inspect", store_path)

        assert 0 == result.returncode, result.stderr
        assert DESK in result.stdout and "other" in result.stdout

    def test_inspect_session_dumps_its_events_as_json_lines_in_order(self, store_path: str) -> None:
        result = sharedesk("inspect", store_path, DESK)

        events = [json.loads(line) for line in result.stdout.splitlines()]
        assert 0 == result.returncode, result.stderr
        assert [1, 2, 3] == [e["sequence"] for e in events]
        assert ["Welcome", "Ticket: login fails", "Looking"] == [
            e["body"]["content"] for e in events
        ]

    def test_inspect_works_while_another_process_writes(self, live_writer: LiveWriter) -> None:
        first = sharedesk("inspect", str(live_writer.path), "--json")
        assert 0 == first.returncode, first.stderr
        seen = json.loads(first.stdout.splitlines()[0])["events"]
        live_writer.wait_posted_beyond(seen)

        second = sharedesk("inspect", str(live_writer.path), "--json")

        assert 0 == second.returncode, second.stderr
        assert json.loads(second.stdout.splitlines()[0])["events"] > seen >= 1

    def test_inspect_session_works_while_another_process_writes(
        self, live_writer: LiveWriter
    ) -> None:
        result = sharedesk("inspect", str(live_writer.path), "live")

        sequences = [json.loads(line)["sequence"] for line in result.stdout.splitlines()]
        assert 0 == result.returncode, result.stderr
        assert list(range(1, len(sequences) + 1)) == sequences


class TestView:
    def test_view_prints_the_channel_with_the_viewer_own_messages_marked(
        self, store_path: str
    ) -> None:
        result = sharedesk("view", store_path, DESK, "--as", "person:ana")

        lines = result.stdout.splitlines()
        assert 0 == result.returncode, result.stderr
        assert "channel as Ana (person)" in lines[0]
        assert ["Welcome", "Ticket: login fails (you)", "Looking"] == [
            _content_and_mark(line) for line in lines[1:]
        ]

    def test_view_of_a_thread_shows_root_and_replies(self, store_path: str) -> None:
        result = sharedesk("view", store_path, DESK, "--as", "agent:a1", "--thread", "2", "--json")

        messages = [json.loads(line) for line in result.stdout.splitlines()]
        assert 0 == result.returncode, result.stderr
        assert [2, 3] == [m["sequence"] for m in messages]
        assert [None, 2] == [m["parent"] for m in messages]

    def test_view_window_limits_the_messages(self, store_path: str) -> None:
        result = sharedesk("view", store_path, DESK, "--as", "operator", "--window", "1", "--json")

        messages = [json.loads(line) for line in result.stdout.splitlines()]
        assert 0 == result.returncode, result.stderr
        assert 1 == len(messages)


def _content_and_mark(line: str) -> str:
    """``"  #2    Ana (person) (you): text"`` -> ``"text (you)"``."""
    head, _, content = line.partition(": ")
    return content + (" (you)" if "(you)" in head else "")


class TestBadInput:
    @pytest.mark.parametrize("location", ["lmdb"], indirect=True)
    @pytest.mark.parametrize(
        ("args", "says"),
        [
            (["inspect", "{missing}"], "does not exist"),
            (["inspect", "{empty}"], "holds no data.mdb"),
            (["inspect", "{store}", "no-such-session"], "unknown session"),
            (["view", "{store}", "no-such-session", "--as", "operator"], "unknown session"),
            (["view", "{store}", DESK, "--as", "robot:7"], "--as must be"),
            (["view", "{store}", DESK, "--as", "agent:"], "--as must be"),
            (["view", "{store}", DESK, "--as", "operator", "--window", "-3"], "--window"),
            (["view", "{store}", DESK, "--as", "operator", "--thread", "0"], "--thread"),
            (["view", "{store}", DESK, "--as", "operator", "--thread", str(2**64)], "--thread"),
            (["view", "{store}", DESK, "--as", "operator", "--window", str(2**64)], "--window"),
            (["view", "{store}", DESK], "--as"),
            (["view", "{store}", DESK, "--as", "operator", "--window", "many"], "--window"),
            (["--log-level", "loud", "inspect", "{store}"], "level must be"),
            (["frobnicate"], "invalid choice"),
            ([], "required"),
        ],
    )
    def test_bad_input_is_one_line_on_stderr_and_exit_2(
        self, store_path: str, tmp_path: Path, args: list[str], says: str
    ) -> None:
        (tmp_path / "empty").mkdir()
        paths = {
            "{missing}": str(tmp_path / "missing"),
            "{empty}": str(tmp_path / "empty"),
            "{store}": store_path,
        }

        result = sharedesk(*[paths.get(a, a) for a in args])

        assert EXIT_USAGE == result.returncode
        assert 1 == len(result.stderr.strip().splitlines()), result.stderr
        assert says in result.stderr
        assert "" == result.stdout

    def test_inspect_of_a_missing_path_creates_nothing(self, tmp_path: Path) -> None:
        sharedesk("inspect", str(tmp_path / "missing"))

        assert not (tmp_path / "missing").exists()


def schemas(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        return {row[0] for row in conn.execute("SELECT nspname FROM pg_namespace")}


class TestPostgres:
    def test_inspect_of_a_database_without_a_store_is_one_line_and_creates_nothing(
        self, postgres_dsn: str
    ) -> None:
        before = schemas(postgres_dsn)

        result = sharedesk("inspect", postgres_dsn)

        assert (EXIT_USAGE, 1, True, before) == (
            result.returncode,
            len(result.stderr.strip().splitlines()),
            "holds no schema 'sharedesk'" in result.stderr,
            schemas(postgres_dsn),
        )

    def test_a_server_that_refuses_the_connection_is_one_line_naming_the_reason(self) -> None:
        result = sharedesk("view", "postgresql://127.0.0.1:1/desks", DESK, "--as", "operator")

        assert (EXIT_USAGE, 1, True) == (
            result.returncode,
            len(result.stderr.strip().splitlines()),
            "refused" in result.stderr,
        )

    def test_a_demo_on_a_server_that_refuses_the_connection_names_the_reason_once(self) -> None:
        result = sharedesk("demo", "--path", "postgresql://127.0.0.1:1/desks")

        assert (EXIT_USAGE, 1) == (result.returncode, result.stderr.count("Connection refused"))

    @pytest.mark.parametrize("location", ["postgres"], indirect=True)
    def test_a_dsn_is_named_without_its_password(self, store_path: str) -> None:
        dsn = store_path + ("&" if "?" in store_path else "?") + "password=hunter2"

        result = sharedesk("inspect", dsn, "no-such-session")

        assert (EXIT_USAGE, True, False) == (
            result.returncode,
            "unknown session 'no-such-session'" in result.stderr,
            "hunter2" in result.stderr,
        )

    def test_a_dsn_without_psycopg_installed_names_the_extra(self) -> None:
        script = (
            "import sys; sys.modules['psycopg'] = None\n"
            "from sharedesk.cli import main\n"
            "sys.exit(main(['inspect', 'postgresql://127.0.0.1:1/desks']))\n"
        )
        result = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
        )

        assert (EXIT_USAGE, 1, True) == (
            result.returncode,
            len(result.stderr.strip().splitlines()),
            "pip install 'sharedesk[postgres]'" in result.stderr,
        )

    def test_demo_plays_and_continues_a_desk_on_postgresql(self, postgres_dsn: str) -> None:
        first = sharedesk("demo", "--path", postgres_dsn, timeout=120)
        second = sharedesk("demo", "--path", postgres_dsn, timeout=120)

        assert (0, 0, True) == (first.returncode, second.returncode, "round 2" in second.stdout)


class TestEntryPoint:
    def test_installed_sharedesk_command_prints_help(self) -> None:
        command = Path(sys.executable).with_name("sharedesk")

        result = subprocess.run(
            [str(command), "--help"], capture_output=True, text=True, timeout=60
        )

        assert 0 == result.returncode
        assert "demo" in result.stdout and "inspect" in result.stdout and "view" in result.stdout


class TestParseViewer:
    def test_operator_parses_to_the_operator(self) -> None:
        assert Operator() == parse_viewer("operator")

    def test_person_and_agent_take_their_id_as_label(self) -> None:
        assert (Person(id="ana", label="ana"), Agent(id="a:1", label="a:1")) == (
            parse_viewer("person:ana"),
            parse_viewer("agent:a:1"),
        )

    @pytest.mark.parametrize("text", ["", "Operator", "person", "person:", "system:x", "ana"])
    def test_anything_else_is_a_validation_error(self, text: str) -> None:
        with pytest.raises(ValidationError):
            parse_viewer(text)


class TestDescribe:
    def test_authors_are_shown_with_label_and_kind(self) -> None:
        assert ["operator", "Ana (person)", "Bot (agent)"] == [
            describe(Operator()),
            describe(Person(id="ana", label="Ana")),
            describe(Agent(id="b", label="Bot")),
        ]


HOSTILE = {
    "clear screen": "\x1b[2J\x1b[H",
    "retitle": "\x1b]0;pwned\x07",
    "clipboard (OSC 52)": "\x1b]52;c;cm0gLXJmIH4=\x07",
    "clipboard through C1 OSC": "\x9d52;c;cm0gLXJmIH4=\x9c",
    "C1 CSI": "\x9b31m",
    "bell, backspace, DEL": "\x07\x08\x7f",
    "bidi override": "\u202e",
    "bidi embedding": "\u202b",
    "bidi isolate": "\u2066\u2069",
    "line separator": "\u2028",
    "paragraph separator": "\u2029",
}


def unsafe(text: str) -> list[str]:
    """The characters of ``text`` that must never reach a terminal raw (lines' ends aside)."""
    return [
        ch
        for ch in text.replace("\n", "")
        if ord(ch) < 0x20
        or 0x7F <= ord(ch) < 0xA0
        or ch in "\u2028\u2029"
        or 0x202A <= ord(ch) <= 0x202E
        or 0x2066 <= ord(ch) <= 0x2069
    ]


@pytest.fixture
def hostile_store(location: str) -> str:
    """A desk ``hostile`` whose labels, ids and contents carry every unsafe sequence, and a
    desk named with each."""
    with open_store(location) as store:
        store.append(
            "hostile",
            [
                Event(Person(id=f"ana{seq}", label=f"Ana{seq}"), Text(f"{name}: {seq}"))
                for name, seq in HOSTILE.items()
            ],
        )
        for seq in HOSTILE.values():
            store.append(f"desk{seq}", [Event(Operator(), Text(seq))])
    return location


class TestHostileContent:
    def test_inspect_lists_session_ids_with_every_unsafe_character_escaped(
        self, hostile_store: str
    ) -> None:
        result = sharedesk("inspect", hostile_store)

        assert (0, [], True) == (
            result.returncode,
            unsafe(result.stdout),
            "desk\\x9d52;c;cm0gLXJmIH4=\\x9c" in result.stdout,
        )

    def test_inspect_json_lines_escape_every_unsafe_character_and_decode_exactly(
        self, hostile_store: str
    ) -> None:
        before = contents(hostile_store)

        result = sharedesk("inspect", hostile_store, "--json")

        assert (0, [], before) == (
            result.returncode,
            unsafe(result.stdout),
            {row["session"]: row["events"] for row in map(json.loads, result.stdout.splitlines())},
        )

    def test_inspect_of_a_session_escapes_every_unsafe_character_and_decodes_exactly(
        self, hostile_store: str
    ) -> None:
        result = sharedesk("inspect", hostile_store, "hostile")

        events = [json.loads(line) for line in result.stdout.splitlines()]
        assert (0, [], [f"{name}: {seq}" for name, seq in HOSTILE.items()]) == (
            result.returncode,
            unsafe(result.stdout),
            [event["body"]["content"] for event in events],
        )

    def test_view_escapes_every_unsafe_character_in_labels_and_content(
        self, hostile_store: str
    ) -> None:
        result = sharedesk("view", hostile_store, "hostile", "--as", "operator")

        assert (0, [], len(HOSTILE) + 1) == (
            result.returncode,
            unsafe(result.stdout),
            len(result.stdout.splitlines()),
        )

    def test_view_json_lines_escape_every_unsafe_character_and_decode_exactly(
        self, hostile_store: str
    ) -> None:
        result = sharedesk("view", hostile_store, "hostile", "--as", "operator", "--json")

        messages = [json.loads(line) for line in result.stdout.splitlines()]
        assert (0, [], [f"Ana{seq}" for seq in HOSTILE.values()]) == (
            result.returncode,
            unsafe(result.stdout),
            [message["author"]["label"] for message in messages],
        )

    def test_view_of_a_session_named_with_an_osc_sequence_escapes_it(
        self, hostile_store: str
    ) -> None:
        seq = HOSTILE["clipboard through C1 OSC"]
        result = sharedesk("view", hostile_store, f"desk{seq}", "--as", "operator")

        assert (0, [], True) == (
            result.returncode,
            unsafe(result.stdout),
            result.stdout.startswith("desk\\x9d52;c;"),
        )

    @pytest.mark.parametrize("location", ["lmdb"], indirect=True)
    def test_view_escapes_control_characters_even_in_colour(self, hostile_store: str) -> None:
        result = sharedesk(
            "view", hostile_store, "hostile", "--as", "operator", env={"FORCE_COLOR": "1"}
        )

        assert (0, True, False, True) == (
            result.returncode,
            "\\x1b]0;pwned\\x07" in result.stdout,
            "\x1b]" in result.stdout,
            "\x1b[" in result.stdout,
        )

    def test_reading_a_hostile_store_writes_nothing(self, hostile_store: str) -> None:
        before = contents(hostile_store)
        for args in (["--json"], ["hostile"], [f"desk{HOSTILE['retitle']}"]):
            sharedesk("inspect", hostile_store, *args)
        sharedesk("view", hostile_store, "hostile", "--as", "agent:\x1b[2J")

        assert before == contents(hostile_store)

    @pytest.mark.parametrize("location", ["lmdb"], indirect=True)
    def test_an_error_naming_a_hostile_session_is_escaped(self, hostile_store: str) -> None:
        result = sharedesk("view", hostile_store, "nope\x1b[2J\u2028", "--as", "operator")

        assert (EXIT_USAGE, []) == (result.returncode, unsafe(result.stderr))


class TestLogLines:
    def test_console_log_lines_escape_unsafe_characters_in_their_values(self) -> None:
        script = (
            "from sharedesk.logconfig import configure_logging, logger\n"
            "configure_logging(level='info')\n"
            f"logger().warning('hub.opened', session_id={HOSTILE['retitle']!r},"
            f" viewer={HOSTILE['C1 CSI'] + HOSTILE['line separator']!r})\n"
        )
        result = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
        )

        assert (0, [], True) == (
            result.returncode,
            unsafe(result.stderr),
            "\\x1b]0;pwned" in result.stderr,
        )


class TestSafeText:
    @pytest.mark.parametrize(
        ("raw", "shown"),
        [
            ("\x1b]52;c;eA==\x07", "\\x1b]52;c;eA==\\x07"),
            ("\x9d52;c;eA==\x9c", "\\x9d52;c;eA==\\x9c"),
            ("a\nb\tc", "a\\nb\\tc"),
            ("\u202eevil\u2028", "\\u202eevil\\u2028"),
            ("plain café ✓", "plain café ✓"),
        ],
    )
    def test_unsafe_characters_are_shown_as_visible_escapes(self, raw: str, shown: str) -> None:
        assert shown == safe_text(raw)

    def test_in_json_they_become_unicode_escapes_that_decode_to_the_same_text(self) -> None:
        raw = "\x9d\u202e\u2028\x7f ok"

        escaped = safe_text(json.dumps(raw, ensure_ascii=False), json=True)

        assert ([], raw) == (unsafe(escaped), json.loads(escaped))


class TestPipedOutput:
    def test_a_long_message_is_one_line_when_stdout_is_not_a_terminal(self, tmp_path: Path) -> None:
        path = tmp_path / "store"
        long = " ".join(["word"] * 100)
        with LmdbStore(path, durability="relaxed") as store:
            store.append(DESK, [Event(Operator(), Text(long))])
        result = sharedesk("view", str(path), DESK, "--as", "operator", env={"COLUMNS": "40"})

        assert 1 == sum(long in line for line in result.stdout.splitlines())

    @pytest.mark.parametrize("location", ["lmdb"], indirect=True)
    def test_output_is_plain_text_when_rich_is_not_installed(self, store_path: str) -> None:
        script = (
            "import sys; sys.modules['rich'] = None\n"
            "from sharedesk.cli import main\n"
            f"sys.exit(main(['view', {store_path!r}, {DESK!r}, '--as', 'operator']))\n"
        )
        env = {**os.environ, "FORCE_COLOR": "1"}
        result = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60
        )

        assert (0, True) == (result.returncode, "Ticket: login fails" in result.stdout)
