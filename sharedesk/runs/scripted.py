"""ScriptedAdapter: a deterministic adapter for tests, demos and benchmarks."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from sharedesk.protocol.authors import Agent, SessionAuthor
from sharedesk.protocol.errors import ValidationError
from sharedesk.protocol.events import Event, RunStarted, Text
from sharedesk.protocol.validation import check_author
from sharedesk.runs.types import AdapterResult, Emit, Run, ScriptedCall, Session


class ScriptedAdapter:
    """Answers each run with its next scripted reply and records every call. Thread-safe.

    Each reply is a ``Text`` by ``author``. With ``native_continuation=True``, a run not
    continued natively opens a provider session by emitting
    ``RunStarted(provider=name, provider_session_id="<name>-<12 hex>")``.

    Attributes:
        name: The provider name (``RunStarted.provider``).
        author: The participant its replies are written by (default ``Agent`` ``name``).
        native_continuation: Whether it continues its own provider sessions.
    """

    def __init__(
        self,
        replies: Sequence[str],
        *,
        name: str = "scripted",
        native_continuation: bool = False,
        author: SessionAuthor | None = None,
    ) -> None:
        """Create the adapter with its ``replies``, one per run, in order."""
        if isinstance(replies, str) or not all(isinstance(r, str) for r in replies):
            raise ValidationError("replies must be a sequence of str")
        if not isinstance(name, str) or not name:
            raise ValidationError("name must be a non-empty str")
        self.name = name
        self.author: SessionAuthor = (
            Agent(id=name, label=name) if author is None else check_author(author)
        )
        self.native_continuation = bool(native_continuation)
        self._replies = list(replies)
        self._lock = threading.Lock()
        self._calls: list[ScriptedCall] = []

    @property
    def calls(self) -> list[ScriptedCall]:
        """A copy of the calls received so far, oldest first."""
        with self._lock:
            return list(self._calls)

    def execute(
        self, run: Run, session: Session, emit: Emit, opts: Mapping[str, Any]
    ) -> AdapterResult:
        """Record the call, emit the next reply as a ``Text`` and return it as the output.

        Raises ``ValidationError`` when no reply is left. Cost: one or two emits.
        """
        transcript = session.context.get("transcript")
        with self._lock:
            self._calls.append(
                ScriptedCall(input=list(run.input), transcript=transcript, opts=dict(opts))
            )
            if not self._replies:
                raise ValidationError(
                    f"scripted adapter {self.name!r} has no reply left for call {len(self._calls)}"
                )
            reply = self._replies.pop(0)
        if self.native_continuation:
            stored = session.metadata.get("provider_sessions", {}).get(self.name, {})
            continued = stored.get("provider_session_id")
            if session.context.get("continuation") != "native" or not continued:
                fresh = f"{self.name}-{uuid.uuid4().hex[:12]}"
                emit(Event(self.author, RunStarted(provider=self.name, provider_session_id=fresh)))
        emit(Event(self.author, Text(reply)))
        return AdapterResult(output=reply)
