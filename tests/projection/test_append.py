"""The append rules, planned from facts with no store: ``projection/append``."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

import msgspec
import pytest

from sharedesk.projection.append import Facts, StoredRow, Wants, plan_write, wants_of
from sharedesk.protocol import (
    ConcurrencyError,
    Conversation,
    Event,
    Person,
    PresentSetOverflow,
    SharingState,
    SharingStateConflict,
    Text,
    ValidationError,
)
from sharedesk.protocol.errors import AlreadyStored, RowsArchived
from sharedesk.protocol.sessions import EMPTY_SESSION_STATE, SessionState
from sharedesk.protocol.validation import check_write
from sharedesk.protocol.writes import Share

ANN = Person(id="ann", label="Ann")
NOW = datetime(2026, 1, 1, tzinfo=UTC)
STATE = SharingState(Conversation("s"), 0)


def facts(
    last: int = 0,
    *,
    known: dict[str, Event] | None = None,
    rows: dict[int, StoredRow] | None = None,
    answered: set[int] | None = None,
    state: SessionState = EMPTY_SESSION_STATE,
    sharing: dict[tuple[str, Conversation], SharingState | None] | None = None,
) -> Facts:
    """Build the facts of a session, empty but for what is given."""
    return Facts(last, known or {}, rows or {}, answered or set(), state, sharing or {})


def stored(content: str, sequence: int, *, id: str, parent: int | None = None) -> Event:
    return Event(ANN, Text(content), id=id, parent=parent, sequence=sequence, timestamp=NOW)


class TestPlanWrite:
    def test_new_events_get_the_next_sequences_and_the_timestamp(self) -> None:
        plan = plan_write(check_write("s", [Event(ANN, Text("a"))]), facts(4), NOW)

        assert [(5, NOW)] == [(e.sequence, e.timestamp) for e in plan.new]

    def test_a_stale_expected_version_is_a_concurrency_error(self) -> None:
        with pytest.raises(ConcurrencyError):
            plan_write(check_write("s", [], expected_version=1), facts(2), NOW)

    def test_unless_stored_naming_a_stored_event_is_refused(self) -> None:
        known = {"done": stored("x", 1, id="done")}

        with pytest.raises(AlreadyStored):
            plan_write(check_write("s", [], unless_stored="done"), facts(1, known=known), NOW)

    def test_a_known_id_is_answered_with_the_stored_event_and_takes_no_sequence(self) -> None:
        known = {"x": stored("old", 1, id="x")}
        write = check_write("s", [Event(ANN, Text("new"), id="x"), Event(ANN, Text("y"))])

        plan = plan_write(write, facts(1, known=known), NOW)

        assert [1, 2] == [e.sequence for e in plan.result]
        assert [2] == [e.sequence for e in plan.new]

    def test_a_parent_that_is_missing_is_refused(self) -> None:
        write = check_write("s", [Event(ANN, Text("r"), parent=1)])

        with pytest.raises(ValidationError, match="missing"):
            plan_write(write, facts(1), NOW)

    def test_a_parent_retention_removed_is_rows_archived(self) -> None:
        write = check_write("s", [Event(ANN, Text("r"), parent=2)])
        retained = msgspec.structs.replace(EMPTY_SESSION_STATE, archived_through=3)

        with pytest.raises(RowsArchived) as raised:
            plan_write(write, facts(5, state=retained), NOW)

        assert ("s", 3) == (raised.value.session_id, raised.value.archived_through)

    def test_a_parent_that_is_a_reply_is_refused(self) -> None:
        write = check_write("s", [Event(ANN, Text("r"), parent=2)])

        with pytest.raises(ValidationError, match="a reply to row 1"):
            plan_write(write, facts(2, rows={2: StoredRow("Text", 1)}), NOW)

    def test_the_first_non_blank_reply_of_an_unanswered_root_is_recorded(self) -> None:
        write = check_write("s", [Event(ANN, Text(" "), parent=1), Event(ANN, Text("r"), parent=1)])

        plan = plan_write(write, facts(1, rows={1: StoredRow("Text", None)}), NOW)

        assert {1: 3} == plan.first_replies

    def test_a_reply_to_an_answered_root_records_nothing(self) -> None:
        write = check_write("s", [Event(ANN, Text("r"), parent=1)])
        given = facts(2, rows={1: StoredRow("Text", None)}, answered={1})

        assert {} == plan_write(write, given, NOW).first_replies

    def test_a_commit_against_a_moved_sharing_state_is_a_conflict(self) -> None:
        share = Share("v", STATE, None)
        given = facts(sharing={("v", STATE.conversation): STATE})

        with pytest.raises(SharingStateConflict):
            plan_write(check_write("s", [], share=share), given, NOW)

    def test_reply_present_notes_the_replys_old_sequence_when_its_id_was_stored(self) -> None:
        known = {"r": stored("reply", 3, id="r")}
        share = Share("v", STATE, None, reply_present=True)
        write = check_write("s", [Event(ANN, Text("reply"), id="r")], share=share)

        plan = plan_write(write, facts(5, known=known), NOW)

        assert plan.sharing is not None and frozenset({3}) == plan.sharing.present_above_watermark

    def test_reply_present_past_the_present_set_limit_is_an_overflow(self) -> None:
        full = SharingState(Conversation("s"), 0, frozenset(range(1, 65)))
        share = Share("v", full, None, reply_present=True)
        write = check_write("s", [Event(ANN, Text("reply"))], share=share)

        with pytest.raises(PresentSetOverflow):
            plan_write(write, facts(100), NOW)

    def test_planning_never_changes_the_facts(self) -> None:
        given = facts(1, rows={1: StoredRow("Text", None)}, known={"a": stored("a", 1, id="a")})
        before = copy.deepcopy(given)

        plan_write(check_write("s", [Event(ANN, Text("r"), parent=1)]), given, NOW)

        assert before == given


class TestWantsOf:
    def test_wants_name_the_ids_parents_guard_sharing_key_and_the_state_a_parent_needs(
        self,
    ) -> None:
        share = Share("v", STATE, None)
        write = check_write(
            "s", [Event(ANN, Text("r"), id="e", parent=2)], unless_stored="g", share=share
        )

        wants = wants_of(write)

        assert Wants({"e", "g"}, {2}, {("v", STATE.conversation)}, True) == wants
