"""Hostile input at ``PostgresStore`` is refused before any statement reaches the server.

``tests.faults.test_hostile_input`` runs its store properties on PostgreSQL too (its
``store`` fixture is parametrised over the three backends): every call succeeds or raises
``ValidationError`` with nothing written. Here, on PostgreSQL only, the stronger rule:
a value that the validation vocabulary refuses whatever the database holds (nesting
past 64, lone surrogates, integers outside ``0 <= n < 2**63`` or ``bool``s, empty ids,
authors and kinds, session ids empty or past 256 UTF-8 bytes) makes the call raise
``ValidationError`` without executing a single statement. Statements are counted on
every thread (the caller's and the store's writer) by wrapping psycopg's cursor
methods.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sharedesk import Agent, Event, Person, SessionAuthor, System, Text, ValidationError
from sharedesk.store.postgres import PostgresStore
from tests.faults.counting import FaultCounter
from tests.faults.test_hostile_input import FAULTS, nested

OK = Person(id="ok", label="OK")


class Statements:
    """Statements executed through psycopg's cursors, on any thread."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def wrap(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.count += 1
            return method(*args, **kwargs)

        return counted


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Statements:
    """Count the statements executed from now on."""
    counter = Statements()
    for cls, name in [
        (psycopg.Cursor, "execute"),
        (psycopg.Cursor, "executemany"),
        (psycopg.Cursor, "copy"),
        (psycopg.Cursor, "stream"),
        (psycopg.ServerCursor, "execute"),
    ]:
        monkeypatch.setattr(cls, name, counter.wrap(getattr(cls, name)))
    return counter


@pytest.fixture
def store(postgres_dsn: str) -> Iterator[PostgresStore]:
    with PostgresStore(postgres_dsn) as opened:
        opened.append("desk", [Event(OK, Text("first"))])
        yield opened


NAMELESS: list[SessionAuthor] = [
    Person(id="", label="X"),
    Agent(id="", label="X"),
    System(kind="", label="X"),
]
#: Events that every store refuses, whatever it holds.
HOSTILE_EVENTS = st.one_of(
    st.integers(65, 300).map(lambda depth: Event(OK, Text("x"), metadata={"m": nested(depth)})),
    st.sampled_from(["\ud800", "a\udfffb", "\udc80" * 3]).map(lambda text: Event(OK, Text(text))),
    st.sampled_from(["\ud800", "a\udfffb"]).map(lambda text: Event(Person(text, "X"), Text("x"))),
    st.sampled_from(NAMELESS).map(lambda author: Event(author, Text("x"))),
    st.sampled_from(["", "\ud800"]).map(lambda event_id: Event(OK, Text("x"), id=event_id)),
    st.sampled_from([0, -1, 2**63, 2**64, True]).map(lambda p: Event(OK, Text("x"), parent=p)),
    st.sampled_from([2**64, 10**30, -(2**70)]).map(
        lambda n: Event(OK, Text("x"), metadata={"n": n})
    ),
)
HOSTILE_SESSION_IDS = st.one_of(
    st.sampled_from(["", "x" * 257, "界" * 86, "a\ud800"]),
    st.integers(),
    st.none(),
)
HOSTILE_INTS = st.sampled_from([-1, -(2**63), 2**63, 2**64, 10**30, True, False])
VALID_EVENTS = st.lists(st.builds(Event, st.just(OK), st.builds(Text, st.text())), max_size=2)


class TestNoStatementForHostileInput:
    def test_the_counter_sees_the_statements_of_a_valid_append(
        self, store: PostgresStore, statements: Statements
    ) -> None:
        store.append("desk", [Event(OK, Text("valid"))])

        assert statements.count > 0

    @FAULTS
    @given(before=VALID_EVENTS, hostile=HOSTILE_EVENTS, after=VALID_EVENTS)
    def test_a_batch_holding_a_hostile_event_is_refused_without_a_statement(
        self,
        store: PostgresStore,
        statements: Statements,
        fault_counter: FaultCounter,
        before: list[Event],
        hostile: Event,
        after: list[Event],
    ) -> None:
        fault_counter.count("postgres append, hostile event")
        statements.count = 0
        with pytest.raises(ValidationError):
            store.append("desk", [*before, hostile, *after])

        assert 0 == statements.count

    @FAULTS
    @given(session_id=HOSTILE_SESSION_IDS, batch=VALID_EVENTS)
    def test_a_hostile_session_id_is_refused_without_a_statement(
        self,
        store: PostgresStore,
        statements: Statements,
        fault_counter: FaultCounter,
        session_id: Any,
        batch: list[Event],
    ) -> None:
        fault_counter.count("postgres session id")
        statements.count = 0
        calls: list[Callable[[], object]] = [
            lambda: store.append(session_id, batch),
            lambda: store.read(session_id),
            lambda: store.last_sequence(session_id),
        ]
        for call in calls:
            with pytest.raises(ValidationError):
                call()

        assert 0 == statements.count

    @FAULTS
    @given(
        name=st.sampled_from(["expected_version", "after", "before", "limit"]),
        value=HOSTILE_INTS,
    )
    def test_a_hostile_bound_or_version_is_refused_without_a_statement(
        self,
        store: PostgresStore,
        statements: Statements,
        fault_counter: FaultCounter,
        name: str,
        value: Any,
    ) -> None:
        fault_counter.count("postgres bounds and versions")
        statements.count = 0
        with pytest.raises(ValidationError):
            if name == "expected_version":
                store.append("desk", [Event(OK, Text("x"))], expected_version=value)
            else:
                store.read("desk", **{name: value})

        assert 0 == statements.count
