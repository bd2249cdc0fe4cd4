"""Run one openai-agents baseline in its own process and print its figures as JSON.

``python -m bench.agents_child '{"kind": "append", ...}'`` (see
:func:`bench.baselines.run_agents_child`). A separate process keeps the library's
imports, event loops and per-thread connections out of the bench process.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench import baselines


def main(argv: list[str] | None = None) -> int:
    """Run the requested baseline; print ``{"ops", "seconds", "latencies_ns"}``."""
    request = json.loads((sys.argv[1:] if argv is None else argv)[0])
    path = Path(request["path"])
    if request["kind"] == "append":
        result = baselines.agents_appends(
            path,
            request["sessions"],
            threads=request["threads"],
            events=request["events"],
            payload=request["payload"],
            max_seconds=request["max_seconds"],
        )
        figures = {
            "ops": result.ops,
            "seconds": result.seconds,
            "latencies_ns": result.latencies_ns,
        }
    elif request["kind"] == "async_append":
        result = baselines.agents_async_appends(
            path,
            request["sessions"],
            coroutines=request["coroutines"],
            events=request["events"],
            payload=request["payload"],
            max_seconds=request["max_seconds"],
        )
        figures = {
            "ops": result.ops,
            "seconds": result.seconds,
            "latencies_ns": result.latencies_ns,
        }
    else:
        seconds, latencies = baselines.agents_reads(
            path, rows=request["rows"], repeat=request["repeat"], payload=request["payload"]
        )
        figures = {"ops": len(latencies), "seconds": seconds, "latencies_ns": latencies}
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
