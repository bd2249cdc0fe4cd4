"""``python -m bench.web_child URL PAGES ROWS``: open pages following one desk's event stream.

A child of ``python -m bench web``: opens ``PAGES`` server-sent-event streams at ``URL``
(plain asyncio streams, one connection each: the instrument must cost the machine less
than what it measures), prints ``ready`` once every stream is open, then reads until each
stream has had ``ROWS`` rows, and prints one JSON line: the post-to-page latency of
every row on every page, in nanoseconds. A row's content starts with
``t=<perf_counter_ns>`` of its post; ``perf_counter`` is the system-wide monotonic clock
on Linux, so the parent's and the child's readings compare.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from urllib.parse import urlsplit

#: A row's post time, as the agents write it first in its content.
POSTED = re.compile(rb'"content":"t=(\d+)')
ROW = b"event: row\n"


async def _page(
    url: str, rows: int, opened: asyncio.Event, left: list[int], out: list[int]
) -> None:
    try:
        await _follow(url, rows, opened, left, out)
    except BaseException:
        opened.set()  # the parent hears of the failure instead of waiting for "ready"
        raise


async def _follow(
    url: str, rows: int, opened: asyncio.Event, left: list[int], out: list[int]
) -> None:
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    writer.write(f"GET {target} HTTP/1.1\r\nHost: {parts.netloc}\r\n\r\n".encode())
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(head.decode(errors="replace"))
    left[0] -= 1
    if left[0] == 0:
        opened.set()
    seen, carry = 0, b""
    while seen < rows:
        data = await reader.read(1 << 16)
        if not data:
            raise RuntimeError(f"the stream ended after {seen} rows")
        now = time.perf_counter_ns()
        data = carry + data
        cut = data.rfind(b"\n\n") + 2  # whole events only; the rest waits
        whole, carry = data[:cut], data[cut:]
        seen += whole.count(ROW)
        out.extend([now - int(posted) for posted in POSTED.findall(whole)])
    writer.close()


async def _main(url: str, pages: int, rows: int) -> list[int]:
    out: list[int] = []
    opened = asyncio.Event()
    left = [pages]
    tasks = [asyncio.create_task(_page(url, rows, opened, left, out)) for _ in range(pages)]
    await opened.wait()
    print("ready", flush=True)
    await asyncio.gather(*tasks)
    return out


if __name__ == "__main__":
    latencies = asyncio.run(_main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
    print(json.dumps(latencies), flush=True)
