"""The projector's view always equals a fresh projection of the whole log."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sharedesk.actors import Hub
from sharedesk.actors._tail import MIRROR_LIMIT
from sharedesk.projection import project_session
from sharedesk.protocol import (
    SCAN_LIMIT,
    Agent,
    Conversation,
    Event,
    Person,
    Projection,
    RunStarted,
    SessionLog,
    SessionQuery,
    Text,
)
from tests.actors.conftest import HubFactory

ANA = Person(id="ana", label="Ana")
VIEWERS = [Agent(id=f"v{n}", label=f"V{n}") for n in range(3)]


def fresh(hub: Hub, conversation: Conversation, window: int) -> Projection:
    return project_session(
        hub.store.log(conversation.desk), SessionQuery(conversation=conversation, window=window)
    )


ops = st.lists(
    st.one_of(
        st.tuples(st.just("root"), st.booleans()),  # blank?
        st.tuples(st.just("reply"), st.integers(min_value=0), st.booleans()),
        st.tuples(st.just("batch"), st.integers(min_value=1, max_value=80), st.booleans()),
        st.tuples(st.just("run"), st.just(0)),
        st.tuples(st.just("behind"), st.integers(min_value=0)),
        st.tuples(
            st.just("view"),
            st.integers(min_value=0, max_value=2),  # viewer
            st.integers(min_value=0),  # thread root choice (0: channel)
            st.sampled_from([0, 1, 3, 30, 100]),  # window
        ),
    ),
    max_size=40,
)


class TestViewEqualsFreshProjection:
    @given(ops)
    def test_views_equal_a_fresh_projection_after_any_appends(
        self, script: list[tuple[object, ...]]
    ) -> None:
        with Hub.open(max_active=4, ask_timeout=10.0) as hub:
            desk = hub.session("desk")
            sequences: list[int] = []
            roots: list[int] = []  # a reply names a root Text row

            def add(stored: list[Event]) -> None:
                sequences.extend(e.sequence for e in stored if e.sequence is not None)
                roots.extend(
                    e.sequence
                    for e in stored
                    if e.sequence is not None and isinstance(e.body, Text) and e.parent is None
                )

            for op in script:
                kind = op[0]
                if kind == "root":
                    add([desk.post(ANA, " " if op[1] else "root")])
                elif kind == "reply" and roots:
                    parent: int | None = roots[int(op[1]) % len(roots)]  # type: ignore[call-overload]
                    add([desk.post(ANA, " " if op[2] else "reply", parent=parent)])
                elif kind == "batch":
                    count = int(op[1])  # type: ignore[call-overload]
                    parent = roots[0] if roots and op[2] else None
                    add(desk.append([Event(ANA, Text("b"), parent=parent) for _ in range(count)]))
                elif kind == "run":
                    add(desk.append([Event(ANA, RunStarted(provider="p"))]))
                elif kind == "behind":
                    add(hub.store.append("desk", [Event(ANA, Text("behind"))]))
                elif kind == "view":
                    viewer = VIEWERS[int(op[1])]  # type: ignore[call-overload]
                    choice = int(op[2])  # type: ignore[call-overload]
                    # A thread may be viewed before its root exists (the next rows).
                    root = (
                        None
                        if choice % 4 == 0
                        else (sequences[-1] if sequences else 0) + 1 + choice % 3
                        if choice % 4 == 1
                        else sequences[choice % len(sequences)]
                        if sequences
                        else None
                    )
                    conversation = Conversation("desk", root)
                    window = int(op[3])  # type: ignore[call-overload]
                    assert fresh(hub, conversation, window) == hub.view(
                        "desk", viewer, conversation, window=window
                    )
            for viewer in VIEWERS:
                assert fresh(hub, Conversation("desk"), 30) == hub.view("desk", viewer)


class TestDeepWalks:
    def test_a_wider_window_reads_below_what_a_narrow_one_kept(self, open_hub: HubFactory) -> None:
        hub = open_hub()
        hub.append("desk", [Event(ANA, Text(f"root {n}")) for n in range(200)])
        hub.view("desk", VIEWERS[0], window=1)

        view = hub.view("desk", VIEWERS[0], window=100)

        assert (fresh(hub, Conversation("desk"), 100), 100) == (view, len(view.messages))

    def test_a_view_whose_walk_outgrows_the_mirror_stays_exact(self, open_hub: HubFactory) -> None:
        hub = open_hub()
        desk = hub.session("desk")
        root = desk.post(ANA, "old root").sequence
        viewer = VIEWERS[0]
        hub.view("desk", viewer)
        desk.append([Event(ANA, Text("deep"), parent=root) for _ in range(MIRROR_LIMIT + 100)])
        desk.post(ANA, "new root")

        view = hub.view("desk", viewer)

        assert (fresh(hub, Conversation("desk"), 30), True) == (view, view.partial)

    def test_a_thread_view_across_more_than_the_scan_limit_is_partial_as_a_fresh_one(
        self, open_hub: HubFactory
    ) -> None:
        hub = open_hub()
        desk = hub.session("desk")
        root = desk.post(ANA, "root").sequence
        thread = Conversation("desk", root)
        desk.post(ANA, "first reply", parent=root)
        hub.view("desk", VIEWERS[0], thread)
        desk.append([Event(ANA, Text("noise")) for _ in range(SCAN_LIMIT)])

        assert fresh(hub, thread, 30) == hub.view("desk", VIEWERS[0], thread)


class TestConcurrentWriters:
    def test_views_read_while_others_write_end_equal_to_a_fresh_projection(
        self, open_hub: HubFactory
    ) -> None:
        hub = open_hub()
        root = hub.session("desk").post(ANA, "root").sequence
        errors: list[BaseException] = []

        def writer(n: int) -> None:
            try:
                for i in range(40):
                    parent = root if (n + i) % 3 == 0 else None
                    hub.session("desk").post(VIEWERS[n], f"{n}.{i}", parent=parent)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        def reader() -> None:
            try:
                for _ in range(40):
                    hub.view("desk", ANA)
                    hub.view("desk", ANA, Conversation("desk", root))
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(3)]
        threads.append(threading.Thread(target=reader))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        thread_view = Conversation("desk", root)
        assert ([], fresh(hub, Conversation("desk"), 30), fresh(hub, thread_view, 30)) == (
            errors,
            hub.view("desk", ANA),
            hub.view("desk", ANA, thread_view),
        )


class TestFolding:
    """Pushed rows are folded into cached views without a walk when that is exact."""

    @pytest.fixture
    def walks(self, monkeypatch: pytest.MonkeyPatch) -> list[SessionQuery]:
        calls: list[SessionQuery] = []

        def counting(log: SessionLog, query: SessionQuery) -> Projection:
            calls.append(query)
            return project_session(log, query)

        monkeypatch.setattr("sharedesk.actors.projector.project_session", counting)
        return calls

    def test_a_new_root_is_folded_into_a_channel_view_without_a_walk(
        self, open_hub: HubFactory, walks: list[SessionQuery]
    ) -> None:
        hub = open_hub()
        desk = hub.session("desk")
        desk.post(ANA, "one")
        hub.view("desk", VIEWERS[0])
        desk.post(ANA, "two")
        desk.post(ANA, "  ")

        view = hub.view("desk", VIEWERS[0])

        assert (1, fresh(hub, Conversation("desk"), 30)) == (len(walks), view)

    def test_a_reply_is_folded_into_its_thread_view_without_a_walk(
        self, open_hub: HubFactory, walks: list[SessionQuery]
    ) -> None:
        hub = open_hub()
        desk = hub.session("desk")
        root = desk.post(ANA, "root").sequence
        thread = Conversation("desk", root)
        hub.view("desk", VIEWERS[0], thread, window=2)
        desk.post(ANA, "elsewhere")
        desk.post(ANA, "first", parent=root)
        desk.post(ANA, "second", parent=root)

        view = hub.view("desk", VIEWERS[0], thread, window=2)

        assert (1, fresh(hub, thread, 2)) == (len(walks), view)

    def test_a_thread_view_opened_before_its_root_exists_shows_the_root(
        self, open_hub: HubFactory
    ) -> None:
        """The projector picks up a thread's root whenever it arrives."""
        hub = open_hub()
        desk = hub.session("desk")
        desk.post(ANA, "before the thread")
        thread = Conversation("desk", thread_root=2)
        hub.view("desk", VIEWERS[0], thread)
        desk.post(ANA, "the root")
        desk.post(ANA, "a reply", parent=2)

        view = hub.view("desk", VIEWERS[0], thread)

        assert ([2, 3], fresh(hub, thread, 30)) == ([m.sequence for m in view.messages], view)

    def test_a_reply_in_the_channel_is_walked_again(
        self, open_hub: HubFactory, walks: list[SessionQuery]
    ) -> None:
        hub = open_hub()
        desk = hub.session("desk")
        root = desk.post(ANA, "root").sequence
        hub.view("desk", VIEWERS[0])
        desk.post(ANA, "first reply", parent=root)

        view = hub.view("desk", VIEWERS[0])

        assert (2, fresh(hub, Conversation("desk"), 30)) == (len(walks), view)
