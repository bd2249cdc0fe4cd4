import ast
import builtins
import copy
import inspect
import pickle
from pathlib import Path

import msgspec
import pytest

from sharedesk.protocol import errors
from sharedesk.protocol.records import ENCODER
from sharedesk.protocol.views import SharingState

FIGURED = [
    (errors.ConcurrencyError, {"expected": 3, "actual": 5}),
    (errors.SharingStateConflict, {"expected": 3, "actual": 5}),
    (errors.LogReadError, {"before": 10, "limit": 64}),
    (errors.PageTooLarge, {"requested": 64, "actual": 65}),
    (errors.EmptyPageCursor, {"next_before": 7}),
    (errors.DuplicateSequence, {"sequence": 4}),
    (errors.PageOutOfRange, {"sequence": 9, "before": 9}),
    (errors.PageNotDescending, {"previous": 3, "next": 4}),
    (errors.CursorDidNotAdvance, {"before": 5, "next_before": 5}),
    (errors.CursorAfterOldest, {"next_before": 8, "oldest": 6}),
    (errors.WatermarkRegression, {"before": 2, "watermark": 3}),
    (errors.PresentSetOverflow, {"limit": 64, "sequence": 99}),
    (errors.PresentSetTooLarge, {"limit": 64, "actual": 65}),
    (errors.StoreFullError, {"path": "/x", "map_size": 1, "max_map_size": 1}),
    (errors.CorruptRecordError, {"session_id": "s", "sequence": 2, "detail": "bad"}),
    (errors.StoreIOError, {"path": "/x", "operation": "open"}),
    (errors.StoreClosedError, {"path": None}),
    (errors.ValidationError, {"message": "bad input"}),
    (errors.AlreadyStored, {"session_id": "s", "event_id": "e.finished"}),
]


class TestErrorTree:
    @pytest.mark.parametrize(("cls", "figures"), FIGURED)
    def test_every_error_derives_from_sharedesk_error_and_not_value_error(
        self, cls: type[Exception], figures: dict[str, object]
    ) -> None:
        assert issubclass(cls, errors.SharedeskError)
        assert not issubclass(cls, ValueError)

    @pytest.mark.parametrize(("cls", "figures"), FIGURED)
    def test_every_error_keeps_its_figures_as_attributes_of_the_same_name(
        self, cls: type[Exception], figures: dict[str, object]
    ) -> None:
        error = cls(**figures)

        assert figures == {name: getattr(error, name) for name in figures}

    @pytest.mark.parametrize(("cls", "figures"), FIGURED)
    def test_every_error_names_its_figures_in_its_message(
        self, cls: type[Exception], figures: dict[str, object]
    ) -> None:
        message = str(cls(**figures))

        for value in figures.values():
            if value is not None:
                assert str(value) in message

    @pytest.mark.parametrize(("cls", "figures"), FIGURED)
    def test_every_error_survives_pickling_with_its_figures(
        self, cls: type[Exception], figures: dict[str, object]
    ) -> None:
        error = pickle.loads(pickle.dumps(cls(**figures)))

        assert cls is type(error)
        assert figures == {name: getattr(error, name) for name in figures}

    def test_page_errors_share_the_page_error_base(self) -> None:
        page_errors = [
            errors.PageTooLarge,
            errors.EmptyPageCursor,
            errors.DuplicateSequence,
            errors.PageOutOfRange,
            errors.PageNotDescending,
            errors.CursorDidNotAdvance,
            errors.CursorAfterOldest,
        ]

        assert all(issubclass(cls, errors.PageError) for cls in page_errors)

    def test_sharing_state_conflict_is_caught_as_a_concurrency_error(self) -> None:
        with pytest.raises(errors.ConcurrencyError):
            raise errors.SharingStateConflict(1, 2)

    def test_present_set_too_large_reaches_the_caller_unchanged_when_decoding(self) -> None:
        """msgspec rewraps ValueError from __post_init__; ours must pass through."""
        raw = ENCODER.encode(
            {
                "conversation": {"desk": "d"},
                "watermark": 0,
                "present_above_watermark": list(range(1, 66)),
            }
        )

        with pytest.raises(errors.PresentSetTooLarge) as caught:
            msgspec.msgpack.decode(raw, type=SharingState)

        assert (64, 65) == (caught.value.limit, caught.value.actual)
        assert not isinstance(caught.value, msgspec.ValidationError)


def _every_error() -> list[type[errors.SharedeskError]]:
    found = [
        value
        for value in vars(errors).values()
        if isinstance(value, type) and issubclass(value, errors.SharedeskError)
    ]
    return sorted(found, key=lambda cls: cls.__name__)


def _sample_figures(cls: type[errors.SharedeskError]) -> dict[str, object]:
    return {name: f"{name}-{n}" if n % 2 else n + 7 for n, name in enumerate(cls._figures)}


class Plain(errors.StoreError):
    """An error written the plain way (its own ``__init__``), as older branches do."""

    _figures = ("where", "count")

    def __init__(self, where: str, count: int) -> None:
        super().__init__(f"{count} locks held at {where}")
        self.where = where
        self.count = count


class TestDeclaredErrors:
    @pytest.mark.parametrize("cls", _every_error(), ids=lambda cls: cls.__name__)
    def test_every_error_in_the_tree_round_trips_through_pickle_with_figures_and_message(
        self, cls: type[errors.SharedeskError]
    ) -> None:
        figures = _sample_figures(cls)
        error = cls(**figures) if figures else cls("a plain message")

        copy = pickle.loads(pickle.dumps(error))

        assert (cls, str(error), figures) == (
            type(copy),
            str(copy),
            {name: getattr(copy, name) for name in figures},
        )

    def test_a_declared_error_takes_its_figures_positionally_or_by_name(self) -> None:
        assert str(errors.PageTooLarge(64, 65)) == str(errors.PageTooLarge(actual=65, requested=64))

    def test_a_declared_error_refuses_a_missing_figure(self) -> None:
        with pytest.raises(TypeError, match="actual"):
            errors.PageTooLarge(64)  # type: ignore[call-arg]

    def test_a_subclass_with_a_new_template_keeps_its_parents_figures(self) -> None:
        error = errors.SharingStateConflict(3, 5)

        assert ((3, 5), "sharing state moved") == (
            (error.expected, error.actual),
            str(error).split(":")[0],
        )

    def test_a_sharing_conflict_says_no_state_rather_than_a_sentinel_watermark(self) -> None:
        message = str(errors.SharingStateConflict(-1, 1))

        assert (
            "sharing state moved: it is at watermark 1, the turn was planned with no state"
            == message
        )

    def test_an_error_written_the_plain_way_still_pickles_with_its_figures(self) -> None:
        copy = pickle.loads(pickle.dumps(Plain("/x", 2)))

        assert ("2 locks held at /x", "/x", 2) == (str(copy), copy.where, copy.count)


class TestOneStyle:
    @pytest.mark.parametrize("cls", _every_error(), ids=lambda cls: cls.__name__)
    def test_every_error_is_declared_with_figures_and_a_template_not_its_own_init(
        self, cls: type[errors.SharedeskError]
    ) -> None:
        own_init = cls.__init__ is not errors.SharedeskError.__init__

        assert (own_init, bool(cls._figures), cls.template is not None) in {
            (False, True, True),  # an error raised with its figures
            (False, False, False),  # a family base, raised with a plain message
        }

    @pytest.mark.parametrize("cls", _every_error(), ids=lambda cls: cls.__name__)
    def test_every_docstring_says_when_the_error_is_raised(
        self, cls: type[errors.SharedeskError]
    ) -> None:
        summary = (cls.__doc__ or "").split("\n")[0]

        assert summary.startswith(("Raised ", "Base ")), summary

    def test_no_module_of_the_package_declares_an_error_outside_the_tree(self) -> None:
        """Every exception class sharedesk declares derives from ``SharedeskError``."""
        package = Path(errors.__file__).parent.parent
        foreign = sorted(
            f"{path.relative_to(package)}:{node.name}({base.id})"
            for path in package.rglob("*.py")
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.ClassDef)
            for base in node.bases
            if isinstance(base, ast.Name)
            and isinstance(getattr(builtins, base.id, None), type)
            and issubclass(getattr(builtins, base.id), BaseException)
        )

        assert ["protocol/errors.py:SharedeskError(Exception)"] == foreign

    def test_a_figure_given_a_value_in_the_class_is_an_optional_argument(self) -> None:
        error = errors.ProviderError("openai", 429, "slow down")

        assert (None, "provider 'openai' failed (HTTP 429): slow down") == (
            error.retry_after,
            str(error),
        )

    def test_a_template_may_use_a_property_built_from_the_figures(self) -> None:
        assert [
            "provider 'p' failed (no response, retry after 2.0 s): gone",
            "store at /x is full: the disk has no space left (map size 8 bytes)",
        ] == [
            str(errors.ProviderError("p", None, "gone", retry_after=2.0)),
            str(errors.StoreFullError("/x", 8, 16, disk_full=True)),
        ]

    def test_a_wrong_argument_is_a_type_error_naming_the_error(self) -> None:
        with pytest.raises(TypeError, match=r"^PageTooLarge\(\): .*'sideways'"):
            errors.PageTooLarge(64, 65, sideways=1)  # type: ignore[call-arg]

    def test_an_error_appended_in_the_declared_style_gets_a_constructor_and_pickles(
        self,
    ) -> None:
        class LockHeld(errors.StoreError):
            """Raised when another process holds the lock of ``path`` (``pid``, if known)."""

            path: str
            pid: int | None = None
            template = "the lock of {path} is held by process {pid}"

        error = LockHeld("/x", pid=7)
        copied = copy.copy(error)  # through __reduce__, as pickle goes (a local class)

        assert (LockHeld, "/x", 7, "the lock of /x is held by process 7") == (
            type(copied),
            copied.path,
            copied.pid,
            str(copied),
        )
        assert ["path", "pid"] == list(inspect.signature(LockHeld).parameters)
