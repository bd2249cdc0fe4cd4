"""No module of sharedesk holds state at module level: its tables are read-only.

The modules are read with ``ast`` (never imported): a module-level name bound to a dict,
list or set display (or comprehension) is a table anything could change; a read-only
one is a tuple, a frozenset or a ``types.MappingProxyType``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import sharedesk
from sharedesk.servers._mcp_tools import TOOLS

PACKAGE = Path(sharedesk.__file__).parent
MODULES = tuple(sorted(PACKAGE.rglob("*.py")))

_MUTABLE = (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)


def mutable_tables(path: Path) -> list[str]:
    """The module-level names of ``path`` bound to a mutable display, as ``"name:line"``."""
    found = []
    for node in ast.parse(path.read_text(encoding="utf-8"), filename=str(path)).body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        names = [t.id for t in targets if isinstance(t, ast.Name) and t.id != "__all__"]
        if names and isinstance(value, _MUTABLE):
            found += [f"{name}:{node.lineno}" for name in names]
    return found


@pytest.mark.parametrize("path", MODULES, ids=lambda path: str(path.relative_to(PACKAGE)))
def test_a_module_binds_no_table_of_mutable_type(path: Path) -> None:
    assert [] == mutable_tables(path)


def test_the_check_finds_a_module_level_dict(tmp_path: Path) -> None:
    module = tmp_path / "module.py"
    module.write_text("__all__ = ['T']\nT: dict[str, int] = {}\nU = (1, 2)\n", encoding="utf-8")

    assert ["T:2"] == mutable_tables(module)


def test_the_mcp_tool_schemas_are_read_only_all_the_way_down() -> None:
    inputs = TOOLS["view"][1]

    with pytest.raises(TypeError):
        inputs["properties"]["desk"]["type"] = "integer"
