"""The store contract suite: every store rule of the contract, written once.

The rules are grouped by capability, as eventsourcing groups its recorder test cases:

- :class:`EventsContract`: the ``EventStore`` port (sequences, idempotent ids,
  ``expected_version``, reads, the ``Text`` log, close, threads);
- :class:`SharingContract`: the ``SharingStateStore`` port (a write's ``Share`` and its
  compare-and-swap);
- :class:`ListingContract`: ``sessions``, ``session_info`` and ``session_infos``.

:class:`StoreContract` combines the three. None of them is collected by pytest (their
names do not start with ``Test``). Each backend's test module subclasses
``StoreContract`` and supplies only ``make_store(path)``; the Hub runs
``EventsContract``, the capability its store-like methods serve. A backend may add its
own tests next to the inherited ones. A bug fixed in one backend gets its regression
test here, so the other backend is covered too.
"""

from __future__ import annotations

import functools
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sharedesk.projection.runstate import fold_session_state
from sharedesk.protocol import (
    PRESENT_SET_LIMIT,
    Agent,
    ConcurrencyError,
    Conversation,
    Event,
    Operator,
    Person,
    PresentSetOverflow,
    RunFinished,
    RunStarted,
    SharingState,
    SharingStateConflict,
    StoreClosedError,
    System,
    Text,
    TextDelta,
    ToolCall,
    ToolResult,
    ValidationError,
)
from sharedesk.protocol.errors import AlreadyStored
from sharedesk.protocol.events import SessionStarted
from sharedesk.protocol.ports import (
    EventStore,
    RunIndexStore,
    SessionInfo,
    SharingStateStore,
    WriteFuture,
    WritingStore,
)
from sharedesk.protocol.sessions import EMPTY_SESSION_STATE, SESSION_STARTED_ID, SessionState
from sharedesk.protocol.validation import check_write
from sharedesk.protocol.views import SessionPage
from sharedesk.protocol.writes import Share


class ContractStore(RunIndexStore, SharingStateStore, WritingStore, Protocol):
    """What the contract suite needs of a store: the four ports plus the session listing."""

    def sessions(self) -> list[str]: ...

    def session_info(self, session_id: str) -> SessionInfo | None: ...

    def session_infos(self) -> list[SessionInfo]: ...


ALICE = Person(id="alice", label="Alice")
BOT = Agent(id="bot", label="Bot")


def text(content: str = "hello", *, id: str | None = None, parent: int | None = None) -> Event:
    """Build an unstamped Text event by Alice."""
    if id is None:
        return Event(ALICE, Text(content), parent=parent)
    return Event(ALICE, Text(content), id=id, parent=parent)


def delta(chunk: str = "chunk") -> Event:
    """Build an unstamped TextDelta event by the bot."""
    return Event(BOT, TextDelta(chunk))


def nested(depth: int) -> dict[str, Any]:
    """A dict nested ``depth`` levels deep (built without recursion)."""
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"d": value}
    return value


def sequences(events: Sequence[Event]) -> list[int | None]:
    return [event.sequence for event in events]


def append_shared(
    store: WritingStore,
    session_id: str,
    events: Sequence[Event],
    *,
    viewer: str,
    state: SharingState,
    expected_state: SharingState | None = None,
    expected_version: int | None = None,
    reply_present: bool = False,
) -> list[Event]:
    """Write ``events`` with a sharing state through the one write path, as the Hub does."""
    share = Share(viewer, state, expected_state, reply_present)
    write = check_write(session_id, events, expected_version=expected_version, share=share)
    return store.submit(write, WriteFuture()).result()


def walk_log(store: ContractStore, session_id: str, limit: int) -> list[SessionPage]:
    """Read a session's whole log page by page, following ``next_before``."""
    log = store.log(session_id)
    pages = [log.read_before(None, limit)]
    while pages[-1].next_before is not None:
        pages.append(log.read_before(pages[-1].next_before, limit))
    return pages


ODD_SESSION_IDS = ["a", "ab", "a/b", "a\x00b", "a\x00", "é", "日本語", "a b", "A"]

#: Bad batches given to append: each must raise ValidationError and write nothing.
BAD_BATCHES: dict[str, Callable[[], Any]] = {
    "not_a_sequence": lambda: 42,
    "a_single_event": lambda: text(),
    "a_string": lambda: "abc",
    "non_event_element": lambda: [text(), {"content": "x"}],
    "stamped_sequence": lambda: [text(), Event(ALICE, Text("x"), sequence=7)],
    "stamped_timestamp": lambda: [
        text(),
        Event(ALICE, Text("x"), timestamp=datetime(2026, 1, 1, tzinfo=UTC)),
    ],
    "empty_id": lambda: [text(), Event(ALICE, Text("x"), id="")],
    "zero_parent": lambda: [text(), text(parent=0)],
    "parent_on_itself": lambda: [text(), text(parent=3)],
    "parent_in_future": lambda: [text(parent=5)],
    "bad_run_status": lambda: [text(), Event(BOT, RunFinished("exploded"))],
    "lone_surrogate_in_id": lambda: [text(), text(id="a\ud800")],
    "lone_surrogate_in_content": lambda: [text(), text("x\udfff")],
    "wrong_field_type": lambda: [text(), Event(ALICE, Text(42))],  # type: ignore[arg-type]
}

BAD_SESSION_IDS: dict[str, Any] = {
    "int": 7,
    "none": None,
    "empty": "",
    "too_long": "x" * 401,
    "lone_surrogate": "a\ud800",
}


class _Fixture(ABC):
    """The store under test: one fresh store per test, closed afterwards."""

    @abstractmethod
    def make_store(self, path: Path) -> EventStore:
        """Return a new, empty store; ``path`` is a fresh directory it may use."""

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[EventStore]:
        store = self.make_store(tmp_path / "store")
        try:
            yield store
        finally:
            store.close()


class EventsContract(_Fixture):
    """The events capability (the ``EventStore`` port): sequences, ids, reads, the log.

    Every store runs it, and so does the Hub, whose store-like methods pass it through
    the session actors.
    """

    def test_store_implements_the_event_store_port(self, store: ContractStore) -> None:
        assert isinstance(store, EventStore)

    # -- sequences -------------------------------------------------------------------

    def test_sequences_start_at_one_and_have_no_gaps(self, store: ContractStore) -> None:
        first = store.append("s", [text("a"), text("b")])
        second = store.append("s", [text("c")])

        assert [1, 2, 3] == sequences(first + second)

    def test_sequences_are_counted_per_session(self, store: ContractStore) -> None:
        store.append("s1", [text(), text()])
        other = store.append("s2", [text()])

        assert [1] == sequences(other)

    def test_append_stamps_a_utc_timestamp(self, store: ContractStore) -> None:
        (stored,) = store.append("s", [text()])

        assert stored.timestamp is not None
        assert stored.timestamp.utcoffset() is not None
        assert 0 == stored.timestamp.utcoffset().total_seconds()  # type: ignore[union-attr]

    def test_append_of_an_empty_batch_writes_nothing(self, store: ContractStore) -> None:
        assert [] == store.append("s", [])
        assert 0 == store.last_sequence("s")

    def test_read_returns_every_body_kind_exactly_as_appended(self, store: ContractStore) -> None:
        given_events = [
            Event(Operator(), Text("go"), metadata={"k": [1, "two"]}),
            Event(BOT, TextDelta("ch"), run_id="run-1"),
            Event(BOT, ToolCall("c1", "search", {"q": "x", "n": 2}), run_id="run-1"),
            Event(System("tool", "Tool"), ToolResult("c1", {"hits": [1]}, is_error=True)),
            Event(BOT, RunStarted("scripted", model="m", provider_session_id="p")),
            Event(BOT, RunFinished("completed", token_usage={"input": 3})),
            Event(ALICE, Text("reply"), parent=1),
        ]
        stored = store.append("s", given_events)

        assert stored == store.read("s")
        assert given_events == [
            Event(e.author, e.body, id=e.id, parent=e.parent, run_id=e.run_id, metadata=e.metadata)
            for e in store.read("s")
        ]

    # -- idempotency -----------------------------------------------------------------

    def test_repeated_id_returns_the_stored_event_and_stores_nothing(
        self, store: ContractStore
    ) -> None:
        (first,) = store.append("s", [text("original", id="e1")])
        (again,) = store.append("s", [text("changed", id="e1")])

        assert first == again
        assert [first] == store.read("s")

    def test_repeated_id_inside_one_batch_is_stored_once(self, store: ContractStore) -> None:
        result = store.append("s", [text("a", id="x"), text("b", id="y"), text("c", id="x")])

        assert [1, 2, 1] == sequences(result)
        assert ["x", "y"] == [event.id for event in store.read("s")]

    def test_batch_with_one_known_id_stores_only_the_new_ones(self, store: ContractStore) -> None:
        store.append("s", [text("a", id="a")])
        result = store.append("s", [text("b", id="b"), text("a2", id="a"), text("c", id="c")])

        assert [2, 1, 3] == sequences(result)
        assert ["a", "b", "c"] == [event.id for event in store.read("s")]
        assert "a" == result[1].body.content  # type: ignore[union-attr]

    def test_same_id_in_two_sessions_is_stored_in_both(self, store: ContractStore) -> None:
        store.append("s1", [text(id="e")])
        (other,) = store.append("s2", [text(id="e")])

        assert 1 == other.sequence
        assert 1 == store.last_sequence("s2")

    def test_parent_check_counts_only_new_events(self, store: ContractStore) -> None:
        """A known id does not take a sequence, so a parent naming the next new row fails."""
        store.append("s", [text(id="a")])

        with pytest.raises(ValidationError):
            store.append("s", [text(id="a"), text(id="b", parent=2)])
        assert 1 == store.last_sequence("s")

    # -- expected_version ------------------------------------------------------------

    def test_stale_expected_version_writes_nothing_and_reports_both_versions(
        self, store: ContractStore
    ) -> None:
        store.append("s", [text(), text()])

        with pytest.raises(ConcurrencyError) as caught:
            store.append("s", [text()], expected_version=1)

        assert (1, 2) == (caught.value.expected, caught.value.actual)
        assert 2 == store.last_sequence("s")

    def test_matching_expected_version_appends(self, store: ContractStore) -> None:
        store.append("s", [text()])

        assert [2] == sequences(store.append("s", [text()], expected_version=1))

    def test_expected_version_zero_means_the_session_is_empty(self, store: ContractStore) -> None:
        assert [1] == sequences(store.append("s", [text()], expected_version=0))
        with pytest.raises(ConcurrencyError):
            store.append("s", [text()], expected_version=0)

    def test_expected_version_conflict_wins_over_a_known_id(self, store: ContractStore) -> None:
        store.append("s", [text(id="a"), text(id="b")])

        with pytest.raises(ConcurrencyError):
            store.append("s", [text(id="a")], expected_version=1)

    # -- read ------------------------------------------------------------------------

    def test_read_after_and_before_are_exclusive(self, store: ContractStore) -> None:
        store.append("s", [text() for _ in range(6)])

        assert [3, 4] == sequences(store.read("s", after=2, before=5))

    def test_read_with_before_one_or_after_last_is_empty(self, store: ContractStore) -> None:
        store.append("s", [text() for _ in range(3)])

        assert [] == store.read("s", before=1)
        assert [] == store.read("s", after=3)
        assert [] == store.read("s", after=2, before=3)

    def test_read_bounds_beyond_the_stream_are_clamped(self, store: ContractStore) -> None:
        store.append("s", [text() for _ in range(3)])

        assert [1, 2, 3] == sequences(store.read("s", after=0, before=100))

    def test_read_limit_takes_the_oldest_rows_in_oldest_first_order(
        self, store: ContractStore
    ) -> None:
        store.append("s", [text() for _ in range(6)])

        assert [2, 3] == sequences(store.read("s", after=1, limit=2))

    def test_read_limit_with_newest_first_takes_the_newest_rows(self, store: ContractStore) -> None:
        store.append("s", [text() for _ in range(6)])

        assert [5, 4] == sequences(store.read("s", before=6, limit=2, newest_first=True))
        assert [6, 5, 4, 3, 2, 1] == sequences(store.read("s", newest_first=True))

    def test_read_limit_zero_returns_nothing(self, store: ContractStore) -> None:
        store.append("s", [text()])

        assert [] == store.read("s", limit=0)
        assert [] == store.read("s", limit=0, newest_first=True)

    def test_read_of_an_unknown_session_is_empty(self, store: ContractStore) -> None:
        assert [] == store.read("nobody")

    @pytest.mark.parametrize(
        "bounds",
        [
            {"after": -1},
            {"before": -2},
            {"limit": -1},
            {"after": "1"},
            {"limit": True},
            {"newest_first": "yes"},
            {"newest_first": 1},
        ],
        ids=["after", "before", "limit", "str", "bool", "order-str", "order-int"],
    )
    def test_read_with_bad_bounds_raises_validation_error(
        self, store: ContractStore, bounds: dict[str, Any]
    ) -> None:
        with pytest.raises(ValidationError):
            store.read("s", **bounds)

    # -- last_sequence ---------------------------------------------------------------

    def test_last_sequence_is_zero_for_an_unknown_session(self, store: ContractStore) -> None:
        assert 0 == store.last_sequence("nobody")

    def test_last_sequence_follows_appends(self, store: ContractStore) -> None:
        store.append("s", [text(), text(), text()])

        assert 3 == store.last_sequence("s")

    # -- bad input -------------------------------------------------------------------

    @pytest.mark.parametrize("kind", sorted(BAD_BATCHES))
    def test_bad_batch_raises_validation_error_and_writes_nothing(
        self, store: ContractStore, kind: str
    ) -> None:
        store.append("s", [text()])

        with pytest.raises(ValidationError):
            store.append("s", BAD_BATCHES[kind]())

        assert 1 == store.last_sequence("s")
        assert 1 == len(store.read("s"))

    @pytest.mark.parametrize("version", [-1, True, "1", 1.0])
    def test_bad_expected_version_raises_validation_error_and_writes_nothing(
        self, store: ContractStore, version: Any
    ) -> None:
        with pytest.raises(ValidationError):
            store.append("s", [text()], expected_version=version)

        assert 0 == store.last_sequence("s")

    # -- log ---------------------------------------------------------------------------

    def test_log_serves_only_text_rows_newest_first(self, store: ContractStore) -> None:
        store.append("s", [text("one"), delta(), text("two"), delta(), text("three", parent=1)])

        page = store.log("s").read_before(None, 10)

        assert [(5, "three", 1), (3, "two", None), (1, "one", None)] == [
            (m.sequence, m.content, m.parent) for m in page.messages
        ]
        assert page.next_before is None

    def test_log_rows_carry_the_session_id_as_desk_and_the_author(
        self, store: ContractStore
    ) -> None:
        store.append("desk/1", [text("hi")])

        (row,) = store.log("desk/1").read_before(None, 5).messages

        assert ("desk/1", ALICE) == (row.desk, row.author)

    def test_log_pages_follow_next_before_to_the_oldest_row(self, store: ContractStore) -> None:
        store.append("s", [text(str(i)) if i % 3 else delta() for i in range(1, 31)])
        expected = [m.sequence for m in store.log("s").read_before(None, 100).messages]

        pages = walk_log(store, "s", 4)

        assert expected == [m.sequence for page in pages for m in page.messages]
        assert all(len(page.messages) <= 4 for page in pages)
        assert [] != pages[-1].messages

    def test_log_cursor_is_the_oldest_row_of_its_page(self, store: ContractStore) -> None:
        store.append("s", [text() for _ in range(5)])

        page = store.log("s").read_before(5, 2)

        assert [4, 3] == [m.sequence for m in page.messages]
        assert 3 == page.next_before

    def test_log_page_ending_exactly_at_the_oldest_row_has_no_cursor(
        self, store: ContractStore
    ) -> None:
        store.append("s", [delta(), text(), text()])

        page = store.log("s").read_before(None, 2)

        assert [3, 2] == [m.sequence for m in page.messages]
        assert page.next_before is None

    def test_log_never_returns_more_rows_than_the_limit(self, store: ContractStore) -> None:
        store.append("s", [text() for _ in range(50)])

        assert 7 == len(store.log("s").read_before(None, 7).messages)

    def test_log_pages_cheaply_past_many_non_message_events(self, store: ContractStore) -> None:
        store.append("s", [text("old")] + [delta() for _ in range(300)] + [text("new")])

        page = store.log("s").read_before(None, 1)
        older = store.log("s").read_before(page.next_before, 5)

        assert ["new"] == [m.content for m in page.messages]
        assert (["old"], None) == ([m.content for m in older.messages], older.next_before)

    def test_log_of_an_unknown_session_has_ended(self, store: ContractStore) -> None:
        assert SessionPage(messages=[], next_before=None) == store.log("nobody").read_before(
            None, 10
        )

    def test_log_with_limit_zero_is_empty_and_ended(self, store: ContractStore) -> None:
        store.append("s", [text()])

        assert SessionPage(messages=[], next_before=None) == store.log("s").read_before(None, 0)

    def test_log_sees_rows_appended_after_it_was_made(self, store: ContractStore) -> None:
        log = store.log("s")
        store.append("s", [text("late")])

        assert ["late"] == [m.content for m in log.read_before(None, 5).messages]

    @pytest.mark.parametrize(
        ("before", "limit"), [(-1, 5), ("3", 5), (None, -1), (None, None)], ids=str
    )
    def test_log_with_bad_arguments_raises_validation_error(
        self, store: ContractStore, before: Any, limit: Any
    ) -> None:
        with pytest.raises(ValidationError):
            store.log("s").read_before(before, limit)

    # -- close -------------------------------------------------------------------------

    @pytest.mark.parametrize(
        "call",
        [
            lambda s: s.append("s", [text()]),
            lambda s: s.read("s"),
            lambda s: s.last_sequence("s"),
            lambda s: s.log("s").read_before(None, 5),
        ],
        ids=[
            "append",
            "read",
            "last_sequence",
            "log",
        ],
    )
    def test_closed_store_raises_store_closed_error(
        self, store: ContractStore, call: Callable[[ContractStore], object]
    ) -> None:
        store.append("s", [text()])
        store.close()

        with pytest.raises(StoreClosedError):
            call(store)

    def test_log_made_before_close_raises_store_closed_error(self, store: ContractStore) -> None:
        store.append("s", [text()])
        log = store.log("s")
        store.close()

        with pytest.raises(StoreClosedError):
            log.read_before(None, 5)

    def test_close_is_idempotent(self, store: ContractStore) -> None:
        store.close()
        store.close()

    def test_context_manager_closes_the_store(self, tmp_path: Path) -> None:
        with self.make_store(tmp_path / "cm") as store:
            store.append("s", [text()])

        with pytest.raises(StoreClosedError):
            store.last_sequence("s")

    # -- threads -----------------------------------------------------------------------

    def test_threads_appending_to_one_session_get_contiguous_sequences(
        self, store: ContractStore
    ) -> None:
        threads, per_thread = 8, 25
        results: list[list[Event]] = []
        lock = threading.Lock()

        def work() -> None:
            mine = [store.append("s", [text()])[0] for _ in range(per_thread)]
            with lock:
                results.append(mine)

        run_threads(work, threads)

        stored = store.read("s")
        assert list(range(1, threads * per_thread + 1)) == sequences(stored)
        assert {e.id: e.sequence for r in results for e in r} == {e.id: e.sequence for e in stored}
        assert all(sequences(r) == sorted(sequences(r)) for r in results)  # type: ignore[type-var]

    def test_threads_appending_to_many_sessions_keep_each_session_contiguous(
        self, store: ContractStore
    ) -> None:
        threads, sessions, rounds = 8, 5, 10

        def work() -> None:
            for round_ in range(rounds):
                for index in range(sessions):
                    store.append(f"s{index}", [text(), text()] if round_ % 2 else [text()])

        run_threads(work, threads)

        per_session = threads * (rounds // 2) * 3
        for index in range(sessions):
            assert list(range(1, per_session + 1)) == sequences(store.read(f"s{index}"))

    def test_threads_racing_on_expected_version_let_exactly_one_win(
        self, store: ContractStore
    ) -> None:
        store.append("s", [text()])
        outcomes: list[str] = []
        lock = threading.Lock()

        def work() -> None:
            try:
                store.append("s", [text()], expected_version=1)
                outcome = "won"
            except ConcurrencyError:
                outcome = "lost"
            with lock:
                outcomes.append(outcome)

        run_threads(work, 8)

        assert (1, 7) == (outcomes.count("won"), outcomes.count("lost"))
        assert 2 == store.last_sequence("s")

    # -- property --------------------------------------------------------------------

    # One store per test, a fresh session per example; each backend subclass runs it.
    @settings(
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.differing_executors]
    )
    @given(
        batches=st.lists(
            st.tuples(
                st.lists(st.sampled_from("abcdefgh"), max_size=5),
                st.one_of(st.none(), st.integers(min_value=0, max_value=12)),
            ),
            max_size=8,
        )
    )
    def test_random_batches_match_a_simple_model(
        self, store: ContractStore, batches: list[tuple[list[str], int | None]]
    ) -> None:
        """Appends with repeated ids and expected versions behave like a dict and a list."""
        session_id = uuid.uuid4().hex
        model: dict[str, int] = {}
        for ids, expected_version in batches:
            last = len(model)
            batch = [text(f"{id_}@{last}", id=id_) for id_ in ids]
            if expected_version is not None and expected_version != last:
                with pytest.raises(ConcurrencyError):
                    store.append(session_id, batch, expected_version=expected_version)
                continue
            result = store.append(session_id, batch, expected_version=expected_version)
            for id_ in ids:
                model.setdefault(id_, len(model) + 1)
            assert [model[id_] for id_ in ids] == sequences(result)

        stored = store.read(session_id)
        assert sorted(model, key=model.__getitem__) == [e.id for e in stored]
        assert list(range(1, len(model) + 1)) == sequences(stored)
        assert len(model) == store.last_sequence(session_id)

    # -- threads: parents -----------------------------------------------------------

    @pytest.mark.parametrize(
        "batch",
        [
            [text("root"), text("reply", parent=1), text("reply to a reply", parent=2)],
            [text("root"), delta(), text("reply to a delta", parent=2)],
            [Event(BOT, RunStarted("scripted")), text("reply to a run event", parent=1)],
        ],
        ids=["reply_to_a_reply", "reply_to_a_text_delta", "reply_to_a_run_event"],
    )
    def test_a_parent_that_is_not_a_root_text_row_is_refused_and_nothing_is_written(
        self, store: ContractStore, batch: list[Event]
    ) -> None:
        """A thread is one level deep: a parent must name an earlier root Text row (case 4)."""
        with pytest.raises(ValidationError):
            store.append("s", batch)

        assert 0 == store.last_sequence("s")

    def test_a_reply_to_a_stored_reply_is_refused_and_nothing_is_written(
        self, store: ContractStore
    ) -> None:
        store.append("s", [text("root"), text("reply", parent=1)])

        with pytest.raises(ValidationError):
            store.append("s", [text("fine", parent=1), text("reply to a reply", parent=2)])

        assert 2 == store.last_sequence("s")

    # -- no shared objects, append equals read -----------------------------------------

    def test_changing_the_metadata_handed_to_append_never_changes_history(
        self, store: ContractStore
    ) -> None:
        metadata: dict[str, Any] = {"tags": ["a"]}
        store.append("s", [Event(ALICE, Text("x"), metadata=metadata)])
        metadata["tags"].append("b")
        metadata["new"] = 1

        assert [{"tags": ["a"]}] == [e.metadata for e in store.read("s")]

    def test_changing_what_append_returned_never_changes_history(
        self, store: ContractStore
    ) -> None:
        (stored,) = store.append("s", [Event(BOT, ToolCall("c1", "search", {"q": ["a"]}))])
        assert isinstance(stored.body, ToolCall)
        stored.body.tool_input["q"].append("b")
        stored.metadata["x"] = 1

        (read,) = store.read("s")
        assert isinstance(read.body, ToolCall)
        assert ({"q": ["a"]}, {}) == (read.body.tool_input, read.metadata)

    def test_changing_what_read_returned_never_changes_history(self, store: ContractStore) -> None:
        store.append("s", [Event(BOT, ToolResult("c1", {"rows": [1, 2]}), metadata={"k": "v"})])
        (first,) = store.read("s")
        assert isinstance(first.body, ToolResult)
        first.body.output["rows"].append(3)
        first.metadata.clear()

        assert [first.id] == [e.id for e in store.read("s")]
        (again,) = store.read("s")
        assert isinstance(again.body, ToolResult)
        assert ({"rows": [1, 2]}, {"k": "v"}) == (again.body.output, again.metadata)

    def test_append_returns_what_read_returns_even_for_non_json_containers(
        self, store: ContractStore
    ) -> None:
        """A set or tuple is stored as its encoding holds it (a list), in every backend."""
        stored = store.append(
            "s",
            [
                Event(ALICE, Text("x"), metadata={"tags": {"b"}, "pair": (1, 2)}),
                Event(BOT, ToolResult("c1", output=("a", frozenset({1})))),
            ],
        )

        assert store.read("s") == stored
        assert {"tags": ["b"], "pair": [1, 2]} == stored[0].metadata

    def test_a_duplicate_id_is_answered_with_a_copy_of_the_stored_event(
        self, store: ContractStore
    ) -> None:
        event = Event(ALICE, Text("x"), metadata={"k": ["v"]})
        store.append("s", [event])
        (again,) = store.append("s", [event])
        again.metadata["k"].append("w")

        assert [{"k": ["v"]}] == [e.metadata for e in store.read("s")]

    # -- hostile input: ValidationError, nothing written -----------------------------

    @pytest.mark.parametrize(
        "event",
        [
            pytest.param(Event(ALICE, Text("x"), metadata=nested(65)), id="metadata-65-deep"),
            pytest.param(Event(ALICE, Text("x"), metadata=nested(5000)), id="metadata-5000-deep"),
            pytest.param(Event(BOT, ToolCall("c", "t", nested(100))), id="tool-input-deep"),
            pytest.param(Event(BOT, ToolResult("c", [nested(100)])), id="output-deep"),
            pytest.param(Event(ALICE, Text("\ud800")), id="surrogate-content"),
            pytest.param(Event(ALICE, Text("x"), id="\udfff"), id="surrogate-id"),
            pytest.param(Event(Person(id="a", label="\ud800"), Text("x")), id="surrogate-label"),
            pytest.param(Event(Person(id="\ud800", label="A"), Text("x")), id="surrogate-author"),
            pytest.param(Event(System(kind="\ud800", label="S"), Text("x")), id="surrogate-kind"),
            pytest.param(Event(ALICE, Text("x"), metadata={"\ud800": 1}), id="surrogate-key"),
            pytest.param(Event(ALICE, Text("x"), run_id="\ud800"), id="surrogate-run-id"),
            pytest.param(Event(Person(id="", label="A"), Text("x")), id="empty-person-id"),
            pytest.param(Event(Agent(id="", label="A"), Text("x")), id="empty-agent-id"),
            pytest.param(Event(System(kind="", label="S"), Text("x")), id="empty-system-kind"),
            pytest.param(Event(ALICE, Text("x"), parent=2**63), id="parent-2**63"),
            pytest.param(Event(ALICE, Text("x"), parent=2**64), id="parent-2**64"),
            pytest.param(Event(ALICE, Text("x"), parent=True), id="parent-bool"),
        ],
    )
    def test_hostile_events_are_refused_and_nothing_is_written(
        self, store: ContractStore, event: Event
    ) -> None:
        with pytest.raises(ValidationError):
            store.append("s", [text("fine"), event])

        assert 0 == store.last_sequence("s")

    @pytest.mark.parametrize(
        "version", [2**63, 2**64, -1, True], ids=["2**63", "2**64", "negative", "bool"]
    )
    def test_an_expected_version_outside_the_int_range_is_refused(
        self, store: ContractStore, version: int
    ) -> None:
        with pytest.raises(ValidationError):
            store.append("s", [text()], expected_version=version)

        assert 0 == store.last_sequence("s")

    @pytest.mark.parametrize(
        "session_id",
        ["", "\ud800", "x" * 257, "界" * 86, None],
        ids=["empty", "surrogate", "257-bytes", "258-utf8-bytes", "none"],
    )
    def test_a_bad_session_id_is_refused_everywhere(
        self, store: ContractStore, session_id: Any
    ) -> None:
        for call in (
            lambda: store.append(session_id, [text()]),
            lambda: store.read(session_id),
            lambda: store.last_sequence(session_id),
        ):
            with pytest.raises(ValidationError):
                call()

    def test_a_session_id_of_256_utf8_bytes_is_accepted(self, store: ContractStore) -> None:
        session_id = "x" * 256

        store.append(session_id, [text()])

        assert 1 == store.last_sequence(session_id)

    @pytest.mark.parametrize("bound", ["after", "before", "limit"])
    @pytest.mark.parametrize("value", [2**63, 2**64, True], ids=["2**63", "2**64", "bool"])
    def test_read_bounds_outside_the_int_range_are_refused(
        self, store: ContractStore, bound: str, value: int
    ) -> None:
        bounds: dict[str, Any] = {bound: value}

        with pytest.raises(ValidationError):
            store.read("s", **bounds)

    def test_a_mixed_batch_of_an_event_and_a_dict_is_refused(self, store: ContractStore) -> None:
        with pytest.raises(ValidationError):
            store.append("s", [text(), {"author": "x"}])  # type: ignore[list-item]

        assert 0 == store.last_sequence("s")


class SharingContract(_Fixture):
    """The sharing-state capability (the ``SharingStateStore`` port), on top of events."""

    @abstractmethod
    def make_store(self, path: Path) -> ContractStore:
        """Return a new, empty store with both ports."""

    def test_store_implements_the_sharing_state_port(self, store: ContractStore) -> None:
        assert isinstance(store, SharingStateStore)

    @pytest.mark.parametrize(
        "call",
        [
            lambda s: s.get_sharing_state("s", "v", Conversation("s")),
            lambda s: append_shared(
                s,
                "s",
                [],
                viewer="v",
                state=SharingState(Conversation("s"), 0),
            ),
        ],
        ids=["get_sharing_state", "shared_write"],
    )
    def test_closed_store_refuses_sharing_calls(
        self, store: ContractStore, call: Callable[[ContractStore], object]
    ) -> None:
        store.append("s", [text()])
        store.close()

        with pytest.raises(StoreClosedError):
            call(store)

    @pytest.mark.parametrize("viewer", ["", "\ud800"], ids=["empty", "surrogate"])
    def test_a_bad_viewer_id_is_refused_and_nothing_is_written(
        self, store: ContractStore, viewer: str
    ) -> None:
        state = SharingState(Conversation("s"), 0)

        with pytest.raises(ValidationError):
            append_shared(store, "s", [text()], viewer=viewer, state=state)

        assert 0 == store.last_sequence("s")

    # -- sharing states ----------------------------------------------------------------

    def test_sharing_state_is_none_until_stored(self, store: ContractStore) -> None:
        assert store.get_sharing_state("s", "agent:bot", Conversation("s")) is None

    def test_a_shared_write_stores_events_and_state_together(self, store: ContractStore) -> None:
        state = SharingState(Conversation("s"), 1, frozenset({2}))

        result = append_shared(store, "s", [text("reply")], viewer="agent:bot", state=state)

        assert [1] == sequences(result)
        assert result == store.read("s")
        assert state == store.get_sharing_state("s", "agent:bot", Conversation("s"))

    def test_a_shared_write_with_no_events_stores_only_the_state(
        self, store: ContractStore
    ) -> None:
        state = SharingState(Conversation("s"), 0)

        assert [] == append_shared(store, "s", [], viewer="agent:bot", state=state)
        assert state == store.get_sharing_state("s", "agent:bot", Conversation("s"))
        assert 0 == store.last_sequence("s")

    def test_a_shared_write_advances_from_the_stored_state(self, store: ContractStore) -> None:
        first = SharingState(Conversation("s"), 0)
        second = SharingState(Conversation("s"), 3)
        append_shared(store, "s", [], viewer="v", state=first)

        append_shared(store, "s", [text()], viewer="v", state=second, expected_state=first)

        assert second == store.get_sharing_state("s", "v", Conversation("s"))

    def test_stale_expected_state_raises_conflict_and_writes_nothing(
        self, store: ContractStore
    ) -> None:
        stored = SharingState(Conversation("s"), 4)
        append_shared(store, "s", [], viewer="v", state=stored)
        stale = SharingState(Conversation("s"), 2)

        with pytest.raises(SharingStateConflict) as caught:
            append_shared(
                store,
                "s",
                [text()],
                viewer="v",
                state=SharingState(Conversation("s"), 5),
                expected_state=stale,
            )

        assert (2, 4) == (caught.value.expected, caught.value.actual)
        assert 0 == store.last_sequence("s")
        assert stored == store.get_sharing_state("s", "v", Conversation("s"))

    def test_expected_no_state_when_one_is_stored_raises_conflict(
        self, store: ContractStore
    ) -> None:
        state = SharingState(Conversation("s"), 1)
        append_shared(store, "s", [], viewer="v", state=state)

        with pytest.raises(SharingStateConflict) as caught:
            append_shared(store, "s", [text()], viewer="v", state=state)

        assert (-1, 1) == (caught.value.expected, caught.value.actual)
        assert 0 == store.last_sequence("s")

    def test_expected_state_differing_only_in_present_set_raises_conflict(
        self, store: ContractStore
    ) -> None:
        stored = SharingState(Conversation("s"), 1, frozenset({3}))
        append_shared(store, "s", [], viewer="v", state=stored)

        with pytest.raises(SharingStateConflict):
            append_shared(
                store,
                "s",
                [],
                viewer="v",
                state=stored,
                expected_state=SharingState(Conversation("s"), 1),
            )

    def test_a_shared_write_with_stale_expected_version_writes_no_state(
        self, store: ContractStore
    ) -> None:
        store.append("s", [text()])

        with pytest.raises(ConcurrencyError) as caught:
            append_shared(
                store,
                "s",
                [text()],
                viewer="v",
                state=SharingState(Conversation("s"), 1),
                expected_version=0,
            )

        assert ConcurrencyError is type(caught.value)
        assert store.get_sharing_state("s", "v", Conversation("s")) is None
        assert 1 == store.last_sequence("s")

    def test_a_shared_write_with_bad_events_writes_no_state(self, store: ContractStore) -> None:
        with pytest.raises(ValidationError):
            append_shared(
                store,
                "s",
                [text(), text(parent=9)],
                viewer="v",
                state=SharingState(Conversation("s"), 1),
            )

        assert store.get_sharing_state("s", "v", Conversation("s")) is None
        assert 0 == store.last_sequence("s")

    @pytest.mark.parametrize(
        "arguments",
        [
            {"viewer": "", "state": SharingState(Conversation("s"), 0), "expected_state": None},
            {"viewer": 3, "state": SharingState(Conversation("s"), 0), "expected_state": None},
            {"viewer": "v", "state": {"watermark": 0}, "expected_state": None},
            {
                "viewer": "v",
                "state": SharingState(Conversation("s"), 2),
                "expected_state": SharingState(Conversation("other"), 1),
            },
        ],
        ids=["empty_viewer", "int_viewer", "dict_state", "expected_of_other_conversation"],
    )
    def test_a_shared_write_with_bad_sharing_arguments_writes_nothing(
        self, store: ContractStore, arguments: dict[str, Any]
    ) -> None:
        with pytest.raises(ValidationError):
            append_shared(store, "s", [text()], **arguments)

        assert 0 == store.last_sequence("s")

    def test_sharing_states_are_keyed_by_viewer_and_conversation(
        self, store: ContractStore
    ) -> None:
        channel, thread = Conversation("s"), Conversation("s", thread_root=1)
        states = {
            ("a", channel): SharingState(channel, 1),
            ("b", channel): SharingState(channel, 2),
            ("a", thread): SharingState(thread, 3),
        }
        for (viewer, _), state in states.items():
            append_shared(store, "s", [], viewer=viewer, state=state)
        append_shared(
            store,
            "t",
            [],
            viewer="a",
            state=SharingState(Conversation("s"), 9),
        )

        assert states == {
            (viewer, conversation): store.get_sharing_state("s", viewer, conversation)
            for viewer, conversation in states
        }

    def test_threads_racing_on_one_sharing_state_let_exactly_one_win(
        self, store: ContractStore
    ) -> None:
        start = SharingState(Conversation("s"), 0)
        append_shared(store, "s", [], viewer="v", state=start)
        winners: list[int] = []
        lock = threading.Lock()

        def work(index: int) -> None:
            try:
                append_shared(
                    store,
                    "s",
                    [text(str(index))],
                    viewer="v",
                    state=SharingState(Conversation("s"), index + 1),
                    expected_state=start,
                )
            except SharingStateConflict:
                return
            with lock:
                winners.append(index)

        run_threads_indexed(work, 8)

        assert 1 == len(winners)
        assert 1 == store.last_sequence("s")
        assert SharingState(Conversation("s"), winners[0] + 1) == store.get_sharing_state(
            "s", "v", Conversation("s")
        )

    def test_threads_on_different_viewers_do_not_collide(self, store: ContractStore) -> None:
        def work(index: int) -> None:
            state: SharingState | None = None
            for watermark in range(5):
                new = SharingState(Conversation("s"), watermark)
                append_shared(
                    store, "s", [text()], viewer=f"v{index}", state=new, expected_state=state
                )
                state = new

        run_threads_indexed(work, 6)

        assert 30 == store.last_sequence("s")
        assert all(
            SharingState(Conversation("s"), 4)
            == store.get_sharing_state("s", f"v{index}", Conversation("s"))
            for index in range(6)
        )

    # -- threads: first replies ---------------------------------------------------

    def test_a_commit_whose_reply_names_a_reply_stores_no_state(self, store: ContractStore) -> None:
        store.append("s", [text("root"), text("reply", parent=1)])

        with pytest.raises(ValidationError):
            append_shared(
                store,
                "s",
                [text(parent=2)],
                viewer="v",
                state=SharingState(Conversation("s"), 2),
                reply_present=True,
            )

        assert store.get_sharing_state("s", "v", Conversation("s")) is None
        assert 2 == store.last_sequence("s")

    def test_first_replies_name_each_roots_first_non_blank_reply(
        self, store: ContractStore
    ) -> None:
        store.append("s", [text("a"), text("b"), text(" ", parent=1), text("x", parent=1)])
        store.append("s", [text("y", parent=1), text("z", parent=2), delta()])

        assert {1: 4, 2: 6} == store.first_replies("s", [1, 2])

    def test_first_replies_leave_out_replies_unanswered_roots_and_unknown_rows(
        self, store: ContractStore
    ) -> None:
        store.append("s", [text("root"), text("reply", parent=1), text("alone"), delta()])

        assert {} == store.first_replies("s", [2, 3, 4, 99])
        assert {} == store.first_replies("unknown", [1])
        assert {} == store.first_replies("s", [])

    def test_a_failed_batch_records_no_first_reply(self, store: ContractStore) -> None:
        store.append("s", [text("root")])

        with pytest.raises(ValidationError):
            store.append("s", [text("first", parent=1), text("bad", parent=2)])

        assert {} == store.first_replies("s", [1])
        store.append("s", [text("now first", parent=1)])
        assert {1: 2} == store.first_replies("s", [1])

    @pytest.mark.parametrize("roots", [[0], [-1], ["1"], 1, [True]])
    def test_first_replies_with_bad_roots_raise_validation_error(
        self, store: ContractStore, roots: Any
    ) -> None:
        with pytest.raises(ValidationError):
            store.first_replies("s", roots)

    # -- commits: the reply noted present in the same transaction ------------------------

    def test_reply_present_notes_the_replys_real_sequence(self, store: ContractStore) -> None:
        store.append("s", [text("before")])
        state = SharingState(Conversation("s"), 1)

        append_shared(
            store,
            "s",
            [text("reply")],
            viewer="v",
            state=state,
            reply_present=True,
        )

        assert SharingState(Conversation("s"), 1, frozenset({2})) == store.get_sharing_state(
            "s", "v", Conversation("s")
        )

    def test_reply_present_notes_the_old_sequence_of_a_reply_stored_before(
        self, store: ContractStore
    ) -> None:
        store.append("s", [text("said before", id="dup"), text("x"), text("y")])
        state = SharingState(Conversation("s"), 1)

        result = append_shared(
            store,
            "s",
            [text("said before", id="dup")],
            viewer="v",
            state=state,
            reply_present=True,
        )

        assert [1] == sequences(result)
        assert state == store.get_sharing_state("s", "v", Conversation("s"))  # 1 <= watermark

    def test_a_commit_lands_after_rows_others_appended_since_its_plan(
        self, store: ContractStore
    ) -> None:
        """No expected_version: only the viewer's own state is checked (case 7)."""
        planned = SharingState(Conversation("s"), 0)
        store.append("s", [text("someone else"), text("and another")])

        result = append_shared(
            store,
            "s",
            [text("reply")],
            viewer="v",
            state=planned,
            reply_present=True,
        )

        assert [3] == sequences(result)
        assert SharingState(Conversation("s"), 0, frozenset({3})) == store.get_sharing_state(
            "s", "v", Conversation("s")
        )

    def test_reply_present_past_the_present_set_limit_writes_nothing(
        self, store: ContractStore
    ) -> None:
        full = SharingState(Conversation("s"), 0, frozenset(range(100, 100 + PRESENT_SET_LIMIT)))

        with pytest.raises(PresentSetOverflow):
            append_shared(
                store,
                "s",
                [text()],
                viewer="v",
                state=full,
                reply_present=True,
            )

        assert (0, None) == (
            store.last_sequence("s"),
            store.get_sharing_state("s", "v", Conversation("s")),
        )


class ListingContract(_Fixture):
    """The listing capability: which sessions a store holds, and their figures."""

    @abstractmethod
    def make_store(self, path: Path) -> ContractStore:
        """Return a new, empty store that lists its sessions."""

    def test_sessions_lists_sessions_holding_events_sorted(self, store: ContractStore) -> None:
        store.append("b", [text()])
        store.append("a", [text()])
        store.append("c", [])

        assert ["a", "b"] == store.sessions()

    def test_session_info_reports_counts_and_last_activity(self, store: ContractStore) -> None:
        store.append("s", [text(), delta()])
        (newest,) = store.append("s", [text()])

        assert newest.timestamp is not None
        assert SessionInfo("s", 3, 2, newest.timestamp) == store.session_info("s")

    def test_session_infos_list_every_session_sorted_by_id(self, store: ContractStore) -> None:
        store.append("b", [delta()])
        store.append("a", [text(), text()])

        assert [("a", 2, 2), ("b", 1, 0)] == [
            (info.session_id, info.last_sequence, info.text_count) for info in store.session_infos()
        ]

    def test_session_info_of_an_unknown_session_is_none(self, store: ContractStore) -> None:
        assert store.session_info("nobody") is None

    # Two events rules checked through the listing: odd ids stay apart, and a bad session
    # id writes no session at all.

    @pytest.mark.parametrize("session_ids", [ODD_SESSION_IDS])
    def test_session_ids_that_prefix_each_other_or_hold_odd_characters_stay_apart(
        self, store: ContractStore, session_ids: list[str]
    ) -> None:
        for count, session_id in enumerate(session_ids, start=1):
            store.append(session_id, [text(session_id) for _ in range(count)])

        for count, session_id in enumerate(session_ids, start=1):
            events = store.read(session_id)
            assert [session_id] * count == [e.body.content for e in events]  # type: ignore[union-attr]
            assert count == store.last_sequence(session_id)
            assert count == sum(len(page.messages) for page in walk_log(store, session_id, 2))
        assert sorted(session_ids) == store.sessions()

    @pytest.mark.parametrize("kind", sorted(BAD_SESSION_IDS))
    def test_bad_session_id_raises_validation_error_and_writes_nothing(
        self, store: ContractStore, kind: str
    ) -> None:
        with pytest.raises(ValidationError):
            store.append(BAD_SESSION_IDS[kind], [text()])

        assert [] == store.sessions()

    @pytest.mark.parametrize(
        "call",
        [lambda s: s.sessions(), lambda s: s.session_info("s"), lambda s: s.session_infos()],
        ids=["sessions", "session_info", "session_infos"],
    )
    def test_closed_store_refuses_listing_calls(
        self, store: ContractStore, call: Callable[[ContractStore], object]
    ) -> None:
        store.append("s", [text()])
        store.close()

        with pytest.raises(StoreClosedError):
            call(store)


class RunIndexContract(_Fixture):
    """The run-index capability (``RunIndexStore``): run events, session state, guards.

    Each run's events, each session's state folded as events are appended, and appends
    guarded by ``unless_stored``. Every store runs it, and so does the Hub, which reads
    both from its store and writes guarded appends through its session actors.
    """

    def test_run_events_are_the_events_carrying_the_run_id_in_order(
        self, store: ContractStore
    ) -> None:
        store.append("s", [Event(BOT, Text("a"), run_id="r1"), text("other")])
        store.append("s", [Event(BOT, TextDelta("b"), run_id="r2")])
        store.append("s", [Event(BOT, RunFinished("completed"), run_id="r1")])

        assert [(1, "r1"), (4, "r1")] == [
            (e.sequence, e.run_id) for e in store.run_events("s", "r1")
        ]

    def test_run_events_of_an_unknown_run_are_empty(self, store: ContractStore) -> None:
        store.append("s", [text()])

        assert ([], []) == (store.run_events("s", "nope"), store.run_events("t", "nope"))

    def test_a_refused_batch_leaves_nothing_in_the_run_index(self, store: ContractStore) -> None:
        with pytest.raises(ValidationError):
            store.append("s", [Event(BOT, Text("a"), run_id="r1"), text(parent=9)])

        assert [] == store.run_events("s", "r1")

    def test_session_state_of_an_empty_session_is_empty(self, store: ContractStore) -> None:
        assert EMPTY_SESSION_STATE == store.session_state("s")

    def test_session_state_follows_started_runs_and_providers(self, store: ContractStore) -> None:
        store.append(
            "s", [Event(System("session", "x"), SessionStarted({"k": 1}), id=SESSION_STARTED_ID)]
        )
        store.append("s", [Event(ALICE, Text("go"), id="h1.input.0", run_id="h1@s")])
        store.append("s", [Event(ALICE, Text("go"), id="h2.input.0", run_id="h2@s")])
        store.append("s", [Event(BOT, RunStarted("p", "m", "ps-1"), run_id="h1@s")])
        store.append("s", [Event(BOT, RunFinished("completed"), run_id="h1@s")])

        assert SessionState(
            metadata={"k": 1},
            provider_sessions={"p": {"provider_session_id": "ps-1", "model": "m"}},
            open_runs=("h2@s",),
        ) == store.session_state("s")

    def test_session_states_are_each_sessions_state_in_the_order_asked(
        self, store: ContractStore
    ) -> None:
        store.append("a", [Event(System("session", "x"), SessionStarted({"k": "a"}))])
        store.append("b", [Event(System("session", "x"), SessionStarted({"k": "b"}))])

        assert [store.session_state(s) for s in ("b", "none", "a")] == store.session_states(
            ["b", "none", "a"]
        )

    def test_session_states_of_no_ids_is_empty_and_a_repeated_id_answers_twice(
        self, store: ContractStore
    ) -> None:
        store.append("a", [Event(System("session", "x"), SessionStarted({"k": "a"}))])

        assert ([], [store.session_state("a")] * 2) == (
            store.session_states([]),
            store.session_states(["a", "a"]),
        )

    def test_session_states_refuse_a_str_and_bad_ids(self, store: ContractStore) -> None:
        for bad in ("ab", ["ok", ""]):
            with pytest.raises(ValidationError):
                store.session_states(bad)

    def test_unless_stored_refuses_once_that_id_is_stored_and_writes_nothing(
        self, store: ContractStore
    ) -> None:
        store.append("s", [text(id="guard")])

        with pytest.raises(AlreadyStored) as info:
            store.append("s", [text("late")], unless_stored="guard")

        assert ("guard", 1) == (info.value.event_id, store.last_sequence("s"))

    def test_unless_stored_ignores_what_others_appended(self, store: ContractStore) -> None:
        store.append("s", [text("a"), text("b")])

        stored = store.append("s", [text("c")], unless_stored="guard")

        assert [3] == sequences(stored)

    @given(
        st.lists(
            st.tuples(
                st.sampled_from(["start", "input", "provider", "finish", "post"]),
                st.sampled_from(["h1@s", "h2@s", "h3@s"]),
            ),
            max_size=12,
        )
    )
    @settings(
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.differing_executors]
    )
    def test_session_state_equals_a_fold_of_the_whole_session(
        self, store: ContractStore, steps: list[tuple[str, str]]
    ) -> None:
        session_id = uuid.uuid4().hex
        for n, (kind, run_id) in enumerate(steps):
            event = {
                "start": Event(
                    System("session", "x"), SessionStarted({"n": n}), id=SESSION_STARTED_ID
                ),
                "input": Event(ALICE, Text("go"), id=f"{run_id}.input.0", run_id=run_id),
                "provider": Event(BOT, RunStarted("p", None, f"ps-{n}"), run_id=run_id),
                "finish": Event(BOT, RunFinished("completed"), run_id=run_id),
                "post": text(),
            }[kind]
            store.append(session_id, [event])

        assert functools.reduce(
            fold_session_state, store.read(session_id), EMPTY_SESSION_STATE
        ) == store.session_state(session_id)


class WritesContract(_Fixture):
    """The one write path (``StoreBase.submit``) and the commit callbacks (``on_commit``)."""

    def test_submit_completes_its_future_with_the_stored_events(self, store: ContractStore) -> None:
        future = store.submit(check_write("s", [text("a"), text("b")]), WriteFuture())

        assert [1, 2] == sequences(future.result(timeout=10))
        assert [1, 2] == sequences(store.read("s"))

    def test_submit_completes_a_failing_write_with_its_error_and_writes_nothing(
        self, store: ContractStore
    ) -> None:
        future = store.submit(check_write("s", [text()], expected_version=3), WriteFuture())

        with pytest.raises(ConcurrencyError):
            future.result(timeout=10)
        assert 0 == store.last_sequence("s")

    def test_a_commit_callback_has_run_when_the_append_returns(self, store: ContractStore) -> None:
        told: list[tuple[str, list[int | None]]] = []
        store.on_commit(lambda session_id, new: told.append((session_id, sequences(new))))

        store.append("s", [text("a"), text("b")])

        assert [("s", [1, 2])] == told

    def test_a_commit_callback_is_told_only_the_new_events(self, store: ContractStore) -> None:
        store.append("s", [text(id="x")])
        told: list[list[int | None]] = []
        store.on_commit(lambda _session_id, new: told.append(sequences(new)))

        store.append("s", [text(id="x"), text(id="y")])
        store.append("s", [text(id="x")])

        assert [[2]] == told

    def test_a_commit_callback_is_not_told_of_a_write_that_failed(
        self, store: ContractStore
    ) -> None:
        told: list[str] = []
        store.on_commit(lambda session_id, _new: told.append(session_id))

        with pytest.raises(ConcurrencyError):
            store.append("s", [text()], expected_version=5)

        assert [] == told

    def test_a_raising_commit_callback_is_dropped_and_the_append_succeeds(
        self, store: ContractStore
    ) -> None:
        told: list[str] = []

        def broken(_session_id: str, _new: list[Event]) -> None:
            raise RuntimeError("listener bug")

        store.on_commit(broken)
        store.on_commit(lambda session_id, _new: told.append(session_id))

        assert [1] == sequences(store.append("s", [text()]))
        assert ["s"] == told

    def test_a_removed_commit_callback_is_not_called_again(self, store: ContractStore) -> None:
        told: list[str] = []
        remove = store.on_commit(lambda session_id, _new: told.append(session_id))
        store.append("s", [text()])

        remove()
        remove()
        store.append("s", [text()])

        assert ["s"] == told

    def test_commit_callbacks_come_in_commit_order_from_many_threads(
        self, store: ContractStore
    ) -> None:
        told: list[int | None] = []
        store.on_commit(lambda _session_id, new: told.extend(sequences(new)))

        def append_one() -> None:
            store.append("s", [text()])

        run_threads(append_one, 8)

        assert list(range(1, 9)) == told

    def test_a_write_submitted_after_close_fails_with_store_closed(
        self, store: ContractStore
    ) -> None:
        write = check_write("s", [text()])
        store.close()

        with pytest.raises(StoreClosedError):
            store.submit(write, WriteFuture()).result(timeout=10)


class StoreContract(EventsContract, SharingContract, ListingContract, RunIndexContract):
    """Every store rule of the contract; a backend subclasses it and implements ``make_store``."""

    @abstractmethod
    def make_store(self, path: Path) -> ContractStore:
        """Return a new, empty store; ``path`` is a fresh directory it may use."""

    def test_store_implements_both_ports(self, store: ContractStore) -> None:
        assert isinstance(store, EventStore)
        assert isinstance(store, SharingStateStore)


def run_threads(work: Callable[[], None], count: int) -> None:
    """Run ``work`` in ``count`` threads started together; re-raise the first failure."""
    run_threads_indexed(lambda _index: work(), count)


def run_threads_indexed(work: Callable[[int], None], count: int) -> None:
    """Run ``work(index)`` in ``count`` threads started together; re-raise the first failure."""
    barrier = threading.Barrier(count)
    errors: list[BaseException] = []

    def target(index: int) -> None:
        try:
            barrier.wait()
            work(index)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=target, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
