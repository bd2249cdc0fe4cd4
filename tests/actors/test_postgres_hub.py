"""The Hub on PostgreSQL: ``Hub.open("postgresql://...")``, and Hubs in two processes.

Every test gets a fresh database on the test session's throwaway server (the
``postgres_dsn`` fixture). The Hub runs the events and run-index capabilities of the
store contract over ``PostgresStore``, as it does over the other stores; and two Hubs in
two OS processes on one database follow each other's desks: what one posts shows in
the other's warm view and wakes its ``wait_turn``, both ways, pushed by
``LISTEN``/``NOTIFY`` (no polling).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.pgserver import ThrowawayPostgres
from sharedesk.actors import Hub
from sharedesk.protocol import HubClosed, Person, SharingStateConflict, ValidationError
from sharedesk.protocol.ports import EventStore
from sharedesk.store.postgres import PostgresStore
from tests.actors.conftest import our_threads
from tests.actors.following import BOB, Recorder, said
from tests.store.contract import EventsContract, RunIndexContract

ALICE = Person(id="alice", label="Alice")


@pytest.fixture(autouse=True)
def _no_thread_left() -> Iterator[None]:
    yield
    assert [] == our_threads()


@pytest.fixture(scope="module")
def contract_database(postgres_server: ThrowawayPostgres) -> str:
    """One database for the contract tests below (each test takes a schema of its own)."""
    from bench.pg import create_database

    return create_database(postgres_server.dsn, f"hub_contract_{uuid.uuid4().hex}")


class _OnPostgres:
    """A fresh, empty store per test: a new schema in the module's database."""

    dsn: str
    schema: str

    @pytest.fixture(autouse=True)
    def _database(self, contract_database: str) -> None:
        self.dsn = contract_database
        self.schema = f"t_{uuid.uuid4().hex}"

    def make_store(self, path: Path) -> EventStore:
        return Hub.open(self.dsn, schema=self.schema)


class TestHubOverPostgresAsEventStore(_OnPostgres, EventsContract):
    """The events contract, through a Hub over PostgreSQL."""


class TestHubOverPostgresAsRunIndex(_OnPostgres, RunIndexContract):
    """The run-index contract, through a Hub over PostgreSQL."""


del EventsContract, RunIndexContract


class TestOpeningAHubOnPostgres:
    @pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
    def test_a_dsn_opens_a_hub_that_follows_the_database(
        self, postgres_dsn: str, scheme: str
    ) -> None:
        dsn = scheme + "://" + postgres_dsn.split("://", 1)[1]

        with Hub.open(dsn, ask_timeout=10.0) as hub:
            hub.session("desk").post(ALICE, "hello")
            view = hub.view("desk", ALICE)

        assert (True, ["hello"]) == (hub.following, [m.content for m in view.messages])

    def test_hub_and_store_options_are_split(self, postgres_dsn: str) -> None:
        with Hub.open(postgres_dsn, ask_timeout=7.0, max_connections=3) as hub:
            assert 7.0 == hub.options.ask_timeout

    def test_an_unknown_option_is_refused_naming_the_valid_ones_before_connecting(
        self,
    ) -> None:
        with pytest.raises(ValidationError) as caught:
            Hub.open("postgresql://127.0.0.1:1/nowhere", bogus=1)

        message = str(caught.value)
        assert ("'bogus'" in message, "ask_timeout" in message, "max_connections" in message) == (
            True,
            True,
            True,
        )

    def test_the_hub_names_its_database_without_the_password(self, postgres_dsn: str) -> None:
        hub = Hub.open(postgres_dsn + "?password=secret")  # the server trusts 127.0.0.1
        hub.close()

        with pytest.raises(HubClosed) as caught:
            hub.session("desk")

        assert ("secret" in str(caught.value), postgres_dsn in str(caught.value)) == (
            False,
            True,
        )

    def test_a_hub_closed_leaves_no_listener_thread(self, postgres_dsn: str) -> None:
        hub = Hub.open(postgres_dsn)
        hub.listen("desk", Recorder())

        hub.close()

        assert [] == our_threads()


class TestTurnsOnPostgres:
    def test_a_commit_losing_to_another_hubs_stores_neither_its_reply_nor_its_state(
        self, postgres_dsn: str
    ) -> None:
        with Hub.open(postgres_dsn) as one, Hub.open(postgres_dsn) as two:
            one.session("desk").post(BOB, "question")
            first, second = one.turn("desk", ALICE), two.turn("desk", ALICE)
            first.commit("answer from one")

            with pytest.raises(SharingStateConflict):
                second.commit("answer from two")

            contents = [m.content for m in two.view("desk", BOB).messages]
            again = two.turn("desk", ALICE)

        assert (["question", "answer from one"], None, []) == (
            contents,
            again.reason,
            again.messages,
        )


class TestTwoHubsInTwoProcesses:
    def test_a_lost_listening_connection_loses_no_push(self, postgres_dsn: str) -> None:
        import psycopg

        recorder = Recorder()
        with Hub.open(postgres_dsn) as hub, PostgresStore(postgres_dsn) as other:
            hub.listen("desk", recorder)
            with psycopg.connect(postgres_dsn, autocommit=True) as conn:
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND query LIKE 'LISTEN%'"
                    " AND pid <> pg_backend_pid()"
                )
            # Committed while the Hub's store listens on no connection: its notice is
            # lost, and the re-check after the reconnection pushes it.
            other.append("desk", [said("while it was away")])
            pushed = recorder.wait_through(1)

        assert [[1]] == pushed
