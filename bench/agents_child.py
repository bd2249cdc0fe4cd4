"""Run one openai-agents baseline in its own process and print its figures as JSON.

``python -m bench.agents_child '{"kind": "append", ...}'`` (see
:func:`bench.baselines.run_agents_child`). A separate process keeps the library's
imports, event loops and per-thread connections out of the bench process.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench import baselines


def main(argv: list[str] | None = None) -> int:
    """Run the requested baseline; print ``{"ops", "seconds", "latencies_ns"}``."""
    request = json.loads((sys.argv[1:] if argv is None else argv)[0])
    path = Path(request["path"])
    if request["kind"] == "read":
        seconds, latencies = baselines.agents_reads(
            path, rows=request["rows"], repeat=request["repeat"], payload=request["payload"]
        )
        ops = len(latencies)
    else:
        common: dict[str, Any] = {
            "events": request["events"],
            "payload": request["payload"],
            "max_seconds": request["max_seconds"],
        }
        if request["kind"] == "append":
            result = baselines.agents_appends(
                path, request["sessions"], threads=request["threads"], **common
            )
        else:
            result = baselines.agents_async_appends(
                path, request["sessions"], coroutines=request["coroutines"], **common
            )
        ops, seconds, latencies = result.ops, result.seconds, result.latencies_ns
    print(json.dumps({"ops": ops, "seconds": seconds, "latencies_ns": latencies}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
