"""SharingActor: plans the turns of one session's participants.

A turn is planned by :func:`~sharedesk.projection.turns.plan_turn` (the rules of what a
turn offers live there, in the pure core) from the stored sharing state of (session,
viewer, conversation), the session's last sequence ``last``, read when the turn is
planned, the session's log and its first-reply index (the store's, one key read per
root). This actor only gathers those and hands the plan back; a turn's commit goes
from the Hub to the store's writer, like any write.

Walks run over the session's tail held in memory (:mod:`sharedesk.actors._tail`), fed
by the session actor's pushes, so a delta reads no store page and costs the same on a
desk of ten thousand rows as on one of a million.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from sharedesk.actors._base import HubActor, HubStore
from sharedesk.actors._messages import Plan, Push
from sharedesk.actors._tail import Tail
from sharedesk.projection.turns import TurnPlan, plan_turn
from sharedesk.protocol._log import logger
from sharedesk.protocol.authors import SessionAuthor, author_key
from sharedesk.protocol.views import Conversation

_log = logger()


class _StoreReplies:
    """The store's first-reply index of one session, as the planner's ``ReplyIndex``."""

    __slots__ = ("_session_id", "_store")

    def __init__(self, store: HubStore, session_id: str) -> None:
        self._store = store
        self._session_id = session_id

    def first_replies(self, roots: Collection[int]) -> dict[int, int]:
        """Ask the store (one read, one key per root)."""
        return self._store.first_replies(self._session_id, roots)


class SharingActor(HubActor):
    """Plans the turns of every participant of one session.

    Sharing states live in the store (read per plan, O(1)). The actor keeps the
    session's :class:`~sharedesk.actors._tail.Tail`, fed by the events the session actor
    pushes, and walks it instead of the store's log, so a delta costs no store read of
    the log and does not grow with the desk's history. A restart loses nothing: the tail
    is rebuilt from the log. Hooks: ``on_start``/``on_stop`` only log (actor thread).
    """

    kind = "sharing"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.tail = Tail(self.key.session_id)

    def context(self, message: Any) -> dict[str, Any]:
        """Bind ``viewer``."""
        if isinstance(message, Plan):
            return {"viewer": author_key(message.viewer)}
        return {}

    def handle(self, message: Any) -> Any:
        """Serve :class:`Push` (told) and :class:`Plan`."""
        match message:
            case Push(events=events):
                try:
                    self.tail.apply_rows(events)
                except Exception:
                    self.tail.reset()  # rebuilt from the log by the next plan
                return None
            case Plan(viewer=viewer, conversation=conversation):
                return self._plan(viewer, conversation)
        raise TypeError(f"unexpected message {type(message).__name__}")

    def _plan(self, viewer: SessionAuthor, conversation: Conversation) -> TurnPlan:
        store = self.hub.store
        session_id = self.key.session_id
        state = store.get_sharing_state(session_id, author_key(viewer), conversation)
        last, _ = self.tail.catch_up_rows(store)
        replies = _StoreReplies(store, session_id)
        plan = plan_turn(self.tail.log(store), state, conversation, viewer, last, replies)
        _log.debug(
            "turn.planned",
            reason=plan.reason,
            messages=len(plan.messages),
            watermark=plan.next_state.watermark,
        )
        return plan
