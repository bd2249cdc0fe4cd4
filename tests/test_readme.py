"""The README's and the docs' code runs as written, and they hold no dated entries.

Every ```python block of ``README.md`` and of each page in ``docs/`` runs, in order, in a
temp directory of its own per page, offline. Each block runs in a fresh namespace, so it
must import what it uses (a reader copies one block at a time); the blocks of one page
share the directory, so a later block may reopen what an earlier one wrote. A block whose
first line is ``# continues the previous block`` runs in the previous block's namespace
instead. A block that reads ``SHAREDESK_POSTGRES_DSN`` gets a fresh database on the test
session's throwaway PostgreSQL server (the ``postgres_dsn`` fixture) in that variable.
Blocks that show shell commands are ```sh (or ```text) and are not run.
"""

from __future__ import annotations

import importlib.util
import logging
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from sharedesk.logconfig import LOGGER_NAME

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
CONTINUES = "# continues the previous block"
POSTGRES_DSN = "SHAREDESK_POSTGRES_DSN"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
_LINK = re.compile(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)")
REGENERATE = ".venv/bin/python docs/gen_reference.py"

# What a lab notebook leaves behind: clock times, dates, machine load, issue numbers.
DATED = {
    "a clock time": re.compile(r"\b\d{1,2}:\d{2}(?::\d{2})?\s*UTC\b"),
    "a time of day": re.compile(r"(?<![\w:\[])(?:[01]\d|2[0-3]):[0-5]\d\b(?!:)"),
    "a date": re.compile(r"\b20\d\d-\d\d-\d\d\b"),
    "a load average": re.compile(r"\bload average|\bload (?:of )?\d+\.\d", re.I),
    "an issue number": re.compile(r"\bissues? #?\d+", re.I),
}


def python_blocks(page: Path) -> list[tuple[int, str]]:
    """Every ```python block of ``page``, with the line its code starts on."""
    text = page.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start(1)) + 1, m.group(1)) for m in _BLOCK.finditer(text)]


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def generator() -> Any:
    """The module docs/gen_reference.py, which renders the reference pages."""
    spec = importlib.util.spec_from_file_location("gen_reference", DOCS / "gen_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
            raise OSError(f"documented examples run offline; tried to connect to {address!r}")
        connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", local_only)


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """A page may configure logging; give the suite its set-up back afterwards."""
    ours = logging.getLogger(LOGGER_NAME)
    handlers, level, propagate = list(ours.handlers), ours.level, ours.propagate
    root = logging.getLogger()
    root_handlers, root_level = list(root.handlers), root.level
    try:
        yield
    finally:
        structlog.reset_defaults()
        ours.handlers[:] = handlers
        ours.setLevel(level)
        ours.propagate = propagate
        root.handlers[:] = root_handlers
        root.setLevel(root_level)


@pytest.fixture
def restored_tracing() -> Iterator[None]:
    """A page may set OpenTelemetry's tracer provider; unset it afterwards (docs/web.md)."""
    yield
    if importlib.util.find_spec("opentelemetry") is not None:
        from opentelemetry import trace
        from opentelemetry.util._once import Once

        trace._TRACER_PROVIDER_SET_ONCE = Once()  # as opentelemetry's own test helpers do
        trace._TRACER_PROVIDER = None


def run_page(page: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """Run every Python block of ``page`` in order, in the current directory."""
    namespace: dict[str, object] = {}
    for line, block in python_blocks(page):
        if POSTGRES_DSN in block:
            monkeypatch.setenv(POSTGRES_DSN, request.getfixturevalue("postgres_dsn"))
        if not block.startswith(CONTINUES):
            namespace = {"__name__": "docs_example"}
        try:
            exec(compile("\n" * (line - 1) + block, str(page), "exec"), namespace)
        except Exception as exc:
            raise AssertionError(f"the block at {page_id(page)}:{line} failed: {exc!r}") from exc


class TestReadme:
    def test_the_readme_has_python_examples(self) -> None:
        assert python_blocks(README)

    def test_the_readme_is_at_most_300_lines(self) -> None:
        lines = README.read_text(encoding="utf-8").count("\n")

        assert lines <= 300

    def test_the_readme_links_the_table_of_contents(self) -> None:
        assert "(docs/index.md)" in README.read_text(encoding="utf-8")


class TestDocs:
    def test_every_page_is_listed_in_the_table_of_contents(self) -> None:
        index = (DOCS / "index.md").read_text(encoding="utf-8")
        pages = {p.name for p in DOCS.glob("*.md")} - {"index.md"}

        assert set() == {name for name in pages if f"({name})" not in index}

    @pytest.mark.parametrize("page", PAGES, ids=page_id)
    @pytest.mark.usefixtures("offline", "restored_logging", "restored_tracing")
    def test_every_python_block_of_a_page_runs_in_order(
        self,
        page: Path,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
        request: pytest.FixtureRequest,
    ) -> None:
        monkeypatch.chdir(tmp_path)
        run_page(page, monkeypatch, request)

    @pytest.mark.parametrize("page", PAGES, ids=page_id)
    def test_a_page_holds_no_dated_entries(self, page: Path) -> None:
        text = page.read_text(encoding="utf-8")
        found = [
            f"{page_id(page)}:{text.count(chr(10), 0, m.start()) + 1}: {what}: {m.group(0)!r}"
            for what, pattern in DATED.items()
            for m in pattern.finditer(text)
        ]

        assert [] == found

    def test_no_source_file_names_an_issue_number(self) -> None:
        sources = [p for d in ("sharedesk", "tests", "bench") for p in (ROOT / d).rglob("*.py")]
        found = [
            f"{page_id(p)}: {m.group(0)!r}"
            for p in sources
            for m in DATED["an issue number"].finditer(p.read_text(encoding="utf-8"))
        ]

        assert [] == found

    @pytest.mark.parametrize("page", PAGES, ids=page_id)
    def test_every_link_of_a_page_to_another_page_resolves(self, page: Path) -> None:
        links = _LINK.findall(page.read_text(encoding="utf-8"))

        assert [] == [link for link in links if not (page.parent / link).is_file()]


class TestReference:
    @pytest.mark.parametrize("name", ["reference.md", "errors.md", "options.md"])
    def test_a_generated_page_matches_the_docstrings(self, name: str) -> None:
        """A stale page fails; the fix is one command, run from the checkout."""
        committed = (DOCS / name).read_text(encoding="utf-8")

        assert generator().render(name) == committed, f"docs/{name} is stale: run {REGENERATE}"
