"""The README's code runs as written: every Python block, in order, in a temp directory, offline.

Each block runs in a fresh namespace, so it must import what it uses (a reader copies one
block at a time); the blocks share the directory, so a later block may reopen what an
earlier one wrote. A block whose first line is ``# continues the previous block`` runs in
the previous block's namespace instead. Any block added to the README is run here too.
A block that reads ``SHAREDESK_POSTGRES_DSN`` gets a fresh database on the test session's
throwaway PostgreSQL server (the ``postgres_dsn`` fixture) in that variable.
"""

from __future__ import annotations

import logging
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from sharedesk.logconfig import LOGGER_NAME

README = Path(__file__).resolve().parent.parent / "README.md"
CONTINUES = "# continues the previous block"
POSTGRES_DSN = "SHAREDESK_POSTGRES_DSN"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks() -> list[tuple[int, str]]:
    """Every ```python block of the README, with the line its code starts on."""
    text = README.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start(1)) + 1, m.group(1)) for m in _BLOCK.finditer(text)]


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refuse every connection that leaves the machine."""
    connect = socket.socket.connect

    def local_only(self: socket.socket, address: Any) -> None:
        if self.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in (
            "127.0.0.1",
            "::1",
            "localhost",
        ):
            raise OSError(f"README examples run offline; tried to connect to {address!r}")
        connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", local_only)


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """The README configures logging; give the suite its set-up back afterwards."""
    ours = logging.getLogger(LOGGER_NAME)
    handlers, level, propagate = list(ours.handlers), ours.level, ours.propagate
    try:
        yield
    finally:
        structlog.reset_defaults()
        ours.handlers[:] = handlers
        ours.setLevel(level)
        ours.propagate = propagate


class TestReadme:
    def test_the_readme_has_python_examples(self) -> None:
        assert python_blocks()

    @pytest.mark.usefixtures("offline", "restored_logging")
    def test_every_python_block_runs_in_order_each_in_its_own_namespace(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
    ) -> None:
        monkeypatch.chdir(tmp_path)
        namespace: dict[str, object] = {}
        for line, block in python_blocks():
            if POSTGRES_DSN in block:
                monkeypatch.setenv(POSTGRES_DSN, request.getfixturevalue("postgres_dsn"))
            if not block.startswith(CONTINUES):
                namespace = {"__name__": "readme"}
            try:
                exec(compile("\n" * (line - 1) + block, str(README), "exec"), namespace)
            except Exception as exc:
                raise AssertionError(f"the README block at line {line} failed: {exc!r}") from exc

        assert (tmp_path / "desk-data").is_dir()
