"""A host process always ends: without ``close()``, after an error, on Ctrl-C or SIGTERM.

Each case runs a small script in a fresh interpreter (a hang there fails the test by its
timeout instead of hanging the suite) and checks how it ended and what is on disk.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from sharedesk import Event, Hub, LmdbStore, Person, Text
from tests.faults.counting import FaultCounter
from tests.faults.test_lmdb_processes import ANNOUNCING, LOCK_HOLDER_CHILD

ROOT = Path(__file__).resolve().parents[2]
#: A script that has not ended by then hangs (each ends in well under a second or two).
HANG = 60.0

OPEN_AND_USE = """
from sharedesk import Agent, Hub, Person
hub = Hub.open({path!r}, idle_timeout=30.0)
ana, bot = Person(id="ana", label="Ana"), Agent(id="bot", label="Bot")
hub.session("desk").post(ana, "hello")
hub.view("desk", bot)
turn = hub.turn("desk", bot)
turn.commit("hi ana")
"""

ASYNC_OPEN_AND_USE = """
import asyncio
from sharedesk import Agent, AsyncHub, Person

async def main():
    hub = await AsyncHub.open({path!r})
    await hub.post("desk", Person(id="ana", label="Ana"), "hello")
    await hub.view("desk", Agent(id="bot", label="Bot"))

asyncio.run(main())
"""

BLOCKED_IN_THE_HUB = """
import threading
from sharedesk import Hub, HubOptions, Person
from tests.actors.faults import FaultyStore

store = FaultyStore()
entered = threading.Event()
for method in ("read", "last_sequence"):
    store.gate[method] = threading.Event()  # never set: the actor's store call blocks
    store.entered[method] = entered
hub = Hub(store, HubOptions(ask_timeout=600.0))
say = lambda: entered.wait() and print("blocked", flush=True)  # noqa: E731
threading.Thread(target=say, daemon=True).start()
hub.view("desk", Person(id="ana", label="Ana"))
"""

#: Posts ``hello`` (id ``post-1``) through a Hub on an existing store; its environment
#: prints ``waiting for the lock`` as the writer asks for LMDB's write lock.
POST_BEHIND_THE_LOCK = (
    ANNOUNCING
    + """
import sys
from sharedesk import Hub, LmdbStore, Person
hub = Hub(LmdbStore(sys.argv[1], environment=announcing))
hub.session("desk").post(Person(id="ana", label="Ana"), "hello", id="post-1")
"""
)

#: How soon a process must end after Ctrl-C, whatever it was waiting for.
CTRL_C_BOUND = 2.0


def start(script: str, cwd: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    try:
        out, err = process.communicate(timeout=HANG)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        raise AssertionError(f"the process hung; stderr: {err[-2000:]}") from None
    return process.returncode, out, err


def stored_texts(path: Path) -> list[str]:
    with LmdbStore(path) as store:
        return [getattr(e.body, "content", "") for e in store.read("desk")]


class TestAProcessThatNeverCallsClose:
    def test_it_exits_when_its_main_thread_ends(
        self, tmp_path: Path, fault_counter: FaultCounter
    ) -> None:
        path = tmp_path / "desk"
        code, _, err = finish(start(OPEN_AND_USE.format(path=str(path)), tmp_path))
        fault_counter.count("exit without close()")

        assert (0, "") == (code, err)

    def test_every_acknowledged_append_is_on_disk_afterwards(
        self, tmp_path: Path, fault_counter: FaultCounter
    ) -> None:
        path = tmp_path / "desk"
        finish(start(OPEN_AND_USE.format(path=str(path)), tmp_path))
        fault_counter.count("exit without close()")

        assert ["hello", "hi ana"] == stored_texts(path)

    def test_an_asyncio_program_that_never_closes_its_async_hub_exits(
        self, tmp_path: Path, fault_counter: FaultCounter
    ) -> None:
        path = tmp_path / "desk"
        code, _, err = finish(start(ASYNC_OPEN_AND_USE.format(path=str(path)), tmp_path))
        fault_counter.count("exit without close()")

        assert (0, "", ["hello"]) == (code, err, stored_texts(path))

    def test_it_exits_when_it_raises_after_a_view_and_a_turn(
        self, tmp_path: Path, fault_counter: FaultCounter
    ) -> None:
        script = OPEN_AND_USE.format(path=str(tmp_path / "desk")) + "\nraise SystemExit(3)\n"
        code, _, _ = finish(start(script, tmp_path))
        fault_counter.count("exit after an error")

        assert 3 == code

    def test_an_uncaught_exception_ends_it_with_its_traceback(
        self, tmp_path: Path, fault_counter: FaultCounter
    ) -> None:
        script = OPEN_AND_USE.format(path=str(tmp_path / "desk")) + "\n1 / 0\n"
        code, _, err = finish(start(script, tmp_path))
        fault_counter.count("exit after an error")

        assert (1, True) == (code, err.rstrip().endswith("ZeroDivisionError: division by zero"))


class TestAnInterruptedProcess:
    def test_ctrl_c_interrupts_a_caller_blocked_in_the_hub(
        self, tmp_path: Path, fault_counter: FaultCounter
    ) -> None:
        process = start(BLOCKED_IN_THE_HUB, tmp_path)
        assert process.stdout is not None
        assert "blocked\n" == process.stdout.readline()
        process.send_signal(signal.SIGINT)
        code, _, err = finish(process)
        fault_counter.count("Ctrl-C while blocked")

        # An uncaught KeyboardInterrupt ends Python by SIGINT itself, as a shell expects.
        assert (-signal.SIGINT, True) == (code, "KeyboardInterrupt" in err)

    def test_sigterm_ends_a_process_blocked_in_the_hub(
        self, tmp_path: Path, fault_counter: FaultCounter
    ) -> None:
        process = start(BLOCKED_IN_THE_HUB, tmp_path)
        assert process.stdout is not None
        assert "blocked\n" == process.stdout.readline()
        process.send_signal(signal.SIGTERM)
        code, _, _ = finish(process)
        fault_counter.count("SIGTERM while blocked")

        assert -signal.SIGTERM == code

    def test_ctrl_c_ends_a_post_waiting_for_another_process_write_lock_and_its_retry_is_exact(
        self, tmp_path: Path, fault_counter: FaultCounter
    ) -> None:
        path = tmp_path / "desk"
        ana = Person(id="ana", label="Ana")
        with LmdbStore(path) as store:
            store.append("desk", [Event(ana, Text("before"))])
        holder = start(LOCK_HOLDER_CHILD, tmp_path, str(path))
        assert holder.stdout is not None and holder.stdin is not None
        assert "holding\n" == holder.stdout.readline()
        poster = start(POST_BEHIND_THE_LOCK, tmp_path, str(path))
        assert poster.stdout is not None
        assert "waiting for the lock\n" == poster.stdout.readline()

        poster.send_signal(signal.SIGINT)
        try:
            poster.communicate(timeout=CTRL_C_BOUND)
        except subprocess.TimeoutExpired:
            poster.kill()
            poster.communicate()
            ended = False
        else:
            ended = True
        holder.communicate("go\n", timeout=HANG)
        fault_counter.count("Ctrl-C while the write lock is held elsewhere")
        with Hub.open(path) as hub:
            retried = hub.session("desk").post(ana, "hello", id="post-1")

        assert (True, -signal.SIGINT) == (ended, poster.returncode)
        assert ["before", "hello"] == stored_texts(path)
        assert ("post-1", 2) == (retried.id, retried.sequence)
