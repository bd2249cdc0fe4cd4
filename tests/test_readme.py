"""The README's code runs as written: its Python blocks execute in order, in one namespace."""

import os
import re
from pathlib import Path

import pytest
import structlog

README = Path(__file__).resolve().parent.parent / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


class TestReadme:
    def test_the_readme_has_python_examples(self) -> None:
        assert python_blocks()

    def test_the_python_examples_run_in_order_in_one_namespace(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.chdir(tmp_path)
        namespace: dict[str, object] = {"__name__": "readme"}
        try:
            for block in python_blocks():
                exec(compile(block, str(README), "exec"), namespace)
        finally:
            structlog.reset_defaults()  # the README configures logging; give it back

        assert os.path.isdir(tmp_path / "desk-data")
