"""What a test does when something it needs is missing: skip it, but fail it under CI=true."""

import os
from typing import NoReturn

import pytest


def in_ci() -> bool:
    """Whether the suite runs under ``CI=true`` (where nothing may skip)."""
    return os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}


def unavailable(reason: str, *, module: bool = False) -> NoReturn:
    """Skip the test (``module``: the whole module) for ``reason``; under CI=true, fail it."""
    if in_ci():
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=module)
