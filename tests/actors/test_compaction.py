"""Hub.compact and Hub.turn(start_after=...): long-lived desks through the Hub, both backends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sharedesk.actors import Hub
from sharedesk.projection.compaction import compacted_through, compaction_of
from sharedesk.protocol import (
    SESSION_WINDOW,
    Agent,
    Compaction,
    Conversation,
    Event,
    Operator,
    Person,
    Text,
    ValidationError,
    author_key,
)
from tests.actors.conftest import HubFactory

ANA = Person(id="ana", label="Ana")
BOT = Agent(id="bot", label="Bot")
EVE = Agent(id="eve", label="Eve")
SUMMARIZER = Agent(id="summarizer", label="Summarizer")
CHANNEL = Conversation("desk")


def texts(messages: list[Any]) -> list[str]:
    return [m.content for m in messages]


def fill(hub: Hub, count: int) -> None:
    hub.session("desk").append([Event(ANA, Text(f"m{n}")) for n in range(1, count + 1)])


class TestLateJoiner:
    def test_pages_of_at_most_the_window_bring_every_row_after_start_after_once(
        self, hub: Hub
    ) -> None:
        fill(hub, 100)

        turn = hub.turn("desk", BOT, start_after=10)
        seen: list[str] = []
        pages: list[int] = []
        while True:
            seen += texts(turn.messages)
            pages.append(len(turn.messages))
            turn.commit()
            turn = hub.turn("desk", BOT)
            if not turn.messages:
                break

        assert [f"m{n}" for n in range(11, 101)] == seen
        assert [SESSION_WINDOW, SESSION_WINDOW, SESSION_WINDOW] == pages
        assert turn.reason is None

    def test_after_the_last_page_new_rows_arrive_as_ordinary_deltas(self, hub: Hub) -> None:
        fill(hub, 5)
        hub.turn("desk", BOT, start_after=2).commit()
        hub.session("desk").post(EVE, "late")

        turn = hub.turn("desk", BOT)

        assert (None, ["late"]) == (turn.reason, texts(turn.messages))

    @pytest.mark.parametrize("start_after", [-1, "3", 2.0, 6, 10**6])
    def test_a_bad_start_after_is_refused_and_writes_nothing(
        self, hub: Hub, start_after: Any
    ) -> None:
        fill(hub, 5)

        with pytest.raises(ValidationError):
            hub.turn("desk", BOT, start_after=start_after)

        assert 5 == hub.session("desk").last_sequence()
        assert hub.store.get_sharing_state("desk", author_key(BOT), CHANNEL) is None

    def test_start_after_for_a_viewer_with_sharing_state_is_refused(self, hub: Hub) -> None:
        fill(hub, 5)
        hub.turn("desk", BOT).commit()

        with pytest.raises(ValidationError, match="already stand"):
            hub.turn("desk", BOT, start_after=1)


class TestCompact:
    def compacted(self, hub: Hub) -> None:
        desk = hub.session("desk")
        desk.post(ANA, "one")
        desk.post(EVE, "two")
        desk.post(ANA, "three")
        desk.post(EVE, "four")
        hub.compact("desk", "one to three", through=3, author=SUMMARIZER)

    def test_compact_appends_a_compaction_naming_the_authors_it_covers(self, hub: Hub) -> None:
        self.compacted(hub)

        event = hub.read("desk")[-1]

        assert (SUMMARIZER, Compaction(3, "one to three", (ANA, EVE))) == (
            event.author,
            event.body,
        )

    def test_a_view_serves_one_summary_row_in_place_of_the_compacted_rows(self, hub: Hub) -> None:
        self.compacted(hub)

        view = hub.view("desk", BOT)

        assert ["one to three", "four"] == texts(view.messages)
        assert (SUMMARIZER, (ANA, EVE)) == (view.messages[0].author, view.messages[0].covers)

    def test_the_compacted_rows_stay_readable(self, hub: Hub) -> None:
        self.compacted(hub)

        assert 5 == len(hub.read("desk"))

    def test_a_view_cached_before_the_compaction_is_served_compacted_after_it(
        self, hub: Hub
    ) -> None:
        desk = hub.session("desk")
        desk.post(ANA, "one")
        desk.post(ANA, "two")
        assert ["one", "two"] == texts(hub.view("desk", BOT).messages)

        hub.compact("desk", "both", through=2, author=SUMMARIZER)

        assert ["both"] == texts(hub.view("desk", BOT).messages)

    def test_a_viewer_whose_watermark_lies_below_through_gets_a_compacted_full_window(
        self, hub: Hub
    ) -> None:
        desk = hub.session("desk")
        desk.post(ANA, "one")
        hub.turn("desk", BOT).commit()
        desk.post(ANA, "two")
        desk.post(ANA, "three")
        hub.compact("desk", "one and two", through=2, author=SUMMARIZER)

        turn = hub.turn("desk", BOT)

        assert ("compacted", ["one and two", "three"]) == (turn.reason, texts(turn.messages))

    def test_a_viewer_past_through_gets_only_the_rows_after_it_once(self, hub: Hub) -> None:
        desk = hub.session("desk")
        desk.post(ANA, "one")
        desk.post(ANA, "two")
        hub.turn("desk", BOT).commit()
        desk.post(ANA, "three")
        hub.compact("desk", "one and two", through=2, author=SUMMARIZER)
        desk.post(ANA, "four")

        first = hub.turn("desk", BOT)
        first.commit()
        second = hub.turn("desk", BOT)

        assert (None, ["three", "four"]) == (first.reason, texts(first.messages))
        assert [] == second.messages

    def test_a_transcript_serves_the_summary_in_place_of_the_compacted_rows(self, hub: Hub) -> None:
        self.compacted(hub)

        transcript = hub.transcript("desk", BOT)

        assert ["one to three", "four"] == [m.content for m in transcript.messages]
        assert SUMMARIZER == transcript.messages[0].author

    def test_a_transcript_built_before_the_compaction_is_continued_through_it(
        self, hub: Hub
    ) -> None:
        desk = hub.session("desk")
        desk.post(ANA, "one")
        desk.post(EVE, "two")
        assert ["one", "two"] == [m.content for m in hub.transcript("desk", BOT).messages]
        hub.compact("desk", "both", through=2, author=SUMMARIZER)
        desk.post(ANA, "three")

        transcript = hub.transcript("desk", BOT)

        assert ["both", "three"] == [m.content for m in transcript.messages]

    def test_a_thread_compaction_leaves_the_channel_as_it_is(self, hub: Hub) -> None:
        desk = hub.session("desk")
        root = desk.post(ANA, "root")
        assert root.sequence is not None
        desk.post(EVE, "r1", parent=root.sequence)
        desk.post(EVE, "r2", parent=root.sequence)
        thread = Conversation("desk", root.sequence)

        hub.compact("desk", "root and r1", through=2, author=SUMMARIZER, conversation=thread)

        assert ["root and r1", "r2"] == texts(hub.view("desk", BOT, thread).messages)
        assert ["root", "r1"] == texts(hub.view("desk", BOT).messages)

    def test_a_second_compaction_covers_the_first_ones_authors(self, hub: Hub) -> None:
        self.compacted(hub)
        hub.session("desk").post(BOT, "five")

        event = hub.compact("desk", "all", through=6, author=Operator())

        assert isinstance(event.body, Compaction)
        assert (ANA, EVE, BOT) == event.body.covers

    @pytest.mark.parametrize(
        ("session_id", "summary", "through"),
        [
            ("desk", "s", 6),  # beyond the last sequence
            ("desk", "s", 3),  # at the previous compaction
            ("desk", "s", 2),  # below it
            ("desk", "  ", 4),  # a blank summary
            ("desk", "s", "4"),  # not an int
            ("nobody", "s", 1),  # an unknown desk
        ],
    )
    def test_bad_input_is_refused_and_writes_nothing(
        self, hub: Hub, session_id: str, summary: str, through: Any
    ) -> None:
        self.compacted(hub)

        with pytest.raises(ValidationError):
            hub.compact(session_id, summary, through=through, author=SUMMARIZER)

        assert 5 == hub.session("desk").last_sequence()
        assert 0 == hub.session("nobody").last_sequence()


def test_a_compaction_survives_a_restart_of_the_hub(open_hub: HubFactory, tmp_path: Path) -> None:
    hub = open_hub(path=tmp_path / "store")
    hub.session("desk").post(ANA, "one")
    hub.session("desk").post(ANA, "two")
    hub.compact("desk", "summary of one", through=1, author=SUMMARIZER)
    hub.close()

    again = open_hub(path=tmp_path / "store")

    assert ["summary of one", "two"] == texts(again.view("desk", BOT).messages)


def test_a_compaction_is_kept_by_postgresql(postgres_dsn: str) -> None:
    hub = Hub.open(postgres_dsn)
    try:
        hub.session("desk").post(ANA, "one")
        hub.session("desk").post(ANA, "two")
        hub.compact("desk", "summary of one", through=1, author=SUMMARIZER)
        hub.turn("desk", BOT, start_after=1).commit()

        assert ["summary of one", "two"] == texts(hub.view("desk", BOT).messages)
        assert hub.store.get_sharing_state("desk", author_key(BOT), CHANNEL) is not None
    finally:
        hub.close()


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("post"), st.sampled_from([ANA, EVE, BOT]), st.integers(0, 3)),
        st.tuples(st.just("turn"), st.booleans(), st.just(0)),
        st.tuples(st.just("compact"), st.integers(0, 3), st.just(0)),
    ),
    max_size=40,
)


class TestExactlyOnceAcrossCompactions:
    @settings(max_examples=40, deadline=None)
    @given(ops=OPS)
    def test_every_row_of_the_view_reaches_the_viewer_once_since_its_last_full_window(
        self, ops: list[tuple[str, Any, int]]
    ) -> None:
        """Rows above the compactions reach the viewer once; summaries stand for the rest."""
        with Hub.open(None, ask_timeout=10.0) as hub:
            desk = hub.session("desk")
            roots: list[int] = []
            shown: list[int] = []
            for op, arg, pick in [*ops, ("turn", False, 0)]:
                if op == "post":
                    parent = roots[pick % len(roots)] if roots and pick else None
                    event = desk.post(arg, f"row by {arg.id}", parent=parent)
                    assert event.sequence is not None
                    if parent is None:
                        roots.append(event.sequence)
                elif op == "compact":
                    state = hub.store.session_state("desk")
                    done = compacted_through(compaction_of(state.compactions, CHANNEL))
                    through = desk.last_sequence() - arg
                    if through > done:
                        hub.compact("desk", f"up to {through}", through=through, author=EVE)
                else:
                    turn = hub.turn("desk", BOT)
                    delivered = [m.sequence for m in turn.messages]
                    if turn.reason is not None:
                        shown = delivered
                    else:
                        assert not set(delivered) & set(shown)
                        shown += delivered
                    turn.commit("reply" if arg else None)
            view = hub.view("desk", BOT)
            rows = [m for m in view.messages if m.content.startswith("row")]  # not summaries
            others = [m.sequence for m in rows if m.author != BOT]
            assert set(others) <= set(shown)
