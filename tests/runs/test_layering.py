"""Runs import only protocol and projection; adapters add runs; neither imports a backend."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import sharedesk.runs

RUNS_DIR = Path(sharedesk.runs.__file__).parent
MODULES = sorted(RUNS_DIR.glob("*.py"))
ADAPTERS = sorted((RUNS_DIR.parent / "adapters").glob("*.py"))
# Besides the layers below it: the library's logger and the lazy-import helper, which
# reach neither a store nor the actors.
ALLOWED_SHAREDESK = (
    "sharedesk.protocol",
    "sharedesk.projection",
    "sharedesk.runs",
    "sharedesk.logconfig",
    "sharedesk._lazy",
)
FORBIDDEN = ("lmdb", "pykka")


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            names.add(node.module)
    return names


class TestLayering:
    @pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
    def test_a_runs_module_imports_from_sharedesk_only_protocol_and_projection(
        self, path: Path
    ) -> None:
        ours = {name for name in imported(path) if name.split(".")[0] == "sharedesk"}

        assert set() == {n for n in ours if not n.startswith(ALLOWED_SHAREDESK)}

    @pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
    def test_a_runs_module_imports_no_storage_or_actor_library(self, path: Path) -> None:
        assert set() == {n for n in imported(path) if n.split(".")[0] in FORBIDDEN}

    @pytest.mark.parametrize("path", ADAPTERS, ids=lambda p: p.name)
    def test_an_adapter_module_imports_from_sharedesk_only_protocol_projection_and_runs(
        self, path: Path
    ) -> None:
        ours = {name for name in imported(path) if name.split(".")[0] == "sharedesk"}

        assert set() == {
            n for n in ours if not n.startswith((*ALLOWED_SHAREDESK, "sharedesk.adapters"))
        }
