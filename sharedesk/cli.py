r"""The ``sharedesk`` command: ``demo``, ``inspect`` and ``view`` (``sharedesk --help``).

A store is an LMDB directory or a PostgreSQL DSN; ``inspect`` and ``view`` never create
or write one. Bad input and every :class:`~sharedesk.SharedeskError` end with one line on
stderr and exit status 2. All output goes through :func:`safe_text`, so a stored string
can never drive the terminal. This module is the one place that configures logging.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
from collections.abc import Collection, Sequence
from datetime import timedelta
from pathlib import Path
from types import MappingProxyType
from typing import IO, TYPE_CHECKING, Any, Final, NoReturn

import msgspec

from sharedesk.actors import Hub, Turn
from sharedesk.logconfig import configure_logging
from sharedesk.projection import project_session
from sharedesk.protocol.authors import Agent, Operator, Person, SessionAuthor, System
from sharedesk.protocol.authors import same_participant as _same
from sharedesk.protocol.constants import SESSION_WINDOW
from sharedesk.protocol.errors import SharedeskError, StoreIOError, ValidationError
from sharedesk.protocol.validation import check_int, check_optional_int, is_postgres_dsn
from sharedesk.protocol.views import Conversation, SessionMessage, SessionQuery
from sharedesk.store.lmdb import LmdbStore

if TYPE_CHECKING:
    from sharedesk.store.postgres import PostgresStore

#: Exit status for bad input and for any :class:`~sharedesk.SharedeskError`.
EXIT_USAGE = 2
#: The desk the demo writes to.
DEMO_DESK = "demo-desk"
#: The file LMDB keeps its data in, inside a store directory.
LMDB_DATA_FILE = "data.mdb"
_PAGE = 512  # rows read per page when a command walks a whole session

_STYLES: Final = MappingProxyType(
    {Operator: "bold yellow", Person: "bold cyan", Agent: "bold magenta"}
)

#: Characters never printed raw: C0 controls, DEL, C1 controls, the line and paragraph
#: separators, and the bidirectional embeddings, overrides and isolates (a name could
#: otherwise reorder what follows it on the line).
_UNSAFE: Final = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_SHORT: Final = MappingProxyType({"\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _visible(match: re.Match[str]) -> str:
    code = ord(match[0])
    return _SHORT.get(match[0]) or (f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}")


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match[0]):04x}"


def safe_text(text: str, *, json: bool = False) -> str:
    r"""Return ``text`` with every unsafe character shown as an escape. Cost: O(len(text)).

    A newline becomes ``\n``, so one message stays one line. With ``json`` (``text`` is a
    JSON document) they become ``\uXXXX`` escapes, so it still decodes to the same value.
    """
    return _UNSAFE.sub(_json_escape if json else _visible, text)


#: A piece of a line: text, or (text, style) with a rich style name.
Segment = str | tuple[str, str]


class Output:
    """Where a command prints (``stream``, default stdout): with rich if ``styled``, else plain.

    ``styled`` defaults to ``stream`` being a terminal or ``FORCE_COLOR`` being set. Every
    segment goes through :func:`safe_text`; styles are attached to segments, never parsed.
    """

    def __init__(self, stream: IO[str] | None = None, *, styled: bool | None = None) -> None:
        self._stream = stream if stream is not None else sys.stdout
        self._console: Any = None
        if styled is None:
            styled = self._stream.isatty() or bool(os.environ.get("FORCE_COLOR"))
        if styled:
            with contextlib.suppress(ImportError):
                from rich.console import Console

                self._console = Console(file=self._stream, highlight=False, soft_wrap=True)

    def line(self, *segments: Segment) -> None:
        """Print one line made of ``segments``. Cost: O(length of the line)."""
        parts = [
            (safe_text(s), "") if isinstance(s, str) else (safe_text(s[0]), s[1]) for s in segments
        ]
        if self._console is None:
            self._stream.write("".join(text for text, _ in parts) + "\n")
        else:
            from rich.text import Text as RichText

            self._console.print(RichText.assemble(*parts))

    def json(self, value: Any) -> None:
        """Print ``value`` as one JSON line, unsafe characters escaped. Cost: O(size)."""
        self._stream.write(safe_text(msgspec.json.encode(value).decode(), json=True) + "\n")

    def table(
        self, columns: Sequence[str], rows: Sequence[Sequence[str]], right: Collection[int]
    ) -> None:
        """Print aligned columns, a bold header first; those in ``right`` right-aligned."""
        cells = [[safe_text(c) for c in row] for row in (columns, *rows)]
        widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
        for n, row in enumerate(cells):
            padded = (
                c.rjust(w) if i in right else c.ljust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
            self.line(("  ".join(padded).rstrip(), "bold" if n == 0 else ""))


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """Print ``sharedesk: error: MESSAGE`` on stderr and exit with status 2."""
        self.exit(EXIT_USAGE, f"{self.prog}: error: {safe_text(message)}\n")


def build_parser() -> argparse.ArgumentParser:
    """Return the ``sharedesk`` argument parser (subcommands ``demo``, ``inspect``, ``view``)."""
    store = "an LMDB store directory or a PostgreSQL DSN (postgresql://...)"
    parser = _Parser(prog="sharedesk", description="Shared desks for multi-agent conversations.")
    parser.add_argument(
        "--log-level", default="warning", help="debug, info, warning (default) or error"
    )
    parser.add_argument("--log-json", action="store_true", help="log JSON lines")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = sub.add_parser("demo", help="play the next round of a scripted shared desk")
    demo.add_argument("--path", default="sharedesk-data", metavar="STORE", help=store)
    inspect = sub.add_parser("inspect", help="list a store's sessions, or dump one's events")
    inspect.add_argument("store", metavar="STORE", help=store)
    inspect.add_argument(
        "session", nargs="?", metavar="SESSION", help="a session: print its events as JSON lines"
    )
    inspect.add_argument("--json", action="store_true", help="list sessions as JSON lines")
    view = sub.add_parser("view", help="print one participant's view of a desk")
    view.add_argument("store", metavar="STORE", help=store)
    view.add_argument("session", metavar="SESSION", help="the desk (session id)")
    view.add_argument(
        "--as", dest="viewer", required=True, metavar="WHO", help="operator, person:ID or agent:ID"
    )
    view.add_argument("--thread", type=int, metavar="N", help="the thread rooted at sequence N")
    view.add_argument(
        "--window", type=int, default=SESSION_WINDOW, metavar="N", help="most messages shown"
    )
    view.add_argument("--json", action="store_true", help="print messages as JSON lines")
    serve = sub.add_parser("serve", help="serve a store's desks as a web page and JSON API")
    serve.add_argument("store", metavar="STORE", help=store)
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8765, help="port (default 8765)")
    serve.add_argument("--tokens", metavar="FILE", help="TOKEN KIND:ID[:LABEL] a line")
    mcp = sub.add_parser("mcp", help="serve desks over MCP (stdio, or --http with --tokens)")
    mcp.add_argument("store", metavar="STORE", help=store)
    mcp.add_argument("--as", dest="participant", metavar="KIND:ID[:LABEL]", help="over stdio")
    mcp.add_argument("--http", metavar="HOST:PORT", help="serve streamable HTTP at /mcp")
    mcp.add_argument("--tokens", metavar="FILE", help="lines TOKEN KIND:ID[:LABEL] (--http)")
    retain = sub.add_parser("retain", help="archive and remove a store's compacted rows")
    retain.add_argument("store", metavar="STORE", help=store)
    retain.add_argument("--desk", metavar="SESSION", help="one desk (default: every desk)")
    retain.add_argument("--keep-last", type=int, metavar="N", help="the newest N rows stay")
    retain.add_argument("--max-age", type=float, metavar="SECONDS", help="only older rows go")
    retain.add_argument(
        "--prune-first", action="append", metavar="KIND", help="a body kind that goes first"
    )
    retain.add_argument("--archive", metavar="DIR", help="write each row to DIR/<desk>.jsonl")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); return the exit status.

    The status is 0 on success, 2 on bad input or a sharedesk error, 130 on Ctrl-C.
    """
    args = build_parser().parse_args(argv)
    err = Output(sys.stderr, styled=False)
    try:
        configure_logging(json=args.log_json, level=args.log_level)
        console = Output()
        if args.command == "demo":
            run_demo(console, args.path)
        elif args.command == "mcp":
            from sharedesk.servers.mcp import run_mcp

            run_mcp(args.store, args.participant, args.http, args.tokens)
        elif args.command == "retain":
            run_retain(console, args)
        elif args.command == "inspect":
            run_inspect(console, args.store, args.session, as_json=args.json)
        elif args.command == "serve":
            from sharedesk.servers.web import serve  # the web extra loads on use

            serve(args.store, host=args.host, port=args.port, tokens=args.tokens)
        else:
            run_view(console, args)
        sys.stdout.flush()
    except BrokenPipeError:  # before OSError, its base: a pager or `head` stopped reading
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (SharedeskError, OSError, ImportError) as exc:
        err.line(f"sharedesk: error: {_one_line(exc)}")
        return EXIT_USAGE
    except KeyboardInterrupt:
        err.line("sharedesk: interrupted")
        return 130
    return 0


def _one_line(exc: BaseException) -> str:
    # A store's I/O error gets its cause's message too, unless it holds it (a reason).
    text = " ".join(str(exc).split()) or type(exc).__name__
    cause = " ".join(str(exc.__cause__ or "").split())
    if isinstance(exc, StoreIOError) and cause and cause not in text:
        text += f": {cause}"
    return text


def parse_viewer(text: str) -> SessionAuthor:
    """Parse ``--as``: ``operator``, ``person:ID`` or ``agent:ID`` (the label is the ID)."""
    if text == "operator":
        return Operator()
    kind, sep, ident = text.partition(":")
    if sep and ident.strip() and kind in ("person", "agent"):
        return Person(id=ident, label=ident) if kind == "person" else Agent(id=ident, label=ident)
    raise ValidationError(f"--as must be operator, person:ID or agent:ID, got {text!r}")


def describe(author: SessionAuthor) -> str:
    """Return how a row's author is shown: ``"Ana (person)"``, ``"operator"``."""
    match author:
        case Person(label=label) | Agent(label=label):
            return f"{label} ({type(author).__name__.lower()})"
        case System(label=label, kind=kind):
            return f"{label} (system:{kind})"
    return "operator"


def render_message(console: Output, message: SessionMessage, viewer: SessionAuthor | None) -> None:
    """Print one message: sequence, author, a ``(you)`` mark, content; replies indented."""
    mine = viewer is not None and _same(message.author, viewer)
    console.line(
        "      ↳ " if message.parent is not None else "  ",
        (f"#{message.sequence:<4}", "dim"),
        " ",
        (describe(message.author), _STYLES.get(type(message.author), "dim")),
        (" (you)", "green") if mine else "",
        f": {message.content}",
    )


def shown(location: str) -> str:
    """Return how a store is named in output: a DSN as ``PostgresStore.path``, no password."""
    if not is_postgres_dsn(location):
        return location
    from sharedesk.store.postgres import redact_dsn

    try:
        return redact_dsn(location)
    except Exception:  # a DSN psycopg cannot parse: opening the store says why
        return "postgresql://?"


def open_existing_store(location: str, session_id: str | None = None) -> LmdbStore | PostgresStore:
    """Open the store at ``location`` (an LMDB directory or a DSN), which must exist.

    Raises ``ValidationError`` when it is not an existing store, or holds no
    ``session_id`` (when given). Cost: LMDB verifies the whole file once
    (``verify=True``); no writes.
    """
    store: LmdbStore | PostgresStore
    if is_postgres_dsn(location):
        from sharedesk import PostgresStore  # the lazy export names the missing extra

        store = PostgresStore(location, create=False)
    else:
        path = Path(location)
        if not path.is_dir():
            missing = "does not exist" if not path.exists() else "is not a directory"
            raise ValidationError(f"no such store: {path} {missing}")
        if not (path / LMDB_DATA_FILE).is_file():
            raise ValidationError(f"not a store: {path} holds no {LMDB_DATA_FILE}")
        store = LmdbStore(path, verify=True)
    try:
        if session_id is not None and store.last_sequence(session_id) == 0:
            raise ValidationError(f"unknown session {session_id!r} in {shown(location)}")
    except BaseException:
        store.close()
        raise
    return store


def run_inspect(console: Output, location: str, session_id: str | None, *, as_json: bool) -> None:
    """List the sessions, or print one's events up to its last sequence as JSON lines."""
    with open_existing_store(location, session_id) as store:
        if session_id is not None:
            last = store.last_sequence(session_id)
            after = store.session_state(session_id).archived_through
            while after < last:
                page = store.read(session_id, after=after, before=last + 1, limit=_PAGE)
                for event in page:
                    console.json(event)
                after = last if not page else page[-1].sequence or last
            return
        rows = [
            (i.session_id, i.last_sequence, i.text_count, i.last_activity)
            for i in store.session_infos()
        ]
    if as_json:
        keys = ("session", "events", "messages", "last_activity")
        for row in rows:
            console.json(dict(zip(keys, row, strict=True)))
        return
    console.line(f"sessions in {shown(location)}")
    cells = [(sid, f"{n:,}", f"{texts:,}", f"{at:%Y-%m-%d %H:%M:%S}") for sid, n, texts, at in rows]
    console.table(("session", "events", "messages", "last activity (UTC)"), cells, right={1, 2})
    if not rows:
        console.line("no sessions")


def run_view(console: Output, args: argparse.Namespace) -> None:
    """Print a viewer's projection of a desk's channel or thread: ``hub.view`` without a Hub.

    The viewer's own messages are marked, the viewer shown with its newest row's label.
    """
    session_id, viewer = args.session, parse_viewer(args.viewer)
    window = check_int("--window", args.window)
    thread = check_optional_int("--thread", args.thread, minimum=1)
    with open_existing_store(args.store, session_id) as store:
        recent = store.read(session_id, newest_first=True, limit=2048)
        viewer = next((e.author for e in recent if _same(e.author, viewer)), viewer)
        query = SessionQuery(Conversation(session_id, thread_root=thread), window=window)
        projection = project_session(store.log(session_id), query)
    if args.json:
        for message in projection.messages:
            console.json(message)
        return
    partial = ", partial: scan limit reached" if projection.partial else ""
    console.line(
        (session_id, "bold"),
        " channel as " if thread is None else f" thread #{thread} as ",
        (describe(viewer), "bold"),
        f" ({len(projection.messages)} messages{partial})",
    )
    for message in projection.messages:
        render_message(console, message, viewer)


OPERATOR = Operator()
ANA = Person(id="ana", label="Ana")
TRIAGE = Agent(id="triage", label="Triage")
RESEARCHER = Agent(id="researcher", label="Researcher")

#: One round after the operator's opening and Ana's ticket (a thread root): who acts, in
#: the thread or not, and what they write (``{t}``: the ticket).
_ROUND: Final = (
    (TRIAGE, False, "On it: ticket #{t} goes to Researcher. Details in the thread."),
    (RESEARCHER, True, "Ticket #{t}: the EU gateway times out; a retry with backoff fixes it."),
    (ANA, True, "Thanks! Retry with backoff sounds right."),
    (TRIAGE, True, "Agreed with the retry plan for #{t}; scheduling the fix tonight."),
    (RESEARCHER, True, "Fix for #{t} queued behind tonight's deploy."),
)


def run_demo(console: Output, location: str) -> None:
    """Play the next round of the scripted desk at ``location`` (created if missing).

    The operator opens the round and Ana files a ticket, then :data:`_ROUND` plays (each
    agent's turn shows only what is new to it), then every participant's view is printed.
    """
    if not is_postgres_dsn(location) and Path(location).is_file():
        raise ValidationError(f"--path must be a directory or a DSN, {location} is a file")
    with Hub.open(location) as hub:
        round_no = hub.last_sequence(DEMO_DESK) // (len(_ROUND) + 2) + 1
        console.line((f"-- sharedesk demo: round {round_no} on {shown(location)} --", "bold"))
        desk = hub.session(DEMO_DESK)
        desk.post(OPERATOR, f"Round {round_no}: please triage today's tickets.")
        root = desk.post(ANA, f"Ticket #{100 + round_no}: checkout times out for EU customers.")
        thread = Conversation(DEMO_DESK, thread_root=root.sequence)
        console.line((f"operator and Ana posted; Ana's ticket is thread #{root.sequence}", "dim"))
        for who, in_thread, text in _ROUND:
            reply, where = text.format(t=100 + round_no), thread if in_thread else None
            name = f"thread #{root.sequence}" if in_thread else "the channel"
            if isinstance(who, Person):
                posted = desk.post(who, reply, parent=root.sequence)
                console.line((f"Ana answered in {name} (#{posted.sequence})", "dim"))
                continue
            turn: Turn = hub.turn(DEMO_DESK, who, where)
            reason = "new since last turn" if turn.reason is None else f"full window: {turn.reason}"
            console.line(
                (describe(who), "bold magenta"),
                f" takes a turn in {name}: {len(turn.messages)} message(s) ({reason})",
            )
            for message in turn.messages:
                render_message(console, message, who)
            committed = turn.commit(reply)
            console.line("  ", ("committed", "green"), f" #{committed and committed.sequence}")
        console.line(("-- what each participant sees --", "bold"))
        views: list[tuple[SessionAuthor, Conversation | None]] = [
            *((member, None) for member in (OPERATOR, ANA, TRIAGE, RESEARCHER)),
            (ANA, thread),
        ]
        for member, where in views:
            suffix = f" in thread #{root.sequence}" if where else ""
            console.line((describe(member) + suffix, "bold"))
            for message in hub.view(DEMO_DESK, member, where, window=8).messages:
                render_message(console, message, member)
    console.line((f"Run it again to continue; then: sharedesk inspect {shown(location)}", "dim"))


def run_retain(console: Output, args: argparse.Namespace) -> None:
    """Apply the retention policy of ``args`` to the store; print one line per desk."""
    from sharedesk.projection.retention import RetentionPolicy
    from sharedesk.store.retention import apply_retention

    max_age = None if args.max_age is None else timedelta(seconds=args.max_age)
    prune = ("TextDelta",) if args.prune_first is None else tuple(args.prune_first)
    policy = RetentionPolicy(args.keep_last, max_age, prune, args.archive)
    with open_existing_store(args.store, args.desk) as store:
        report = apply_retention(store, policy, args.desk)
    for desk, removed in report.removed.items():
        through = report.archived_through[desk]
        console.line(f"{desk}: removed {removed:,} rows, archived through {through:,}")


if __name__ == "__main__":  # pragma: no cover - the installed entry point calls main()
    sys.exit(main())
