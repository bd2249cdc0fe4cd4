"""The PostgreSQL call deadline (``sharedesk.store._pg_watchdog``), on plain sockets."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from sharedesk.store._pg_watchdog import Watchdog


class FakeConnection:
    """What the watchdog touches of a psycopg connection: its socket and ``close()``."""

    def __init__(self, sock: socket.socket) -> None:
        self.pgconn = SimpleNamespace(socket=sock.fileno())
        self.closed = False

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    mine, peer = socket.socketpair()
    mine.settimeout(10)  # a watchdog that never cuts fails the test instead of hanging it
    yield mine, peer
    mine.close()
    peer.close()


def watchdog_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("sharedesk-pg-watchdog")]


def test_a_use_still_waiting_at_its_deadline_is_woken_and_its_connection_closed(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    mine, _peer = pair
    conn = FakeConnection(mine)
    watchdog = Watchdog(0.2, "test")
    try:
        with watchdog.watch(conn):
            received = mine.recv(1)  # the peer never sends: only the watchdog ends this
    finally:
        watchdog.stop()

    assert (b"", True) == (received, conn.closed)


def test_a_use_that_ends_in_time_keeps_its_connection(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    """A later use, cut at its own deadline, shows the watchdog went past the first's."""
    mine, peer = pair
    later, _later_peer = socket.socketpair()
    later.settimeout(10)
    conn = FakeConnection(mine)
    watchdog = Watchdog(0.2, "test")
    try:
        with watchdog.watch(conn):
            peer.sendall(b"x")
            assert b"x" == mine.recv(1)
        with watchdog.watch(FakeConnection(later)):
            cut = later.recv(1)
    finally:
        watchdog.stop()
        later.close()
        _later_peer.close()

    peer.sendall(b"y")
    assert (b"", b"y", False) == (cut, mine.recv(1), conn.closed)


def test_no_timeout_watches_nothing_and_starts_no_thread(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    mine, peer = pair
    watchdog = Watchdog(0, "zero")
    with watchdog.watch(FakeConnection(mine)):
        peer.sendall(b"x")
        assert b"x" == mine.recv(1)

    assert [] == [name for name in watchdog_threads() if name.endswith(":zero")]
    watchdog.stop()


def test_stop_ends_the_thread(pair: tuple[socket.socket, socket.socket]) -> None:
    mine, _peer = pair
    watchdog = Watchdog(30, "stopping")
    with watchdog.watch(FakeConnection(mine)):
        assert ["sharedesk-pg-watchdog:stopping"] == [
            name for name in watchdog_threads() if name.endswith(":stopping")
        ]

    watchdog.stop()
    watchdog.stop()  # idempotent

    assert [] == [name for name in watchdog_threads() if name.endswith(":stopping")]


def test_a_use_after_a_quiet_spell_is_still_cut_at_its_deadline(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    mine, peer = pair
    watchdog = Watchdog(0.2, "quiet")
    try:
        with watchdog.watch(FakeConnection(mine)):
            peer.sendall(b"x")
            mine.recv(1)
        time.sleep(0.6)  # one nap of 0.2 s, then asleep until the next use
        with watchdog.watch(FakeConnection(mine)):
            received = mine.recv(1)
    finally:
        watchdog.stop()

    assert b"" == received


def test_stop_cuts_the_uses_still_watched(pair: tuple[socket.socket, socket.socket]) -> None:
    """A store stops its watchdog last in close(): nothing may stay waiting after it."""
    mine, _peer = pair
    conn = FakeConnection(mine)
    watchdog = Watchdog(30, "closing")
    received: list[bytes] = []
    watched = threading.Event()

    def wait() -> None:
        with watchdog.watch(conn):
            watched.set()
            received.append(mine.recv(1))

    waiter = threading.Thread(target=wait)
    waiter.start()
    assert watched.wait(10)
    watchdog.stop()
    waiter.join(10)

    assert ([b""], True) == (received, conn.closed)
