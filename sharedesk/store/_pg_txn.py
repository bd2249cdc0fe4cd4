"""A group's write transaction on PostgreSQL: two round trips, the facts and the write.

``facts`` sends ``BEGIN``, the lock of the sessions' ``streams`` rows (in session-id
order) and the reads the plans need as one simple-protocol message: each statement runs
on a fresh snapshot (read committed), so every read sees what the lock waited for. A
group holding sessions with no row yet creates them and sends the reads again. ``put``
only builds the write statement; ``commit`` sends it with ``COMMIT``, one message again.
The statements are prepared on the connection and planned once (``Queries.prepare``
sets generic plans: arrays of any length get the same plan); a message passes
their arguments as array literals of hex, numbers, class names and timestamps (nothing
to escape), so building one costs a ``hex()`` per value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, NamedTuple

import msgspec
import psycopg

from sharedesk.projection.append import Facts, SharingKey, StoredRow, Wants, WritePlan
from sharedesk.protocol import records
from sharedesk.protocol.views import Conversation, SharingState
from sharedesk.store._pg_schema import PUT_COMMIT, Queries

__all__ = ["GroupTxn", "Probe", "utf8"]

#: PostgreSQL takes notice payloads of up to 8000 bytes; a group's notices are split
#: into payloads of at most this many characters.
_PAYLOAD: Final = 7900


def utf8(value: str) -> bytes:
    return value.encode("utf-8")


def _bytea(values: Iterable[bytes | None]) -> str:
    r"""Return a ``bytea[]`` literal: ``E'{"\\\\x<hex>",NULL}'`` (E-string, then array escapes)."""
    items = ",".join("NULL" if v is None else f'"\\\\\\\\x{v.hex()}"' for v in values)
    return f"E'{{{items}}}'"


def _array(values: Iterable[object]) -> str:
    """Return an array literal of numbers, class names, timestamps or payloads (no escapes)."""
    items = ",".join("NULL" if v is None else f'"{v}"' for v in values)
    return f"'{{{items}}}'"


class Probe(NamedTuple):
    """A row one write stores, by which a later read tells whether it committed."""

    query: str  # selects the row's bytes by (session_id, key)
    sid: bytes
    key: bytes
    value: bytes


class GroupTxn:
    """One group's write transaction on ``conn`` (autocommit, outside a transaction)."""

    def __init__(self, conn: psycopg.Connection[Any], sql: Queries, channel: str) -> None:
        self._conn = conn
        self._sql = sql
        self._channel = channel
        self._write = ""
        #: A row a guarded write of the group stores (``None``: plain appends only).
        self.probe: Probe | None = None
        #: The session of that write.
        self.guarded_session = ""
        #: What planning in the transaction returned (its result once committed).
        self.result: Any = None
        #: Whether :meth:`commit` sent the ``COMMIT`` (and the server process running it).
        self.committing = False
        self.backend_pid = 0

    def facts(self, wants: Mapping[str, Wants]) -> dict[str, Facts]:
        """Begin, lock the sessions' rows, read the facts: one round trip (two for new rows).

        A read with no keys (no parent or sharing state wanted, say) is not sent.
        """
        ids: list[tuple[bytes, bytes]] = []
        parents: list[tuple[bytes, int]] = []
        shares: dict[tuple[bytes, bytes], SharingKey] = {}  # (sid, key) -> what it keys
        for session_id, want in wants.items():
            sid = utf8(session_id)
            ids += [(sid, records.event_id_key(b"", event_id)) for event_id in want.ids]
            parents += [(sid, parent) for parent in want.parents]
            for wanted in want.sharing:
                shares[(sid, records.sharing_key(b"", *wanted))] = wanted
        sids = _bytea(sorted(utf8(session_id) for session_id in wants))
        reads = f"EXECUTE sharedesk_lock({sids})"
        if ids:
            sessions, keys = zip(*ids, strict=True)
            reads += f"; EXECUTE sharedesk_known({_bytea(sessions)}, {_bytea(keys)})"
        if parents:
            sessions, seqs = zip(*parents, strict=True)
            reads += f"; EXECUTE sharedesk_parents({_bytea(sessions)}, {_array(seqs)})"
        if shares:
            sessions, keys = zip(*shares, strict=True)
            reads += f"; EXECUTE sharedesk_sharing({_bytea(sessions)}, {_bytea(keys)})"
        cursor = self._conn.execute(f"BEGIN; {reads}", prepare=False)
        cursor.nextset()  # past BEGIN
        streams = {bytes(sid): (last, raw) for sid, last, raw in cursor.fetchall()}
        if len(streams) < len(wants):  # new sessions: make their rows, read again
            cursor = self._conn.execute(f"EXECUTE sharedesk_create({sids}); {reads}")
            cursor.nextset()  # past the INSERT
            streams = {bytes(sid): (last, raw) for sid, last, raw in cursor.fetchall()}
        facts: dict[str, Facts] = {}
        for session_id, want in wants.items():
            last, raw = streams[utf8(session_id)]
            state = records.decode_session_state(session_id, raw if want.state else None)
            sharing: dict[tuple[str, Conversation], SharingState | None]
            sharing = dict.fromkeys(want.sharing)
            facts[session_id] = Facts(last, {}, {}, set(), state, sharing)
        for sid, seq, record in cursor.fetchall() if ids and cursor.nextset() else ():
            session_id = bytes(sid).decode("utf-8")
            event = records.decode_record(records.EVENT_DECODER, session_id, seq, record)
            facts[session_id].known[event.id] = event
        for sid, seq, kind, parent, answered in (
            cursor.fetchall() if parents and cursor.nextset() else ()
        ):
            session_facts = facts[bytes(sid).decode("utf-8")]
            session_facts.rows[seq] = StoredRow(kind, parent)
            if answered:
                session_facts.answered.add(seq)
        for sid, key, raw in cursor.fetchall() if shares and cursor.nextset() else ():
            session_id = bytes(sid).decode("utf-8")
            state_key = shares[(bytes(sid), bytes(key))]
            facts[session_id].sharing[state_key] = records.decode_state(session_id, raw)
        return facts

    def put(self, plans: Sequence[WritePlan]) -> None:
        """Build the statement writing ``plans`` and the notice; :meth:`commit` sends it."""
        events: list[list[Any]] = [[], [], [], [], [], [], []]
        replies: list[list[Any]] = [[], [], []]
        shares: dict[tuple[bytes, bytes], bytes] = {}
        streams: dict[bytes, list[Any]] = {}  # sid -> [last, texts, state, last activity]
        for plan in plans:
            write = plan.write
            sid = utf8(write.session_id)
            for event in plan.new:
                run_key = None if event.run_id is None else records.run_index_key(b"", event.run_id)
                row = (
                    sid,
                    event.sequence,
                    records.event_id_key(b"", event.id),
                    type(event.body).__name__,
                    event.parent,
                    run_key,
                    records.ENCODER.encode(event),
                )
                for column, value in zip(events, row, strict=True):
                    column.append(value)
            for root, reply in plan.first_replies.items():
                for column, item in zip(replies, (sid, root, reply), strict=True):
                    column.append(item)
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
        e, r, c = events, replies, columns
        self._write = PUT_COMMIT % (
            *(_bytea(e[0]), _array(e[1]), _bytea(e[2]), _array(e[3]), _array(e[4])),
            *(_bytea(e[5]), _bytea(e[6]), _bytea(r[0]), _array(r[1]), _array(r[2])),
            *(_bytea(sid for sid, _ in shares), _bytea(key for _, key in shares)),
            *(_bytea(shares.values()), _bytea(streams), _array(c[0]), _array(c[1])),
            *(_bytea(c[2]), _array(c[3]), f"'{self._channel}'", _array(payloads)),
        )

    def commit(self) -> None:
        """Send the write built by :meth:`put` (if any) and ``COMMIT``: one round trip."""
        self.backend_pid = self._conn.info.backend_pid
        self.committing = True
        self._conn.execute(self._write or "COMMIT", prepare=False)

    def _probe_of(self, sid: bytes, plan: WritePlan) -> Probe:
        if plan.new:
            first = plan.new[0]
            key, value = records.event_id_key(b"", first.id), records.ENCODER.encode(first)
            return Probe(self._sql.probe_event, sid, key, value)
        assert plan.sharing is not None and plan.write.share is not None
        key = records.sharing_key(b"", plan.write.share.viewer, plan.sharing.conversation)
        return Probe(self._sql.get_sharing, sid, key, records.ENCODER.encode(plan.sharing))

    def remove(self, session_id: str, through: int) -> int:
        """Delete the session's rows up to ``through`` (see ``WriteTxn.remove``)."""
        conn, sql, sid = self._conn, self._sql, utf8(session_id)
        conn.execute("BEGIN", prepare=False)
        row = conn.execute(sql.lock_stream, [sid]).fetchone()
        state = records.decode_session_state(session_id, None if row is None else row[0])
        if through <= state.archived_through:
            return 0
        bounds = [sid, state.archived_through, through]
        kinds = conn.execute(sql.remove_events, bounds).fetchall()
        conn.execute(sql.remove_replies, bounds)
        texts = sum(1 for (kind,) in kinds if kind == "Text")
        state = msgspec.structs.replace(state, archived_through=through)
        conn.execute(sql.retained, [records.ENCODER.encode(state), texts, sid])
        return len(kinds)
