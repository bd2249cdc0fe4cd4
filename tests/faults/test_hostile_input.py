"""Hostile input at every public entry point: a result or ``ValidationError``, never a crash.

Hypothesis generates events, ids, conversations, bounds and states mixing valid values
with the hostile kinds the contract names (nesting past 64 levels, lone surrogates,
integers outside ``0 <= n < 2**63`` or ``bool``s, empty author ids and kinds, session ids
empty or past 256 UTF-8 bytes, non-events in a batch, non-JSON containers). Every call
must either succeed, and then ``append`` returns what ``read`` returns, or raise
``ValidationError`` and write nothing. Through a Hub, no actor crashes and no desk is
marked failed, however many hostile calls arrive. Each test counts its cases for the
README's Reliability table (see ``tests.faults.counting``).
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import structlog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sharedesk import (
    Agent,
    ConcurrencyError,
    Conversation,
    Event,
    Hub,
    LmdbStore,
    MemoryStore,
    Operator,
    Person,
    PresentSetOverflow,
    RunFinished,
    SessionQuery,
    SharingQuery,
    SharingState,
    SharingStateConflict,
    System,
    Text,
    ToolCall,
    ToolResult,
    TranscriptBuilder,
    ValidationError,
    WatermarkRegression,
    initialized_state,
    note_present,
    prepare_delta,
    project_session,
)
from sharedesk.cli import Output, main, parse_viewer, render_message, safe_text
from sharedesk.logconfig import LOGGER_NAME
from sharedesk.protocol.views import SessionMessage
from sharedesk.store.postgres import PostgresStore
from tests.faults.counting import FaultCounter
from tests.store.contract import append_shared

#: Every test here: no deadline (shared 2-core machine), fixtures reused across examples.
FAULTS = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

SURROGATES = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
CONTROL = st.characters(min_codepoint=0, max_codepoint=0x9F)
#: Text mixing ordinary characters, control characters and lone surrogates.
HOSTILE_TEXT = st.text(
    st.one_of(st.characters(codec="utf-8"), CONTROL, SURROGATES), min_size=0, max_size=12
)
#: Integers around every boundary the contract names, and bools.
HOSTILE_INTS = st.one_of(
    st.integers(min_value=-3, max_value=5),
    st.sampled_from([2**63 - 1, 2**63, 2**64, -(2**63), 10**30]),
    st.booleans(),
)


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for index in range(depth):
        value = {"d": value} if index % 2 else [value]
    return value


#: JSON-like values, with sets, tuples and depth from flat to far past 64.
VALUES = st.one_of(
    st.recursive(
        st.one_of(st.none(), st.booleans(), HOSTILE_INTS, st.floats(), HOSTILE_TEXT),
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.dictionaries(HOSTILE_TEXT, inner, max_size=3),
            st.tuples(inner, inner),
            st.frozensets(st.integers(0, 9), max_size=3),
        ),
        max_leaves=8,
    ),
    st.integers(min_value=60, max_value=300).map(nested),
)
AUTHORS = st.one_of(
    st.just(Operator()),
    st.builds(Person, id=HOSTILE_TEXT, label=HOSTILE_TEXT),
    st.builds(Agent, id=HOSTILE_TEXT, label=HOSTILE_TEXT),
    st.builds(System, kind=HOSTILE_TEXT, label=HOSTILE_TEXT),
)
BODIES = st.one_of(
    st.builds(Text, HOSTILE_TEXT),
    st.builds(ToolCall, HOSTILE_TEXT, HOSTILE_TEXT, st.dictionaries(HOSTILE_TEXT, VALUES)),
    st.builds(ToolResult, HOSTILE_TEXT, VALUES),
    st.builds(
        RunFinished,
        st.sampled_from(["completed", "failed", "bogus"]),
        token_usage=st.dictionaries(HOSTILE_TEXT, VALUES, max_size=2),
    ),
)
EVENTS = st.builds(
    Event,
    AUTHORS,
    BODIES,
    id=st.one_of(st.uuids().map(lambda u: u.hex), HOSTILE_TEXT),
    parent=st.one_of(st.none(), HOSTILE_INTS),
    run_id=st.one_of(st.none(), HOSTILE_TEXT),
    metadata=st.dictionaries(HOSTILE_TEXT, VALUES, max_size=3),
)
#: A batch: events, with now and then something that is not one.
BATCHES = st.lists(
    st.one_of(EVENTS, EVENTS, st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)),
    max_size=4,
)
SESSION_IDS = st.one_of(
    st.sampled_from(["desk", "x" * 256, "x" * 257, "界" * 86, ""]),
    HOSTILE_TEXT,
    st.integers(),
    st.none(),
)
CONVERSATIONS = st.builds(
    Conversation, st.one_of(st.just("desk"), HOSTILE_TEXT), st.one_of(st.none(), HOSTILE_INTS)
)


def stored(store: Any, session_id: str) -> list[Event]:
    try:
        return list(store.read(session_id))
    except ValidationError:
        return []


def contents(store: Any) -> dict[str, list[Event]]:
    """Return everything ``store`` holds, session by session (to check nothing was written)."""
    return {session_id: store.read(session_id) for session_id in store.sessions()}


def sharing_state(store: Any, viewer: Any, conversation: Any) -> Any:
    """Return the stored state of ``desk`` for (viewer, conversation), or the refusal's type."""
    try:
        return store.get_sharing_state("desk", viewer, conversation)
    except ValidationError as exc:
        return type(exc)


@pytest.fixture(params=["memory", "lmdb", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    opened: Any
    if request.param == "memory":
        opened = MemoryStore()
    elif request.param == "lmdb":
        opened = LmdbStore(tmp_path, durability="relaxed")
    else:
        opened = PostgresStore(request.getfixturevalue("postgres_dsn"))
    with opened:
        yield opened


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[Hub]:
    with Hub.open(tmp_path / "hub", durability="relaxed", max_restarts=0) as opened:
        yield opened


class TestStores:
    @FAULTS
    @given(session_id=SESSION_IDS, batch=BATCHES, version=st.one_of(st.none(), HOSTILE_INTS))
    def test_append_stores_what_it_returns_or_refuses_and_writes_nothing(
        self, store: Any, fault_counter: FaultCounter, session_id: Any, batch: Any, version: Any
    ) -> None:
        fault_counter.count("store append")
        before = contents(store)
        try:
            result = store.append(session_id, batch, expected_version=version)
        except (ValidationError, ConcurrencyError):  # a conflict is a correct answer too
            assert before == contents(store)
            return
        assert all(e in stored(store, session_id) for e in result)

    @FAULTS
    @given(
        session_id=SESSION_IDS,
        after=st.one_of(st.none(), HOSTILE_INTS),
        before=st.one_of(st.none(), HOSTILE_INTS),
        limit=st.one_of(st.none(), HOSTILE_INTS),
    )
    def test_read_answers_or_refuses_any_bounds(
        self,
        store: Any,
        fault_counter: FaultCounter,
        session_id: Any,
        after: Any,
        before: Any,
        limit: Any,
    ) -> None:
        fault_counter.count("store read")
        before_read = contents(store)
        with contextlib.suppress(ValidationError):
            assert isinstance(store.read(session_id, after=after, before=before, limit=limit), list)

        assert before_read == contents(store)

    @FAULTS
    @given(viewer=HOSTILE_TEXT, conversation=CONVERSATIONS, watermark=HOSTILE_INTS)
    def test_sharing_state_calls_answer_or_refuse(
        self,
        store: Any,
        fault_counter: FaultCounter,
        viewer: str,
        conversation: Conversation,
        watermark: int,
    ) -> None:
        fault_counter.count("store sharing state")
        before = (contents(store), sharing_state(store, viewer, conversation))
        try:
            state = SharingState(conversation, watermark)
            append_shared(store, "desk", [], viewer=viewer, state=state)
        except (ValidationError, SharingStateConflict):  # a conflict is a correct answer too
            assert before == (contents(store), sharing_state(store, viewer, conversation))
            return
        assert state == store.get_sharing_state("desk", viewer, conversation)


class TestHub:
    @FAULTS
    @given(batch=BATCHES, viewer=AUTHORS, conversation=CONVERSATIONS, window=HOSTILE_INTS)
    def test_no_hostile_call_crashes_an_actor_or_fails_the_desk(
        self,
        hub: Hub,
        fault_counter: FaultCounter,
        batch: Any,
        viewer: Any,
        conversation: Conversation,
        window: Any,
    ) -> None:
        fault_counter.count("hub append/view/turn/commit")
        refused_left: list[bool] = []
        before = contents(hub.store)
        try:
            hub.append("desk", batch)
        except ValidationError:
            refused_left.append(before == contents(hub.store))
        before = contents(hub.store)
        with contextlib.suppress(ValidationError):
            hub.view("desk", viewer, conversation, window=window)
        refused_left.append(before == contents(hub.store))  # a view never writes
        with contextlib.suppress(ValidationError):
            turn = hub.turn("desk", viewer, conversation)
            before = contents(hub.store)
            try:
                turn.commit(batch[0] if batch and isinstance(batch[0], Event) else "ok")
            except ValidationError:
                refused_left.append(before == contents(hub.store))
        stats = hub.stats()

        assert (0, [], True) == (stats.restarts, stats.failed, all(refused_left))

    @FAULTS
    @given(session_id=SESSION_IDS, author=AUTHORS, content=HOSTILE_TEXT, parent=HOSTILE_INTS)
    def test_a_hostile_post_is_refused_before_any_actor(
        self,
        hub: Hub,
        fault_counter: FaultCounter,
        session_id: Any,
        author: Any,
        content: str,
        parent: Any,
    ) -> None:
        fault_counter.count("hub post")
        before = contents(hub.store)
        try:
            hub.session(session_id).post(author, content, parent=parent)
        except ValidationError:
            assert before == contents(hub.store)
        stats = hub.stats()

        assert (0, []) == (stats.restarts, stats.failed)

    def test_deep_metadata_and_a_huge_thread_root_leave_the_desk_working(
        self, hub: Hub, fault_counter: FaultCounter
    ) -> None:
        deep = Event(Operator(), Text("x"), metadata=nested(5000))
        calls: list[Callable[[], object]] = [
            *[lambda: hub.append("desk", [deep]) for _ in range(6)],
            lambda: hub.turn("desk", Operator(), Conversation("desk", thread_root=2**64)),
            lambda: hub.turn("desk", Person(id="\ud800", label="X")),
            lambda: hub.append("desk", [Event(Operator(), Text("x")), {"a": 1}]),  # type: ignore[list-item]
        ]
        refused = 0
        for call in calls:
            fault_counter.count("hostile calls through a Hub")
            with contextlib.suppress(ValidationError):
                call()
                continue
            refused += 1
        hub.session("desk").post(Operator(), "still open")

        assert (9, 1, 0, []) == (
            refused,
            hub.last_sequence("desk"),
            hub.stats().restarts,
            hub.stats().failed,
        )


class TestFolds:
    @FAULTS
    @given(batch=st.lists(EVENTS, max_size=4), conversation=CONVERSATIONS, window=HOSTILE_INTS)
    def test_project_session_answers_or_refuses(
        self,
        fault_counter: FaultCounter,
        batch: list[Event],
        conversation: Conversation,
        window: Any,
    ) -> None:
        fault_counter.count("fold project_session")
        store = MemoryStore()
        try:
            store.append("desk", batch)
        except ValidationError:
            assert {} == contents(store)
        before = contents(store)
        with contextlib.suppress(ValidationError):
            project_session(store.log("desk"), SessionQuery(conversation, window=window))

        assert before == contents(store)

    @FAULTS
    @given(
        conversation=CONVERSATIONS,
        watermark=HOSTILE_INTS,
        sequence=HOSTILE_INTS,
        before=HOSTILE_INTS,
    )
    def test_sharing_folds_answer_or_refuse(
        self,
        fault_counter: FaultCounter,
        conversation: Conversation,
        watermark: Any,
        sequence: Any,
        before: Any,
    ) -> None:
        fault_counter.count("fold sharing")
        store = MemoryStore()
        store.append("desk", [Event(Operator(), Text("a")), Event(Operator(), Text("b"))])
        try:
            state = initialized_state(conversation, watermark)
        except ValidationError:
            return
        given_state = msgspec.structs.replace(state)
        # The folds' documented errors for a state that does not fit are answers too.
        with contextlib.suppress(ValidationError, PresentSetOverflow):
            note_present(state, sequence)
        with contextlib.suppress(ValidationError, WatermarkRegression):
            query = SharingQuery(conversation, conversation, before)
            prepare_delta(store.log("desk"), state, query)

        assert (given_state, 2) == (state, store.last_sequence("desk"))

    @FAULTS
    @given(batch=st.lists(EVENTS, max_size=4), viewer=AUTHORS)
    def test_transcripts_answer_or_refuse(
        self, fault_counter: FaultCounter, batch: list[Event], viewer: Any
    ) -> None:
        fault_counter.count("fold transcript")
        store = MemoryStore()
        try:
            store.append("desk", batch)
        except ValidationError:
            assert {} == contents(store)
        before = contents(store)
        with contextlib.suppress(ValidationError):
            TranscriptBuilder.from_events(store.read("desk"), session_id="desk", viewer=viewer)

        assert before == contents(store)


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """``main`` configures logging as a program does; give the suite its set-up back."""
    ours = logging.getLogger(LOGGER_NAME)
    handlers, level, propagate = list(ours.handlers), ours.level, ours.propagate
    saved = structlog.get_config()
    try:
        yield
    finally:
        structlog.configure(**saved)
        ours.handlers[:] = handlers
        ours.setLevel(level)
        ours.propagate = propagate


def controls(text: str) -> list[str]:
    return [ch for ch in text.replace("\n", "") if ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0]


class TestCli:
    @FAULTS
    @given(text=HOSTILE_TEXT)
    def test_parse_viewer_answers_an_author_or_refuses(
        self, fault_counter: FaultCounter, text: str
    ) -> None:
        fault_counter.count("cli parse_viewer")
        try:
            viewer = parse_viewer(text)
        except ValidationError:
            return
        name = text.partition(":")[2]
        assert viewer in (Operator(), Person(id=name, label=name), Agent(id=name, label=name))

    @FAULTS
    @given(author=AUTHORS, content=HOSTILE_TEXT, sequence=st.integers(1, 10**6))
    def test_no_control_character_reaches_the_terminal(
        self, fault_counter: FaultCounter, author: Any, content: str, sequence: int
    ) -> None:
        fault_counter.count("cli render")
        out = io.StringIO()
        message = SessionMessage(sequence=sequence, author=author, content=content)
        render_message(Output(out, styled=False), message, author)

        assert ([], []) == (controls(out.getvalue()), controls(safe_text(content)))

    @FAULTS
    @given(session_id=HOSTILE_TEXT, viewer=HOSTILE_TEXT)
    @pytest.mark.usefixtures("restored_logging")
    def test_view_and_inspect_exit_0_or_2_and_print_no_control_character(
        self, tmp_path: Path, fault_counter: FaultCounter, session_id: str, viewer: str
    ) -> None:
        fault_counter.count("cli view/inspect")
        path = tmp_path / "store"
        if not path.exists():
            with LmdbStore(path, durability="relaxed") as store:
                store.append("desk", [Event(Person("a\x1b[2J", "A\x9b"), Text("\x1b]52;c;x\x07"))])
        with LmdbStore(path, durability="relaxed") as store:
            before = contents(store)
        for argv in (
            ["view", str(path), session_id, "--as", viewer],
            [session_id, viewer],
            ["view", str(path), "desk", "--as", "operator"],
            ["inspect", str(path)],
        ):
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code: object
                try:
                    code = main(argv)
                except SystemExit as exc:  # argparse refused the arguments
                    code = exc.code

            assert (True, [], []) == (
                code in (0, 2),
                controls(out.getvalue()),
                controls(err.getvalue()),
            )
        with LmdbStore(path, durability="relaxed") as store:
            assert before == contents(store)  # view and inspect never write
