"""What travels to a store's writer: a write checked once by ``check_write``, never again."""

from __future__ import annotations

import msgspec

from sharedesk.protocol.events import Event
from sharedesk.protocol.views import SharingState


class Share(msgspec.Struct, frozen=True):
    """The sharing state a turn's commit stores with its reply (a compare-and-swap).

    The store checks it as the append rules say (``projection/append.py``, rules 3 and
    8); a stored state that cannot be decoded is ``CorruptRecordError``.

    Attributes:
        viewer: The participant's :func:`~sharedesk.protocol.author_key`; the state is
            keyed by (session, viewer, ``state.conversation``).
        state: The state to store.
        expected_state: The state the turn planned from (``None``: no state stored);
            the write fails with ``SharingStateConflict`` when the stored one differs.
        reply_present: Note the first event's stored sequence (its old one when its id
            was stored before) as present in ``state`` before it is stored.
    """

    viewer: str
    state: SharingState
    expected_state: SharingState | None
    reply_present: bool = False


class Write(msgspec.Struct, frozen=True):
    """One write, built by :func:`~sharedesk.protocol.validation.check_write`: the store trusts it.

    An append, or (with ``share``) a turn's commit.

    Attributes:
        session_id: The session.
        events: Private copies of the events to append, validated, unstamped.
        expected_version: Write only if the session's last sequence equals it.
        unless_stored: Write only if the session holds no event with this id.
        share: The sharing state stored in the same transaction, or ``None``.
        linked: Writes to other sessions stored in the same transaction: the store
            commits this write and all of them, or none (the first error of any is
            this write's error). Each is a plain write (no share, none linked).
    """

    session_id: str
    events: list[Event]
    expected_version: int | None = None
    unless_stored: str | None = None
    share: Share | None = None
    linked: tuple[Write, ...] = ()
