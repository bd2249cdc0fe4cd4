"""The rules of a run, as pure functions: what it writes, how it folds back, what it accepts.

* A session and its runs are never stored as records: their state is folded from events.
  Every event of a run carries its ``run_id``.
* A run id is ``"<32 hex>@<session_id>"``, so a run is found in O(1) through the store
  port. Its lifecycle events get ids derived from the hex part (``<hex>.input.<i>``,
  ``<hex>.started``, ``<hex>.finished``): the store keeps the first ``<hex>.finished``
  and returns it to any later writer, so a cancel racing a timeout or a completion has
  exactly one winner, and every loser learns who won (the ``writer`` token).
"""

from __future__ import annotations

import inspect
import itertools
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, TypedDict

import msgspec

from sharedesk.protocol.authors import Agent, Operator, SessionAuthor, System
from sharedesk.protocol.errors import RunNotFound, ValidationError
from sharedesk.protocol.events import Event, RunFinished, RunStarted, Text, TextDelta
from sharedesk.protocol.sessions import SessionState
from sharedesk.protocol.validation import check_author, check_optional_int
from sharedesk.runs.types import CONTINUATION_MODES, CONTINUATION_OPTS, Run, Session

NO_OPTS: Final[Mapping[str, Any]] = MappingProxyType({})
#: Author of the lifecycle events the executors write.
LIFECYCLE_AUTHOR: Final = System(kind="run", label="sharedesk")
#: Author of ``SessionStarted``.
SESSION_AUTHOR: Final = System(kind="session", label="sharedesk")
#: The default author of a run's input rows.
OPERATOR: Final = Operator()
#: Author of input rows with role ``"system"``.
SYSTEM_PROMPT_AUTHOR: Final = System(kind="prompt", label="system")
#: A buffered ``TextDelta`` older than this (seconds) is appended with the next emit.
STREAM_FLUSH_S: Final = 0.05
#: Most ``TextDelta`` chunks buffered before they are appended.
STREAM_FLUSH_CHUNKS: Final = 1024

_HEX_LEN: Final = 32
_INPUT_ROLES: Final = frozenset({"user", "system"})


def new_run_id(session_id: str) -> str:
    """Return a fresh run id of ``session_id``: ``"<32 hex>@<session_id>"``."""
    return f"{uuid.uuid4().hex}@{session_id}"


def parse_run_id(run_id: Any) -> tuple[str, str]:
    """Split a run id into its hex part and its session id (``RunNotFound`` if malformed)."""
    if not isinstance(run_id, str) or len(run_id) <= _HEX_LEN + 1 or run_id[_HEX_LEN] != "@":
        raise RunNotFound(str(run_id))
    hexid, session_id = run_id[:_HEX_LEN], run_id[_HEX_LEN + 1 :]
    if any(c not in "0123456789abcdef" for c in hexid):
        raise RunNotFound(run_id)
    return hexid, session_id


def lifecycle_id(run_id: str, name: str) -> str:
    """Return the id of the run's event ``name`` (``input.<i>``, ``started``, ``finished``)."""
    return f"{parse_run_id(run_id)[0]}.{name}"


def input_events(run_id: str, input: Any, author: Any) -> list[Event]:
    """Return the input rows of a new run (see ``SessionManager.start_run``)."""
    asker = check_author(author)
    if isinstance(input, str):
        input = [{"role": "user", "content": input}]
    if not isinstance(input, Sequence) or isinstance(input, bytes) or not input:
        raise ValidationError(
            "input must be a str or a non-empty list of {'role', 'content'} dicts, "
            f"got {type(input).__name__}"
        )
    events: list[Event] = []
    for index, item in enumerate(input):
        where = f"input[{index}]"
        if not isinstance(item, Mapping) or set(item) != {"role", "content"}:
            raise ValidationError(f"{where} must be a mapping with exactly 'role' and 'content'")
        role, content = item["role"], item["content"]
        if role not in _INPUT_ROLES:
            raise ValidationError(f"{where}.role must be 'user' or 'system', got {role!r}")
        if not isinstance(content, str):
            raise ValidationError(f"{where}.content must be a str, got {type(content).__name__}")
        writer = SYSTEM_PROMPT_AUTHOR if role == "system" else asker
        row_id = lifecycle_id(run_id, f"input.{index}")
        events.append(
            Event(writer, Text(content), id=row_id, run_id=run_id, metadata={"role": role})
        )
    return events


def fold_run(run_id: str, events: Sequence[Event]) -> Run | None:
    """Fold a run from events of its session, oldest first (``None``: no first input row)."""
    hexid, session_id = parse_run_id(run_id)
    first, started, finished = f"{hexid}.input.0", f"{hexid}.started", f"{hexid}.finished"
    inputs: list[dict[str, str]] = []
    seen_first = done = False
    status = "pending"
    provider = model = provider_session_id = error_code = error_message = None
    token_usage: dict[str, Any] = {}
    for event in events:
        if event.run_id != run_id:
            continue
        body = event.body
        seen_first = seen_first or event.id == first
        if event.id.startswith(f"{hexid}.input.") and isinstance(body, Text):
            role = event.metadata.get("role")
            inputs.append(
                {"role": role if role in _INPUT_ROLES else "user", "content": body.content}
            )
        elif isinstance(body, RunStarted):
            if event.id == started:
                provider, model = body.provider, body.model
                status = status if done else "running"
            if body.provider_session_id is not None:
                provider_session_id = body.provider_session_id
                model = body.model if body.model is not None else model
        elif isinstance(body, RunFinished) and event.id == finished:
            done, status = True, body.status
            error_code, error_message = body.error_code, body.error_message
            token_usage = dict(body.token_usage)
    if not seen_first:
        return None
    return Run(
        id=run_id,
        session_id=session_id,
        status=status,
        input=inputs,
        provider=provider,
        model=model,
        provider_session_id=provider_session_id,
        error_code=error_code,
        error_message=error_message,
        token_usage=token_usage,
    )


def session_of(session_id: str, state: SessionState) -> Session:
    """Return the :class:`Session` a folded :class:`SessionState` describes."""
    metadata = dict(state.metadata)
    metadata["provider_sessions"] = {
        provider: dict(entry) for provider, entry in state.provider_sessions.items()
    }
    status = "active" if state.open_runs else "idle"
    return Session(id=session_id, status=status, metadata=metadata, context={})


def coalesce_chunks(chunks: Sequence[Event]) -> list[Event]:
    """Join each run of consecutive ``TextDelta`` chunks that differ only in id and text.

    The joined event is the first chunk's with the texts in order: one stored row per
    flush, not one per chunk.
    """
    joined: list[Event] = []
    for _, group in itertools.groupby(chunks, lambda e: (e.author, e.run_id, e.parent, e.metadata)):
        first, *rest = group
        if rest:
            texts = [e.body.delta for e in (first, *rest) if isinstance(e.body, TextDelta)]
            first = msgspec.structs.replace(first, body=TextDelta("".join(texts)))
        joined.append(first)
    return joined


class ExecuteOptions(TypedDict, total=False):
    """The keyword options of an execution, as ``SessionManager.execute_run`` takes them."""

    continuation: str | bool
    continuation_opts: Mapping[str, Any] | None
    adapter_opts: Mapping[str, Any] | None


@dataclass(frozen=True, eq=False)
class RunOptions:
    """An execution's checked options (see :func:`check_options`)."""

    viewer: SessionAuthor  # the participant the adapter runs as (the replay's viewer)
    continuation: str | bool
    budget: dict[str, int | None]  # the checked ``continuation_opts``
    timeout: float | None  # ``adapter_opts["timeout"]`` in seconds
    opts: Mapping[str, Any]  # ``adapter_opts`` as the adapter receives them


def check_options(
    adapter: Any,
    *,
    sync: bool,
    continuation: Any = False,
    continuation_opts: Any = None,
    adapter_opts: Any = None,
) -> RunOptions:
    """Check an execution with ``adapter`` (driven by a sync executor when ``sync``).

    Raises ``ValidationError`` for what ``SessionManager.execute_run`` refuses.
    """
    # Explicit attribute checks: isinstance() against the runtime-checkable Protocol
    # costs about 90 us a call, a tenth of a whole run on MemoryStore.
    execute = getattr(adapter, "execute", None)
    if not (callable(execute) and hasattr(adapter, "native_continuation")):
        raise ValidationError(
            f"adapter must have name, native_continuation and execute; got {type(adapter).__name__}"
        )
    name = getattr(adapter, "name", None)
    if not isinstance(name, str) or not name:
        raise ValidationError(f"adapter.name must be a non-empty str, got {name!r}")
    if sync and inspect.iscoroutinefunction(execute):
        raise ValidationError(
            f"adapter {name!r} has a coroutine execute: run it with "
            "SessionManager.aexecute_run or arun_once"
        )
    author = getattr(adapter, "author", None)
    viewer = (
        Agent(id=name, label=name) if author is None else check_author(author, "adapter.author")
    )
    known = isinstance(continuation, str) and continuation in CONTINUATION_MODES
    if continuation is not False and not known:
        raise ValidationError(
            f"continuation must be False, 'auto', 'replay' or 'native', got {continuation!r}"
        )
    if continuation == "native" and not adapter.native_continuation:
        raise ValidationError(
            f"continuation='native' but adapter {name!r} cannot continue natively"
        )
    if continuation_opts is not None and not isinstance(continuation_opts, Mapping):
        raise ValidationError(
            f"continuation_opts must be a mapping, got {type(continuation_opts).__name__}"
        )
    budget = dict(continuation_opts or {})
    unknown = sorted(str(key) for key in budget if key not in CONTINUATION_OPTS)
    if unknown:
        raise ValidationError(
            f"continuation_opts has unknown keys {unknown}; allowed: {sorted(CONTINUATION_OPTS)}"
        )
    budget = {
        key: check_optional_int(f"continuation_opts[{key!r}]", v) for key, v in budget.items()
    }
    if adapter_opts is not None and not isinstance(adapter_opts, Mapping):
        raise ValidationError(f"adapter_opts must be a mapping, got {type(adapter_opts).__name__}")
    opts = NO_OPTS if adapter_opts is None else adapter_opts
    timeout = opts.get("timeout")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0
    ):
        raise ValidationError(
            f"adapter_opts['timeout'] must be a positive number of seconds, got {timeout!r}"
        )
    seconds = None if timeout is None else float(timeout)
    return RunOptions(viewer, continuation, budget, seconds, {} if opts is NO_OPTS else opts)


def plan_claim(
    run: Run, session: Session, adapter: Any, options: RunOptions
) -> tuple[Event, str | bool]:
    """Return the run's ``RunStarted`` (its claim, with a ``writer`` token) and the mode.

    ``"auto"`` is resolved here. The claim names the provider session continued (native
    only) and the adapter's ``model``, else for a native continuation the stored one.
    """
    stored = session.metadata.get("provider_sessions", {}).get(adapter.name, {})
    continued = stored.get("provider_session_id")
    mode = options.continuation
    if mode == "auto":
        mode = "native" if adapter.native_continuation and continued else "replay"
    model = getattr(adapter, "model", None)
    if not isinstance(model, str):
        model = stored.get("model") if mode == "native" else None
    provider_session = continued if mode == "native" else None
    body = RunStarted(provider=adapter.name, model=model, provider_session_id=provider_session)
    claim_id, token = lifecycle_id(run.id, "started"), {"writer": uuid.uuid4().hex}
    return Event(LIFECYCLE_AUTHOR, body, id=claim_id, run_id=run.id, metadata=token), mode
