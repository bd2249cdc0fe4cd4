"""Each layer imports only the layers below it, read from the modules' ``import`` lines.

``protocol`` <- ``projection`` <- ``store`` (imports only ``protocol`` and
``projection``); ``runs`` imports ``protocol`` and ``projection``, and no backend.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import sharedesk

PACKAGE = Path(sharedesk.__file__).parent

#: Layer -> the sharedesk modules its modules may import (itself included).
ALLOWED: dict[str, tuple[str, ...]] = {
    "protocol": ("sharedesk.protocol",),
    "projection": ("sharedesk.protocol", "sharedesk.projection"),
    "store": ("sharedesk.protocol", "sharedesk.projection", "sharedesk.store"),
    # Besides the layers below it: the library's logger and the lazy-import helper,
    # which reach neither a store nor the actors.
    "runs": (
        "sharedesk.protocol",
        "sharedesk.projection",
        "sharedesk.runs",
        "sharedesk.logconfig",
        "sharedesk._lazy",
    ),
}
MODULES = [(layer, path) for layer in ALLOWED for path in sorted((PACKAGE / layer).glob("*.py"))]
#: Libraries a layer must not import: storage and actors stay out of the runs.
FORBIDDEN = {"runs": ("lmdb", "pykka", "psycopg"), "store": ("pykka",)}


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            names.add(node.module)
    return names


def module_id(item: tuple[str, Path]) -> str:
    return f"{item[0]}/{item[1].name}"


class TestLayering:
    def test_every_layer_has_modules(self) -> None:
        assert set(ALLOWED) == {layer for layer, _ in MODULES}

    @pytest.mark.parametrize("item", MODULES, ids=module_id)
    def test_a_module_imports_from_sharedesk_only_the_layers_below_it(
        self, item: tuple[str, Path]
    ) -> None:
        layer, path = item
        ours = {name for name in imported(path) if name.split(".")[0] == "sharedesk"}

        assert set() == {name for name in ours if not name.startswith(ALLOWED[layer])}

    @pytest.mark.parametrize("item", MODULES, ids=module_id)
    def test_a_module_imports_no_library_its_layer_must_not_reach(
        self, item: tuple[str, Path]
    ) -> None:
        layer, path = item
        forbidden = FORBIDDEN.get(layer, ())

        assert set() == {name for name in imported(path) if name.split(".")[0] in forbidden}
