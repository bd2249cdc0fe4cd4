"""The append rules: what one checked write stores, decided from what the store holds.

The only home of these rules (no I/O): a store's writer reads the :class:`Facts` of each
session its group touches, asks :func:`plan_write` for each write in turn, and writes
the :class:`WritePlan` it gets. The rules, in the order they are checked:

1. ``expected_version`` must equal the session's last sequence (``ConcurrencyError``);
2. ``unless_stored`` must name no stored event (``AlreadyStored``);
3. a commit's ``expected_state`` must be the stored sharing state
   (``SharingStateConflict``);
4. ids: an event whose id is stored (or repeats an earlier id of the batch) takes no
   sequence and is answered with the stored event; new events get ``last + 1, ...``;
5. parents: a new event's ``parent`` names an earlier root ``Text`` row, stored or new
   in the batch (``ValidationError``), and not one retention removed (at or below the
   session state's ``archived_through``: ``RowsArchived``);
6. first replies: a root's first non-blank reply is recorded, unless it has one;
7. the session state is folded with the new events (``projection/runstate``);
8. reply present: a commit with ``reply_present`` notes its first event's stored
   sequence in the state it stores (``PresentSetOverflow`` when that overflows).

A write that breaks a rule raises and writes nothing; the others of its group go on.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from datetime import datetime
from types import MappingProxyType
from typing import Final, NamedTuple

import msgspec

from sharedesk.projection.runstate import fold_session_state, moves_session_state
from sharedesk.projection.session import is_blank
from sharedesk.projection.sharing import note_present
from sharedesk.protocol.errors import (
    AlreadyStored,
    ConcurrencyError,
    RowsArchived,
    SharingStateConflict,
    ValidationError,
)
from sharedesk.protocol.events import Event, Text
from sharedesk.protocol.sessions import SessionState
from sharedesk.protocol.validation import check_parents
from sharedesk.protocol.views import Conversation, SharingState
from sharedesk.protocol.writes import Write

#: The key of a stored sharing state within a session: (viewer, conversation).
SharingKey = tuple[str, Conversation]
#: The ``first_replies`` of a plan that records none (most): one shared, read-only.
_NO_REPLIES: Final[Mapping[int, int]] = MappingProxyType({})


class StoredRow(NamedTuple):
    """What the rules need of a stored row named as a ``parent``: body class name, parent."""

    kind: str
    parent: int | None


class Wants(msgspec.Struct, gc=False):
    """What the writes of one group need to know of one session (built by :func:`wants_of`).

    The ids of the writes' events and ``unless_stored``, the ``parent`` sequences, the
    sharing keys compared and swapped, and whether the session state is needed (an
    event moves it, or names a ``parent``: rule 5 reads its ``archived_through``).
    """

    ids: set[str] = msgspec.field(default_factory=set)
    parents: AbstractSet[int] = frozenset()  # seldom any: a set only once one is added
    sharing: AbstractSet[SharingKey] = frozenset()
    state: bool = False


class Facts(msgspec.Struct, gc=False):
    """What a store holds of one session, as far as one group's writes need it.

    Read for one :class:`Wants`: the writer adds each planned write's effect, for the
    next write of the group (``plan_write`` never does), to a non-empty container in
    place and replaces an empty one, so a backend may share its empty containers.

    Attributes:
        last: The session's last sequence (0 for none).
        known: The stored events among the ids wanted, by id.
        rows: The stored rows among the parents wanted, by sequence (a missing one is
            left out).
        answered: The roots among the parents wanted that have a first non-blank reply.
        state: The session state (``EMPTY_SESSION_STATE`` when not wanted).
        sharing: The stored sharing state of each key wanted (``None``: none stored).
    """

    last: int
    known: dict[str, Event]
    rows: dict[int, StoredRow]
    answered: set[int]
    state: SessionState
    sharing: dict[SharingKey, SharingState | None]


class WritePlan(msgspec.Struct, frozen=True, gc=False):
    """What one :class:`~sharedesk.protocol.writes.Write` stores, decided by :func:`plan_write`.

    ``result`` has one stored event per input event, in input order; ``new`` the events
    to store, in sequence order; ``first_replies`` root -> its first non-blank reply (new
    entries only); ``texts`` how many of ``new`` are ``Text`` rows; ``state`` the folded
    session state and ``sharing`` the sharing state to store, ``None`` for none.
    """

    write: Write
    result: list[Event]
    new: list[Event]
    first_replies: Mapping[int, int]
    texts: int
    state: SessionState | None
    sharing: SharingState | None


def wants_of(write: Write, wants: Wants | None = None) -> Wants:
    """Add what planning ``write`` needs to ``wants`` (a new one for ``None``); return it."""
    if wants is None:
        wants = Wants()
    ids = wants.ids
    for event in write.events:
        ids.add(event.id)
        if event.parent is not None:
            wants.parents = wants.parents | {event.parent}
            wants.state = True
        if not wants.state and moves_session_state(event):
            wants.state = True
    if write.unless_stored is not None:
        ids.add(write.unless_stored)
    if write.share is not None:
        wants.sharing = wants.sharing | {(write.share.viewer, write.share.state.conversation)}
    return wants


def _watermark(state: SharingState | None) -> int:
    """Return the watermark of ``state``, or -1 for none (as ``SharingStateConflict`` says)."""
    return -1 if state is None else state.watermark


def plan_write(write: Write, facts: Facts, now: datetime) -> WritePlan:
    """Decide what ``write`` stores, given the ``facts`` of its session (rules 1-8 above).

    ``facts`` were read for (at least) :func:`wants_of` ``(write)`` and are not changed;
    ``now`` stamps the new events. Raises the error of the rule broken (see above).
    """
    last = facts.last
    if write.expected_version is not None and write.expected_version != last:
        raise ConcurrencyError(write.expected_version, last)
    known = facts.known
    if write.unless_stored is not None and write.unless_stored in known:
        raise AlreadyStored(write.session_id, write.unless_stored)
    share = write.share
    if share is not None:
        stored = facts.sharing.get((share.viewer, share.state.conversation))
        if stored != share.expected_state:
            raise SharingStateConflict(_watermark(share.expected_state), _watermark(stored))
    # Rule 4: a known id (or one repeated in the batch) is answered with its stored event.
    fresh: dict[str, Event] = {}
    result: list[Event] = []
    next_sequence = last + 1
    replace = msgspec.structs.replace
    for event in write.events:
        stored_event = known.get(event.id) or fresh.get(event.id)
        if stored_event is None:
            stored_event = fresh[event.id] = replace(event, sequence=next_sequence, timestamp=now)
            next_sequence += 1
        result.append(stored_event)
    new = result if len(fresh) == len(result) else list(fresh.values())
    check_parents(new, last + 1)
    first_replies: dict[int, int] = {}
    texts = 0
    state: SessionState | None = None
    for index, row in enumerate(new):
        parent = row.parent
        if parent is not None:  # rule 5
            if parent > last:
                named = new[parent - last - 1]
                _check_row(index, parent, StoredRow(type(named.body).__name__, named.parent))
            elif parent <= facts.state.archived_through:
                raise RowsArchived(write.session_id, facts.state.archived_through)
            else:
                _check_row(index, parent, facts.rows.get(parent))
        body = row.body
        if isinstance(body, Text):
            texts += 1
            if (  # rule 6
                parent is not None
                and parent not in first_replies
                and parent not in facts.answered
                and not is_blank(body.content)
            ):
                assert row.sequence is not None
                first_replies[parent] = row.sequence
        if moves_session_state(row):  # rule 7
            state = fold_session_state(facts.state if state is None else state, row)
    sharing: SharingState | None = None
    if share is not None:
        sharing = share.state
        if share.reply_present and result:  # rule 8
            reply = result[0].sequence
            assert reply is not None
            sharing = note_present(sharing, reply)
    return WritePlan(write, result, new, first_replies or _NO_REPLIES, texts, state, sharing)


def _check_row(index: int, parent: int, row: StoredRow | None) -> None:
    """Check that ``row``, named as ``events[index].parent``, is a root ``Text`` row."""
    if row is None:
        why = "missing"
    elif row.kind != "Text":
        why = f"a {row.kind} event"
    elif row.parent is not None:
        why = f"a reply to row {row.parent}"
    else:
        return
    raise ValidationError(
        f"events[{index}].parent={parent} must name a root Text row (a thread is one "
        f"level deep), but row {parent} is {why}"
    )
