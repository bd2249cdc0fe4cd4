"""The public surface: the contract's names are exported, sorted and documented."""

import inspect

import sharedesk
from sharedesk.protocol import errors

#: Every name the public contract promises at the package root (the list lives here, in
#: the repository: change it only together with the contract).
CONTRACT_NAMES = {
    # Constants
    "SESSION_WINDOW", "PAGE_SIZE", "SCAN_LIMIT", "PRESENT_SET_LIMIT",
    # Authors
    "Operator", "Person", "Agent", "System", "SessionAuthor",
    # Events
    "Event", "Text", "TextDelta", "ToolCall", "ToolResult", "RunStarted", "RunFinished",
    # Stores
    "MemoryStore", "LmdbStore",
    # Projection
    "Conversation", "LogMessage", "SessionPage", "SessionLog", "SessionQuery",
    "SessionMessage", "project_session", "Projection",
    # Continuous sharing
    "SharingState", "initialized_state", "note_present", "SharingQuery", "prepare_delta",
    "Delta", "Reinitialize", "ReinitializeReason",
    # Transcripts
    "TranscriptMessage", "Transcript", "TranscriptBuilder",
    # Runs
    "SessionManager", "RunResult", "ScriptedAdapter", "ScriptedCall",
    # Actors
    "Hub",
    # Async
    "AsyncHub", "AsyncTurn",
    # Errors
    "SharedeskError", "ValidationError", "ConcurrencyError", "LogReadError", "PageError",
    "PageTooLarge", "EmptyPageCursor", "DuplicateSequence", "PageOutOfRange",
    "PageNotDescending", "CursorDidNotAdvance", "CursorAfterOldest",
    "WatermarkRegression", "PresentSetOverflow", "PresentSetTooLarge",
}  # fmt: skip


class TestSurface:
    def test_every_contract_name_is_exported_from_the_package_root(self) -> None:
        assert set() == CONTRACT_NAMES - set(sharedesk.__all__)

    def test_all_is_sorted_and_has_no_duplicates(self) -> None:
        assert sorted(set(sharedesk.__all__)) == sharedesk.__all__

    def test_every_exported_name_resolves(self) -> None:
        missing = [name for name in sharedesk.__all__ if not hasattr(sharedesk, name)]

        assert [] == missing

    def test_every_exported_class_and_function_has_a_docstring(self) -> None:
        undocumented = [
            name
            for name in sharedesk.__all__
            if (inspect.isclass(obj := getattr(sharedesk, name)) or inspect.isfunction(obj))
            and not (obj.__doc__ or "").strip()
        ]

        assert [] == undocumented

    def test_every_public_method_of_an_exported_class_has_a_docstring(self) -> None:
        undocumented = [
            f"{name}.{attr}"
            for name in sharedesk.__all__
            if inspect.isclass(cls := getattr(sharedesk, name))
            for attr, member in vars(cls).items()
            if not attr.startswith("_")
            and (inspect.isfunction(member) or isinstance(member, classmethod | staticmethod))
            and not (inspect.getdoc(getattr(cls, attr)) or "").strip()
        ]

        assert [] == undocumented

    def test_every_error_the_errors_module_declares_is_exported_from_the_package_root(
        self,
    ) -> None:
        declared = {
            name
            for name, cls in vars(errors).items()
            if inspect.isclass(cls)
            and issubclass(cls, errors.SharedeskError)
            and cls.__module__ == errors.__name__
        }

        assert set() == declared - set(sharedesk.__all__)

    def test_every_error_derives_from_sharedesk_error(self) -> None:
        errors = [
            name
            for name in sharedesk.__all__
            if inspect.isclass(cls := getattr(sharedesk, name)) and issubclass(cls, Exception)
        ]

        assert all(issubclass(getattr(sharedesk, n), sharedesk.SharedeskError) for n in errors)
