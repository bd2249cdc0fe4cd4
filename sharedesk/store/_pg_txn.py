"""A group's write transaction on PostgreSQL: the facts it reads and the one statement it writes.

:class:`GroupTxn` is what ``PostgresStore._transact`` hands the base's writer (see
:mod:`sharedesk.store.postgres` for the transaction around it). ``facts`` locks the
group's ``streams`` rows in session-id order and reads what the append rules need;
``put`` writes every plan of the group with one statement, the group's notice included.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, NamedTuple

import psycopg

from sharedesk.projection.append import Facts, StoredRow, Wants, WritePlan
from sharedesk.protocol import records
from sharedesk.protocol.events import Event
from sharedesk.protocol.views import Conversation, SharingState
from sharedesk.store._pg_schema import Queries

__all__ = ["GroupTxn", "Probe", "utf8"]

#: PostgreSQL takes notice payloads of up to 8000 bytes; a group's notices are split
#: into payloads of at most this many characters.
_PAYLOAD: Final = 7900


def utf8(value: str) -> bytes:
    return value.encode("utf-8")


class Probe(NamedTuple):
    """A row one write stores, by which a later read tells whether it committed."""

    query: str  # selects the row's bytes by (session_id, key)
    sid: bytes
    key: bytes
    value: bytes


class GroupTxn:
    """One group's write transaction on ``conn``: the base's ``WriteTxn`` on PostgreSQL.

    Args:
        conn: A connection inside the group's transaction.
        sql: The store's statements.
        channel: The channel the group's notice goes to.
    """

    def __init__(self, conn: psycopg.Connection[Any], sql: Queries, channel: str) -> None:
        self._conn = conn
        self._sql = sql
        self._channel = channel
        #: A row a guarded write of the group stores (``None``: plain appends only).
        self.probe: Probe | None = None
        #: The session of that write.
        self.guarded_session = ""

    def facts(self, wants: Mapping[str, Wants]) -> dict[str, Facts]:
        """Lock the sessions' rows (in id order), then read what the plans need.

        A session with no row yet gets one, and the reads run again once every row
        is locked. A read whose list is empty (no parent, no sharing state) is not sent.
        """
        conn, sql = self._conn, self._sql
        sids = sorted(utf8(session_id) for session_id in wants)
        ids: tuple[list[bytes], list[bytes]] = ([], [])
        parents: tuple[list[bytes], list[int]] = ([], [])
        shares: tuple[list[bytes], list[bytes]] = ([], [])
        share_of: dict[tuple[bytes, bytes], tuple[str, Conversation]] = {}
        for session_id, want in wants.items():
            sid = utf8(session_id)
            for event_id in want.ids:
                ids[0].append(sid)
                ids[1].append(records.event_id_key(b"", event_id))
            for parent in want.parents:
                parents[0].append(sid)
                parents[1].append(parent)
            for viewer, conversation in want.sharing:
                key = records.sharing_key(b"", viewer, conversation)
                shares[0].append(sid)
                shares[1].append(key)
                share_of[(sid, key)] = (viewer, conversation)

        def read() -> list[Any]:
            """Send the reads a group needs (none for empty lists), in this order."""
            return [
                conn.execute(sql.lock, [sids]),
                *(conn.execute(query, keys) if keys[0] else () for query, keys in wanted),
            ]

        wanted = ((sql.known, ids), (sql.parents, parents), (sql.sharing, shares))

        cursors = read()
        streams = {bytes(row[0]): row for row in cursors[0]}
        if len(streams) < len(sids):
            conn.execute(sql.create, [[sid for sid in sids if sid not in streams]])
            cursors = read()
            streams = {bytes(row[0]): row for row in cursors[0]}
        facts: dict[str, Facts] = {}
        for session_id, want in wants.items():
            _, last, raw = streams[utf8(session_id)]
            state = records.decode_session_state(session_id, raw if want.state else None)
            sharing: dict[tuple[str, Conversation], SharingState | None]
            sharing = dict.fromkeys(want.sharing)
            facts[session_id] = Facts(last, {}, {}, set(), state, sharing)
        for sid, seq, record in cursors[1]:
            session_id = bytes(sid).decode("utf-8")
            event = records.decode_record(records.EVENT_DECODER, session_id, seq, record)
            facts[session_id].known[event.id] = event
        for sid, seq, kind, parent, answered in cursors[2]:
            session_facts = facts[bytes(sid).decode("utf-8")]
            session_facts.rows[seq] = StoredRow(kind, parent)
            if answered:
                session_facts.answered.add(seq)
        for sid, key, raw in cursors[3]:
            session_id = bytes(sid).decode("utf-8")
            state_key = share_of[(bytes(sid), bytes(key))]
            facts[session_id].sharing[state_key] = records.decode_state(session_id, raw)
        return facts

    def put(self, plans: Sequence[WritePlan]) -> None:
        """Write ``plans`` with one statement: events, replies, sharing, streams, notice."""
        events: list[list[Any]] = [[], [], [], [], [], [], []]
        replies: list[list[Any]] = [[], [], []]
        shares: dict[tuple[bytes, bytes], bytes] = {}
        streams: dict[bytes, list[Any]] = {}  # sid -> [last, texts, state, last activity]
        for plan in plans:
            write = plan.write
            sid = utf8(write.session_id)
            for event in plan.new:
                for column, value in zip(events, _row(sid, event), strict=True):
                    column.append(value)
            for root, reply in plan.first_replies.items():
                for column, value in zip(replies, (sid, root, reply), strict=True):
                    column.append(value)
            if plan.new:
                stream = streams.setdefault(sid, [0, 0, None, None])
                stream[0], stream[3] = plan.new[-1].sequence, plan.new[-1].timestamp
                stream[1] += plan.texts
                if plan.state is not None:
                    stream[2] = records.ENCODER.encode(plan.state)
            if plan.sharing is not None:
                assert write.share is not None
                key = records.sharing_key(b"", write.share.viewer, plan.sharing.conversation)
                shares[(sid, key)] = records.ENCODER.encode(plan.sharing)
            guarded = write.expected_version is not None or write.unless_stored is not None
            if self.probe is None and (guarded or write.share is not None):
                self.probe = self._probe_of(sid, plan)
                self.guarded_session = write.session_id
        payloads: list[str] = []
        for sid, (last, *_) in streams.items():
            notice = f"{last}:{sid.hex()}"
            if payloads and len(payloads[-1]) + len(notice) < _PAYLOAD:
                payloads[-1] += " " + notice
            else:
                payloads.append(notice)
        columns = [list(c) for c in zip(*streams.values(), strict=True)] or [[], [], [], []]
        params: list[Any] = [
            *events,
            *replies,
            [sid for sid, _ in shares],
            [key for _, key in shares],
            list(shares.values()),
            list(streams),
            *columns,
            self._channel,
            payloads,
        ]
        self._conn.execute(self._sql.put, params)

    def _probe_of(self, sid: bytes, plan: WritePlan) -> Probe:
        if plan.new:
            first = plan.new[0]
            key, value = records.event_id_key(b"", first.id), records.ENCODER.encode(first)
            return Probe(self._sql.probe_event, sid, key, value)
        assert plan.sharing is not None and plan.write.share is not None
        key = records.sharing_key(b"", plan.write.share.viewer, plan.sharing.conversation)
        return Probe(self._sql.get_sharing, sid, key, records.ENCODER.encode(plan.sharing))


def _row(sid: bytes, event: Event) -> tuple[Any, ...]:
    """Return the ``events`` columns of ``event``, a planned new event (its sequence set)."""
    return (
        sid,
        event.sequence,
        records.event_id_key(b"", event.id),
        type(event.body).__name__,
        event.parent,
        None if event.run_id is None else records.run_index_key(b"", event.run_id),
        records.ENCODER.encode(event),
    )
