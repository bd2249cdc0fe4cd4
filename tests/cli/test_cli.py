"""The ``sharedesk`` command, end to end in subprocesses (plus its pure helpers in-process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sharedesk import Agent, Event, Operator, Person, Text, ValidationError
from sharedesk.cli import EXIT_USAGE, describe, parse_viewer
from sharedesk.store.lmdb import LmdbStore

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


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    """A store with a small desk: a channel post, a ticket (thread root) and a reply."""
    path = tmp_path / "store"
    with LmdbStore(path, durability="relaxed") as store:
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
    return path


WRITER = textwrap.dedent(
    """
    import sys, time
    from sharedesk import Operator
    from sharedesk.actors import Hub

    hub = Hub.open(sys.argv[1], durability="relaxed")
    desk = hub.session("live")
    desk.post(Operator(), "first")
    print("ready", flush=True)
    while True:
        desk.post(Operator(), "more")
        time.sleep(0.002)
    """
)


@pytest.fixture
def live_writer(tmp_path: Path) -> Iterator[Path]:
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
        yield path
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
        self, store_path: Path
    ) -> None:
        """Like `sharedesk inspect PATH | head -0`: a closed pipe is not an error."""
        read_end, write_end = os.pipe()
        os.close(read_end)  # closed before the child writes: its first write breaks
        try:
            result = subprocess.run(
                [sys.executable, "-m", "sharedesk.cli", "inspect", str(store_path), "--json"],
                stdout=write_end,
                stderr=subprocess.PIPE,
                text=True,
                timeout=60,
                cwd=CHECKOUT,
            )
        finally:
            os.close(write_end)

        assert (0, "") == (result.returncode, result.stderr)

    def test_inspect_lists_sessions_with_event_counts(self, store_path: Path) -> None:
        result = sharedesk("inspect", str(store_path), "--json")

        rows = [json.loads(line) for line in result.stdout.splitlines()]
        assert 0 == result.returncode, result.stderr
        assert {DESK: 3, "other": 1} == {row["session"]: row["events"] for row in rows}
        assert all(row["last_activity"] for row in rows)

    def test_inspect_lists_sessions_sorted_by_id(self, store_path: Path) -> None:
        result = sharedesk("inspect", str(store_path), "--json")

        assert [DESK, "other"] == [
            json.loads(line)["session"] for line in result.stdout.splitlines()
        ]

    def test_inspect_table_names_each_session(self, store_path: Path) -> None:
        result = sharedesk("inspect", str(store_path))

        assert 0 == result.returncode, result.stderr
        assert DESK in result.stdout and "other" in result.stdout

    def test_inspect_session_dumps_its_events_as_json_lines_in_order(
        self, store_path: Path
    ) -> None:
        result = sharedesk("inspect", str(store_path), DESK)

        events = [json.loads(line) for line in result.stdout.splitlines()]
        assert 0 == result.returncode, result.stderr
        assert [1, 2, 3] == [e["sequence"] for e in events]
        assert ["Welcome", "Ticket: login fails", "Looking"] == [
            e["body"]["content"] for e in events
        ]

    def test_inspect_works_while_another_process_writes(self, live_writer: Path) -> None:
        first = sharedesk("inspect", str(live_writer), "--json")
        time.sleep(0.2)
        second = sharedesk("inspect", str(live_writer), "--json")

        counts = [json.loads(r.stdout.splitlines()[0])["events"] for r in (first, second)]
        assert (0, 0) == (first.returncode, second.returncode), first.stderr + second.stderr
        assert counts[0] >= 1
        assert counts[1] > counts[0]

    def test_inspect_session_works_while_another_process_writes(self, live_writer: Path) -> None:
        result = sharedesk("inspect", str(live_writer), "live")

        sequences = [json.loads(line)["sequence"] for line in result.stdout.splitlines()]
        assert 0 == result.returncode, result.stderr
        assert list(range(1, len(sequences) + 1)) == sequences


class TestView:
    def test_view_prints_the_channel_with_the_viewer_own_messages_marked(
        self, store_path: Path
    ) -> None:
        result = sharedesk("view", str(store_path), DESK, "--as", "person:ana")

        lines = result.stdout.splitlines()
        assert 0 == result.returncode, result.stderr
        assert "channel as Ana (person)" in lines[0]
        assert ["Welcome", "Ticket: login fails (you)", "Looking"] == [
            _content_and_mark(line) for line in lines[1:]
        ]

    def test_view_of_a_thread_shows_root_and_replies(self, store_path: Path) -> None:
        result = sharedesk(
            "view", str(store_path), DESK, "--as", "agent:a1", "--thread", "2", "--json"
        )

        messages = [json.loads(line) for line in result.stdout.splitlines()]
        assert 0 == result.returncode, result.stderr
        assert [2, 3] == [m["sequence"] for m in messages]
        assert [None, 2] == [m["parent"] for m in messages]

    def test_view_window_limits_the_messages(self, store_path: Path) -> None:
        result = sharedesk(
            "view", str(store_path), DESK, "--as", "operator", "--window", "1", "--json"
        )

        messages = [json.loads(line) for line in result.stdout.splitlines()]
        assert 0 == result.returncode, result.stderr
        assert 1 == len(messages)


def _content_and_mark(line: str) -> str:
    """``"  #2    Ana (person) (you): text"`` -> ``"text (you)"``."""
    head, _, content = line.partition(": ")
    return content + (" (you)" if "(you)" in head else "")


class TestBadInput:
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
        self, store_path: Path, tmp_path: Path, args: list[str], says: str
    ) -> None:
        (tmp_path / "empty").mkdir()
        paths = {
            "{missing}": str(tmp_path / "missing"),
            "{empty}": str(tmp_path / "empty"),
            "{store}": str(store_path),
        }

        result = sharedesk(*[paths.get(a, a) for a in args])

        assert EXIT_USAGE == result.returncode
        assert 1 == len(result.stderr.strip().splitlines()), result.stderr
        assert says in result.stderr
        assert "" == result.stdout

    def test_inspect_of_a_missing_path_creates_nothing(self, tmp_path: Path) -> None:
        sharedesk("inspect", str(tmp_path / "missing"))

        assert not (tmp_path / "missing").exists()


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
    "C1 CSI": "\x9b31m",
    "bell and backspace": "\x07\x08",
    "bidi override": "\u202e",
}


@pytest.fixture
def hostile_store(tmp_path: Path) -> Path:
    """A desk whose session id, labels, ids and contents all carry control sequences."""
    path = tmp_path / "store"
    with LmdbStore(path, durability="relaxed") as store:
        for name, seq in HOSTILE.items():
            store.append(
                f"desk{seq}",
                [Event(Person(id=f"ana{seq}", label=f"Ana{seq}"), Text(f"{name}: {seq}"))],
            )
    return path


def controls(text: str) -> list[str]:
    """The control characters in ``text`` other than the newlines ending its lines."""
    return [ch for ch in text.replace("\n", "") if ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0]


class TestHostileContent:
    def test_inspect_lists_session_ids_with_their_control_characters_escaped(
        self, hostile_store: Path
    ) -> None:
        result = sharedesk("inspect", str(hostile_store))

        assert (0, [], True) == (
            result.returncode,
            controls(result.stdout),
            "desk\\x1b]52;c;cm0gLXJmIH4=\\x07" in result.stdout,
        )

    @pytest.mark.parametrize("name", sorted(HOSTILE))
    def test_view_escapes_control_characters_in_labels_and_content(
        self, hostile_store: Path, name: str
    ) -> None:
        seq = HOSTILE[name]
        result = sharedesk("view", str(hostile_store), f"desk{seq}", "--as", "operator")

        assert (0, [], "\u202e" in result.stdout) == (
            result.returncode,
            controls(result.stdout),
            False,
        )

    def test_view_escapes_control_characters_even_in_colour(self, hostile_store: Path) -> None:
        seq = HOSTILE["retitle"]
        result = sharedesk(
            "view", str(hostile_store), f"desk{seq}", "--as", "operator", env={"FORCE_COLOR": "1"}
        )

        assert (0, True, False) == (
            result.returncode,
            "\\x1b]0;pwned\\x07" in result.stdout,
            "\x1b]" in result.stdout,
        )

    def test_json_output_keeps_the_content_exactly(self, hostile_store: Path) -> None:
        seq = HOSTILE["clipboard (OSC 52)"]
        result = sharedesk("inspect", str(hostile_store), f"desk{seq}")

        assert f"clipboard (OSC 52): {seq}" == json.loads(result.stdout)["body"]["content"]

    def test_an_error_naming_a_hostile_session_is_escaped(self, hostile_store: Path) -> None:
        result = sharedesk("view", str(hostile_store), "nope\x1b[2J", "--as", "operator")

        assert (EXIT_USAGE, []) == (result.returncode, controls(result.stderr))


class TestPipedOutput:
    def test_a_long_message_is_one_line_when_stdout_is_not_a_terminal(self, tmp_path: Path) -> None:
        path = tmp_path / "store"
        long = " ".join(["word"] * 100)
        with LmdbStore(path, durability="relaxed") as store:
            store.append(DESK, [Event(Operator(), Text(long))])
        result = sharedesk("view", str(path), DESK, "--as", "operator", env={"COLUMNS": "40"})

        assert 1 == sum(long in line for line in result.stdout.splitlines())

    def test_output_is_plain_text_when_rich_is_not_installed(self, store_path: Path) -> None:
        script = (
            "import sys; sys.modules['rich'] = None\n"
            "from sharedesk.cli import main\n"
            f"sys.exit(main(['view', {str(store_path)!r}, {DESK!r}, '--as', 'operator']))\n"
        )
        env = {**os.environ, "FORCE_COLOR": "1"}
        result = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60
        )

        assert (0, True) == (result.returncode, "Ticket: login fails" in result.stdout)
