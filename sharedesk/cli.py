r"""The ``sharedesk`` command: a demo desk, and inspection of a store on disk.

- ``sharedesk demo [--path DIR]``: a scripted shared desk on LMDB (an operator, a person
  and two agents answering through ``ScriptedAdapter``, in the channel and one thread).
  It prints each turn's delta and each participant's attributed view; running it again
  continues the same desk, and the deltas show only what is new.
- ``sharedesk inspect PATH [SESSION] [--json]``: the sessions of a store with their
  event counts and last activity, or one session's events as JSON lines. It opens the
  store as one more LMDB process, so it works while a Hub has the path open elsewhere.
- ``sharedesk view PATH SESSION --as agent:ID|person:ID|operator [--thread N]
  [--window N]``: one participant's projection of a desk.

Bad input (a missing path, an unknown session, a malformed ``--as``) and every
:class:`~sharedesk.SharedeskError` end with one line on standard error and exit status 2,
never a traceback. This module is the one place that configures logging (through
:func:`sharedesk.logconfig.configure_logging`).

Human-readable output never passes text from a store to the terminal raw: control
characters (C0, DEL, C1, so every ESC, CSI and OSC sequence such as OSC 52, and the
bidirectional overrides) in contents, labels, ids and session ids are shown as visible
escapes (``\x1b``, ``\u202e``), and styles are applied to text segments, never parsed
from them (no markup injection). ``--json`` output is unchanged (JSON escapes control
characters itself). Colour and layout come from rich when it is installed (the ``cli``
extra) and standard output is a terminal; otherwise the output is plain text, written
line by line with no wrapping.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import MappingProxyType
from typing import IO, Any, Final, NoReturn

from sharedesk.actors import Hub, Turn
from sharedesk.logconfig import configure_logging
from sharedesk.projection import project_session
from sharedesk.protocol.authors import (
    Agent,
    Operator,
    Person,
    SessionAuthor,
    System,
    same_participant,
)
from sharedesk.protocol.codec import encode_json
from sharedesk.protocol.constants import SESSION_WINDOW
from sharedesk.protocol.errors import SharedeskError, ValidationError
from sharedesk.protocol.events import Event, Text
from sharedesk.protocol.validation import MAX_INT
from sharedesk.protocol.views import Conversation, SessionMessage, SessionQuery
from sharedesk.runs import ScriptedAdapter
from sharedesk.runs.types import Run, Session
from sharedesk.store.lmdb import LmdbStore

#: Exit status for bad input and for any :class:`~sharedesk.SharedeskError`.
EXIT_USAGE = 2

#: The desk the demo writes to.
DEMO_DESK = "demo-desk"

#: The file LMDB keeps its data in, inside a store directory.
LMDB_DATA_FILE = "data.mdb"

_AUTHOR_STYLE = {
    "operator": "bold yellow",
    "person": "bold cyan",
    "agent": "bold magenta",
    "system": "dim",
}


#: Characters shown as escapes: C0 controls, DEL, C1 controls, bidirectional overrides
#: and isolates (a name could otherwise reorder what follows it on the line).
_UNSAFE: Final = frozenset(
    [*range(0x00, 0x20), *range(0x7F, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
)
_ESCAPES: Final = MappingProxyType({0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"})


def safe_text(text: str) -> str:
    r"""Return ``text`` with every control character shown as a visible escape.

    ESC ``]52;c;...`` BEL (OSC 52, set the clipboard) becomes the literal text
    ``\x1b]52;c;...\x07``; a newline becomes ``\n``, so one message stays one line.

    Cost: O(len(text)).
    """
    if not any(ord(ch) in _UNSAFE for ch in text):
        return text
    parts = []
    for ch in text:
        code = ord(ch)
        if code not in _UNSAFE:
            parts.append(ch)
        elif code in _ESCAPES:
            parts.append(_ESCAPES[code])
        elif code <= 0xFF:
            parts.append(f"\\x{code:02x}")
        else:
            parts.append(f"\\u{code:04x}")
    return "".join(parts)


#: A piece of a line: text, or (text, style) with a rich style name.
Segment = str | tuple[str, str]


class Output:
    """Where the command prints: styled on a terminal with rich, else plain lines.

    Every segment is passed through :func:`safe_text`; styles are attached to segments
    (rich ``Text``), never parsed out of them.
    """

    def __init__(self, stream: IO[str] | None = None, *, styled: bool | None = None) -> None:
        """Print to ``stream`` (default: standard output at the time of the call).

        Args:
            stream: The text stream.
            styled: Use rich (colour, tables) if installed; default: ``stream`` is a
                terminal, or ``FORCE_COLOR`` is set.
        """
        self._stream = stream if stream is not None else sys.stdout
        self._console: Any = None
        if styled is None:  # FORCE_COLOR: rich's own switch for colour off a terminal
            styled = self._stream.isatty() or bool(os.environ.get("FORCE_COLOR"))
        if styled:
            try:
                from rich.console import Console
            except ImportError:
                pass
            else:
                self._console = Console(file=self._stream, highlight=False, soft_wrap=True)

    def line(self, *segments: Segment) -> None:
        """Print one line made of ``segments``. Cost: O(length of the line)."""
        if self._console is None:
            text = "".join(safe_text(s if isinstance(s, str) else s[0]) for s in segments)
            self._stream.write(text + "\n")
            return
        from rich.text import Text

        self._console.print(
            Text.assemble(
                *(safe_text(s) if isinstance(s, str) else (safe_text(s[0]), s[1]) for s in segments)
            )
        )

    def rule(self, title: str) -> None:
        """Print a section title across the line. Cost: O(width)."""
        if self._console is None:
            self._stream.write(f"-- {safe_text(title)} --\n")
            return
        from rich.text import Text

        self._console.rule(Text(safe_text(title), style="bold"))

    def table(
        self,
        title: str,
        columns: Sequence[str],
        rows: Sequence[Sequence[str]],
        *,
        right: Collection[int] = (),
    ) -> None:
        """Print a table; the columns whose index is in ``right`` are right-aligned.

        Cost: O(cells).
        """
        cells = [[safe_text(c) for c in row] for row in rows]
        if self._console is not None:
            from rich.table import Table

            table = Table(title=safe_text(title))
            for i, name in enumerate(columns):
                table.add_column(name, justify="right" if i in right else "left")
            for row in cells:
                table.add_row(*row)
            self._console.print(table)
            return
        widths = [
            max([len(name), *(len(row[i]) for row in cells)]) for i, name in enumerate(columns)
        ]

        def fmt(row: Sequence[str]) -> str:
            return "  ".join(
                c.rjust(w) if i in right else c.ljust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            ).rstrip()

        self._stream.write(safe_text(title) + "\n" + fmt(columns) + "\n")
        for row in cells:
            self._stream.write(fmt(row) + "\n")


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr and exit status 2."""

    def error(self, message: str) -> NoReturn:
        """Print ``sharedesk: error: MESSAGE`` and exit with status 2."""
        self.exit(EXIT_USAGE, f"{self.prog}: error: {safe_text(message)}\n")


def build_parser() -> argparse.ArgumentParser:
    """Return the ``sharedesk`` argument parser.

    Returns:
        The parser, with the subcommands ``demo``, ``inspect`` and ``view``.

    Cost: O(1).
    """
    parser = _Parser(
        prog="sharedesk",
        description="Shared desks for multi-agent conversations: demo and inspection.",
    )
    parser.add_argument(
        "--log-level",
        default="warning",
        help="lowest level logged to stderr: debug, info, warning (default), error",
    )
    parser.add_argument("--log-json", action="store_true", help="log JSON lines")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser(
        "demo",
        help="run (or continue) a scripted shared desk on LMDB",
        description="Run a scripted shared desk on LMDB, or continue it: an operator, a "
        "person and two scripted agents post in the channel and one thread; each agent's "
        "turn shows only what is new to it, then every participant's view is printed.",
    )
    demo.add_argument(
        "--path",
        type=Path,
        default=Path("sharedesk-data"),
        help="store directory (default ./sharedesk-data; created if missing)",
    )

    inspect = sub.add_parser(
        "inspect",
        help="list a store's sessions, or dump one session's events",
        description="List the sessions of a store (events, last activity), or print one "
        "session's events as JSON lines. Safe while another process has the store open.",
    )
    inspect.add_argument("path", type=Path, help="store directory")
    inspect.add_argument("session", nargs="?", help="session id: dump its events as JSON lines")
    inspect.add_argument("--json", action="store_true", help="list sessions as JSON lines")

    view = sub.add_parser(
        "view",
        help="print one participant's view of a desk",
        description="Print the projection of a desk (its channel, or one thread) as one "
        "participant sees it, with the participant's own messages marked.",
    )
    view.add_argument("path", type=Path, help="store directory")
    view.add_argument("session", help="session (desk) id")
    view.add_argument(
        "--as",
        dest="viewer",
        required=True,
        metavar="WHO",
        help="the participant: operator, person:ID or agent:ID",
    )
    view.add_argument("--thread", type=int, metavar="N", help="the thread rooted at sequence N")
    view.add_argument(
        "--window",
        type=int,
        default=SESSION_WINDOW,
        metavar="N",
        help=f"messages shown at most (default {SESSION_WINDOW})",
    )
    view.add_argument("--json", action="store_true", help="print messages as JSON lines")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``sharedesk`` command line.

    Args:
        argv: The arguments after the program name (default ``sys.argv[1:]``).

    Returns:
        The exit status: 0 on success, 2 on bad input or a sharedesk error.

    Cost: that of the command run.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    err = Output(sys.stderr, styled=False)
    try:
        _configure_logging(args.log_json, args.log_level)
        console = Output()
        if args.command == "demo":
            run_demo(console, args.path)
        elif args.command == "inspect":
            run_inspect(console, args.path, args.session, as_json=args.json)
        else:
            run_view(
                console,
                args.path,
                args.session,
                parse_viewer(args.viewer),
                thread=args.thread,
                window=args.window,
                as_json=args.json,
            )
    except SharedeskError as exc:
        err.line(f"sharedesk: error: {_one_line(exc)}")
        return EXIT_USAGE
    except BrokenPipeError:  # before OSError, its base class
        # Output piped into a pager or `head` that stopped reading: not an error.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError as exc:
        err.line(f"sharedesk: error: {_one_line(exc)}")
        return EXIT_USAGE
    except KeyboardInterrupt:
        err.line("sharedesk: interrupted")
        return 130
    return 0


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def _configure_logging(as_json: bool, level: str) -> None:
    """Configure structlog for the command (the one place sharedesk does so)."""
    configure_logging(json=as_json, level=level)


# -- shared helpers ----------------------------------------------------------------------


def parse_viewer(text: str) -> SessionAuthor:
    """Parse ``--as``: ``operator``, ``person:ID`` or ``agent:ID`` (the label is the ID).

    Args:
        text: The option's value.

    Returns:
        The participant.

    Raises:
        ValidationError: Any other form, or an empty ID.

    Cost: O(len(text)).
    """
    if text == "operator":
        return Operator()
    kind, sep, ident = text.partition(":")
    if sep and ident.strip() and kind in ("person", "agent"):
        return Person(id=ident, label=ident) if kind == "person" else Agent(id=ident, label=ident)
    raise ValidationError(f"--as must be operator, person:ID or agent:ID, got {text!r}")


def describe(author: SessionAuthor) -> str:
    """Return how a row's author is shown: ``"Ana (person)"``, ``"operator"``.

    Cost: O(1).
    """
    match author:
        case Operator():
            return "operator"
        case Person(label=label) | Agent(label=label):
            return f"{label} ({author_kind(author)})"
        case System(label=label, kind=kind):
            return f"{label} (system:{kind})"
    raise AssertionError(author)  # pragma: no cover - exhaustive


def author_kind(author: SessionAuthor) -> str:
    """Return ``"operator"``, ``"person"``, ``"agent"`` or ``"system"``. Cost: O(1)."""
    match author:
        case Operator():
            return "operator"
        case Person():
            return "person"
        case Agent():
            return "agent"
        case System():
            return "system"
    raise AssertionError(author)  # pragma: no cover - exhaustive


def _same(a: SessionAuthor, b: SessionAuthor) -> bool:
    return same_participant(a, b)


def render_message(console: Output, message: SessionMessage, viewer: SessionAuthor | None) -> None:
    """Print one message: sequence, attributed author, ``(you)`` mark, content.

    Replies are indented under their thread root; control characters are escaped.

    Cost: O(len(content)).
    """
    style = _AUTHOR_STYLE[author_kind(message.author)]
    mine = viewer is not None and _same(message.author, viewer)
    indent = "    ↳ " if message.parent is not None else ""
    console.line(
        f"  {indent}",
        (f"#{message.sequence:<4}", "dim"),
        " ",
        (describe(message.author), style),
        (" (you)", "green") if mine else "",
        f": {message.content}",
    )


def _check_store_path(path: Path) -> None:
    """Refuse a path that is not an existing sharedesk store (never create one here).

    Raises:
        ValidationError: ``path`` is missing, not a directory, or holds no LMDB data.
    """
    if not path.exists():
        raise ValidationError(f"no such store: {path} does not exist")
    if not path.is_dir():
        raise ValidationError(f"not a store: {path} is not a directory")
    if not (path / LMDB_DATA_FILE).is_file():
        raise ValidationError(f"not a store: {path} holds no {LMDB_DATA_FILE}")


@contextmanager
def open_existing_store(path: Path) -> Iterator[LmdbStore]:
    """Open the LMDB store at ``path`` (which must exist) and close it afterwards.

    Raises:
        ValidationError: ``path`` is not an existing store.
        StoreIOError: LMDB could not open it.

    Cost: opens the environment (one more reader process is fine for LMDB) and the
    store's writer thread; reads the whole file once to verify it (a damaged file is
    ``CorruptRecordError``, never a crash); no writes.
    """
    _check_store_path(path)
    store = LmdbStore(path, verify=True)
    try:
        yield store
    finally:
        store.close()


def _require_session(store: LmdbStore, path: Path, session_id: str) -> None:
    if store.last_sequence(session_id) == 0:
        raise ValidationError(f"unknown session {session_id!r} in {path}")


# -- inspect -----------------------------------------------------------------------------


def run_inspect(console: Output, path: Path, session_id: str | None, *, as_json: bool) -> None:
    """List the store's sessions, or print one session's events as JSON lines.

    Args:
        console: Where to print.
        path: The store directory.
        session_id: A session to dump, or ``None`` to list them all.
        as_json: List sessions as JSON lines instead of a table.

    Raises:
        ValidationError: ``path`` is not a store, or ``session_id`` is unknown.

    Cost: listing reads each session's metadata record; a dump reads the session's
    events in pages of 512; no writes.
    """
    with open_existing_store(path) as store:
        if session_id is not None:
            _require_session(store, path, session_id)
            after: int | None = None
            while True:
                page = store.read(session_id, after=after, limit=512)
                for event in page:
                    sys.stdout.write(encode_json(event).decode() + "\n")
                if len(page) < 512:
                    break
                after = page[-1].sequence
            sys.stdout.flush()
            return
        infos = store.session_infos()  # sorted by id
        if as_json:
            for info in infos:
                sys.stdout.write(
                    encode_json(
                        {
                            "session": info.session_id,
                            "events": info.last_sequence,
                            "messages": info.text_count,
                            "last_activity": info.last_activity,
                        }
                    ).decode()
                    + "\n"
                )
            sys.stdout.flush()
            return
        rows = [
            (
                info.session_id,
                f"{info.last_sequence:,}",
                f"{info.text_count:,}",
                info.last_activity.strftime("%Y-%m-%d %H:%M:%S"),
            )
            for info in infos
        ]
        columns = ("session", "events", "messages", "last activity (UTC)")
        console.table(f"sessions in {path}", columns, rows, right={1, 2})
        if not infos:
            console.line("no sessions")


# -- view --------------------------------------------------------------------------------


def _known_label(store: LmdbStore, session_id: str, who: SessionAuthor) -> SessionAuthor:
    """Return ``who`` with the label its newest row carries (its id when none is found)."""
    for event in store.read(session_id, newest_first=True, limit=2048):
        if _same(event.author, who):
            author: SessionAuthor = event.author
            return author
    return who


def run_view(
    console: Output,
    path: Path,
    session_id: str,
    viewer: SessionAuthor,
    *,
    thread: int | None,
    window: int,
    as_json: bool,
) -> None:
    """Print ``viewer``'s projection of the desk ``session_id`` (channel or thread).

    The projection is built with ``project_session`` over the store's log: the same
    messages ``hub.view`` serves, read without a Hub, so it works while a Hub has the
    store open in another process.

    Args:
        console: Where to print.
        path: The store directory.
        session_id: The desk.
        viewer: The participant (their own messages are marked).
        thread: The thread root to show, or ``None`` for the channel.
        window: Messages shown at most.
        as_json: Print one JSON object per message instead.

    Raises:
        ValidationError: ``path`` is not a store, the session is unknown, or
            ``window``/``thread`` is out of range.
        PageError: The store served a malformed page (a bug in the store).

    Cost: one projection over the session's log: at most ``SCAN_LIMIT`` rows read; no
    writes.
    """
    if not 0 <= window < MAX_INT:
        raise ValidationError(f"--window must be in [0, 2**63), got {window}")
    if thread is not None and not 1 <= thread < MAX_INT:
        raise ValidationError(f"--thread must be a sequence in [1, 2**63), got {thread}")
    with open_existing_store(path) as store:
        _require_session(store, path, session_id)
        viewer = _known_label(store, session_id, viewer)
        conversation = Conversation(session_id, thread_root=thread)
        projection = project_session(
            store.log(session_id), SessionQuery(conversation, window=window)
        )
    if as_json:
        for message in projection.messages:
            sys.stdout.write(encode_json(message).decode() + "\n")
        sys.stdout.flush()
        return
    where = "channel" if thread is None else f"thread #{thread}"
    console.line(
        (session_id, "bold"),
        f" {where} as ",
        (describe(viewer), "bold"),
        f" ({len(projection.messages)} messages"
        + (", partial: scan limit reached" if projection.partial else "")
        + ")",
    )
    for message in projection.messages:
        render_message(console, message, viewer)


# -- demo --------------------------------------------------------------------------------

OPERATOR = Operator()
ANA = Person(id="ana", label="Ana")
TRIAGE = Agent(id="triage", label="Triage")
RESEARCHER = Agent(id="researcher", label="Researcher")


def _round_number(hub: Hub) -> int:
    """Return the demo round to play: one more than the rounds already on the desk."""
    played = 0
    after: int | None = None
    while True:
        page = hub.read(DEMO_DESK, after=after, limit=512)
        for event in page:
            if (
                isinstance(event.author, Operator)
                and isinstance(event.body, Text)
                and event.body.content.startswith("Round ")
            ):
                played += 1
        if len(page) < 512:
            return played + 1
        after = page[-1].sequence


def _scripted_reply(adapter: ScriptedAdapter, turn: Turn, round_no: int) -> str:
    """Ask ``adapter`` for its reply to ``turn`` (a run whose input is the delta)."""
    prompt = "\n".join(f"{describe(m.author)}: {m.content}" for m in turn.messages)
    captured: list[Event] = []

    def emit(event: Event) -> Event:
        captured.append(event)
        return event

    run = Run(
        id=f"demo-{round_no}-{adapter.name}-{len(adapter.calls)}",
        session_id=DEMO_DESK,
        status="running",
        input=[{"role": "user", "content": prompt or "(nothing new)"}],
    )
    adapter.execute(run, Session(id=DEMO_DESK, status="active"), emit, {})
    texts = [e.body.content for e in captured if isinstance(e.body, Text)]
    return texts[-1] if texts else ""


def _show_turn(console: Output, who: SessionAuthor, where: str, turn: Turn) -> None:
    reason = "new since last turn" if turn.reason is None else f"full window: {turn.reason}"
    style = _AUTHOR_STYLE[author_kind(who)]
    console.line(
        (describe(who), style),
        f" takes a turn in {where}: {len(turn.messages)} message(s) ({reason})",
    )
    for message in turn.messages:
        render_message(console, message, who)


def _agent_turn(
    console: Output,
    hub: Hub,
    agent: Agent,
    bot: ScriptedAdapter,
    conversation: Conversation | None,
    where: str,
    round_no: int,
) -> None:
    """Let ``agent`` take a turn, show its delta, and commit the scripted reply."""
    turn = hub.turn(DEMO_DESK, agent, conversation)
    _show_turn(console, agent, where, turn)
    reply = turn.commit(_scripted_reply(bot, turn, round_no) or None)
    if reply is None:
        console.line("  ", ("committed", "green"), " (no reply)")
    else:
        console.line("  ", ("committed", "green"), f" #{reply.sequence}")
    console.line()


def run_demo(console: Output, path: Path) -> None:
    """Play one round of the scripted desk at ``path`` and print what each participant sees.

    Each run appends one round: the operator opens it, Ana files a ticket (a thread
    root), the two agents take turns (``hub.turn``) and commit their replies (written by
    ``ScriptedAdapter``s), Ana answers in the thread, and each agent takes one more turn.
    Then every participant's channel view and the thread are printed.

    Args:
        console: Where to print (colour only on a terminal).
        path: The store directory (created if missing).

    Raises:
        ValidationError: ``path`` exists and is not a directory.
        SharedeskError: The store or the Hub failed.

    Cost: about a dozen durable appends and a few projections; one Hub open and close.
    """
    if path.exists() and not path.is_dir():
        raise ValidationError(f"--path must be a directory, {path} is a file")
    with Hub.open(path) as hub:
        round_no = _round_number(hub)
        ticket = 100 + round_no
        console.rule(f"sharedesk demo: round {round_no} on {path}")
        triage_bot = ScriptedAdapter(
            [
                f"On it: ticket #{ticket} goes to Researcher. Details in the thread.",
                f"Agreed with the retry plan for #{ticket}; scheduling the fix tonight.",
            ],
            name="triage",
        )
        researcher_bot = ScriptedAdapter(
            [
                f"Ticket #{ticket}: the EU gateway times out after 30 s; a retry with "
                "backoff should cover it.",
                f"Fix for #{ticket} queued behind tonight's deploy.",
            ],
            name="researcher",
        )
        desk = hub.session(DEMO_DESK)
        desk.post(OPERATOR, f"Round {round_no}: please triage today's tickets.")
        root = desk.post(ANA, f"Ticket #{ticket}: checkout times out for EU customers.")
        thread = Conversation(DEMO_DESK, thread_root=root.sequence)
        where_thread = f"thread #{root.sequence}"
        console.line((f"operator and Ana posted; Ana's ticket is thread #{root.sequence}", "dim"))
        console.line()

        _agent_turn(console, hub, TRIAGE, triage_bot, None, "the channel", round_no)
        _agent_turn(console, hub, RESEARCHER, researcher_bot, thread, where_thread, round_no)

        answer = desk.post(ANA, "Thanks! Retry with backoff sounds right.", parent=root.sequence)
        console.line((f"Ana answered in {where_thread} (#{answer.sequence})", "dim"))
        console.line()

        _agent_turn(console, hub, TRIAGE, triage_bot, thread, where_thread, round_no)
        _agent_turn(console, hub, RESEARCHER, researcher_bot, thread, where_thread, round_no)

        console.rule("what each participant sees in the channel")
        for who in (OPERATOR, ANA, TRIAGE, RESEARCHER):
            projection = hub.view(DEMO_DESK, who, window=8)
            console.line((describe(who), "bold"))
            for message in projection.messages:
                render_message(console, message, who)
        console.rule(f"{where_thread} as Ana")
        for message in hub.view(DEMO_DESK, ANA, thread, window=8).messages:
            render_message(console, message, ANA)
        console.line()
        hint = f"Run it again to continue the desk; inspect it with `sharedesk inspect {path}`."
        console.line((hint, "dim"))


if __name__ == "__main__":  # pragma: no cover - the installed entry point calls main()
    sys.exit(main())
