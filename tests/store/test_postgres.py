"""PostgresStore runs the store contract suite unchanged, plus its PostgreSQL-specific rules.

Every test gets a fresh, empty database on the test session's throwaway server (the
``postgres_dsn`` fixture), or, in the contract suite, a fresh schema in a database of
its own; the server itself is never restarted here.
"""

from __future__ import annotations

import queue
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

import msgspec
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.pg import create_database
from bench.pgserver import ThrowawayPostgres
from sharedesk import Hub, MemoryStore
from sharedesk.protocol import (
    Agent,
    CommitOutcomeUnknown,
    ConcurrencyError,
    Conversation,
    Event,
    SessionStarted,
    SharingState,
    StoreClosedError,
    StoreIOError,
    System,
    Text,
    TextDelta,
    ValidationError,
)
from sharedesk.protocol.errors import StoreFormatError, StoreUnreachable
from sharedesk.protocol.ports import WriteFuture
from sharedesk.protocol.sessions import SESSION_STARTED_ID
from sharedesk.protocol.validation import check_write
from sharedesk.store import _pg_listen
from sharedesk.store._pg_schema import SCHEMA_VERSION
from sharedesk.store.postgres import PostgresStore
from tests.store.conftest import child_env
from tests.store.contract import (
    ALICE,
    BOT,
    ContractStore,
    StoreContract,
    append_shared,
    run_threads,
    run_threads_indexed,
    text,
)


@pytest.fixture(scope="module")
def contract_database(postgres_server: ThrowawayPostgres) -> str:
    """One database for the contract suite (each of its stores takes a fresh schema)."""
    return create_database(postgres_server.dsn, f"contract_{uuid.uuid4().hex}")


class TestPostgresStore(StoreContract):
    """The contract, on PostgreSQL: each store on a schema of its own in one database.

    A fresh schema isolates a store as a fresh database would (its own tables and
    channel), at a fifth of the cost of ``CREATE DATABASE``.
    """

    dsn: str

    @pytest.fixture(autouse=True)
    def _database(self, contract_database: str) -> None:
        self.dsn = contract_database

    def make_store(self, path: Path) -> ContractStore:
        return PostgresStore(self.dsn, schema=f"t_{uuid.uuid4().hex}")


del StoreContract


# -- PostgreSQL-specific rules ------------------------------------------------------------


def admin(dsn: str) -> psycopg.Connection[Any]:
    """An autocommit connection to the test's database, for looking behind the store."""
    return psycopg.connect(dsn, autocommit=True)


def rows(dsn: str, query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    with admin(dsn) as conn:
        return conn.execute(query, params).fetchall()


def listener_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("sharedesk-pg-listener")]


def terminate_store_backends(dsn: str) -> int:
    """End every other connection to the test's database (as a lost network would)."""
    with admin(dsn) as conn:
        row = conn.execute(
            "SELECT count(pg_terminate_backend(pid, 30000)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
    assert row is not None
    return int(row[0])


def interrupt_next_commit(dsn: str, schema: str = "sharedesk") -> None:
    """Make the next commit that writes an event lose its connection inside ``COMMIT``.

    A deferred constraint trigger runs inside ``COMMIT``; the first time it fires (a
    sequence counts, and sequences are not rolled back) it ends its own backend, so the
    transaction is not committed and the client loses the connection while it waits
    for the ``COMMIT``'s answer.
    """
    with admin(dsn) as conn:
        conn.execute("CREATE SEQUENCE public.trap_count")
        conn.execute(
            """CREATE FUNCTION public.trap() RETURNS trigger AS $$
            BEGIN
                IF nextval('public.trap_count') = 1 THEN
                    PERFORM pg_terminate_backend(pg_backend_pid());
                END IF;
                RETURN NULL;
            END $$ LANGUAGE plpgsql"""
        )
        conn.execute(
            f"CREATE CONSTRAINT TRIGGER trap AFTER INSERT ON {schema}.events "
            "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION public.trap()"
        )


@pytest.fixture
def dsn(postgres_dsn: str) -> str:
    return postgres_dsn


@pytest.fixture
def pg(dsn: str) -> Iterator[PostgresStore]:
    with PostgresStore(dsn) as store:
        yield store


class TestSchema:
    def test_open_creates_the_schema_and_records_its_version(
        self, pg: PostgresStore, dsn: str
    ) -> None:
        assert [(SCHEMA_VERSION,)] == rows(dsn, "SELECT version FROM sharedesk.schema_version")
        tables = rows(
            dsn, "SELECT tablename FROM pg_tables WHERE schemaname = 'sharedesk' ORDER BY 1"
        )
        assert [("events",), ("replies",), ("schema_version",), ("sharing",), ("streams",)] == (
            tables
        )

    def test_reopening_keeps_the_data_and_migrates_nothing(self, dsn: str) -> None:
        with PostgresStore(dsn) as store:
            stored = store.append("s", [text("kept")])
        with PostgresStore(dsn) as store:
            assert stored == store.read("s")
        assert 1 == len(rows(dsn, "SELECT * FROM sharedesk.schema_version"))

    def test_concurrent_openers_apply_each_migration_once(self, dsn: str) -> None:
        opened: list[PostgresStore] = []
        lock = threading.Lock()

        def open_one() -> None:
            store = PostgresStore(dsn)
            with lock:
                opened.append(store)

        try:
            run_threads(open_one, 6)
        finally:
            for store in opened:
                store.close()

        assert 6 == len(opened)
        assert [(SCHEMA_VERSION,)] == rows(dsn, "SELECT version FROM sharedesk.schema_version")

    def test_a_schema_newer_than_the_code_is_refused_and_left_alone(self, dsn: str) -> None:
        PostgresStore(dsn).close()
        with admin(dsn) as conn:
            conn.execute(
                "INSERT INTO sharedesk.schema_version (version, description) VALUES (%s, 'x')",
                [SCHEMA_VERSION + 1],
            )

        with pytest.raises(StoreFormatError) as caught:
            PostgresStore(dsn)

        assert (f"schema 'sharedesk' at version {SCHEMA_VERSION + 1}", SCHEMA_VERSION) == (
            caught.value.found,
            caught.value.supported,
        )
        assert 2 == len(rows(dsn, "SELECT * FROM sharedesk.schema_version"))

    def test_without_create_a_database_lacking_the_schema_is_refused_and_left_alone(
        self, dsn: str
    ) -> None:
        with pytest.raises(ValidationError, match="holds no schema 'sharedesk'"):
            PostgresStore(dsn, create=False)

        assert [] == rows(dsn, "SELECT 1 FROM pg_namespace WHERE nspname = 'sharedesk'")

    def test_without_create_an_existing_store_opens_with_its_data(self, dsn: str) -> None:
        with PostgresStore(dsn) as store:
            stored = store.append("s", [text("kept")])

        with PostgresStore(dsn, create=False) as store:
            assert stored == store.read("s")

    def test_stores_on_two_schemas_of_one_database_are_independent(self, dsn: str) -> None:
        with PostgresStore(dsn, schema="app_a") as a, PostgresStore(dsn, schema="app_b") as b:
            a.append("s", [text("in a")])

            assert (1, 0, [], ["s"]) == (
                a.last_sequence("s"),
                b.last_sequence("s"),
                b.sessions(),
                a.sessions(),
            )
            assert ("app_a_appended", "app_b_appended") == (a.channel, b.channel)


class TestOptions:
    @pytest.mark.parametrize(
        "dsn_given",
        ["/tmp/desk", "host=localhost dbname=x", "", "http://example.org/db", 42, None],
        ids=["path", "keywords", "empty", "http", "int", "none"],
    )
    def test_a_dsn_that_is_not_a_postgresql_url_is_refused(self, dsn_given: Any) -> None:
        with pytest.raises(ValidationError):
            PostgresStore(dsn_given)

    @pytest.mark.parametrize(
        "options",
        [
            {"schema": "Bad-Name"},
            {"schema": "pg_catalog"},
            {"schema": "pg_toast"},
            {"schema": "information_schema"},
            {"schema": ""},
            {"schema": "x" * 41},
            {"min_connections": -1},
            {"max_connections": 0},
            {"min_connections": 5, "max_connections": 2},
            {"connect": "psycopg.connect"},
            {"connect_timeout": 0},
            {"connect_timeout": "1"},
            {"retry_timeout": -1},
            {"retry_timeout": True},
            {"notify": "never"},
            {"group_commit": "yes"},
            {"call_timeout": -1},
            {"call_timeout": "60"},
            {"create": "no"},
            {"durability": "relaxed"},
        ],
        ids=str,
    )
    def test_a_bad_or_unknown_option_is_refused(self, dsn: str, options: dict[str, Any]) -> None:
        with pytest.raises(ValidationError):
            PostgresStore(dsn, **options)

    def test_an_unreachable_server_is_a_store_io_error(self) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]

        with pytest.raises(StoreIOError) as caught:
            PostgresStore(f"postgresql://nobody:secret@127.0.0.1:{port}/x", connect_timeout=0.5)

        assert "secret" not in str(caught.value)

    def test_the_password_never_shows_in_the_path(self, dsn: str) -> None:
        with PostgresStore(dsn.replace("postgres@", "postgres:hunter2@")) as store:
            assert "hunter2" not in store.path + repr(store)


def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


class CountingConnect:
    """A ``connect`` seam: makes real connections to ``dsn`` (or raises ``refuse``), counting."""

    def __init__(self, dsn: str, refuse: Exception | None = None) -> None:
        self.dsn = dsn
        self.refuse = refuse
        self.calls = 0

    def __call__(self) -> psycopg.Connection[Any]:
        self.calls += 1
        if self.refuse is not None:
            raise self.refuse
        return psycopg.connect(self.dsn)


def opened(**options: Any) -> BaseException | PostgresStore:
    """Open a ``PostgresStore`` on a thread; return it or what it raised (bounded wait)."""

    def open_() -> PostgresStore:
        return PostgresStore(**options)

    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(open_)
        error = future.exception(timeout=60)
        return future.result() if error is None else error


#: Logging left as a new application leaves it: no handler, no configuration.
SILENT_CHILD = """
import sys
from sharedesk.protocol import StoreIOError
from sharedesk.store.postgres import PostgresStore

try:
    PostgresStore(sys.argv[2], connect_timeout=1, retry_timeout=0)
except StoreIOError as error:
    print(type(error).__name__)
with PostgresStore(sys.argv[1]) as store:
    store.append("s", [])
    store.read("s")
    import psycopg
    with psycopg.connect(sys.argv[1], autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid, 30000) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    print(len(store.read("s")))
"""


class TestConnecting:
    def test_a_refused_connection_fails_the_open_at_once_naming_the_reason(self) -> None:
        dsn = f"postgresql://nobody:secret@127.0.0.1:{closed_port()}/x"

        error = opened(dsn=dsn, connect_timeout=3600, retry_timeout=3600)

        assert isinstance(error, StoreUnreachable)
        assert ("open", True, False) == (
            error.operation,
            "refused" in error.reason.lower(),
            "secret" in str(error),
        )

    def test_an_unknown_role_fails_the_open_after_one_attempt_naming_the_reason(
        self, dsn: str
    ) -> None:
        connect = CountingConnect(dsn.replace("postgres@", "no_such_role@"))

        error = opened(dsn=dsn, connect=connect, connect_timeout=3600, retry_timeout=3600)

        assert isinstance(error, StoreUnreachable)
        assert (1, True) == (connect.calls, 'role "no_such_role" does not exist' in error.reason)

    def test_every_connection_comes_from_the_connect_factory(self, dsn: str) -> None:
        connect = CountingConnect(dsn)
        with PostgresStore(dsn, connect=connect, min_connections=2) as store:
            store.append("s", [text()])
            store.follow(lambda session_id, last: None)

            assert (3, 1) == (connect.calls, store.last_sequence("s"))

    def test_a_call_that_finds_every_connection_busy_is_a_store_io_error_naming_it(
        self, dsn: str
    ) -> None:
        """It waits ``connect_timeout`` for a connection to come free, then fails, not retried."""
        armed, holding, release = threading.Event(), threading.Event(), threading.Event()

        class Held(psycopg.Connection[Any]):
            def execute(self, query: Any, *args: Any, **kwargs: Any) -> Any:
                if armed.is_set() and not holding.is_set():
                    holding.set()  # the pool's only connection stays in this use
                    release.wait(30)
                return super().execute(query, *args, **kwargs)

        options: dict[str, Any] = {"max_connections": 1, "connect_timeout": 0.05}
        with PostgresStore(dsn, connect=lambda: Held.connect(dsn), **options) as store:
            store.append("s", [text()])
            armed.set()
            with ThreadPoolExecutor(1) as pool:
                first = pool.submit(store.read, "s")
                assert holding.wait(30)
                with pytest.raises(StoreIOError) as caught:
                    store.read("s")
                release.set()

                assert ("read", False, [1]) == (
                    caught.value.operation,
                    isinstance(caught.value, StoreUnreachable),
                    [e.sequence for e in first.result(timeout=30)],
                )

    def test_a_connection_the_server_dropped_while_idle_is_never_written_on(self, dsn: str) -> None:
        """A guarded write takes a live connection instead: no outcome to settle."""
        with PostgresStore(dsn, retry_timeout=0) as store:
            store.append("s", [text()])
            terminate_store_backends(dsn)

            stored = store.append("s", [text()], expected_version=1)

            assert [2] == [e.sequence for e in stored]

    def test_with_logging_unconfigured_connection_faults_print_nothing(
        self, dsn: str, tmp_path: Path
    ) -> None:
        script = tmp_path / "child.py"
        script.write_text(SILENT_CHILD)
        refused = f"postgresql://127.0.0.1:{closed_port()}/x"

        child = subprocess.run(
            [sys.executable, str(script), dsn, refused],
            capture_output=True,
            text=True,
            timeout=120,
            env=child_env(),
            check=False,
        )

        assert ("StoreUnreachable\n0\n", "") == (child.stdout, child.stderr)

    @pytest.mark.parametrize(
        ("given", "shown"),
        [
            ("host=db password=hunter2", "'host=db password=***'"),
            ("postgresql://ann:hunter2@[db/x", "'postgresql://ann:***@[db/x'"),
        ],
        ids=["keywords", "unparsable"],
    )
    def test_a_dsn_error_quotes_what_was_given_without_its_password(
        self, given: str, shown: str
    ) -> None:
        with pytest.raises(ValidationError) as caught:
            PostgresStore(given)

        assert (True, False) == (shown in str(caught.value), "hunter2" in str(caught.value))


class TestSequencing:
    def test_two_stores_appending_to_one_session_stay_gap_free(self, dsn: str) -> None:
        with PostgresStore(dsn) as a, PostgresStore(dsn) as b:
            per_thread = 15

            def work(index: int) -> None:
                store = (a, b)[index % 2]
                for _ in range(per_thread):
                    store.append("s", [text(), text()] if index % 3 else [text()])

            run_threads_indexed(work, 6)

            stored = a.read("s")
            expected = sum((2 if i % 3 else 1) * per_thread for i in range(6))
            assert list(range(1, expected + 1)) == [e.sequence for e in stored]
            assert len(stored) == len({e.id for e in stored})
            assert b.session_info("s") == a.session_info("s")

    def test_two_stores_appending_the_same_ids_store_each_once(self, dsn: str) -> None:
        with PostgresStore(dsn) as a, PostgresStore(dsn) as b:
            ids = [f"e{i}" for i in range(20)]
            results: list[list[Event]] = []
            lock = threading.Lock()

            def work(index: int) -> None:
                store = (a, b)[index % 2]
                mine = [store.append("s", [text(id=id_)])[0] for id_ in ids]
                with lock:
                    results.append(mine)

            run_threads_indexed(work, 4)

            stored = {e.id: e for e in a.read("s")}
            assert (20, 20) == (len(stored), a.last_sequence("s"))
            assert all(r == [stored[id_] for id_ in ids] for r in results)


class TestStaleTail:
    """A store plans appends on its cached tail of a session; another store moves it."""

    @pytest.fixture
    def pair(self, dsn: str) -> Iterator[tuple[PostgresStore, PostgresStore]]:
        with PostgresStore(dsn) as a, PostgresStore(dsn) as b:
            yield a, b

    def test_an_append_lands_after_rows_another_store_wrote(
        self, pair: tuple[PostgresStore, PostgresStore]
    ) -> None:
        a, b = pair
        a.append("s", [text()])
        b.append("s", [text(), text()])

        assert [4] == [e.sequence for e in a.append("s", [text()])]
        assert list(range(1, 5)) == [e.sequence for e in b.read("s")]

    def test_expected_version_is_checked_against_the_real_last_sequence(
        self, pair: tuple[PostgresStore, PostgresStore]
    ) -> None:
        a, b = pair
        a.append("s", [text()])
        b.append("s", [text()])

        with pytest.raises(ConcurrencyError) as caught:
            a.append("s", [text()], expected_version=1)
        assert (1, 2) == (caught.value.expected, caught.value.actual)
        assert [3] == [e.sequence for e in a.append("s", [text()], expected_version=2)]

    def test_an_id_another_store_wrote_is_answered_with_its_event(
        self, pair: tuple[PostgresStore, PostgresStore]
    ) -> None:
        a, b = pair
        a.append("s", [text()])
        (theirs,) = b.append("s", [text("theirs", id="x")])

        result = a.append("s", [text("mine", id="x"), text("new")])

        assert [theirs.sequence, 3] == [e.sequence for e in result]
        assert theirs == result[0]

    def test_a_reply_to_a_root_another_store_wrote_is_indexed_as_its_first(
        self, pair: tuple[PostgresStore, PostgresStore]
    ) -> None:
        a, b = pair
        a.append("s", [text("a")])
        b.append("s", [text("root"), text("reply", parent=2)])

        a.append("s", [text("later reply", parent=2), text("reply to 1", parent=1)])

        assert {1: 5, 2: 3} == a.first_replies("s", [1, 2])

    def test_a_reply_to_a_reply_another_store_wrote_is_refused(
        self, pair: tuple[PostgresStore, PostgresStore]
    ) -> None:
        a, b = pair
        a.append("s", [text("root")])
        b.append("s", [text("reply", parent=1)])

        with pytest.raises(ValidationError, match="a reply to row 1"):
            a.append("s", [text("deeper", parent=2)])
        assert 2 == a.last_sequence("s")

    def test_the_session_state_folds_what_both_stores_appended(
        self, pair: tuple[PostgresStore, PostgresStore]
    ) -> None:
        a, b = pair
        a.append("s", [Event(ALICE, Text("go"), id="r1.input.0", run_id="r1")])
        b.append("s", [Event(ALICE, Text("go"), id="r2.input.0", run_id="r2")])
        a.append("s", [Event(ALICE, Text("go"), id="r3.input.0", run_id="r3")])

        assert ("r1", "r2", "r3") == b.session_state("s").open_runs

    @settings(
        max_examples=40,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(
        batches=st.lists(
            st.tuples(
                st.integers(min_value=0, max_value=1),
                st.lists(st.sampled_from("abcdef"), max_size=4),
                st.one_of(st.none(), st.integers(min_value=0, max_value=8)),
            ),
            max_size=8,
        )
    )
    def test_appends_through_two_stores_match_a_simple_model(
        self,
        pair: tuple[PostgresStore, PostgresStore],
        batches: list[tuple[int, list[str], int | None]],
    ) -> None:
        """Whichever store appends, ids, sequences and expected versions act as one log."""
        session_id = uuid.uuid4().hex
        model: dict[str, int] = {}
        for which, ids, expected_version in batches:
            store = pair[which]
            batch = [text(id=id_) for id_ in ids]
            if expected_version is not None and expected_version != len(model):
                with pytest.raises(ConcurrencyError):
                    store.append(session_id, batch, expected_version=expected_version)
                continue
            result = store.append(session_id, batch, expected_version=expected_version)
            for id_ in ids:
                model.setdefault(id_, len(model) + 1)
            assert [model[id_] for id_ in ids] == [e.sequence for e in result]

        stored = pair[0].read(session_id)
        assert sorted(model, key=model.__getitem__) == [e.id for e in stored]
        assert (len(model), len(model)) == (
            pair[0].last_sequence(session_id),
            pair[1].last_sequence(session_id),
        )


class TestIdentifiers:
    def test_nul_characters_round_trip_in_every_identifier_and_content(
        self, pg: PostgresStore
    ) -> None:
        session_id, viewer = "desk\x00one", "person:\x00a"
        (root,) = pg.append(
            session_id, [Event(ALICE, Text("a\x00b"), id="id\x00", run_id="run\x00")]
        )
        state = SharingState(Conversation(session_id, thread_root=1), 1)
        append_shared(
            pg,
            session_id,
            [text("re\x00", parent=1)],
            viewer=viewer,
            state=state,
        )

        assert [root] == pg.run_events(session_id, "run\x00")
        assert ["a\x00b", "re\x00"] == [e.body.content for e in pg.read(session_id)]  # type: ignore[union-attr]
        assert [root] == pg.append(session_id, [text("again", id="id\x00")])
        assert state == pg.get_sharing_state(session_id, viewer, state.conversation)
        assert [session_id] == pg.sessions()
        assert {1: 2} == pg.first_replies(session_id, [1])

    def test_an_event_id_longer_than_an_index_entry_is_stored_and_found(
        self, pg: PostgresStore
    ) -> None:
        long_id = "x" * 10_000
        (first,) = pg.append("s", [text("a", id=long_id)])

        assert [first] == pg.append("s", [text("b", id=long_id)])
        assert 1 == pg.last_sequence("s")


class TestFollow:
    def test_close_wakes_the_listener_instead_of_waiting_for_its_poll(
        self, dsn: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(_pg_listen, "LISTEN_POLL", 120.0)
        store = PostgresStore(dsn)
        store.follow(lambda session_id, last: None)
        closer = threading.Thread(target=store.close)
        closer.start()
        closer.join(30)  # the listener's poll alone would take 120 s

        assert not closer.is_alive()
        assert not [t for t in threading.enumerate() if "pg-listener" in t.name]

    def test_a_follower_hears_another_stores_appends(self, dsn: str) -> None:
        heard: queue.Queue[tuple[str | None, int]] = queue.Queue()
        with PostgresStore(dsn) as a, PostgresStore(dsn) as b:
            a.follow(lambda session_id, last: heard.put((session_id, last)))
            b.append("desk\x00x", [text(), text()])
            b.append("other", [text()])

            assert ("desk\x00x", 2) == heard.get(timeout=10)
            assert ("other", 1) == heard.get(timeout=10)

    def test_a_follower_hears_appends_and_shares_in_commit_order(self, dsn: str) -> None:
        heard: queue.Queue[tuple[str | None, int]] = queue.Queue()
        with PostgresStore(dsn) as a, PostgresStore(dsn) as b:
            a.follow(lambda session_id, last: heard.put((session_id, last)))
            b.append("s", [text()])
            append_shared(
                b,
                "s",
                [text()],
                viewer="v",
                state=SharingState(Conversation("s"), 1),
            )

            told = [heard.get(timeout=10)]
            while told[-1] != ("s", 2):
                told.append(heard.get(timeout=10))
            # in commit order; one group may hold both commits, told as one notice
            assert told in ([("s", 1), ("s", 2)], [("s", 2)])

    def test_an_append_that_stores_nothing_new_is_not_announced(self, dsn: str) -> None:
        heard: queue.Queue[tuple[str | None, int]] = queue.Queue()
        with PostgresStore(dsn) as store:
            store.append("s", [text(id="a")])
            store.follow(lambda session_id, last: heard.put((session_id, last)))
            store.append("s", [text(id="a")])
            store.append("s", [text(id="b")])

            assert ("s", 2) == heard.get(timeout=10)

    def test_stopping_the_last_follower_stops_the_listener(self, pg: PostgresStore) -> None:
        stop = pg.follow(lambda session_id, last: None)
        assert 1 == len(listener_threads())

        stop()
        stop()

        assert [] == listener_threads()

    def test_close_stops_the_listener(self, dsn: str) -> None:
        store = PostgresStore(dsn)
        store.follow(lambda session_id, last: None)

        store.close()

        assert [] == listener_threads()
        with pytest.raises(StoreClosedError):
            store.follow(lambda session_id, last: None)

    def test_a_lost_listener_connection_reconnects_and_says_notices_may_be_missed(
        self, dsn: str
    ) -> None:
        heard: queue.Queue[tuple[str | None, int]] = queue.Queue()
        with PostgresStore(dsn) as store:
            store.follow(lambda session_id, last: heard.put((session_id, last)))

            terminate_store_backends(dsn)

            assert (None, 0) == heard.get(timeout=10)
            store.append("s", [text()])
            assert ("s", 1) == heard.get(timeout=10)


class TestConnectionLoss:
    def test_the_pool_reconnects_after_its_connections_are_lost(
        self, pg: PostgresStore, dsn: str
    ) -> None:
        pg.append("s", [text()])
        assert terminate_store_backends(dsn) >= 1

        assert [2] == [e.sequence for e in pg.append("s", [text()])]
        assert 2 == pg.last_sequence("s")

    def test_a_plain_append_interrupted_at_commit_is_retried_and_stored_once(
        self, pg: PostgresStore, dsn: str
    ) -> None:
        interrupt_next_commit(dsn)

        stored = pg.append("s", [text("once", id="e1")])

        assert [stored[0]] == pg.read("s")

    @pytest.mark.parametrize(
        "guard",
        [{"expected_version": 0}, {"unless_stored": "g"}],
        ids=["expected_version", "unless_stored"],
    )
    def test_a_guarded_append_interrupted_at_commit_is_settled_by_a_read_and_run_again(
        self, pg: PostgresStore, dsn: str, guard: dict[str, Any]
    ) -> None:
        """The trap aborted the commit: the read finds nothing stored, so it runs again."""
        interrupt_next_commit(dsn)

        stored = pg.append("s", [text(id="e1")], **guard)

        assert stored == pg.read("s")
        assert [1] == [e.sequence for e in stored]

    def test_a_share_interrupted_at_commit_is_settled_by_a_read_and_run_again(
        self, pg: PostgresStore, dsn: str
    ) -> None:
        interrupt_next_commit(dsn)
        state = SharingState(Conversation("s"), 0)

        append_shared(pg, "s", [text()], viewer="v", state=state)

        assert (1, state) == (
            pg.last_sequence("s"),
            pg.get_sharing_state("s", "v", state.conversation),
        )

    @pytest.mark.parametrize(
        "write",
        [
            lambda store: store.append("s", [text(id="e1")], expected_version=0),
            lambda store: append_shared(
                store,
                "s",
                [text(id="e1")],
                viewer="v",
                state=SharingState(Conversation("s"), 0),
            ),
        ],
        ids=["append", "shared_write"],
    )
    def test_a_write_whose_interrupted_commit_cannot_be_settled_says_its_outcome_is_unknown(
        self,
        dsn: str,
        write: Callable[[PostgresStore], object],
    ) -> None:
        """As when the server stays unreachable once the commit was cut off."""
        connect = CountingConnect(dsn)
        with PostgresStore(dsn, retry_timeout=0.2, connect=connect) as store:
            interrupt_next_commit(dsn)
            connect.refuse = psycopg.OperationalError("refused by the test")

            with pytest.raises(CommitOutcomeUnknown) as caught:
                write(store)

            connect.refuse = None
            assert "s" == caught.value.session_id
            assert [1] == [e.sequence for e in store.append("s", [text(id="e1")])]

    def test_a_driver_error_is_a_store_io_error_with_the_cause(
        self, pg: PostgresStore, dsn: str
    ) -> None:
        with admin(dsn) as conn:
            conn.execute("DROP TABLE sharedesk.events")

        with pytest.raises(StoreIOError) as caught:
            pg.read("s")

        assert isinstance(caught.value.__cause__, psycopg.Error)


def commit_as_group(
    store: PostgresStore, writes: Sequence[tuple[str, list[Event]]]
) -> list[list[Event] | BaseException]:
    """Submit ``writes`` while the store's writer is held inside a commit: one group.

    An ``on_commit`` callback holds the writer in the commit of one append to
    ``"blocker"``; the writes queue meanwhile, and the writer takes them all as its next
    group once it is let go. Returns each write's stored events or error.
    """
    holding, release = threading.Event(), threading.Event()

    def hold(session_id: str, _events: list[Event]) -> None:
        if session_id == "blocker":
            holding.set()
            release.wait(30)

    remove = store.on_commit(hold)
    held = store.submit(check_write("blocker", [text()]), WriteFuture())
    assert holding.wait(30)
    futures = [store.submit(check_write(sid, events), WriteFuture()) for sid, events in writes]
    release.set()
    held.result(timeout=30)
    remove()
    outcomes: list[list[Event] | BaseException] = []
    for future in futures:
        error = future.exception(timeout=30)
        outcomes.append(future.result() if error is None else error)
    return outcomes


def untimed(events: Sequence[Event]) -> list[Event]:
    """``events`` without their timestamps (two stores stamp the same write apart)."""
    return [msgspec.structs.replace(e, timestamp=None) for e in events]


def sequences(outcomes: list[list[Event] | BaseException]) -> list[list[int | None]]:
    """The stored sequences of each outcome of :func:`commit_as_group` (all succeeded)."""
    assert all(isinstance(outcome, list) for outcome in outcomes), outcomes
    return [[e.sequence for e in cast(list[Event], outcome)] for outcome in outcomes]


def transactions_of(dsn: str, *session_ids: str) -> int:
    """How many transactions wrote the stored events of ``session_ids`` (distinct ``xmin``)."""
    found = rows(
        dsn,
        "SELECT DISTINCT xmin::text FROM sharedesk.events WHERE session_id = ANY(%s)",
        [[session_id.encode() for session_id in session_ids]],
    )
    return len(found)


class TestGroupCommit:
    """Writes queued while the writer is busy are committed together, in one transaction."""

    def test_a_group_of_appends_to_several_sessions_commits_in_one_transaction(
        self, pg: PostgresStore, dsn: str
    ) -> None:
        outcomes = commit_as_group(pg, [("b", [text()]), ("a", [text()]), ("c", [text()])])

        assert [[1], [1], [1]] == sequences(outcomes)
        assert outcomes == [pg.read("b"), pg.read("a"), pg.read("c")]
        assert 1 == transactions_of(dsn, "a", "b", "c")

    def test_two_appends_to_one_session_in_a_group_are_sequenced_one_after_the_other(
        self, pg: PostgresStore
    ) -> None:
        pg.append("s", [text()])

        outcomes = commit_as_group(pg, [("s", [text("x")]), ("s", [text("y"), text("z")])])

        assert [[2], [3, 4]] == sequences(outcomes)
        assert ["hello", "x", "y", "z"] == [cast(Text, e.body).content for e in pg.read("s")]

    def test_a_write_another_store_got_ahead_of_is_sequenced_after_it(
        self, pg: PostgresStore, dsn: str
    ) -> None:
        pg.append("s", [text()])
        with PostgresStore(dsn) as other:
            other.append("s", [text(), text()])

        outcomes = commit_as_group(pg, [("s", [text("mine")]), ("t", [text()])])

        assert [[4], [1]] == sequences(outcomes)

    def test_a_known_id_in_a_group_is_answered_with_its_stored_event(
        self, pg: PostgresStore
    ) -> None:
        (stored,) = pg.append("s", [text("first", id="x")])

        outcomes = commit_as_group(pg, [("s", [text("again", id="x")]), ("t", [text()])])

        assert [[stored], pg.read("t")] == outcomes
        assert 1 == pg.last_sequence("s")

    def test_a_write_failing_its_checks_fails_alone_and_the_others_commit(
        self, pg: PostgresStore
    ) -> None:
        pg.append("s", [text("root"), text("reply", parent=1)])

        outcomes = commit_as_group(
            pg, [("s", [text("deeper", parent=2)]), ("t", [text()]), ("u", [text()])]
        )

        assert isinstance(outcomes[0], ValidationError)
        assert [pg.read("t"), pg.read("u")] == outcomes[1:]
        assert (2, 1, 1) == (pg.last_sequence("s"), pg.last_sequence("t"), pg.last_sequence("u"))

    def test_a_reply_in_a_group_to_a_stored_root_records_the_first_reply(
        self, pg: PostgresStore
    ) -> None:
        pg.append("s", [text("root")])

        outcomes = commit_as_group(pg, [("s", [text("reply", parent=1)]), ("t", [text()])])

        assert [[2], [1]] == sequences(outcomes)
        assert {1: 2} == pg.first_replies("s", [1])

    def test_a_group_keeps_run_rows_and_the_folded_session_state(
        self, pg: PostgresStore, dsn: str
    ) -> None:
        started = Event(System("session", "x"), SessionStarted({"k": 1}), id=SESSION_STARTED_ID)
        run = [Event(BOT, TextDelta("ch"), run_id="run-1")]

        outcomes = commit_as_group(pg, [("s", [started]), ("t", run)])

        assert [[1], [1]] == sequences(outcomes)
        assert outcomes[1] == pg.run_events("t", "run-1")
        with PostgresStore(dsn) as fresh:
            assert {"k": 1} == fresh.session_state("s").metadata

    def test_a_group_whose_commit_is_interrupted_runs_again_and_stores_each_write_once(
        self, pg: PostgresStore, dsn: str
    ) -> None:
        pg.append("s", [text()])
        pg.append("t", [text()])
        interrupt_next_commit(dsn)

        outcomes = commit_as_group(pg, [("s", [text(id="e1")]), ("t", [text(id="e2")])])

        assert [pg.read("s", after=1), pg.read("t", after=1)] == outcomes
        assert [["e1"], ["e2"]] == [[e.id for e in pg.read(sid, after=1)] for sid in ("s", "t")]

    @settings(
        max_examples=20,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(
        sessions=st.lists(
            st.tuples(
                st.sampled_from(["fresh", "written", "written elsewhere"]),
                st.lists(
                    st.tuples(
                        st.sampled_from(["text", "reply-stored", "reply-new", "bad", "run"]),
                        st.sampled_from(["new", "known", "repeat"]),
                    ),
                    min_size=1,
                    max_size=3,
                ),
            ),
            min_size=1,
            max_size=5,
        )
    )
    def test_a_group_stores_what_appending_each_write_to_a_memory_store_stores(
        self,
        dsn: str,
        sessions: list[tuple[str, list[tuple[str, str]]]],
    ) -> None:
        """One write per session: the group's outcomes and rows are a lone append's."""
        model = MemoryStore()
        writes: list[tuple[str, list[Event]]] = []
        with PostgresStore(dsn) as pg, PostgresStore(dsn) as other:
            for index, (history, specs) in enumerate(sessions):
                session_id = f"{uuid.uuid4().hex[:8]}-{index}"
                start = [text("root", id=f"{session_id}-root"), text("reply", parent=1)]
                if history != "fresh":
                    for store in (pg, model):
                        store.append(session_id, start)
                if history == "written elsewhere":
                    late = [text("late", id=f"{session_id}-late")]
                    other.append(session_id, late)
                    model.append(session_id, late)
                batch: list[Event] = []
                for n, (kind, ident) in enumerate(specs):
                    event_id = {
                        "new": f"{session_id}-{n}",
                        "known": f"{session_id}-root",
                        "repeat": f"{session_id}-0",
                    }[ident]
                    if kind == "run":
                        batch.append(Event(BOT, TextDelta("ch"), id=event_id, run_id="r"))
                        continue
                    parent = {"text": None, "reply-stored": 1, "reply-new": None, "bad": 2}[kind]
                    batch.append(text(kind, id=event_id, parent=parent))
                writes.append((session_id, batch))

            outcomes = commit_as_group(pg, writes)

            for (session_id, batch), outcome in zip(writes, outcomes, strict=True):
                try:
                    expected: list[Event] | type[BaseException] = model.append(session_id, batch)
                except ValidationError:
                    expected = ValidationError
                if isinstance(outcome, BaseException):
                    assert expected is type(outcome)
                else:
                    assert isinstance(expected, list)
                    assert untimed(expected) == untimed(outcome)
                assert untimed(model.read(session_id)) == untimed(pg.read(session_id))
                assert model.first_replies(session_id, [1, 2, 3]) == pg.first_replies(
                    session_id, [1, 2, 3]
                )
                assert model.session_state(session_id) == pg.session_state(session_id)
                assert untimed(model.run_events(session_id, "r")) == untimed(
                    pg.run_events(session_id, "r")
                )
                info, stored_info = model.session_info(session_id), pg.session_info(session_id)
                assert (info and info.text_count) == (stored_info and stored_info.text_count)
                assert model.log(session_id).read_before(None, 50) == pg.log(
                    session_id
                ).read_before(None, 50)

    def test_appends_from_threads_share_commits(self, pg: PostgresStore, dsn: str) -> None:
        """Eight threads append to eight sessions at once; groups take several each."""
        sessions = [f"s{index}" for index in range(8)]
        start = threading.Barrier(8)

        def work(index: int) -> None:
            start.wait()
            for _ in range(5):
                pg.append(sessions[index], [text()])

        run_threads_indexed(work, 8)

        assert [5] * 8 == [pg.last_sequence(s) for s in sessions]
        assert transactions_of(dsn, *sessions) < 40

    def test_a_group_is_two_round_trips_its_facts_then_its_write_and_commit(self, dsn: str) -> None:
        """``BEGIN``, lock and reads go as one message; the write goes with ``COMMIT``."""
        sent: list[str] = []

        class Counted(psycopg.Connection[Any]):
            def execute(self, query: Any, *args: Any, **kwargs: Any) -> Any:
                sent.append(str(query))
                return super().execute(query, *args, **kwargs)

        with PostgresStore(dsn, max_connections=1, connect=lambda: Counted.connect(dsn)) as store:
            store.append("s", [text()])
            sent.clear()
            store.append("s", [text(parent=1), text()], expected_version=1)
            state = SharingState(Conversation("s"), 0)
            append_shared(store, "s", [text()], viewer="v", state=state)

        assert ["BEGIN", "EXECUTE", "BEGIN", "EXECUTE"] == [q.split()[0].rstrip(";") for q in sent]

    def test_close_ends_the_group_writer(self, dsn: str) -> None:
        store = PostgresStore(dsn)
        store.append("s", [text()])

        store.close()

        assert [] == [t for t in threading.enumerate() if t.name.startswith("sharedesk-pg-writer")]
        with pytest.raises(StoreClosedError):
            store.append("s", [text()])


class TestThreads:
    def test_close_leaves_none_of_the_stores_threads_running(self, dsn: str) -> None:
        store = PostgresStore(dsn)
        store.follow(lambda session_id, last: None)
        store.append("s", [text()])

        def work(index: int) -> None:
            store.append(f"s{index}", [text()])

        run_threads_indexed(work, 4)
        mine = [t for t in threading.enumerate() if t.name.endswith(f":{store.path}")]
        assert {"sharedesk-pg-listener", "sharedesk-pg-watchdog", "sharedesk-pg-writer"} <= {
            t.name.split(":", 1)[0] for t in mine
        }

        store.close()

        assert [] == [t.name for t in mine if t.is_alive()]


class TestUnderAHub:
    def test_a_hub_runs_its_sessions_views_and_turns_on_the_store(self, dsn: str) -> None:
        bot = Agent(id="bot", label="Bot")
        with Hub(PostgresStore(dsn)) as hub:
            hub.session("desk").post(ALICE, "hello")
            turn = hub.turn("desk", bot)
            reply = turn.commit("hi Alice")

            assert ["hello"] == [m.content for m in turn.messages]
            assert ["hello", "hi Alice"] == [m.content for m in hub.view("desk", ALICE).messages]
            assert reply is not None and reply.sequence == 2
            assert [] == hub.turn("desk", bot).messages
