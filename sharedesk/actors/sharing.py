"""SharingActor: plans the turns of one session's participants.

The rules live in the pure :func:`~sharedesk.projection.turns.plan_turn`; the actor
gathers its inputs and walks the session's tail, fed by the session actor's pushes, so a
delta reads no store page whatever the desk's history. Commits go through the Hub.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from sharedesk.actors._base import HubActor
from sharedesk.actors._messages import Plan, Push
from sharedesk.actors._tail import Tail
from sharedesk.projection.turns import TurnPlan, plan_turn
from sharedesk.protocol._log import logger
from sharedesk.protocol.authors import SessionAuthor, author_key
from sharedesk.protocol.views import Conversation

_log = logger()


class SharingActor(HubActor):
    """Plans the turns of every participant of one session (see the module).

    A restart loses nothing: states live in the store, the tail is rebuilt from the log.
    """

    kind = "sharing"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.tail = Tail(self.key.session_id)

    def context(self, message: Any) -> dict[str, Any]:
        """Bind ``viewer``."""
        return {"viewer": author_key(message.viewer)} if isinstance(message, Plan) else {}

    def handle(self, message: Any) -> Any:
        """Serve :class:`Push` (told) and :class:`Plan`."""
        match message:
            case Push(events=events):
                self.tail.apply_rows(events)  # a gap resets it: the next plan rebuilds
                return None
            case Plan(viewer=viewer, conversation=conversation, start_after=start_after):
                return self._plan(viewer, conversation, start_after)
        return super().handle(message)

    def first_replies(self, roots: Collection[int]) -> dict[int, int]:
        """Return the store's first replies of ``roots``: the planner's ``ReplyIndex``."""
        return self.hub.store.first_replies(self.key.session_id, roots)

    def _plan(
        self, viewer: SessionAuthor, conversation: Conversation, start_after: int | None
    ) -> TurnPlan:
        store = self.hub.store
        state = store.get_sharing_state(self.key.session_id, author_key(viewer), conversation)
        tail = self.tail
        last, _ = tail.catch_up_rows(store)
        plan = plan_turn(
            tail.log(store),
            state,
            conversation,
            viewer,
            last,
            self,
            compaction=tail.compaction(conversation),
            start_after=start_after,
        )
        _log.debug(
            "turn.planned",
            reason=plan.reason,
            messages=len(plan.messages),
            watermark=plan.next_state.watermark,
        )
        return plan
