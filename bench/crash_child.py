"""The writer child of the ``crash`` scenario: append forever, print every acknowledgement.

``python -m bench.crash_child DIR --threads T --sessions S --via store|hub`` appends one
event per call from ``T`` threads over ``S`` sessions and prints ``ack SESSION ID SEQ``
(flushed) each time an append returns, until it is killed. It prints ``ready`` once the
store is open.

With ``--resend FILE`` (lines ``SESSION ID``) it first appends an event with each of
those ids again, as a client retrying after a crash would, and acknowledges each with the
sequence the store answered: an idempotent store answers the original one.
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path
from typing import Any


def main(argv: list[str] | None = None) -> int:
    """Run the writer until killed; returns only on a bad command line."""
    parser = argparse.ArgumentParser(prog="python -m bench.crash_child")
    parser.add_argument("dir", type=Path)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--via", choices=["store", "hub"], default="store")
    parser.add_argument("--durability", choices=["durable", "relaxed"], default="durable")
    parser.add_argument("--resend", type=Path, help="file of 'SESSION ID' lines to append again")
    args = parser.parse_args(argv)

    from bench.harness import open_hub, open_store
    from sharedesk import Agent, Event, Text, configure_logging

    configure_logging(level="warning")

    target: Any
    if args.via == "hub":
        target = open_hub(args.dir, args.durability)

        def append(session_id: str, events: list[Any]) -> list[Any]:
            result: list[Any] = target.session(session_id).append(events)
            return result
    else:
        target = open_store(args.dir, args.durability)
        append = target.append
    out_lock = threading.Lock()

    def writer(index: int) -> None:
        author = Agent(id=f"w{index}", label=f"writer {index}")
        j = 0
        while True:
            session_id = f"crash-{(index + j * args.threads) % args.sessions}"
            (stored,) = append(session_id, [Event(author, Text(f"w{index} #{j}"))])
            with out_lock:
                sys.stdout.write(f"ack {session_id} {stored.id} {stored.sequence}\n")
                sys.stdout.flush()
            j += 1

    workers = [threading.Thread(target=writer, args=(k,), daemon=True) for k in range(args.threads)]
    with out_lock:
        sys.stdout.write("ready\n")
        sys.stdout.flush()
    if args.resend is not None:
        retry = Agent(id="retry", label="retry")
        for line in args.resend.read_text().splitlines():
            session_id, event_id = line.split()
            (stored,) = append(session_id, [Event(retry, Text("retried"), id=event_id)])
            sys.stdout.write(f"ack {session_id} {stored.id} {stored.sequence}\n")
        sys.stdout.flush()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
