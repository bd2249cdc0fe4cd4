"""The errors of the runs layer keep their figures, name them, and survive pickling."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from sharedesk.protocol import errors

CASES: list[tuple[type[errors.SharedeskError], dict[str, Any]]] = [
    (errors.RunNotFound, {"run_id": "r1"}),
    (errors.RunStateError, {"run_id": "r1", "status": "completed", "action": "cancel"}),
    (errors.RunTimeout, {"run_id": "r1", "timeout": 0.25}),
    (errors.RunFailed, {"run_id": "r1", "error_code": "RuntimeError", "error_message": "boom"}),
    (errors.RunCancelled, {"run_id": "r1"}),
    (errors.QueueFull, {"session_id": "s1", "max_queued_runs": 100}),
    (errors.QueueClosed, {"session_id": "s1"}),
    (errors.ProviderError, {"provider": "openai", "status_code": 503, "detail": "overloaded"}),
]


class TestRunErrors:
    @pytest.mark.parametrize(("cls", "figures"), CASES)
    def test_each_error_keeps_its_figures_as_attributes(
        self, cls: type[errors.SharedeskError], figures: dict[str, Any]
    ) -> None:
        error = cls(**figures)

        assert figures == {name: getattr(error, name) for name in figures}

    @pytest.mark.parametrize(("cls", "figures"), CASES)
    def test_each_error_names_its_figures_in_its_message(
        self, cls: type[errors.SharedeskError], figures: dict[str, Any]
    ) -> None:
        message = str(cls(**figures))

        assert all(str(value) in message for value in figures.values())

    @pytest.mark.parametrize(("cls", "figures"), CASES)
    def test_each_error_survives_pickling(
        self, cls: type[errors.SharedeskError], figures: dict[str, Any]
    ) -> None:
        error = cls(**figures)

        copy = pickle.loads(pickle.dumps(error))

        assert (str(error), figures) == (str(copy), {n: getattr(copy, n) for n in figures})

    @pytest.mark.parametrize(("cls", "figures"), CASES[:5])
    def test_run_errors_share_a_base_that_carries_the_run_id(
        self, cls: type[errors.SharedeskError], figures: dict[str, Any]
    ) -> None:
        error = cls(**figures)

        assert isinstance(error, errors.RunError)
        assert "r1" == error.run_id
