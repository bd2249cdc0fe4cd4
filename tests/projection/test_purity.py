"""The folds stay sans-IO: every module of sharedesk/projection/ imports only what it may.

The modules are read with ``ast`` (never imported), so an import hidden inside a function
or behind ``if TYPE_CHECKING`` counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import sharedesk.projection

PACKAGE = Path(sharedesk.projection.__file__).parent
MODULES = tuple(sorted(PACKAGE.glob("*.py")))

#: Top-level modules a fold may never import: storage, actors, logging, clocks, threads,
#: processes, the network and randomness.
FORBIDDEN = frozenset(
    {
        "asyncio",
        "concurrent",
        "httpx",
        "lmdb",
        "logging",
        "multiprocessing",
        "os",
        "pykka",
        "queue",
        "random",
        "rich",
        "secrets",
        "signal",
        "socket",
        "sqlite3",
        "structlog",
        "subprocess",
        "threading",
        "time",
    }
)

#: The parts of sharedesk a fold may import: the protocol and its own package.
ALLOWED_SHAREDESK = ("sharedesk.protocol", "sharedesk.projection")

#: Calls that read a clock (``datetime`` as a type is fine; ``datetime.now()`` is not).
CLOCK_CALLS = frozenset({"now", "utcnow", "today", "fromtimestamp", "utcfromtimestamp"})


def imported_modules(tree: ast.AST) -> list[str]:
    """Every module named by an import statement anywhere in ``tree``."""
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def clock_calls(tree: ast.AST) -> list[str]:
    """Every ``<something>.now()``-like call in ``tree``, as ``"name:line"``."""
    return [
        f"{node.func.attr}:{node.lineno}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in CLOCK_CALLS
    ]


def parse(path: Path) -> ast.AST:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


class TestPurity:
    def test_the_package_holds_the_fold_modules(self) -> None:
        assert {"__init__.py", "session.py", "sharing.py"} <= {path.name for path in MODULES}

    @pytest.mark.parametrize("path", MODULES, ids=lambda path: path.name)
    def test_a_fold_module_imports_no_io_clock_thread_or_logger(self, path: Path) -> None:
        found = [name for name in imported_modules(parse(path)) if name.split(".")[0] in FORBIDDEN]

        assert [] == found

    @pytest.mark.parametrize("path", MODULES, ids=lambda path: path.name)
    def test_a_fold_module_imports_only_the_protocol_from_sharedesk(self, path: Path) -> None:
        found = [
            name
            for name in imported_modules(parse(path))
            if name.split(".")[0] == "sharedesk"
            and not any(
                name == allowed or name.startswith(allowed + ".") for allowed in ALLOWED_SHAREDESK
            )
        ]

        assert [] == found

    @pytest.mark.parametrize("path", MODULES, ids=lambda path: path.name)
    def test_a_fold_module_reads_no_clock(self, path: Path) -> None:
        assert [] == clock_calls(parse(path))

    @pytest.mark.parametrize("path", MODULES, ids=lambda path: path.name)
    def test_a_fold_module_uses_no_relative_imports(self, path: Path) -> None:
        """Relative imports would escape the name checks above, so none are allowed."""
        relative = [
            node.lineno
            for node in ast.walk(parse(path))
            if isinstance(node, ast.ImportFrom) and node.level > 0
        ]

        assert [] == relative


class TestTheCheckItself:
    """The checks would catch what they are meant to catch."""

    def test_an_import_inside_a_function_is_found(self) -> None:
        tree = ast.parse("def f():\n    import threading\n")

        assert ["threading"] == imported_modules(tree)

    def test_a_from_import_of_a_submodule_is_found(self) -> None:
        tree = ast.parse("from structlog.contextvars import bound_contextvars\n")

        assert ["structlog.contextvars"] == imported_modules(tree)

    def test_a_clock_call_is_found(self) -> None:
        tree = ast.parse("from datetime import datetime\nstamp = datetime.now()\n")

        assert ["now:2"] == clock_calls(tree)
