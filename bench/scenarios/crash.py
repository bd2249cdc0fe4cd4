"""``crash``: kill -9 a writer child over and over; count acknowledged, lost, duplicated.

Each cycle starts :mod:`bench.crash_child` on the same directory, lets it append from
several threads for a random moment, and kills it with SIGKILL. Every ``ack`` line it
printed is an append that returned, so a promise of durability. After each cycle the
store is reopened here and checked against every acknowledgement so far:

- lost: an acknowledged event id that is not stored, or stored at another sequence;
- duplicated: an event id stored more than once in a session;
- gaps: a session whose sequences are not exactly 1..last.

From the second cycle on, the child first appends :data:`RESEND` already acknowledged
ids again (a client retrying after the crash); each must be answered with its original
sequence and must not be stored twice.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.harness import BenchRun, open_store
from bench.options import Option, settle
from bench.report import Target, measurement

NAME = "crash"
HELP = "kill -9 loop of a writer child: acknowledged, lost, duplicated, gaps"

CHECKOUT = Path(__file__).resolve().parents[2]

#: Acknowledged ids the next child appends again before writing new events.
RESEND = 32


OPTIONS = (
    Option("--cycles", 10, "kill cycles", quick=2),
    Option("--threads", 4, "writer threads in the child", quick=2),
    Option("--sessions", 8, "sessions written", quick=3),
    Option("--via", "store", "child writes via the store or a Hub", choices=("store", "hub")),
    Option(
        "--durability",
        "durable",
        "child durability (default {default}; relaxed may lose acknowledged events)",
        choices=("durable", "relaxed"),
    ),
    Option("--seed", 11, "random seed"),
)


def _reader(stream: Any, acks: list[tuple[str, str, int]], ready: threading.Event) -> None:
    for line in stream:
        parts = line.split()
        if parts == ["ready"]:
            ready.set()
        elif len(parts) == 4 and parts[0] == "ack" and line.endswith("\n"):
            acks.append((parts[1], parts[2], int(parts[3])))


def _one_cycle(
    directory: Path, args: argparse.Namespace, lifetime: float, resend: Path | None
) -> tuple[list[tuple[str, str, int]], float, str]:
    """Run the child for ``lifetime`` seconds after it is ready, SIGKILL it, return acks."""
    command = [
        sys.executable,
        "-m",
        "bench.crash_child",
        str(directory),
        "--threads",
        str(args.threads),
        "--sessions",
        str(args.sessions),
        "--via",
        args.via,
        "--durability",
        args.durability,
        *(["--resend", str(resend)] if resend is not None else []),
    ]
    child = subprocess.Popen(
        command,
        cwd=CHECKOUT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    acks: list[tuple[str, str, int]] = []
    ready = threading.Event()
    reader = threading.Thread(target=_reader, args=(child.stdout, acks, ready), daemon=True)
    reader.start()
    try:
        if not ready.wait(timeout=30):
            raise RuntimeError("crash child did not start within 30 s")
        started = time.perf_counter()
        time.sleep(lifetime)
        os.kill(child.pid, signal.SIGKILL)
        alive = time.perf_counter() - started
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        reader.join(timeout=10)
    stderr = child.stderr.read() if child.stderr is not None else ""
    if child.stdout is not None:
        child.stdout.close()
    if child.stderr is not None:
        child.stderr.close()
    return acks, alive, stderr


def _check(
    directory: Path, acknowledged: dict[tuple[str, str], int], sessions: int
) -> dict[str, int]:
    """Reopen the store and compare it with every acknowledgement so far."""
    store = open_store(directory, "durable")
    try:
        lost = moved = duplicated = gaps = stored_total = 0
        stored: dict[tuple[str, str], int] = {}
        for k in range(sessions):
            session_id = f"crash-{k}"
            events = store.read(session_id)
            stored_total += len(events)
            if [e.sequence for e in events] != list(range(1, len(events) + 1)):
                gaps += 1
            ids = [e.id for e in events]
            duplicated += len(ids) - len(set(ids))
            for e in events:
                stored[(session_id, e.id)] = e.sequence or 0
        for key, sequence in acknowledged.items():
            found = stored.get(key)
            if found is None:
                lost += 1
            elif found != sequence:
                moved += 1
        return {
            "lost": lost,
            "moved": moved,
            "duplicated": duplicated,
            "gaps": gaps,
            "stored": stored_total,
        }
    finally:
        store.close()


def run(run_: BenchRun, args: argparse.Namespace) -> None:
    args = settle(args, OPTIONS, run_.quick)
    q = run_.quick
    rng = random.Random(args.seed)
    directory = run_.fresh_dir("crash") / "store"
    directory.mkdir()
    acknowledged: dict[tuple[str, str], int] = {}
    retried = retried_moved = 0
    alive_total = 0.0
    worst = {"lost": 0, "moved": 0, "duplicated": 0, "gaps": 0, "stored": 0}
    with run_.progress(f"kill -9 cycles ({args.via}, {args.durability})", args.cycles) as advance:
        for _ in range(args.cycles):
            lifetime = rng.uniform(0.1, 0.4) if q else rng.uniform(0.2, 1.2)
            resend = None
            if acknowledged:
                # A client retrying after the crash: some ids acknowledged before it.
                chosen = rng.sample(sorted(acknowledged), min(RESEND, len(acknowledged)))
                resend = directory.parent / "resend.txt"
                resend.write_text("".join(f"{s} {i}\n" for s, i in chosen))
            acks, alive, stderr = _one_cycle(directory, args, lifetime, resend)
            if not acks and stderr.strip():
                raise RuntimeError(f"crash child failed: {stderr.strip().splitlines()[-1]}")
            alive_total += alive
            for session_id, event_id, sequence in acks:
                known = acknowledged.get((session_id, event_id))
                if known is None:
                    acknowledged[(session_id, event_id)] = sequence
                else:
                    retried += 1
                    retried_moved += known != sequence
            found = _check(directory, acknowledged, args.sessions)
            for key in ("lost", "moved", "duplicated", "gaps"):
                worst[key] = max(worst[key], found[key])
            worst["stored"] = found["stored"]
            advance(1)

    run_.measurements.append(
        measurement(
            scenario=NAME,
            system="sharedesk",
            operation="append",
            label=f"crash child acknowledged appends ({args.via}, {args.durability})",
            ops=len(acknowledged),
            seconds=alive_total,
            params={"threads": args.threads, "sessions": args.sessions, "cycles": args.cycles},
            note="appends acknowledged while the child lived, across all cycles",
        )
    )
    run_.figures["crash cycles"] = args.cycles
    run_.figures["crash acknowledged / stored"] = f"{len(acknowledged)} / {worst['stored']}"
    run_.figures["crash ids re-sent after a restart / answered with another sequence"] = (
        f"{retried} / {retried_moved}"
    )
    run_.figures["crash lost / moved / duplicated / sessions with gaps"] = (
        f"{worst['lost']} / {worst['moved']} / {worst['duplicated']} / {worst['gaps']}"
    )
    for name, claim, value in (
        (
            "crash-acknowledged-kept",
            "acknowledged events lost or moved after kill -9 (retries included)",
            worst["lost"] + worst["moved"] + retried_moved,
        ),
        (
            "crash-no-duplicates-or-gaps",
            "events duplicated or sessions with gaps after kill -9",
            worst["duplicated"] + worst["gaps"],
        ),
    ):
        run_.targets.append(
            Target(
                name=name,
                claim=claim,
                value=float(value),
                bound=0.0,
                at_least=False,
                detail=f"{args.cycles} cycles, {len(acknowledged)} acknowledged",
                unit="",
            )
        )
