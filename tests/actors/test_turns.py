"""Turns: full windows, deltas, commits, conflicts, and exactly-once delivery."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sharedesk.actors import Hub, HubOptions, Turn
from sharedesk.protocol import (
    SCAN_LIMIT,
    SESSION_WINDOW,
    Agent,
    Conversation,
    Event,
    Operator,
    Person,
    ReinitializeReason,
    RunStarted,
    SessionAuthor,
    SharingStateConflict,
    Text,
    ValidationError,
    author_key,
    same_participant,
)
from sharedesk.protocol.errors import TurnAlreadyCommitted
from sharedesk.protocol.ports import D
from sharedesk.protocol.writes import Write
from sharedesk.store import MemoryStore
from tests.actors.conftest import HubFactory

REPOSITORY = Path(__file__).resolve().parents[2]

ANA = Person(id="ana", label="Ana")
BOT = Agent(id="bot", label="Bot")
EVE = Agent(id="eve", label="Eve")
CHANNEL = Conversation("desk")


def texts(messages: list) -> list[str]:  # type: ignore[type-arg]
    return [m.content for m in messages]


class TestFirstTurn:
    def test_first_turn_offers_the_whole_window_with_reason_initial(self, hub: Hub) -> None:
        desk = hub.session("desk")
        desk.post(ANA, "one")
        desk.post(EVE, "two")

        turn = hub.turn("desk", BOT)

        assert ("initial", ["one", "two"]) == (turn.reason, texts(turn.messages))

    def test_first_turn_on_an_empty_desk_is_initial_and_empty(self, hub: Hub) -> None:
        turn = hub.turn("desk", BOT)

        assert ("initial", []) == (turn.reason, turn.messages)

    def test_a_first_turn_is_the_viewers_view_own_rows_included(self, hub: Hub) -> None:
        """An agent that lost its state must see what it said itself."""
        desk = hub.session("desk")
        desk.post(BOT, "hi all")
        desk.post(ANA, "theirs")

        turn = hub.turn("desk", BOT)

        assert ["hi all", "theirs"] == texts(turn.messages)
        assert hub.view("desk", BOT).messages == turn.messages

    def test_a_full_window_of_a_thread_is_its_view_own_reply_included(self, hub: Hub) -> None:
        desk = hub.session("desk")
        root = desk.post(ANA, "question").sequence
        desk.post(BOT, "my earlier answer", parent=root)
        thread = Conversation("desk", root)

        turn = hub.turn("desk", BOT, thread)

        assert hub.view("desk", BOT, thread).messages == turn.messages
        assert ["question", "my earlier answer"] == texts(turn.messages)

    def test_a_delta_never_offers_the_viewers_own_rows(self, hub: Hub) -> None:
        desk = hub.session("desk")
        hub.turn("desk", BOT).commit()
        desk.post(BOT, "mine, posted outside a turn")
        desk.post(Agent(id="bot", label="another label"), "mine too")
        desk.post(ANA, "theirs")

        turn = hub.turn("desk", BOT)

        assert (None, ["theirs"]) == (turn.reason, texts(turn.messages))


class TestDeltas:
    def test_second_turn_offers_only_what_arrived_since_the_commit(self, hub: Hub) -> None:
        desk = hub.session("desk")
        desk.post(ANA, "old")
        hub.turn("desk", BOT).commit()
        desk.post(EVE, "new")

        turn = hub.turn("desk", BOT)

        assert (None, ["new"]) == (turn.reason, texts(turn.messages))

    def test_a_committed_reply_is_never_offered_back_to_its_author(self, hub: Hub) -> None:
        desk = hub.session("desk")
        desk.post(ANA, "question")
        hub.turn("desk", BOT).commit("my answer")
        desk.post(ANA, "follow-up")

        assert ["follow-up"] == texts(hub.turn("desk", BOT).messages)

    def test_a_committed_reply_is_offered_to_the_other_participants(self, hub: Hub) -> None:
        hub.session("desk").post(ANA, "question")
        hub.turn("desk", EVE).commit()
        hub.turn("desk", BOT).commit("my answer")

        assert ["my answer"] == texts(hub.turn("desk", EVE).messages)

    def test_a_row_appended_between_plan_and_commit_is_offered_next_turn(self, hub: Hub) -> None:
        desk = hub.session("desk")
        hub.turn("desk", BOT).commit()
        desk.post(ANA, "seen")
        turn = hub.turn("desk", BOT)
        desk.post(EVE, "arrived while bot was thinking")
        turn.commit("bot's reply")

        assert ["arrived while bot was thinking"] == texts(hub.turn("desk", BOT).messages)

    def test_an_abandoned_turn_is_offered_again_in_full(self, hub: Hub) -> None:
        desk = hub.session("desk")
        hub.turn("desk", BOT).commit()
        desk.post(ANA, "one")
        first = hub.turn("desk", BOT)
        desk.post(ANA, "two")

        again = hub.turn("desk", BOT)

        assert (["one"], ["one", "two"]) == (texts(first.messages), texts(again.messages))

    def test_a_desk_whose_first_rows_came_after_the_first_turn_gives_a_delta(
        self, hub: Hub
    ) -> None:
        """The log ends above the watermark (WATERMARK_UNAVAILABLE): every row was walked."""
        hub.turn("desk", BOT).commit()
        hub.session("desk").post(ANA, "first ever")

        turn = hub.turn("desk", BOT)

        assert (None, ["first ever"]) == (turn.reason, texts(turn.messages))

    def test_a_watermark_on_run_events_below_every_text_row_gives_a_delta(self, hub: Hub) -> None:
        desk = hub.session("desk")
        desk.append([Event(BOT, RunStarted(provider="p"))])
        hub.turn("desk", BOT).commit()
        desk.post(ANA, "hello")

        turn = hub.turn("desk", BOT)

        assert (None, ["hello"]) == (turn.reason, texts(turn.messages))

    def test_a_gap_beyond_the_scan_limit_reinitializes_with_its_reason(
        self, memory_hub: Hub
    ) -> None:
        desk = memory_hub.session("desk")
        desk.post(ANA, "start")
        memory_hub.turn("desk", BOT).commit()
        memory_hub.append("desk", [Event(EVE, Text("r"), parent=1) for _ in range(SCAN_LIMIT)])
        desk.post(ANA, "root after the flood")

        turn = memory_hub.turn("desk", BOT)

        assert ReinitializeReason.GAP_TOO_LARGE.value == turn.reason
        assert "root after the flood" == turn.messages[-1].content

    def test_a_channel_delta_offers_a_first_reply_whose_root_is_below_the_watermark(
        self, hub: Hub
    ) -> None:
        """The channel view shows a root's first reply, so a delta offers it (case 2)."""
        desk = hub.session("desk")
        root = desk.post(ANA, "root").sequence
        hub.turn("desk", BOT).commit()
        desk.post(EVE, "first in the thread", parent=root)
        desk.post(EVE, "new root")

        turn = hub.turn("desk", BOT)

        assert (None, ["first in the thread", "new root"]) == (turn.reason, texts(turn.messages))
        assert ["root", "first in the thread", "new root"] == texts(hub.view("desk", BOT).messages)

    def test_a_channel_delta_leaves_out_second_replies_and_blank_first_ones(self, hub: Hub) -> None:
        desk = hub.session("desk")
        root = desk.post(ANA, "root").sequence
        desk.post(EVE, "first", parent=root)
        hub.turn("desk", BOT).commit()
        desk.post(EVE, "second", parent=root)
        other = desk.post(ANA, "other root").sequence
        desk.post(EVE, "   ", parent=other)
        desk.post(EVE, "first non-blank", parent=other)

        assert ["other root", "first non-blank"] == texts(hub.turn("desk", BOT).messages)

    def test_a_channel_delta_offers_a_first_reply_once_across_turns(self, hub: Hub) -> None:
        desk = hub.session("desk")
        root = desk.post(ANA, "root").sequence
        hub.turn("desk", BOT).commit()
        desk.post(EVE, "first", parent=root)
        hub.turn("desk", BOT).commit()
        desk.post(ANA, "second", parent=root)

        assert [] == hub.turn("desk", BOT).messages


class TestWritersOutsideTheHub:
    def test_a_row_written_straight_to_the_store_is_offered_by_the_next_turn(
        self, hub: Hub
    ) -> None:
        hub.turn("desk", BOT).commit()
        hub.store.append("desk", [Event(ANA, Text("behind the hub's back"))])

        assert ["behind the hub's back"] == texts(hub.turn("desk", BOT).messages)

    def test_a_commit_after_an_outside_write_lands_after_it_and_skips_nothing(
        self, hub: Hub
    ) -> None:
        hub.session("desk").post(ANA, "question")
        turn = hub.turn("desk", BOT)
        hub.store.append("desk", [Event(EVE, Text("from another process"))])

        stored = turn.commit("answer")

        assert stored is not None and 3 == stored.sequence
        assert ["from another process"] == texts(hub.turn("desk", BOT).messages)


class _OtherProcessStore(MemoryStore):
    """A store another process appends to right before every commit reaches it."""

    def submit(self, write: Write, done: D) -> D:
        if write.share is not None:  # a turn's commit
            self.append(write.session_id, [Event(EVE, Text("from another process"))])
        return super().submit(write, done)


class TestCommitWhileOthersWrite:
    def test_a_commit_never_fails_because_another_process_appended_meanwhile(self) -> None:
        """Only the viewer's own sharing state is checked inside the commit (case 7)."""
        with Hub(_OtherProcessStore(), HubOptions(ask_timeout=10.0)) as hub:
            hub.session("desk").post(ANA, "question")
            for n in range(3):
                hub.turn("desk", BOT).commit(f"answer {n}")

            turn = hub.turn("desk", BOT)

            assert ["from another process"] == texts(turn.messages)
            assert 7 == hub.last_sequence("desk")

    def test_a_thread_of_writers_straight_to_the_store_never_fails_a_commit(self, hub: Hub) -> None:
        hub.session("desk").post(ANA, "question")
        stop = threading.Event()

        def outsider() -> None:
            while not stop.is_set():
                hub.store.append("desk", [Event(EVE, Text("outside"))])

        writer = threading.Thread(target=outsider)
        writer.start()
        try:
            replies = [hub.turn("desk", BOT).commit(f"answer {n}") for n in range(20)]
        finally:
            stop.set()
            writer.join()

        assert 20 == len([r for r in replies if r is not None])


OUTSIDE_WRITER = """
import sys
from sharedesk.protocol import Event, Person, Text
from sharedesk.store import LmdbStore

with LmdbStore(sys.argv[1], durability="relaxed") as store:
    print("ready", flush=True)
    for n in range(int(sys.argv[2])):
        store.append("desk", [Event(Person("pat", "Pat"), Text(f"outside {n}"))])
"""


class TestCommitWhileAnotherProcessWrites:
    def test_commits_never_fail_and_every_outside_row_is_offered_once(
        self, open_hub: HubFactory, tmp_path: Path
    ) -> None:
        """Another process appends all along; no commit fails, no row is missed (case 7)."""
        hub = open_hub(path=tmp_path / "store", durability="relaxed", ask_timeout=10.0)
        hub.session("desk").post(ANA, "question")
        first = hub.turn("desk", BOT)  # the full window, taken before the child writes,
        first.commit()  # so every outside row lies above the watermark
        offered = [m.sequence for m in first.messages if m.author != BOT]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPOSITORY), env.get("PYTHONPATH")]))
        child = subprocess.Popen(
            [sys.executable, "-c", OUTSIDE_WRITER, str(tmp_path / "store"), "2000"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        try:
            assert child.stdout is not None
            assert b"ready\n" in iter(child.stdout.readline, b"")
            while child.poll() is None:
                turn = hub.turn("desk", BOT)
                turn.commit("answer")
                offered.extend(m.sequence for m in turn.messages if m.author != BOT)
            _, err = child.communicate(timeout=60)
            assert 0 == child.returncode, err.decode()
        finally:
            if child.poll() is None:
                child.kill()
                child.communicate()
        last = hub.turn("desk", BOT)
        last.commit()
        offered.extend(m.sequence for m in last.messages if m.author != BOT)

        others = [e.sequence for e in hub.read("desk") if e.author != BOT]
        assert (2001, others) == (len(others), offered)


class TestParents:
    def test_a_post_replying_to_a_reply_is_refused_and_nothing_is_written(self, hub: Hub) -> None:
        """A reply to a reply would show in no view, so it is refused (case 4)."""
        desk = hub.session("desk")
        root = desk.post(ANA, "root").sequence
        reply = desk.post(EVE, "reply", parent=root).sequence

        with pytest.raises(ValidationError):
            desk.post(ANA, "reply to a reply", parent=reply)

        assert (2, 0, []) == (hub.last_sequence("desk"), hub.stats().restarts, hub.stats().failed)

    def test_a_commit_whose_reply_names_a_reply_is_refused_and_moves_nothing(
        self, hub: Hub
    ) -> None:
        desk = hub.session("desk")
        root = desk.post(ANA, "root").sequence
        reply = desk.post(EVE, "reply", parent=root).sequence
        turn = hub.turn("desk", BOT)

        with pytest.raises(ValidationError):
            turn.commit(Event(BOT, Text("deeper"), parent=reply))

        assert ("initial", 2) == (hub.turn("desk", BOT).reason, hub.last_sequence("desk"))

    def test_a_post_replying_to_a_run_event_is_refused(self, hub: Hub) -> None:
        desk = hub.session("desk")
        desk.append([Event(BOT, RunStarted(provider="p"))])

        with pytest.raises(ValidationError):
            desk.post(ANA, "reply to a run", parent=1)

        assert 1 == hub.last_sequence("desk")


class TestThreads:
    def test_a_thread_reply_goes_to_its_root(self, hub: Hub) -> None:
        root = hub.session("desk").post(ANA, "question").sequence

        stored = hub.turn("desk", BOT, Conversation("desk", root)).commit("answer")

        assert stored is not None and root == stored.parent

    def test_thread_watermarks_are_independent(self, hub: Hub) -> None:
        desk = hub.session("desk")
        first = desk.post(ANA, "first topic").sequence
        second = desk.post(ANA, "second topic").sequence
        hub.turn("desk", BOT, Conversation("desk", first)).commit()
        hub.turn("desk", BOT, Conversation("desk", second)).commit()
        desk.post(EVE, "on first", parent=first)
        desk.post(EVE, "on second", parent=second)
        hub.turn("desk", BOT, Conversation("desk", first)).commit()

        turn = hub.turn("desk", BOT, Conversation("desk", second))

        assert (None, ["on second"]) == (turn.reason, texts(turn.messages))

    def test_a_thread_taken_before_its_root_exists_offers_the_root_when_it_comes(
        self, hub: Hub
    ) -> None:
        desk = hub.session("desk")
        desk.post(ANA, "before")
        thread = Conversation("desk", 2)
        hub.turn("desk", BOT, thread).commit()
        desk.post(ANA, "the root")
        desk.post(EVE, "a reply", parent=2)

        turn = hub.turn("desk", BOT, thread)

        assert (None, ["the root", "a reply"]) == (turn.reason, texts(turn.messages))
        assert turn.messages == hub.view("desk", BOT, thread).messages

    def test_switching_threads_never_reinitializes(self, hub: Hub) -> None:
        desk = hub.session("desk")
        first = desk.post(ANA, "first topic").sequence
        hub.turn("desk", BOT, Conversation("desk", first)).commit()
        hub.turn("desk", BOT).commit()
        desk.post(EVE, "reply", parent=first)

        turn = hub.turn("desk", BOT, Conversation("desk", first))

        assert (None, ["reply"]) == (turn.reason, texts(turn.messages))


class TestCommit:
    def test_the_second_of_two_concurrent_turns_loses_with_a_conflict(self, hub: Hub) -> None:
        hub.session("desk").post(ANA, "question")
        first = hub.turn("desk", BOT)
        second = hub.turn("desk", BOT)
        first.commit("answer one")

        with pytest.raises(SharingStateConflict):
            second.commit("answer two")

        assert 2 == hub.last_sequence("desk")

    def test_committing_a_turn_twice_conflicts_and_writes_nothing(self, hub: Hub) -> None:
        turn = hub.turn("desk", BOT)
        turn.commit("once")

        with pytest.raises(SharingStateConflict):
            turn.commit("twice")

        assert 1 == hub.last_sequence("desk")

    def test_committing_a_turn_twice_says_it_was_committed_already(self, hub: Hub) -> None:
        """The message names what happened, never a sentinel watermark of -1."""
        hub.session("desk").post(ANA, "question")
        turn = hub.turn("desk", BOT)
        turn.commit("once")

        with pytest.raises(TurnAlreadyCommitted) as caught:
            turn.commit("twice")

        message = str(caught.value)
        assert (True, False, 2) == (
            "committed already" in message,
            "-1" in message,
            hub.last_sequence("desk"),
        )

    def test_commit_without_reply_returns_none(self, hub: Hub) -> None:
        assert hub.turn("desk", BOT).commit() is None

    def test_an_event_reply_by_someone_else_is_refused(self, hub: Hub) -> None:
        turn = hub.turn("desk", BOT)

        with pytest.raises(ValidationError):
            turn.commit(Event(ANA, Text("not bot's")))

    def test_an_event_reply_by_the_viewer_is_stored(self, hub: Hub) -> None:
        stored = hub.turn("desk", BOT).commit(Event(BOT, Text("mine"), id="r1"))

        assert stored is not None and ("r1", 1) == (stored.id, stored.sequence)

    def test_a_reply_whose_id_was_already_stored_is_still_not_offered_back(self, hub: Hub) -> None:
        desk = hub.session("desk")
        desk.append([Event(BOT, Text("said before"), id="dup")])
        hub.turn("desk", BOT).commit()
        desk.post(ANA, "next")
        hub.turn("desk", BOT).commit(Event(BOT, Text("said before"), id="dup"))
        desk.post(ANA, "after")

        assert ["after"] == texts(hub.turn("desk", BOT).messages)


class TestRestart:
    def test_sharing_state_survives_a_hub_restart_on_disk(self, open_hub: HubFactory) -> None:
        first = open_hub(on_disk=True)
        first.session("desk").post(ANA, "before restart")
        first.turn("desk", BOT).commit("bot was here")
        path = first.store
        first.close()
        del path
        second = open_hub(on_disk=True)
        second.session("desk").post(ANA, "after restart")

        turn = second.turn("desk", BOT)

        assert (None, ["after restart"]) == (turn.reason, texts(turn.messages))


# -- exactly once, against a model that replays the whole log -------------------------

PARTICIPANTS: list[SessionAuthor] = [BOT, EVE, ANA]
ROOT = 1  # the thread every example has: the first row


@dataclass
class Model:
    """The log as rows, and what each (viewer, conversation) was delivered."""

    rows: list[tuple[int, str, bool, int | None]] = field(default_factory=list)
    delivered: dict[tuple[str, Conversation], list[int]] = field(default_factory=dict)
    first_watermark: dict[tuple[str, Conversation], int] = field(default_factory=dict)

    def add(self, sequence: int, author: SessionAuthor, blank: bool, parent: int | None) -> None:
        self.rows.append((sequence, author_key(author), blank, parent))

    def deliver(self, viewer: SessionAuthor, conversation: Conversation, turn: object) -> None:
        key = (author_key(viewer), conversation)
        messages = turn.messages  # type: ignore[attr-defined]
        own = [m.sequence for m in messages if author_key(m.author) == key[0]]
        if turn.reason is None:  # type: ignore[attr-defined]
            assert [] == own, "a delta offered the viewer its own rows"
        got = [m.sequence for m in messages if m.sequence not in own]
        already = self.delivered.setdefault(key, [])
        assert [] == [seq for seq in got if seq in already], "a row was delivered twice"
        if key not in self.first_watermark:
            self.first_watermark[key] = turn.plan.next_state.watermark  # type: ignore[attr-defined]
        already.extend(got)

    def expected(self, viewer: str, conversation: Conversation) -> list[int]:
        """Every row of the viewer's view, other than its own, replaying the whole log.

        The examples stay below the window, so the first (full) turn shows every row
        that qualifies up to its watermark, and the deltas every one above it.
        """
        root = conversation.thread_root
        wanted: list[int] = []
        answered: set[int] = set()
        for sequence, author, blank, parent in self.rows:
            if blank:
                continue
            if root is None:
                qualifies = parent is None or parent not in answered
                if parent is not None:
                    answered.add(parent)
            else:
                qualifies = sequence == root or parent == root
            if qualifies and author != viewer:
                wanted.append(sequence)
        return wanted


post_op = st.tuples(
    st.just("post"),
    st.sampled_from(PARTICIPANTS),
    st.booleans(),  # reply to a root (else a new root)
    st.booleans(),  # blank (replies only)
)
turn_op = st.tuples(
    st.just("turn"),
    st.sampled_from(PARTICIPANTS),
    st.booleans(),  # in the thread (else the channel)
    st.sampled_from(["commit", "reply", "abandon", "stale"]),
)


class TestExactlyOnce:
    @given(st.lists(st.one_of(post_op, turn_op), max_size=30))
    def test_interleaved_turns_deliver_every_row_exactly_once(
        self, ops: list[tuple[object, ...]]
    ) -> None:
        model = Model()
        with Hub.open(ask_timeout=10.0) as hub:
            desk = hub.session("desk")
            model.add(desk.post(Operator(), "topic").sequence or 0, Operator(), False, None)
            roots = [ROOT]
            thread = Conversation("desk", ROOT)

            def take_turn(viewer: SessionAuthor, conversation: Conversation, mode: str) -> None:
                turn = hub.turn("desk", viewer, conversation)
                if mode == "abandon":
                    return
                if mode == "stale":
                    newer = hub.turn("desk", viewer, conversation)
                    reply = "reply" if len(model.rows) < 25 else None
                    commit(newer, reply)
                    if reply is None and newer.plan.next_state == turn.plan.expected_state:
                        commit(turn, None)  # the state did not move: nothing to conflict with
                    else:
                        with pytest.raises(SharingStateConflict):
                            turn.commit()
                    return
                commit(turn, "reply" if mode == "reply" and len(model.rows) < 25 else None)

            def commit(turn: Turn, reply: str | None) -> None:
                stored = turn.commit(reply)
                model.deliver(turn.viewer, turn.conversation, turn)
                if stored is not None:
                    assert stored.sequence is not None
                    model.add(stored.sequence, turn.viewer, False, stored.parent)
                    if stored.parent is None:
                        roots.append(stored.sequence)

            for op in ops:
                if op[0] == "post" and len(model.rows) < 25:
                    _, author, is_reply, blank = op
                    parent = roots[len(model.rows) % len(roots)] if is_reply else None
                    text = " " if blank and is_reply else "text"
                    row = desk.post(author, text, parent=parent)  # type: ignore[arg-type]
                    assert row.sequence is not None
                    model.add(row.sequence, author, text == " ", parent)  # type: ignore[arg-type]
                    if parent is None:
                        roots.append(row.sequence)
                elif op[0] == "turn":
                    _, viewer, in_thread, mode = op
                    take_turn(viewer, thread if in_thread else CHANNEL, mode)  # type: ignore[arg-type]
            for key in list(model.first_watermark):
                viewer = next(p for p in PARTICIPANTS if author_key(p) == key[0])
                take_turn(viewer, key[1], "commit")

            for (viewer_key, conversation), got in model.delivered.items():
                assert model.expected(viewer_key, conversation) == sorted(got)

    def test_concurrent_turns_and_posts_deliver_every_root_exactly_once(self, hub: Hub) -> None:
        delivered: dict[str, list[int]] = {author_key(p): [] for p in PARTICIPANTS}
        errors: list[BaseException] = []
        # Each one's first turn (a full window, which a fast neighbour could outrun) is
        # taken on the empty desk, so every later turn is a delta.
        started = threading.Barrier(len(PARTICIPANTS), timeout=30)

        def not_mine(me: SessionAuthor, turn: Turn) -> list[int]:
            return [m.sequence for m in turn.messages if not same_participant(m.author, me)]

        def participant(me: SessionAuthor) -> None:
            try:
                hub.turn("desk", me).commit()
                started.wait()
                for n in range(15):
                    hub.session("desk").post(me, f"{author_key(me)} {n}")
                    turn = hub.turn("desk", me)
                    turn.commit("reply" if n % 3 == 0 else None)
                    delivered[author_key(me)].extend(not_mine(me, turn))
                final = hub.turn("desk", me)
                final.commit()
                delivered[author_key(me)].extend(not_mine(me, final))
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=participant, args=(p,)) for p in PARTICIPANTS]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        # After everyone's final turn, one more round catches rows posted meanwhile.
        for me in PARTICIPANTS:
            turn = hub.turn("desk", me)
            turn.commit()
            delivered[author_key(me)].extend(not_mine(me, turn))

        events = hub.read("desk")
        for me in PARTICIPANTS:
            others = [e.sequence for e in events if author_key(e.author) != author_key(me)]
            assert ([], others) == (errors, sorted(delivered[author_key(me)]))


# -- every row a view shows is offered once, across restarts and both stores ----------

AGENTS: list[SessionAuthor] = [BOT, EVE]
AUTHORS: list[SessionAuthor] = [ANA, BOT, EVE]


class _KeptMemoryStore(MemoryStore):
    """A MemoryStore that outlives the Hubs over it (a "restart" keeps its rows)."""

    def close(self) -> None:
        """Leave the rows for the next Hub; ``release`` closes it."""

    def release(self) -> None:
        super().close()


viewed_ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("post"),
            st.sampled_from(AUTHORS),
            st.integers(0, 6),  # 0: a new root, else a reply to a root
            st.booleans(),  # blank
        ),
        st.tuples(
            st.just("turn"),
            st.sampled_from(AGENTS),
            st.integers(0, 6),  # 0: the channel, else a thread
            st.sampled_from(["commit", "reply", "abandon", "conflict"]),
        ),
        st.tuples(st.just("view"), st.sampled_from(AGENTS), st.integers(0, 6)),
        st.tuples(st.just("restart")),
    ),
    max_size=28,
)


class _Desk:
    """One example's Hub (reopened on restarts) and what each agent was shown and offered."""

    def __init__(self, backend: str, path: Path) -> None:
        self.backend = backend
        self.path = path
        self.kept = _KeptMemoryStore()
        self.hub = self.open()
        self.roots: list[int] = []
        self.rows = 0
        self.offered: dict[tuple[str, Conversation], list[int]] = {}
        self.shown: dict[tuple[str, Conversation], set[int]] = {}
        self.replies: dict[tuple[str, Conversation], set[int]] = {}

    def open(self) -> Hub:
        if self.backend == "lmdb":
            return Hub.open(self.path, durability="relaxed", ask_timeout=10.0)
        return Hub(self.kept, HubOptions(ask_timeout=10.0))

    def restart(self) -> None:
        self.hub.close()
        self.hub = self.open()

    def close(self) -> None:
        self.hub.close()
        self.kept.release()

    def conversation(self, choice: int) -> Conversation:
        if choice == 0 or not self.roots:
            return CHANNEL
        if choice == 6:  # a thread whose root is the next row: taken before it exists
            return Conversation("desk", self.hub.last_sequence("desk") + 1)
        return Conversation("desk", self.roots[choice % len(self.roots)])

    def post(self, author: SessionAuthor, choice: int, blank: bool) -> None:
        parent = None if choice == 0 or not self.roots else self.roots[choice % len(self.roots)]
        stored = self.hub.session("desk").post(author, " " if blank else "text", parent=parent)
        assert stored.sequence is not None
        self.rows += 1
        if parent is None:
            self.roots.append(stored.sequence)

    def view(self, agent: SessionAuthor, conversation: Conversation) -> None:
        me = author_key(agent)
        view = self.hub.view("desk", agent, conversation)
        others = {m.sequence for m in view.messages if author_key(m.author) != me}
        self.shown.setdefault((me, conversation), set()).update(others)

    def turn(self, agent: SessionAuthor, conversation: Conversation, mode: str) -> None:
        turn = self.hub.turn("desk", agent, conversation)
        if conversation.thread_root not in (None, *self.roots):
            mode = "commit"  # no root (yet): a reply to it would be refused
        if mode == "abandon":
            return
        if mode == "conflict":
            rival = self.hub.turn("desk", agent, conversation)
            self.commit(rival, "rival's reply")
            with pytest.raises(SharingStateConflict):
                turn.commit("too late")
            return
        self.commit(turn, "reply" if mode == "reply" else None)

    def commit(self, turn: Turn, reply: str | None) -> None:
        me = author_key(turn.viewer)
        key = (me, turn.conversation)
        first = key not in self.offered
        assert turn.reason == ("initial" if first else None)
        own = {m.sequence for m in turn.messages if author_key(m.author) == me}
        if first:  # a full window is the view, own rows included
            assert self.hub.view("desk", turn.viewer, turn.conversation).messages == turn.messages
        else:
            assert set() == own, "a delta offered the agent its own rows"
        mine = self.replies.setdefault(key, set())
        assert set() == own & mine, "a committed reply came back to its author"
        stored = turn.commit(reply)
        got = [m.sequence for m in turn.messages if m.sequence not in own]
        offered = self.offered.setdefault(key, [])
        assert [] == [seq for seq in got if seq in offered], "a row was offered twice"
        offered.extend(got)
        if stored is not None:
            assert stored.sequence is not None
            self.rows += 1
            mine.add(stored.sequence)
            if stored.parent is None:
                self.roots.append(stored.sequence)
        # What the turn showed is what the agent's view showed (a full window), or new.
        self.view(turn.viewer, turn.conversation)


class TestEveryViewedRowIsOfferedOnce:
    @pytest.mark.parametrize("backend", ["memory", "lmdb"])
    @settings(max_examples=20, deadline=None)
    @given(ops=viewed_ops)
    def test_every_row_shown_in_a_view_is_offered_by_exactly_one_turn(
        self, backend: str, ops: list[tuple[Any, ...]]
    ) -> None:
        """Posts, turns, commits, views and restarts in any order, on both stores.

        Fewer rows than a window, so no view ever drops a row it showed: every row other
        than the agent's own that any view of an agent showed is offered by exactly one
        of its committed turns, none twice, and none of its committed replies back.
        """
        with tempfile.TemporaryDirectory() as directory:
            desk = _Desk(backend, Path(directory) / "store")
            try:
                for op in ops:
                    if op[0] == "post" and desk.rows < SESSION_WINDOW - 4:
                        desk.post(op[1], op[2], op[3])
                    elif op[0] == "turn" and desk.rows < SESSION_WINDOW - 4:
                        desk.turn(op[1], desk.conversation(op[2]), op[3])
                    elif op[0] == "view":
                        desk.view(op[1], desk.conversation(op[2]))
                    elif op[0] == "restart":
                        desk.restart()
                for me, conversation in list(desk.shown):
                    agent = next(a for a in AGENTS if author_key(a) == me)
                    desk.commit(desk.hub.turn("desk", agent, conversation), None)
                    desk.view(agent, conversation)

                for key, shown in desk.shown.items():
                    offered = desk.offered[key]
                    assert (sorted(shown), len(offered)) == (sorted(offered), len(set(offered)))
            finally:
                desk.close()
