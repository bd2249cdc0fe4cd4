"""SharingActor: plans and commits the turns of one session's participants.

A turn is planned from the stored sharing state of (session, viewer, conversation) and
the session's last sequence ``last``, read when the turn is planned:

- no state: the full window (:func:`project_session` below ``last + 1``), reason
  ``"initial"``;
- a state: :func:`prepare_delta` with ``before = last + 1`` (``before`` is exclusive,
  so every row up to ``last`` is walked). A ``Delta`` gives the rows not yet shown
  (reason ``None``); a ``Reinitialize`` gives the full window with its reason.

Committing stores ``watermark = last`` (everything walked, not ``before``: a row appended
by someone else between planning and committing lies above ``last`` and is delivered by
the next turn, never skipped), the present entries above ``last`` carried over, plus the
reply's own sequence (:func:`note_present`), so the reply is never offered back to its
author. Reply and state are written by the session actor in one ``append_and_share``.

The log ends before the watermark (``WATERMARK_UNAVAILABLE``) whenever no ``Text`` row
lies at or below the watermark, e.g. on a young desk whose first turn was taken before
anything was posted, or when the rows up to the watermark are all run or tool events.
In that case the walk has seen every row above the watermark, which is exactly what a
delta needs, so the Hub treats it as a valid delta: the planner lends the fold a log that
ends with a marker row at the watermark (blank, of no desk, so it never qualifies), and
the fold stops there as it would at any row at or below the watermark. A
``WATERMARK_UNAVAILABLE`` reason therefore never reaches a ``Turn``.

A turn never offers rows written by its own viewer (same participant, labels ignored):
the viewer already has them.

Two turns of the same viewer and conversation planned from the same state: the first to
commit wins; the second loses with ``SharingStateConflict`` (compare-and-swap, by value,
on the stored state, inside the same transaction as the reply) and writes nothing, so
the watermark never moves backwards and no row is skipped. Its viewer takes a new turn,
which offers what the winner's turn did not.

Walks run over the session's tail held in memory (:mod:`sharedesk.actors._tail`), fed
by the session actor's pushes, so a delta reads no store page and costs the same on a
desk of ten thousand rows as on one of a million.
"""

from __future__ import annotations

from typing import Any

from sharedesk.actors._base import ActorKey, HubActor
from sharedesk.actors._messages import AppendAndShare, Commit, Plan, Push, TurnPlan
from sharedesk.actors._tail import Tail
from sharedesk.logconfig import logger
from sharedesk.projection import prepare_delta, project_session
from sharedesk.protocol.authors import SessionAuthor, System, author_key, same_participant
from sharedesk.protocol.constants import SESSION_WINDOW
from sharedesk.protocol.events import Event
from sharedesk.protocol.ports import SessionLog
from sharedesk.protocol.views import (
    Conversation,
    Delta,
    LogMessage,
    SessionPage,
    SessionQuery,
    SharingQuery,
    SharingState,
)

_log = logger()

_MARKER_AUTHOR = System(kind="sharedesk.marker", label="")


class _EndsAtWatermark:
    """A log that, once the real one ends above ``watermark``, ends with a marker row there."""

    __slots__ = ("_log", "_watermark")

    def __init__(self, log: SessionLog, watermark: int) -> None:
        self._log = log
        self._watermark = watermark

    def read_before(self, before: int | None, limit: int) -> SessionPage:
        page = self._log.read_before(before, limit)
        rows = page.messages
        if page.next_before is not None or limit <= 0:
            return page
        if rows and rows[-1].sequence <= self._watermark:
            return page  # the fold stops at that row
        if len(rows) >= limit:
            return SessionPage(messages=rows, next_before=rows[-1].sequence)  # marker next
        marker = LogMessage(
            sequence=self._watermark, author=_MARKER_AUTHOR, content="", desk="", parent=None
        )
        return SessionPage(messages=[*rows, marker], next_before=None)


def plan_turn(
    log: SessionLog,
    state: SharingState | None,
    conversation: Conversation,
    viewer: SessionAuthor,
    last: int,
) -> TurnPlan:
    """Plan a turn of ``viewer`` in ``conversation`` on a session whose last sequence is ``last``.

    Args:
        log: The session's log.
        state: The stored sharing state, or ``None``.
        conversation: The channel or thread.
        viewer: Whose turn it is.
        last: The session's last sequence (read before ``log`` is walked).

    Returns:
        The plan: messages (oldest first, none by ``viewer``), reason, the state it was
        planned from and the state committing will store.

    Raises:
        PageError: The log returned a malformed page.
        LogReadError: The log failed.
        WatermarkRegression: ``last`` lies below the stored watermark.

    Cost: one walk of the log from ``last`` down to the watermark (a delta) or to a full
    window, at most ``SCAN_LIMIT`` rows each; no writes.
    """
    reason: str | None
    if state is None:
        messages = None
        reason = "initial"
        carried: frozenset[int] = frozenset()
    else:
        query = SharingQuery(requested=conversation, bound=conversation, before=last + 1)
        result = prepare_delta(_EndsAtWatermark(log, state.watermark), state, query)
        if isinstance(result, Delta):
            messages = result.messages
            reason = None
        else:
            messages = None
            reason = result.reason.value
        carried = frozenset(seq for seq in state.present_above_watermark if seq > last)
    if messages is None:
        window = SessionQuery(conversation=conversation, before=last + 1, window=SESSION_WINDOW)
        messages = project_session(log, window).messages
    own = [m for m in messages if not same_participant(m.author, viewer)]
    return TurnPlan(
        conversation=conversation,
        messages=own,
        reason=reason,
        expected_state=state,
        next_state=SharingState(
            conversation=conversation, watermark=last, present_above_watermark=carried
        ),
    )


class SharingActor(HubActor):
    """Plans and commits the turns of every participant of one session.

    Sharing states live in the store (read per plan, O(1)). The actor keeps the
    session's :class:`~sharedesk.actors._tail.Tail`, fed by the events the session actor
    pushes, and walks it instead of the store's log, so a delta costs no store read and
    does not grow with the desk's history. A restart loses nothing: the tail is rebuilt
    from the log. Commits are handed to the session actor, the only writer. Hooks:
    ``on_start``/``on_stop`` only log (actor thread).
    """

    kind = "sharing"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.tail = Tail(self.key.session_id)

    def context(self, message: Any) -> dict[str, Any]:
        """Bind ``viewer``."""
        if isinstance(message, Plan | Commit):
            return {"viewer": author_key(message.viewer)}
        return {}

    def handle(self, message: Any) -> Any:
        """Serve :class:`Push` (told), :class:`Plan` and :class:`Commit`."""
        match message:
            case Push(events=events):
                try:
                    self.tail.apply(events)
                except Exception:
                    self.tail.reset()  # rebuilt from the log by the next plan
                return None
            case Plan(viewer=viewer, conversation=conversation):
                return self._plan(viewer, conversation)
            case Commit(viewer=viewer, plan=plan, reply=reply):
                return self._commit(viewer, plan, reply)
        raise TypeError(f"unexpected message {type(message).__name__}")

    def _plan(self, viewer: SessionAuthor, conversation: Conversation) -> TurnPlan:
        store = self.hub.store
        session_id = self.key.session_id
        state = store.get_sharing_state(session_id, author_key(viewer), conversation)
        last, _ = self.tail.catch_up(store)
        plan = plan_turn(self.tail.log(store), state, conversation, viewer, last)
        _log.debug(
            "turn.planned",
            reason=plan.reason,
            messages=len(plan.messages),
            watermark=plan.next_state.watermark,
        )
        return plan

    def _commit(self, viewer: SessionAuthor, plan: TurnPlan, reply: Event | None) -> Event | None:
        message = AppendAndShare(
            events=[] if reply is None else [reply],
            viewer=author_key(viewer),
            state=plan.next_state,
            expected_state=plan.expected_state,
        )
        stored: list[Event] = self.hub._call(
            ActorKey(kind="session", session_id=self.key.session_id), message, inline=True
        )
        _log.info(
            "turn.committed",
            watermark=plan.next_state.watermark,
            reply_sequence=stored[0].sequence if stored else None,
            delivered=len(plan.messages),
        )
        return stored[0] if stored else None
