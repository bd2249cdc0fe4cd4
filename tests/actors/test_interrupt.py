"""Ctrl-C ends a process blocked in the Hub, even when the store's writer is stuck.

The child opens a Hub over a store whose writer is stuck (as one waiting for another
process's LMDB write lock is): its writes never complete, and its ``close`` waits for
the writer, as a real store's does. The child posts, the test sends SIGINT, and the
child must end: the wait in ``post`` is interrupted, and the exit hook gives the stuck
store at most its grace, never the writer's whole wait.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

CHILD = """
import threading

from sharedesk import Hub, MemoryStore, Person


class StuckStore(MemoryStore):
    def __init__(self):
        super().__init__()
        self.stuck = threading.Event()
        self.writer = threading.Thread(target=self.stuck.wait, daemon=True)
        self.writer.start()

    def submit(self, write, done):
        return done  # the writer never gets to it: nothing finishes the completion

    def append(self, *args, **kwargs):
        self.stuck.wait()

    def close(self):
        self.writer.join()  # waits for the stuck writer
        super().close()


hub = Hub(StuckStore())
print("ready", flush=True)
hub.session("desk").post(Person(id="ana", label="Ana"), "hello")
"""


class TestCtrlC:
    def test_ctrl_c_on_a_post_to_a_stuck_store_ends_the_process(self) -> None:
        root = Path(__file__).resolve().parents[2]
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD],
            env={**os.environ, "PYTHONPATH": str(root)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stdout is not None
            assert "ready" == child.stdout.readline().strip()
            child.send_signal(signal.SIGINT)
            _, err = child.communicate(timeout=5.0)  # a bound on the wait, not a timing
        finally:
            child.kill()
            child.wait()

        # The interrupt ends the wait in ``post`` itself: the traceback's last line, and no
        # other error first (an exit hook interrupted after a failed post proves nothing).
        last = err.rstrip().splitlines()[-1] if err.strip() else ""
        assert (True, "KeyboardInterrupt", False) == (
            child.returncode != 0,
            last,
            "Exception ignored" in err,
        )
