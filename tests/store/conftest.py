"""Fixtures for the store tests: child Python processes that are always reaped."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Starts ``python -c CODE ARGS...`` (or ``-m MODULE``) with the repository on the path.
ChildFactory = Callable[..., "subprocess.Popen[bytes]"]


def child_env() -> dict[str, str]:
    """Return the environment of a child: the repository importable, output unbuffered."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.fixture(autouse=True)
def _no_store_thread_left_running() -> Iterator[None]:
    """Every store a test opens is closed by its end: no LMDB writer thread, and none of a
    PostgresStore's (pool, writer, listener, notifier, watchdog), outlives it."""
    before = set(threading.enumerate())
    yield
    leaked = [
        thread.name
        for thread in threading.enumerate()
        if thread not in before
        and thread.name.startswith(("sharedesk-lmdb-writer", "sharedesk-pg"))
    ]
    assert [] == leaked


@pytest.fixture
def spawn() -> Iterator[ChildFactory]:
    """Start child processes; any still running at teardown is killed and reaped."""
    children: list[subprocess.Popen[bytes]] = []

    def start(*args: str) -> subprocess.Popen[bytes]:
        child = subprocess.Popen(
            [sys.executable, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=child_env(),
            cwd=ROOT,
        )
        children.append(child)
        return child

    yield start
    for child in children:
        if child.poll() is None:
            child.kill()
        child.communicate()


def run_child(spawn: ChildFactory, code: str, *args: str, timeout: float = 60) -> str:
    """Run ``code`` in a child Python to completion and return its stdout.

    Raises:
        AssertionError: The child failed; its stderr is in the message.
    """
    child = spawn("-c", code, *args)
    out, err = child.communicate(timeout=timeout)
    assert 0 == child.returncode, err.decode()
    return out.decode()
