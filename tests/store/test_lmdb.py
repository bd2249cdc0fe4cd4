"""LmdbStore runs the store contract suite unchanged, plus its own durability and fault tests."""

from __future__ import annotations

import json
import os
import random
import signal
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import lmdb
import msgspec
import pytest

from sharedesk.protocol import (
    ConcurrencyError,
    Conversation,
    CorruptRecordError,
    Event,
    Person,
    SharingState,
    StoreClosedError,
    StoreFullError,
    StoreIOError,
    Text,
    TextDelta,
    ValidationError,
)
from sharedesk.protocol.errors import StoreFormatError
from sharedesk.protocol.ports import WriteFuture
from sharedesk.protocol.records import sharing_key
from sharedesk.protocol.validation import MAX_SESSION_ID_BYTES, check_write
from sharedesk.store import LmdbStore
from sharedesk.store._lmdb_env import FORMAT_KEY, FORMAT_VERSION, READER_CHECK_COMMITS
from sharedesk.store._lmdb_layout import SEQ, session_prefix, tree_problem
from tests.store.conftest import ChildFactory, run_child
from tests.store.contract import ContractStore, StoreContract, append_shared, delta, text

ALICE = Person(id="alice", label="Alice")


class TestLmdbStore(StoreContract):
    """The contract, on the LMDB backend (relaxed durability keeps the suite fast)."""

    def make_store(self, path: Path) -> ContractStore:
        return LmdbStore(path, durability="relaxed")


class TestDurableLmdbStore(StoreContract):
    """The contract again with an fsync on every commit (the default)."""

    def make_store(self, path: Path) -> ContractStore:
        return LmdbStore(path)


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "desk"


@pytest.fixture
def store(store_path: Path) -> Iterator[LmdbStore]:
    with LmdbStore(store_path) as opened:
        yield opened


def raw_keys(path: str | Path, db: bytes) -> list[bytes]:
    """Return the keys of one sub-database of a closed store, read with raw py-lmdb."""
    env = lmdb.open(str(path), max_dbs=8, readonly=True)
    try:
        with env.begin() as txn:
            return [bytes(key) for key, _ in txn.cursor(db=env.open_db(db, txn=txn))]
    finally:
        env.close()


def raw_put(path: Path, db: bytes, key: bytes, value: bytes) -> None:
    """Write one raw record into a closed store's environment."""
    env = lmdb.open(str(path), max_dbs=8)
    try:
        handle = env.open_db(db)
        with env.begin(write=True) as txn:
            txn.put(key, value, db=handle)
    finally:
        env.close()


def gate_writer(scripted: ScriptedEnvironment) -> tuple[threading.Event, threading.Event]:
    """Make the store's writer stop as it begins its next write transaction until released.

    Returns (entered, release): ``entered`` is set once the writer holds a group.
    """
    entered, release = threading.Event(), threading.Event()

    def gated(stage: str) -> None:
        if stage == "begin" and not entered.is_set():
            entered.set()
            assert release.wait(30)

    scripted.write_hooks.append(gated)
    return entered, release


def submit(
    store: LmdbStore, session_id: str, events: list[Event], **options: Any
) -> Future[list[Event]]:
    """Queue one checked write to the store's writer; return its future."""
    return store.submit(check_write(session_id, events, **options), WriteFuture())


def outcome(future: Future[list[Event]]) -> list[int | None] | BaseException:
    """Return a write's stored sequences, or its error (waiting at most 30 s)."""
    error = future.exception(timeout=30)
    return error if error is not None else [e.sequence for e in future.result()]


def in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Start ``call`` in a thread; the list receives its result or exception."""
    outcome: list[Any] = []

    def target() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    return thread, outcome


def _no_hook(stage: str) -> None:
    """The hook of a write transaction no test scripts."""


def fail_at(stage: str, error: BaseException) -> Callable[[str], None]:
    """Return a write hook that raises ``error`` at ``stage`` (``"begin"``, ``"put"``...)."""

    def hook(at: str) -> None:
        if at == stage:
            raise error

    return hook


class ScriptedEnvironment:
    """The ``environment=`` seam's test double: a real environment that fails on demand.

    ``LmdbStore(path, environment=scripted.open)`` opens the environment through it. A
    test then scripts what comes next: the next write transactions' hooks (each called
    with ``"begin"``, before each ``"put"`` (a put or a putmulti) and before
    ``"commit"``; it may raise), the errors the next read transactions' ``begin`` raises,
    or a call made inside the next read transaction. It counts opens, closes, reader
    checks and map resizes.
    """

    def __init__(self) -> None:
        self.env: Any = None
        self.opens = self.closes = self.writes = self.reader_checks = self.resizes = 0
        self.write_hooks: list[Callable[[str], None]] = []
        self.read_errors: list[BaseException] = []
        self.inside_next_read: Callable[[], None] | None = None

    def open(self, path: str, **options: Any) -> ScriptedEnvironment:
        self.env = lmdb.open(path, **options)
        self.opens += 1
        return self

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    def begin(self, **options: Any) -> Any:
        if options.get("write"):
            self.writes += 1
            hook = self.write_hooks.pop(0) if self.write_hooks else _no_hook
            hook("begin")
            return _ScriptedTxn(self.env.begin(**options), hook)
        if self.read_errors:
            raise self.read_errors.pop(0)
        txn = self.env.begin(**options)
        inside, self.inside_next_read = self.inside_next_read, None
        if inside is not None:
            inside()
        return txn

    def open_db(self, name: bytes, *, txn: Any = None, **options: Any) -> Any:
        if isinstance(txn, _ScriptedTxn):
            txn = txn.inner
        return self.env.open_db(name, txn=txn, **options)

    def reader_check(self) -> int:
        self.reader_checks += 1
        freed: int = self.env.reader_check()
        return freed

    def set_mapsize(self, size: int) -> None:
        self.resizes += 1
        self.env.set_mapsize(size)

    def close(self) -> None:
        self.closes += 1
        self.env.close()

    def last_txnid(self) -> int:
        txnid: int = self.env.info()["last_txnid"]
        return txnid


class _ScriptedTxn:
    def __init__(self, txn: Any, hook: Callable[[str], None]) -> None:
        self.inner = txn
        self._hook = hook

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __enter__(self) -> _ScriptedTxn:
        self.inner.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.inner.__exit__(*exc)

    def put(self, *args: Any, **options: Any) -> Any:
        self._hook("put")
        return self.inner.put(*args, **options)

    def cursor(self, **options: Any) -> Any:
        return _ScriptedCursor(self.inner.cursor(**options), self._hook)

    def commit(self) -> None:
        self._hook("commit")
        self.inner.commit()


class _ScriptedCursor:
    def __init__(self, cursor: Any, hook: Callable[[str], None]) -> None:
        self._cursor = cursor
        self._hook = hook

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)

    def putmulti(self, *args: Any, **options: Any) -> Any:
        self._hook("put")
        return self._cursor.putmulti(*args, **options)


@pytest.fixture
def scripted() -> ScriptedEnvironment:
    return ScriptedEnvironment()


@pytest.fixture
def scripted_store(store_path: Path, scripted: ScriptedEnvironment) -> Iterator[LmdbStore]:
    with LmdbStore(store_path, environment=scripted.open) as opened:
        yield opened


class TestLmdbStoreReopen:
    def test_events_survive_close_and_reopen(self, store_path: Path) -> None:
        with LmdbStore(store_path) as first:
            stored = first.append("s", [text("a"), delta(), text("b", parent=1)])

        with LmdbStore(store_path) as second:
            assert stored == second.read("s")
            assert ["b", "a"] == [m.content for m in second.log("s").read_before(None, 5).messages]

    def test_sequences_continue_after_reopen(self, store_path: Path) -> None:
        with LmdbStore(store_path) as first:
            first.append("s", [text(id="a"), text()])

        with LmdbStore(store_path) as second:
            assert [1, 3] == [e.sequence for e in second.append("s", [text(id="a"), text()])]

    def test_sharing_state_and_session_info_survive_reopen(self, store_path: Path) -> None:
        state = SharingState(Conversation("s", thread_root=1), 1, frozenset({3}))
        with LmdbStore(store_path) as first:
            first.append("s", [text()])
            append_shared(first, "s", [text(), text()], viewer="agent:x", state=state)
            info = first.session_info("s")

        with LmdbStore(store_path) as second:
            assert state == second.get_sharing_state("s", "agent:x", state.conversation)
            assert info == second.session_info("s")
            assert ["s"] == second.sessions()

    def test_relaxed_store_keeps_its_events_after_reopen(self, store_path: Path) -> None:
        with LmdbStore(store_path, durability="relaxed") as first:
            stored = first.append("s", [text()])

        with LmdbStore(store_path) as second:
            assert stored == second.read("s")


def raw_main_put(path: Path, key: bytes, value: bytes | None) -> None:
    """Write (``None``: delete) one key of LMDB's unnamed database in a closed store."""
    env = lmdb.open(str(path), max_dbs=8)
    try:
        with env.begin(write=True) as txn:
            if value is None:
                txn.delete(key)
            else:
                txn.put(key, value)
    finally:
        env.close()


class TestLmdbStoreFormat:
    def test_a_new_store_records_its_format(self, store_path: Path) -> None:
        LmdbStore(store_path).close()

        env = lmdb.open(str(store_path), max_dbs=8, readonly=True)
        try:
            with env.begin() as txn:
                recorded = txn.get(FORMAT_KEY)
        finally:
            env.close()

        assert str(FORMAT_VERSION).encode() == recorded

    @pytest.mark.parametrize(
        ("record", "found"),
        [(b"2", "format record b'2'"), (None, "no format record")],
        ids=["other_format", "no_record"],
    )
    def test_a_file_of_another_format_is_refused_and_left_unchanged(
        self, store_path: Path, record: bytes | None, found: str
    ) -> None:
        with LmdbStore(store_path) as store:
            store.append("s", [text()])
        raw_main_put(store_path, FORMAT_KEY, record)
        before = (store_path / "data.mdb").read_bytes()

        with pytest.raises(StoreFormatError) as caught:
            LmdbStore(store_path)

        assert (FORMAT_VERSION, True) == (caught.value.supported, found in caught.value.found)
        assert before == (store_path / "data.mdb").read_bytes()


class TestLmdbStoreOptions:
    @pytest.mark.parametrize(
        "options",
        [
            {"durability": "fast"},
            {"map_size": 0},
            {"map_size": None},
            {"max_map_size": -1},
            {"map_size": 2**21, "max_map_size": 2**20},
            {"group_wait": -0.1},
            {"group_wait": "soon"},
            {"verify": "yes"},
        ],
        ids=[
            "durability",
            "map_size",
            "none_map_size",
            "max_map_size",
            "map_above_max",
            "negative_wait",
            "str_wait",
            "str_verify",
        ],
    )
    def test_bad_option_raises_validation_error(
        self, store_path: Path, options: dict[str, Any]
    ) -> None:
        with pytest.raises(ValidationError):
            LmdbStore(store_path, **options)

    def test_path_that_is_a_file_raises_store_io_error(self, tmp_path: Path) -> None:
        path = tmp_path / "file"
        path.write_text("not a store")

        with pytest.raises(StoreIOError) as caught:
            LmdbStore(path)

        assert ("open", str(path.resolve())) == (caught.value.operation, caught.value.path)
        assert caught.value.__cause__ is not None


class TestLmdbStorePaths:
    @pytest.mark.parametrize(
        "path", ["", "a\x00b", 3, b"store", None], ids=["empty", "nul", "int", "bytes", "none"]
    )
    def test_a_path_that_is_not_one_raises_validation_error_and_creates_nothing(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: Any
    ) -> None:
        monkeypatch.chdir(tmp_path)

        with pytest.raises(ValidationError):
            LmdbStore(path)

        assert [] == list(tmp_path.iterdir())

    @pytest.mark.parametrize("map_size", [1, 4096, 32 * 1024])
    def test_a_map_smaller_than_lmdb_can_open_starts_at_64_kib_and_grows(
        self, store_path: Path, map_size: int
    ) -> None:
        with LmdbStore(store_path, map_size=map_size, durability="relaxed") as store:
            store.append("s", [text("x" * 1000) for _ in range(200)])

            assert (200, True) == (store.last_sequence("s"), store.map_size() > 64 * 1024)

    def test_a_max_map_size_below_64_kib_raises_validation_error(self, store_path: Path) -> None:
        with pytest.raises(ValidationError):
            LmdbStore(store_path, map_size=4096, max_map_size=32 * 1024)


class TestLmdbStoreSharedEnvironment:
    def test_two_stores_on_one_path_share_the_environment(
        self, store_path: Path, scripted: ScriptedEnvironment
    ) -> None:
        with (
            LmdbStore(store_path, environment=scripted.open) as first,
            LmdbStore(store_path, environment=scripted.open) as second,
        ):
            first.append("s", [text("from first")])
            second.append("s", [text("from second")])

            assert 1 == scripted.opens
            assert [1, 2] == [e.sequence for e in first.read("s")]

    def test_stores_alternating_on_one_session_never_reuse_a_sequence(
        self, store_path: Path
    ) -> None:
        """Each store caches session metadata between its own commits; the other's drop it."""
        with LmdbStore(store_path) as first, LmdbStore(store_path) as second:
            for round_ in range(3):
                first.append("s", [text(f"first {round_}")])
                second.append("s", [text(f"second {round_}")])

            assert list(range(1, 7)) == [e.sequence for e in first.read("s")]
            assert 6 == len({e.id for e in second.read("s")})

    def test_a_symlinked_path_shares_the_environment(
        self, tmp_path: Path, scripted: ScriptedEnvironment
    ) -> None:
        real = tmp_path / "real"
        real.mkdir()
        (tmp_path / "link").symlink_to(real)

        with (
            LmdbStore(real, environment=scripted.open),
            LmdbStore(tmp_path / "link", environment=scripted.open) as second,
        ):
            assert (1, str(real.resolve())) == (scripted.opens, second.path)

    def test_environment_stays_open_until_the_last_store_closes(
        self, store_path: Path, scripted: ScriptedEnvironment
    ) -> None:
        first = LmdbStore(store_path, environment=scripted.open)
        second = LmdbStore(store_path)
        first.close()

        second.append("s", [text()])

        assert (1, 0) == (second.last_sequence("s"), scripted.closes)
        second.close()
        assert 1 == scripted.closes

    def test_closing_one_store_leaves_the_other_usable(self, store_path: Path) -> None:
        with LmdbStore(store_path) as survivor:
            LmdbStore(store_path).close()

            assert [1] == [e.sequence for e in survivor.append("s", [text()])]

    def test_other_durability_on_an_open_path_raises_validation_error(
        self, store: LmdbStore, store_path: Path
    ) -> None:
        with pytest.raises(ValidationError):
            LmdbStore(store_path, durability="relaxed")

    def test_reopening_a_path_after_every_store_closed_opens_a_new_environment(
        self, store_path: Path, scripted: ScriptedEnvironment
    ) -> None:
        LmdbStore(store_path, environment=scripted.open).close()

        with LmdbStore(store_path, durability="relaxed", environment=scripted.open):
            assert 2 == scripted.opens


class TestLmdbStoreLifecycle:
    def test_close_stops_the_writer_thread(self, store_path: Path) -> None:
        store = LmdbStore(store_path)
        store.append("s", [text()])

        store.close()

        assert [] == [t.name for t in threading.enumerate() if t.name.endswith(store.path)]

    def test_writes_queued_at_close_get_store_closed_error(
        self, scripted_store: LmdbStore, scripted: ScriptedEnvironment
    ) -> None:
        """The group being written completes; writes still queued fail instead of hanging."""
        store = scripted_store
        entered, release = gate_writer(scripted)
        first = submit(store, "s", [text("in group")])
        assert entered.wait(30)
        queued = submit(store, "s", [text("queued")])

        closer, _ = in_thread(store.close)
        refused = queued.exception(timeout=30)
        release.set()
        closer.join()

        assert isinstance(refused, StoreClosedError)
        assert [1] == outcome(first)

    def test_repr_names_path_durability_and_state(self, store_path: Path) -> None:
        store = LmdbStore(store_path, durability="relaxed")
        store.close()

        assert f"LmdbStore({store.path!r}, durability='relaxed') [closed]" == repr(store)


def held_group(store: LmdbStore, scripted: ScriptedEnvironment) -> threading.Event:
    """Hold the writer in the transaction of a write to session ``held``; return the release.

    Every write submitted until the release joins the one group after it.
    """
    entered, release = gate_writer(scripted)
    submit(store, "held", [text("holding")])
    assert entered.wait(30)
    return release


class TestLmdbStoreGroupCommit:
    def test_writes_queued_together_commit_in_one_transaction(
        self, scripted_store: LmdbStore, scripted: ScriptedEnvironment
    ) -> None:
        store = scripted_store
        release = held_group(store, scripted)
        waiting = [submit(store, f"s{index % 3}", [text()]) for index in range(10)]
        before = scripted.last_txnid()

        release.set()
        results = [outcome(future) for future in waiting]

        assert before + 2 == scripted.last_txnid()
        assert [[1], [1], [1], [2], [2], [2], [3], [3], [3], [4]] == results

    def test_a_group_is_answered_before_the_group_behind_it_commits(
        self, scripted_store: LmdbStore, scripted: ScriptedEnvironment
    ) -> None:
        store = scripted_store
        committing, finish = threading.Event(), threading.Event()

        def hold_commit(stage: str) -> None:
            if stage == "commit":
                committing.set()
                assert finish.wait(30)

        release = held_group(store, scripted)
        first = submit(store, "s", [text("first")])
        scripted.write_hooks.extend([_no_hook, hold_commit])  # the group after ``first``'s
        release.set()
        answered_first = outcome(first)
        second = submit(store, "t", [text("second")])
        assert committing.wait(30)  # the second group's commit has not happened
        finish.set()

        assert ([1], [1]) == (answered_first, outcome(second))

    @pytest.mark.parametrize("stage", ["begin", "put", "commit"])
    def test_a_group_failing_at_its_stage_writes_nothing_and_the_next_one_commits(
        self, scripted_store: LmdbStore, scripted: ScriptedEnvironment, stage: str
    ) -> None:
        store = scripted_store
        scripted.write_hooks.append(fail_at(stage, lmdb.Error("simulated disk failure")))

        failed = outcome(submit(store, "t", [text("lost")]))

        assert isinstance(failed, StoreIOError)
        assert ([], [1]) == (store.read("t"), outcome(submit(store, "t", [text()])))

    def test_one_failing_write_does_not_spoil_its_group(
        self, scripted_store: LmdbStore, scripted: ScriptedEnvironment
    ) -> None:
        store = scripted_store
        store.append("s", [text()])
        release = held_group(store, scripted)
        good = submit(store, "s", [text("good")], expected_version=1)
        stale = submit(store, "s", [text("stale")], expected_version=1)
        bad = submit(store, "s", [text("bad", parent=99)])
        other = submit(store, "t", [text("other")])

        release.set()

        assert [2] == outcome(good)
        assert isinstance(outcome(stale), ConcurrencyError)
        assert isinstance(outcome(bad), ValidationError)
        assert [1] == outcome(other)
        assert ["good"] == [e.body.content for e in store.read("s", after=1)]  # type: ignore[union-attr]

    def test_a_write_refused_at_a_later_event_leaves_no_record_claim_or_text_row(
        self, scripted_store: LmdbStore, scripted: ScriptedEnvironment
    ) -> None:
        store = scripted_store
        release = held_group(store, scripted)
        refused = submit(store, "s", [text("a", id="a"), text("b", id="b", parent=2)])
        after = submit(store, "s", [msgspec.structs.replace(delta(), id="a")])

        release.set()

        with pytest.raises(ValidationError, match=r"events\[1\]\.parent=2"):
            refused.result(timeout=30)
        assert [(1, TextDelta("chunk"))] == [(e.sequence, e.body) for e in after.result()]
        assert [] == store.log("s").read_before(None, 10).messages
        store.close()
        prefix = session_prefix("s")
        assert ([prefix + b"\x00a"], []) == (
            [key for key in raw_keys(store.path, b"ids") if key.startswith(prefix)],
            [key for key in raw_keys(store.path, b"texts") if key.startswith(prefix)],
        )

    def test_later_writes_in_a_group_see_the_earlier_ones(
        self, scripted_store: LmdbStore, scripted: ScriptedEnvironment
    ) -> None:
        store = scripted_store
        release = held_group(store, scripted)
        first = submit(store, "s", [text(id="x")], expected_version=0)
        repeat = submit(store, "s", [text(id="x"), text(id="y")], expected_version=1)

        release.set()

        assert [1, 2] == outcome(repeat)
        assert first.result() == repeat.result()[:1]

    def test_many_threads_on_many_sessions_stay_contiguous(
        self, scripted_store: LmdbStore, scripted: ScriptedEnvironment
    ) -> None:
        store = scripted_store
        threads, per_thread, sessions = 16, 30, 7
        acknowledged: dict[str, list[int]] = {}
        lock = threading.Lock()
        barrier = threading.Barrier(threads)

        def work(index: int) -> None:
            barrier.wait()
            for round_ in range(per_thread):
                session_id = f"s{(index + round_) % sessions}"
                stored = store.append(session_id, [text()])
                with lock:
                    acknowledged.setdefault(session_id, []).extend(
                        e.sequence for e in stored if e.sequence is not None
                    )

        workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()

        for session_id, acked in acknowledged.items():
            assert list(range(1, len(acked) + 1)) == sorted(acked)
            assert sorted(acked) == [e.sequence for e in store.read(session_id)]
        assert threads * per_thread == sum(map(len, acknowledged.values()))
        assert threads * per_thread > scripted.last_txnid()


class TestLmdbStoreReaderSlots:
    def test_a_full_reader_table_is_reclaimed_and_the_read_retried(
        self, scripted_store: LmdbStore, scripted: ScriptedEnvironment
    ) -> None:
        stored = scripted_store.append("s", [text()])
        checks = scripted.reader_checks
        scripted.read_errors.append(lmdb.ReadersFullError("simulated: slots of dead processes"))

        events = scripted_store.read("s")

        assert (stored, 1) == (events, scripted.reader_checks - checks)

    def test_a_reader_table_still_full_after_reclaiming_raises_store_io_error(
        self, scripted_store: LmdbStore, scripted: ScriptedEnvironment
    ) -> None:
        checks = scripted.reader_checks
        scripted.read_errors.extend(lmdb.ReadersFullError("simulated") for _ in range(2))

        with pytest.raises(StoreIOError) as caught:
            scripted_store.read("s")

        assert ("read", 1) == (caught.value.operation, scripted.reader_checks - checks)
        assert isinstance(caught.value.__cause__, lmdb.ReadersFullError)

    def test_the_writer_reclaims_dead_readers_every_few_commits(
        self, scripted_store: LmdbStore, scripted: ScriptedEnvironment
    ) -> None:
        checks = scripted.reader_checks
        for _ in range(READER_CHECK_COMMITS * 2):
            scripted_store.append("s", [text()])

        assert 2 == scripted.reader_checks - checks


class TestLmdbStoreFaults:
    def test_engine_failure_on_read_raises_store_io_error_with_cause(
        self, scripted_store: LmdbStore, scripted: ScriptedEnvironment
    ) -> None:
        scripted_store.append("s", [text()])
        scripted.read_errors.append(lmdb.Error("simulated disk failure"))

        with pytest.raises(StoreIOError) as caught:
            scripted_store.read("s")

        assert ("read", True) == (
            caught.value.operation,
            isinstance(caught.value.__cause__, lmdb.Error),
        )

    def test_a_full_disk_at_commit_raises_store_full_error_and_writes_nothing(
        self, scripted_store: LmdbStore, scripted: ScriptedEnvironment
    ) -> None:
        store = scripted_store
        store.append("s", [text()])
        scripted.write_hooks.append(fail_at("commit", lmdb.DiskError("simulated: disk full")))

        with pytest.raises(StoreFullError) as caught:
            store.append("s", [text()])

        assert (True, store.path) == (caught.value.disk_full, caught.value.path)
        assert "disk has no space left" in str(caught.value)
        assert [1, 2] == [e.sequence for e in [*store.read("s"), *store.append("s", [text()])]]

    def test_a_bug_in_one_group_reaches_its_callers_and_the_writer_keeps_going(
        self, scripted_store: LmdbStore, scripted: ScriptedEnvironment
    ) -> None:
        scripted.write_hooks.append(fail_at("put", RuntimeError("bug")))

        with pytest.raises(RuntimeError):
            scripted_store.append("s", [text()])

        assert [1] == [e.sequence for e in scripted_store.append("s", [text()])]


class TestLmdbStoreGrowth:
    def test_map_grows_when_full_and_every_event_stays_readable(self, store_path: Path) -> None:
        with LmdbStore(store_path, map_size=256 * 1024) as store:
            for batch in range(40):
                store.append("s", [text(f"{batch}:" + "x" * 2000) for _ in range(10)])

            assert 256 * 1024 < store.map_size()
            assert 400 == len(store.read("s"))
            assert "39:" == store.read("s", newest_first=True, limit=1)[0].body.content[:3]  # type: ignore[union-attr]

    def test_readers_in_other_threads_survive_growth(self, store_path: Path) -> None:
        with LmdbStore(store_path, map_size=256 * 1024) as store:
            store.append("s", [text("first")])
            stop = threading.Event()
            seen: list[int] = []

            def read() -> None:
                while not stop.is_set():
                    seen.append(len(store.read("s", limit=5, newest_first=True)))
                    store.log("s").read_before(None, 3)

            readers = [threading.Thread(target=read) for _ in range(3)]
            for reader in readers:
                reader.start()
            for _ in range(30):
                store.append("s", [text("y" * 3000) for _ in range(10)])
            stop.set()
            for reader in readers:
                reader.join()

            assert 256 * 1024 < store.map_size()
            assert 301 == store.last_sequence("s")
            assert all(1 <= count <= 5 for count in seen)

    def test_full_store_raises_store_full_error_and_writes_nothing(self, store_path: Path) -> None:
        with LmdbStore(store_path, map_size=128 * 1024, max_map_size=256 * 1024) as store:
            with pytest.raises(StoreFullError) as caught:
                for _ in range(100):
                    store.append("s", [text("z" * 4000) for _ in range(5)])
            written = store.last_sequence("s")

            assert (256 * 1024, 256 * 1024) == (caught.value.max_map_size, caught.value.map_size)
            assert written == len(store.read("s"))
            assert 0 == written % 5
            assert [written + 1] == [e.sequence for e in store.append("s", [text("small")])]

    def test_only_the_writes_that_do_not_fit_get_store_full_error(
        self, store_path: Path, scripted: ScriptedEnvironment
    ) -> None:
        with LmdbStore(
            store_path, map_size=128 * 1024, max_map_size=128 * 1024, environment=scripted.open
        ) as store:
            release = held_group(store, scripted)
            small = submit(store, "s", [text("small")])
            huge = submit(store, "s", [text("h" * 400_000)])
            other = submit(store, "t", [text("other")])

            release.set()

            assert [1] == outcome(small)
            assert isinstance(outcome(huge), StoreFullError)
            assert [1] == outcome(other)
            assert 1 == store.last_sequence("s")


def damage(
    store_path: Path, *, truncate: int | None = None, at: int = 0, data: bytes = b""
) -> None:
    """Truncate the closed store's data file to ``truncate`` bytes, or write ``data`` at ``at``."""
    with open(store_path / "data.mdb", "r+b") as file:
        if truncate is not None:
            file.truncate(truncate)
        else:
            file.seek(at)
            file.write(data)


def filled(store_path: Path) -> int:
    """Fill a store with 200 events in 4 sessions, close it, return its file size."""
    with LmdbStore(store_path, durability="relaxed") as store:
        for index in range(200):
            store.append(f"s/{index % 4}", [text("t" * 2000)])
    return (store_path / "data.mdb").stat().st_size


class TestLmdbStoreDataFile:
    def test_a_truncated_file_raises_corrupt_record_error_at_open(self, store_path: Path) -> None:
        damage(store_path, truncate=filled(store_path) // 2)

        with pytest.raises(CorruptRecordError) as caught:
            LmdbStore(store_path)

        assert "" == caught.value.session_id
        assert "data.mdb" in caught.value.detail
        assert "pages in use" in caught.value.detail

    def test_a_file_cut_inside_its_meta_pages_raises_corrupt_record_error(
        self, store_path: Path
    ) -> None:
        filled(store_path)
        damage(store_path, truncate=4100)

        with pytest.raises(CorruptRecordError, match="before meta page 1"):
            LmdbStore(store_path)

    def test_a_zeroed_file_raises_corrupt_record_error(self, store_path: Path) -> None:
        damage(store_path, at=0, data=bytes(filled(store_path)))

        with pytest.raises(CorruptRecordError, match="no LMDB meta page"):
            LmdbStore(store_path)

    def test_an_empty_data_file_is_a_new_store(self, store_path: Path) -> None:
        store_path.mkdir()
        (store_path / "data.mdb").write_bytes(b"")

        with LmdbStore(store_path) as store:
            assert [1] == [e.sequence for e in store.append("s", [text()])]

    def test_verify_refuses_a_garbage_page_that_the_size_check_lets_through(
        self, store_path: Path
    ) -> None:
        size = filled(store_path)
        damage(store_path, at=8192, data=random.Random(1).randbytes(size // 2 - 8192))

        with pytest.raises(CorruptRecordError, match="verifier reports"):
            LmdbStore(store_path, verify=True)

    def test_verify_adopts_a_map_grown_by_another_process_and_walks_again(
        self, store_path: Path
    ) -> None:
        filled(store_path)
        scripted = ScriptedEnvironment()
        with LmdbStore(store_path, environment=scripted.open):
            scripted.read_errors.append(lmdb.MapResizedError("simulated: grown elsewhere"))
            with LmdbStore(store_path, verify=True) as second:
                last = second.last_sequence("s/0")

        assert (50, 1, []) == (last, scripted.resizes, scripted.read_errors)

    def test_verify_opens_a_sound_store(self, store_path: Path) -> None:
        filled(store_path)

        with LmdbStore(store_path, verify=True) as store:
            assert 50 == store.last_sequence("s/0")

    def test_a_leaf_page_with_a_garbled_header_is_refused_at_open_without_verify(
        self, store_path: Path
    ) -> None:
        """LMDB would abort on the read that steps onto such a leaf (``IS_LEAF``).

        Every leaf but the main database's root (the sub-database records) is garbled.
        """
        filled(store_path)
        raw = bytearray((store_path / "data.mdb").read_bytes())
        # The main database's root page, in each meta page (after the page header, the
        # meta's first 24 bytes and the free database's record; the root ends a record).
        main_roots = {int.from_bytes(raw[at + 128 : at + 136], "little") for at in (0, 4096)}
        for at in range(2 * 4096, len(raw), 4096):
            if raw[at + 10] == 0x02 and at // 4096 not in main_roots:
                raw[at + 10] = 0x04  # a leaf's flags: now it claims to be an overflow page
        (store_path / "data.mdb").write_bytes(raw)

        with pytest.raises(CorruptRecordError, match=r"page \d+ is damaged"):
            LmdbStore(store_path)

    def test_the_open_walk_passes_a_sound_store_with_deep_trees(self, store_path: Path) -> None:
        with LmdbStore(store_path, durability="relaxed") as store:
            for index in range(200):
                store.append(f"s/{index % 7}", [text("x" * 40) for _ in range(50)])
        env = lmdb.open(str(store_path), max_dbs=8, readonly=True)
        try:
            with env.begin() as txn:
                depth = txn.stat(env.open_db(b"events", txn=txn, create=False))["depth"]
        finally:
            env.close()

        with LmdbStore(store_path) as store:
            events = sum(len(store.read(f"s/{index}")) for index in range(7))
            assert (None, 10_000) == (tree_problem(store.path), events)
        assert depth >= 3


class TestLmdbStoreRecords:
    def test_corrupt_record_raises_corrupt_record_error_and_others_stay_readable(
        self, store_path: Path
    ) -> None:
        with LmdbStore(store_path) as store:
            store.append("s", [text("one"), text("two"), text("three")])
        raw_put(store_path, b"events", session_prefix("s") + SEQ.pack(2), b"\xc1garbage")

        with LmdbStore(store_path) as store:
            with pytest.raises(CorruptRecordError) as caught:
                store.read("s")

            assert ("s", 2) == (caught.value.session_id, caught.value.sequence)
            assert ["three"] == [e.body.content for e in store.read("s", after=2)]  # type: ignore[union-attr]
            assert ["one"] == [e.body.content for e in store.read("s", before=2)]  # type: ignore[union-attr]
            assert ["three"] == [m.content for m in store.log("s").read_before(None, 1).messages]

    def test_record_holding_another_sequence_is_corrupt(self, store_path: Path) -> None:
        with LmdbStore(store_path) as store:
            first, _second = store.append("s", [text(), text()])
        raw_put(
            store_path, b"events", session_prefix("s") + SEQ.pack(2), msgspec.msgpack.encode(first)
        )

        with LmdbStore(store_path) as store, pytest.raises(CorruptRecordError) as caught:
            store.read("s", after=1)

        assert 2 == caught.value.sequence

    def test_corrupt_sharing_state_raises_corrupt_record_error(self, store_path: Path) -> None:
        conversation = Conversation("s")
        with LmdbStore(store_path) as store:
            append_shared(store, "s", [], viewer="v", state=SharingState(conversation, 1))
        key = sharing_key(session_prefix("s"), "v", conversation)
        raw_put(store_path, b"sharing", key, b"\x92\x01")

        with LmdbStore(store_path) as store, pytest.raises(CorruptRecordError) as caught:
            store.get_sharing_state("s", "v", conversation)

        assert "s" == caught.value.session_id

    def test_record_written_before_later_fields_existed_still_decodes(
        self, store_path: Path
    ) -> None:
        """An old record lacks parent, run_id and metadata; they take their defaults."""
        with LmdbStore(store_path) as store:
            store.append("s", [text("new")])
        old_shape = {
            "author": {"type": "person", "id": "alice", "label": "Alice"},
            "body": {"type": "text", "content": "old"},
            "id": "old-1",
            "sequence": 1,
            "timestamp": "2024-01-01T00:00:00Z",
        }
        raw_put(
            store_path,
            b"events",
            session_prefix("s") + SEQ.pack(1),
            msgspec.msgpack.encode(old_shape),
        )

        with LmdbStore(store_path) as store:
            (event,) = store.read("s")

            assert (Text("old"), None, None, {}) == (
                event.body,
                event.parent,
                event.run_id,
                event.metadata,
            )
            assert "old" == store.log("s").read_before(None, 1).messages[0].content

    def test_long_event_ids_stay_idempotent(self, store: LmdbStore) -> None:
        long_id = "é" * 300

        (first,) = store.append("s", [Event(ALICE, Text("a"), id=long_id)])
        (again,) = store.append("s", [Event(ALICE, Text("b"), id=long_id)])
        (near,) = store.append("s", [Event(ALICE, Text("c"), id=long_id + "!")])

        assert (first, 2) == (again, near.sequence)

    def test_longest_session_id_and_long_viewer_fit_in_keys(self, store: LmdbStore) -> None:
        session_id = "界" * (MAX_SESSION_ID_BYTES // 3)  # the longest: 255 UTF-8 bytes
        conversation = Conversation(session_id, thread_root=1)
        state = SharingState(conversation, 1)

        append_shared(store, session_id, [text()], viewer="v" * 1000, state=state)

        assert state == store.get_sharing_state(session_id, "v" * 1000, conversation)


class TestLmdbStoreProcesses:
    def test_a_second_process_reads_what_this_one_acknowledged(
        self, store: LmdbStore, spawn: ChildFactory
    ) -> None:
        stored = store.append("s/1", [text("hello"), delta()])

        out = run_child(spawn, READ_CHILD, store.path, "s/1")

        (result,) = [line for line in out.splitlines() if line.startswith("RESULT ")]
        assert [[e.id, e.sequence] for e in stored] == json.loads(result.removeprefix("RESULT "))

    def test_a_second_process_writes_while_this_one_is_open(
        self, store: LmdbStore, spawn: ChildFactory
    ) -> None:
        store.append("s", [text("parent")])

        run_child(spawn, WRITE_CHILD, store.path, "s", "20")
        stored = store.append("s", [text("parent again")])

        assert [22] == [e.sequence for e in stored]
        assert list(range(1, 23)) == [e.sequence for e in store.read("s")]

    def test_two_processes_writing_at_once_keep_sequences_contiguous(
        self, store: LmdbStore, spawn: ChildFactory
    ) -> None:
        child = spawn("-c", WRITE_CHILD, store.path, "shared", "200")
        for _ in range(100):
            store.append("shared", [text()])
        _out, err = child.communicate(timeout=60)

        assert 0 == child.returncode, err.decode()
        assert list(range(1, 301)) == [e.sequence for e in store.read("shared")]

    def test_opening_and_reading_while_another_process_holds_the_write_lock_do_not_wait(
        self, store_path: Path, spawn: ChildFactory
    ) -> None:
        with LmdbStore(store_path) as store:
            store.append("s", [text()])
        holder = spawn("-c", HOLD_WRITE_LOCK_CHILD, str(store_path))
        assert holder.stdout is not None
        assert b"holding\n" == holder.stdout.readline()

        def open_and_read() -> list[int | None]:
            with LmdbStore(store_path) as store:
                return [e.sequence for e in store.read("s")]

        thread, outcome = in_thread(open_and_read)
        thread.join(60)  # a hang detector: the holder keeps the lock until told
        read_while_held = (list(outcome), holder.poll() is None)
        holder.send_signal(signal.SIGUSR1)
        _out, err = holder.communicate(timeout=60)
        thread.join()

        assert 0 == holder.returncode, err.decode()
        assert ([[1]], True) == read_while_held

    def test_reads_do_not_wait_for_an_append_stuck_behind_another_process_write_lock(
        self, store_path: Path, spawn: ChildFactory, scripted: ScriptedEnvironment
    ) -> None:
        with LmdbStore(store_path) as first:
            stored = first.append("s", [text("before")])
        holder = spawn("-c", HOLD_WRITE_LOCK_CHILD, str(store_path))
        assert holder.stdout is not None
        assert b"holding\n" == holder.stdout.readline()
        asking = threading.Event()
        scripted.write_hooks.append(lambda stage: asking.set())

        with LmdbStore(store_path, environment=scripted.open) as store:
            stuck = submit(store, "s", [text("after")])
            assert asking.wait(30)  # the writer asks for the lock the holder keeps
            reader, read = in_thread(lambda: store.read("s"))
            reader.join(60)  # a hang detector: the holder keeps the lock until told
            read_while_stuck = (list(read), stuck.done())
            holder.send_signal(signal.SIGUSR1)
            holder.communicate(timeout=60)

            assert ([stored], False) == read_while_stuck
            assert [2] == outcome(stuck)

    def test_a_reopened_store_reads_without_a_write_transaction_until_its_first_append(
        self, store_path: Path, scripted: ScriptedEnvironment
    ) -> None:
        with LmdbStore(store_path) as first:
            stored = first.append("s", [text("a"), text("b")])

        with LmdbStore(store_path, environment=scripted.open) as second:
            nested: list[list[Event]] = []
            scripted.inside_next_read = lambda: nested.append(second.read("s"))
            read = second.read("s")
            writes_before_append = scripted.writes
            appended = second.append("s", [text("c")])

            assert (0, [stored], stored) == (writes_before_append, nested, read)
            assert [*stored, *appended] == second.read("s")

    def test_threads_reading_a_reopened_store_while_its_first_append_commits_read_whole_rows(
        self, store_path: Path
    ) -> None:
        with LmdbStore(store_path, durability="relaxed") as first:
            first.append("s", [text(str(index)) for index in range(50)])

        with LmdbStore(store_path, durability="relaxed") as second:

            def read_many() -> set[int]:
                return {len(second.read("s")) for _ in range(40)}

            readers = [in_thread(read_many) for _ in range(4)]
            second.append("s", [text("late")])
            for thread, _ in readers:
                thread.join()

            seen = [outcome for _, outcome in readers]
            assert all(len(out) == 1 and out[0] <= {50, 51} for out in seen), seen
            assert 51 == len(second.read("s"))

    def test_map_grown_by_another_process_is_adopted(
        self, store_path: Path, spawn: ChildFactory
    ) -> None:
        with LmdbStore(store_path, map_size=256 * 1024) as store:
            store.append("s", [text()])

            run_child(spawn, GROW_CHILD, store.path)

            assert 201 == len(store.read("s"))
            assert 202 == store.append("s", [text()])[0].sequence
            assert 256 * 1024 < store.map_size()


READ_CHILD = """
import json, sys
from sharedesk.store import LmdbStore
with LmdbStore(sys.argv[1]) as store:
    print("RESULT " + json.dumps([[e.id, e.sequence] for e in store.read(sys.argv[2])]))
"""

WRITE_CHILD = """
import sys
from sharedesk.protocol import Event, Person, Text
from sharedesk.store import LmdbStore
with LmdbStore(sys.argv[1]) as store:
    for _ in range(int(sys.argv[3])):
        store.append(sys.argv[2], [Event(Person(id="c", label="C"), Text("child"))])
"""

#: Holds the write lock until it gets SIGUSR1.
HOLD_WRITE_LOCK_CHILD = """
import signal, sys, lmdb
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
env = lmdb.open(sys.argv[1], max_dbs=8)
with env.begin(write=True):
    print("holding", flush=True)
    signal.sigwait({signal.SIGUSR1})
"""

GROW_CHILD = """
import sys
from sharedesk.protocol import Event, Person, Text
from sharedesk.store import LmdbStore
with LmdbStore(sys.argv[1], map_size=256 * 1024) as store:
    for _ in range(20):
        store.append("s", [Event(Person(id="c", label="C"), Text("g" * 4000)) for _ in range(10)])
"""


@pytest.mark.slow
class TestLmdbStoreCrash:
    def test_every_acknowledged_event_survives_sigkill(
        self, store_path: Path, spawn: ChildFactory
    ) -> None:
        """Kill a writer after random numbers of acks: acked events keep their sequence; no
        gap, no repeat."""
        rng = random.Random(20261129)
        acknowledged: dict[tuple[str, str], int] = {}
        for _cycle in range(6):
            child = spawn("-m", "tests.store.crash_writer", str(store_path), "6", "5")
            assert child.stdout is not None
            assert b"ready\n" == wait_for_ready(child.stdout)
            seen = [child.stdout.readline() for _ in range(rng.randint(1, 400))]
            os.kill(child.pid, signal.SIGKILL)  # after a random number of acks
            out, _ = child.communicate(timeout=30)
            for line in b"".join([*seen, out]).decode().splitlines():
                if line.startswith("ack ") and line.count(" ") == 3:
                    _, session_id, event_id, sequence = line.split(" ")
                    acknowledged[(session_id, event_id)] = int(sequence)

        with LmdbStore(store_path) as store:
            stored = {
                (session_id, event.id): event.sequence
                for session_id in store.sessions()
                for event in store.read(session_id)
            }
            for session_id in store.sessions():
                events = store.read(session_id)
                assert list(range(1, len(events) + 1)) == [e.sequence for e in events]
                assert len(events) == len({e.id for e in events})
                assert len(events) == store.last_sequence(session_id)

        assert acknowledged != {}
        assert acknowledged == {key: stored[key] for key in acknowledged if key in stored}
        assert set(acknowledged) <= set(stored)


def wait_for_ready(stream: Any) -> bytes:
    """Read the child's first line (it prints ``ready`` once its store is open)."""
    line: bytes = stream.readline()
    while line and line != b"ready\n":
        line = stream.readline()
    return line
