"""SessionManager: the façade of the runs layer (sessions and runs as folds over events).

The rules are in :mod:`sharedesk.runs.rules`, the executors in :mod:`sharedesk.runs.execute`
and :mod:`sharedesk.runs.aio`; this module checks a call's options and hands it on.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final, Unpack

from sharedesk.protocol.authors import SessionAuthor
from sharedesk.protocol.events import Event
from sharedesk.protocol.ports import EventStore
from sharedesk.runs import aio, execute, rules
from sharedesk.runs.rules import OPERATOR, ExecuteOptions
from sharedesk.runs.types import Adapter, RunResult

#: The input of a :meth:`SessionManager.compact_with` run.
SUMMARY_REQUEST: Final = (
    "Summarize this conversation so far for the participants who continue it: keep who "
    "said what, the decisions made and the questions still open."
)


def _start_once(store: Any, session_id: str | None, input: Any, author: SessionAuthor) -> str:
    if session_id is None:
        session_id = execute.start_session(store).id
    return execute.start_run(store, session_id, input, author=author).id


class SessionManager:
    """Sessions and runs over any store with the run-index port (every store, a ``Hub``).

    All methods are static: everything the manager knows it folds from the store. Every
    check of a call's arguments comes before its first write: a refused call writes nothing.
    """

    # The reads and writes of sessions and runs are the executor's (documented there).
    start_session = staticmethod(execute.start_session)
    get_session = staticmethod(execute.get_session)
    start_run = staticmethod(execute.start_run)
    get_run = staticmethod(execute.get_run)
    cancel_run = staticmethod(execute.cancel_run)

    @staticmethod
    def execute_run(
        store: EventStore, adapter: Adapter, run_id: str, **options: Unpack[ExecuteOptions]
    ) -> RunResult:
        """Execute a pending run with ``adapter`` (on a worker thread), recording it as events.

        Args:
            store: The store (or Hub).
            adapter: The adapter.
            run_id: A pending run.
            continuation: ``False`` (default: no transcript); ``"replay"``: the session's
                other events as a transcript for the adapter's author, in
                ``session.context["transcript"]``; ``"native"``: the adapter continues
                ``session.metadata["provider_sessions"][adapter.name]``; ``"auto"``: native
                when the adapter can and a provider session is stored, else replay.
            continuation_opts: The replay's ``limit`` (newest events) and
                ``max_messages``, ``max_chars``, ``max_tokens_approx`` (ints or ``None``).
            adapter_opts: Passed to ``adapter.execute`` unchanged (``None``: ``{}``);
                ``"timeout"`` (seconds) bounds the run.

        Raises:
            ValidationError: Not an adapter (or one whose ``execute`` is a coroutine
                function), or bad options; nothing was written, the run stays pending.
            RunNotFound: No such run.
            RunStateError: The run is not pending (already executed or cancelled).
            RunTimeout: It overran ``adapter_opts["timeout"]``; its adapter is abandoned.
            RunFailed: The adapter raised (the ``__cause__``).
            RunCancelled: ``cancel_run`` cancelled it while it ran.

        Cost: a read of the run's own events, one session lookup, for a replay the newest
        events its budget needs; one append each for ``RunStarted``, each emitted event
        and ``RunFinished``; one state lookup every 5-100 ms. Blocks until the run ends.
        """
        checked = rules.check_options(adapter, sync=True, **options)
        return execute.execute_run(store, adapter, run_id, checked)

    @staticmethod
    def run_once(
        store: EventStore,
        adapter: Adapter,
        input: Any,
        *,
        session_id: str | None = None,
        author: SessionAuthor = OPERATOR,
        **options: Unpack[ExecuteOptions],
    ) -> RunResult:
        """Start a session (or continue ``session_id`` as it is), start a run and execute it.

        Arguments, errors and cost as :meth:`start_session` (new session only),
        :meth:`start_run` and :meth:`execute_run`, every argument checked before any write.
        """
        checked = rules.check_options(adapter, sync=True, **options)
        run_id = _start_once(store, session_id, input, author)
        return execute.execute_run(store, adapter, run_id, checked)

    @staticmethod
    async def aexecute_run(
        store: Any, adapter: Any, run_id: str, **options: Unpack[ExecuteOptions]
    ) -> RunResult:
        """:meth:`execute_run` for asyncio code, on a thread of its own: the loop stays free.

        ``store`` may be an ``AsyncHub``; ``adapter.aexecute`` (preferred) or ``execute``
        may be a coroutine function, handed a coroutine ``emit``. Raises as
        :meth:`execute_run`, and ``CancelledError`` when the awaiting task is cancelled
        (the run is then cancelled as by :meth:`cancel_run`).
        """
        checked = rules.check_options(adapter, sync=False, **options)
        return await aio.aexecute_run(store, adapter, run_id, checked)

    @staticmethod
    async def arun_once(
        store: Any,
        adapter: Any,
        input: Any,
        *,
        session_id: str | None = None,
        author: SessionAuthor = OPERATOR,
        **options: Unpack[ExecuteOptions],
    ) -> RunResult:
        """:meth:`run_once` for asyncio code (see :meth:`aexecute_run`), started off the loop."""
        checked = rules.check_options(adapter, sync=False, **options)
        sync = aio.sync_store(store)
        run_id = await asyncio.to_thread(_start_once, sync, session_id, input, author)
        return await aio.aexecute_run(sync, adapter, run_id, checked)

    @staticmethod
    def compact_with(
        hub: Any,
        adapter: Adapter,
        session_id: str,
        *,
        instructions: str = SUMMARY_REQUEST,
        **options: Unpack[ExecuteOptions],
    ) -> Event:
        """Ask ``adapter`` for a summary of the desk, as a run, then compact with it.

        The run (:meth:`run_once` on ``session_id``, ``continuation="replay"`` unless
        ``options`` say otherwise) gets ``instructions`` as its input and the desk as its
        transcript, read through any earlier summary. Its output (or last ``Text``) is
        the summary ``hub.compact`` appends, authored by the adapter's author (the
        compactor), through the run's last row; when others wrote during the run, through
        the desk's last sequence before it (the run's rows then stay above the summary).
        Returns the ``Compaction`` event; raises what :meth:`run_once` and
        ``hub.compact`` raise (a blank output: ``ValidationError``, nothing compacted).
        """
        checked = rules.check_options(adapter, sync=True, **{"continuation": "replay", **options})
        through = hub.last_sequence(session_id)
        run_id = _start_once(hub, session_id, instructions, OPERATOR)
        output = execute.execute_run(hub, adapter, run_id, checked).output
        since = hub.read(session_id, after=through)
        if all(event.run_id == run_id for event in since):  # nobody else wrote meanwhile
            through = since[-1].sequence
        compaction: Event = hub.compact(session_id, output, through=through, author=checked.viewer)
        return compaction
