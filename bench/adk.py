"""``adk``: Google ADK's session services next to ``DeskSessionService``, in one run.

Three systems, durable on both sides (the desk on LMDB with fsync'd commits; ADK's
``SqliteSessionService`` and ``DatabaseSessionService`` on ``sqlite+aiosqlite``, both
files with SQLite's default, synchronous commits):

- ``append_event`` from ``--sessions`` (default 100) concurrent sessions, one coroutine
  each, ``--events`` events per session; a ``StaleSessionError`` or a locked database
  counts as a failed call (reported), never as a success;
- ``get_session(num_recent_events=20)`` on one session of ``--long`` events (default
  20,000) and on one of ``--short`` (default 200), ``--reads`` calls each: the desk
  against ``DatabaseSessionService``, and the desk's long/short ratio (flat: <= 1.5x).
  Setup is not timed: the desk's session is written by the service itself on a hub with
  relaxed durability (then reopened durable); the database's events are inserted in
  one transaction through ADK's own storage schema, as its ``append_event`` stores them;
- ``list_sessions`` for one user among ``--list-sessions`` sessions (default 5,000) of
  ``--users`` users (default 50), ``--reads`` calls: the desk against
  ``DatabaseSessionService``; the desk's listing is also read in pages of 100.

``get_session`` rebuilds ADK events from stored JSON (pydantic validation); the time
that validation takes per 20 events is measured alone, and reported with its share of
the desk's ``get_session`` on the long session.

Targets: append >= 5x the faster of the two ADK services; get_session >= 10x
``DatabaseSessionService`` and long/short <= 1.5x; list_sessions >= 10x.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.harness import BenchRun
from bench.options import Option, settle
from bench.report import Target, measurement, ratio_target, timed_calls

NAME = "adk"
HELP = "Google ADK: DeskSessionService vs SqliteSessionService and DatabaseSessionService"

APP = "bench"


OPTIONS = (
    Option("--sessions", 100, "concurrent appending sessions", quick=10),
    Option("--events", 20, "events per appending session", quick=3),
    Option("--long", 20_000, "events of the long session", quick=200),
    Option("--short", 200, "events of the short session", quick=20),
    Option("--reads", 200, "timed calls per read measurement", quick=10),
    Option("--list-sessions", 5000, "sessions for list_sessions", quick=50),
    Option("--users", 50, "users those sessions belong to", quick=5),
)


def _event(i: int, text: str = "") -> Any:
    from google.adk.events.event import Event
    from google.genai import types

    part = types.Part(text=text or f"message {i}: " + "x" * 80)
    return Event(author="user", content=types.Content(role="user", parts=[part]))


async def _appends(service: Any, sessions: int, events: int) -> tuple[int, int, float, list[int]]:
    """Append from ``sessions`` concurrent sessions; return (ok, failed, seconds, latencies)."""
    made = [
        await service.create_session(app_name=APP, user_id=f"u{i % 10}") for i in range(sessions)
    ]
    latencies: list[int] = []
    failed = 0

    async def writer(session: Any) -> None:
        nonlocal failed
        for i in range(events):
            t0 = time.perf_counter_ns()
            try:
                await service.append_event(session, _event(i))
            except Exception:  # stale or locked: a failed call, not a success
                failed += 1
                fresh = await service.get_session(
                    app_name=APP, user_id=session.user_id, session_id=session.id
                )
                session = fresh if fresh is not None else session
                continue
            latencies.append(time.perf_counter_ns() - t0)

    start = time.perf_counter()
    await asyncio.gather(*(writer(s) for s in made))
    return len(latencies), failed, time.perf_counter() - start, latencies


async def _timed(call: Callable[[], Awaitable[Any]], count: int) -> list[int]:
    await call()  # warm
    latencies: list[int] = []
    for _ in range(count):
        t0 = time.perf_counter_ns()
        await call()
        latencies.append(time.perf_counter_ns() - t0)
    return latencies


async def _fill_desk(path: Path, events: dict[str, int], list_sessions: int, users: int) -> None:
    """Write the read scenarios' sessions on a relaxed hub (setup, not timed)."""
    from sharedesk import AsyncHub
    from sharedesk.integrations.google_adk import DeskSessionService

    async with AsyncHub.open(path, durability="relaxed") as hub:
        service = DeskSessionService(hub)
        for session_id, count in events.items():
            session = await service.create_session(
                app_name=APP, user_id="reader", session_id=session_id
            )
            for i in range(count):
                await service.append_event(session, _event(i))
        await _fill_listing(service, list_sessions, users)


async def _fill_listing(service: Any, sessions: int, users: int) -> None:
    for start in range(0, sessions, 100):
        await asyncio.gather(
            *(
                service.create_session(app_name=APP, user_id=f"lister{i % users}", state={"n": i})
                for i in range(start, min(sessions, start + 100))
            )
        )


async def _fill_database(
    service: Any, events: dict[str, int], list_sessions: int, users: int
) -> None:
    """Insert the read scenarios' events through ADK's own schema, in one transaction."""
    for session_id, count in events.items():
        session = await service.create_session(
            app_name=APP, user_id="reader", session_id=session_id
        )
        schema = service._get_schema_classes()
        async with service.database_session_factory() as sql:
            base = time.time()
            for i in range(count):
                event = _event(i)
                event.timestamp = base + i * 1e-3
                sql.add(schema.StorageEvent.from_event(session, event))
            await sql.commit()
    for i in range(list_sessions):  # sequential: the service serialises them anyway
        await service.create_session(app_name=APP, user_id=f"lister{i % users}", state={"n": i})


def run(run_: BenchRun, args: argparse.Namespace) -> None:
    args = settle(args, OPTIONS, run_.quick)
    try:
        from google.adk.sessions.base_session_service import GetSessionConfig
        from google.adk.sessions.database_session_service import DatabaseSessionService
        from google.adk.sessions.sqlite_session_service import SqliteSessionService
    except ImportError as missing:
        run_.note(f"google-adk or sqlalchemy not installed ({missing}): the adk scenario skipped")
        return
    from sharedesk import AsyncHub
    from sharedesk.integrations.google_adk import DeskSessionService

    recent = GetSessionConfig(num_recent_events=20)
    lengths = {"long": args.long, "short": args.short}

    async def scenario() -> None:
        # -- append_event from concurrent sessions ------------------------------------
        desk_dir = run_.fresh_dir("adk-desk")
        async with AsyncHub.open(desk_dir / "append") as hub:
            with run_.progress("adk desk append_event", 1) as advance:
                figures = await _appends(DeskSessionService(hub), args.sessions, args.events)
                advance(1)
        _record_append(run_, "desk", figures, args.sessions)
        sqlite_dir = run_.fresh_dir("adk-sqlite")
        with run_.progress("adk SqliteSessionService append_event", 1) as advance:
            figures = await _appends(
                SqliteSessionService(str(sqlite_dir / "s.db")), args.sessions, args.events
            )
            advance(1)
        _record_append(run_, "sqlite", figures, args.sessions)
        db_dir = run_.fresh_dir("adk-database")
        database = DatabaseSessionService(f"sqlite+aiosqlite:///{db_dir / 'append.db'}")
        try:
            with run_.progress("adk DatabaseSessionService append_event", 1) as advance:
                figures = await _appends(database, args.sessions, args.events)
                advance(1)
        finally:
            await database.close()
        _record_append(run_, "database", figures, args.sessions)

        # -- reads ----------------------------------------------------------------------
        with run_.progress("adk setup: desk sessions (relaxed, untimed)", 1) as advance:
            await _fill_desk(desk_dir / "reads", lengths, args.list_sessions, args.users)
            advance(1)
        database = DatabaseSessionService(f"sqlite+aiosqlite:///{db_dir / 'reads.db'}")
        try:
            with run_.progress("adk setup: database sessions (untimed)", 1) as advance:
                await _fill_database(database, lengths, args.list_sessions, args.users)
                advance(1)
            async with AsyncHub.open(desk_dir / "reads") as hub:
                desk = DeskSessionService(hub)
                services: list[tuple[str, Any]] = [("desk", desk), ("database", database)]
                for system, service in services:
                    for name in lengths:
                        latencies = await _timed(
                            functools.partial(
                                service.get_session,
                                app_name=APP,
                                user_id="reader",
                                session_id=name,
                                config=recent,
                            ),
                            args.reads,
                        )
                        _record_read(run_, system, f"get_session {name}", latencies, lengths[name])
                    latencies = await _timed(
                        functools.partial(service.list_sessions, app_name=APP, user_id="lister0"),
                        args.reads,
                    )
                    _record_read(run_, system, "list_sessions", latencies, args.list_sessions)
                latencies = await _timed(
                    lambda: desk.list_sessions(app_name=APP, user_id="lister0", page_size=100),
                    args.reads,
                )
                _record_read(run_, "desk", "list_sessions page 100", latencies, args.list_sessions)
                got = await desk.get_session(
                    app_name=APP, user_id="reader", session_id="long", config=recent
                )
                assert got is not None
                _record_validation(run_, got.events, args.reads)
        finally:
            await database.close()

    asyncio.run(scenario())
    _targets(run_)


def _label(system: str, what: str) -> str:
    return f"adk {system} {what}"


def _record_append(
    run_: BenchRun, system: str, figures: tuple[int, int, float, list[int]], sessions: int
) -> None:
    ok, failed, seconds, latencies = figures
    run_.figures[f"adk {system} append failed calls"] = failed
    run_.measurements.append(
        measurement(
            scenario=NAME,
            system=system,
            operation="append_event",
            label=_label(system, f"append_event c={sessions}"),
            ops=ok,
            seconds=seconds,
            latencies_ns=latencies,
            params={"sessions": sessions, "failed": failed},
            note="one coroutine per session; failed calls (stale, locked) not counted",
        )
    )


def _record_read(run_: BenchRun, system: str, what: str, latencies: list[int], size: int) -> None:
    run_.measurements.append(
        timed_calls(
            scenario=NAME,
            operation=what.split()[0],
            label=_label(system, what),
            latencies_ns=latencies,
            system=system,
            params={"size": size},
            note="one call at a time",
        )
    )


def _record_validation(run_: BenchRun, events: list[Any], count: int) -> None:
    """Time pydantic's rebuilding of 20 ADK events from their JSON, alone."""
    from google.adk.events.event import Event

    dumped = [e.model_dump(mode="json", exclude_none=True) for e in events]
    latencies: list[int] = []
    for _ in range(count):
        t0 = time.perf_counter_ns()
        for data in dumped:
            Event.model_validate(data)
        latencies.append(time.perf_counter_ns() - t0)
    run_.measurements.append(
        timed_calls(
            scenario=NAME,
            operation="validate",
            label=_label("pydantic", f"Event.model_validate x{len(dumped)}"),
            latencies_ns=latencies,
            system="google-adk",
            note="the part of get_session that rebuilds ADK events from JSON",
        )
    )


def _targets(run_: BenchRun) -> None:
    desk_rate = run_.rate(_label("desk", f"append_event c={_sessions(run_)}"))
    rates = {
        name: run_.rate(_label(name, f"append_event c={_sessions(run_)}"))
        for name in ("sqlite", "database")
    }
    faster = max(rates, key=lambda n: rates[n] or 0.0)
    names = {"sqlite": "SqliteSessionService", "database": "DatabaseSessionService"}
    run_.targets.append(
        ratio_target(
            name="adk-append-vs-faster-adk-service",
            claim="desk append_event, concurrent sessions",
            numerator=desk_rate,
            denominator=rates[faster],
            baseline=f"ADK {names[faster]}",
            bound=5.0,
            at_least=True,
            what="events/s",
        )
    )
    for name, what, bound in (
        ("adk-get-session-vs-database", "get_session long", 10.0),
        ("adk-list-sessions-vs-database", "list_sessions", 10.0),
    ):
        run_.targets.append(
            ratio_target(
                name=name,
                claim=f"desk {what}",
                numerator=run_.median(_label("database", what)),
                denominator=run_.median(_label("desk", what)),
                baseline="ADK DatabaseSessionService (median µs, theirs over ours)",
                bound=bound,
                at_least=True,
                what="µs",
            )
        )
    long_us, short_us = (run_.median(_label("desk", f"get_session {n}")) for n in ("long", "short"))
    validation_us = run_.median(_label("pydantic", "Event.model_validate x20"))
    if long_us and validation_us:
        run_.figures[
            "adk desk get_session long: share of pydantic validation "
            "(Event.model_validate x20 median over get_session long median)"
        ] = round(validation_us / long_us, 3)
    run_.targets.append(
        Target(
            name="adk-get-session-flat",
            claim="desk get_session(num_recent_events=20): long session over short",
            value=None if not long_us or not short_us else long_us / short_us,
            bound=1.5,
            at_least=False,
            detail=f"{long_us} / {short_us} µs median",
            baseline="the desk's short session",
        )
    )


def _sessions(run_: BenchRun) -> int:
    for m in run_.measurements:
        if m.label.startswith("adk desk append_event c="):
            return int(m.label.rsplit("=", 1)[1])
    return 0
