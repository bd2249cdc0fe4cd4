"""The options of the bench: each declared once, as an :class:`Option`.

A scenario states only its own options, in its ``OPTIONS``; :data:`COMMON` holds the
ones every scenario takes (``--quick``, ``--out``, ...). An option has a normal default
and a ``--quick`` one, and its help names the default, so the two never disagree. On the
command line its default is ``None``: :func:`settle` resolves it, so an option given on
the command line always wins, in either mode.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import msgspec

T = TypeVar("T")

#: Where results go unless ``--out`` says otherwise.
DEFAULT_OUT = Path(__file__).resolve().parent / "results"


class Option(msgspec.Struct, frozen=True):
    """One command-line option of a scenario.

    ``flag`` is its name (``"--max-seconds"``, read as ``args.max_seconds``); ``default``
    and ``quick`` its values on a normal and a ``--quick`` run (``quick`` is ``default``
    unless given). The type read from the command line follows the default: ``bool`` is a
    switch, ``int``, ``float`` and ``Path`` are read as such, a ``list`` as comma-separated
    ints (:func:`int_list`), anything else as text (``reads`` overrides it), among
    ``choices`` when given. ``help`` says what it is, and ``(default ...)`` is added unless
    the default is ``None`` or a switch, or ``help`` speaks of its default itself
    (``{default}`` in it is replaced by the default).
    """

    flag: str
    default: Any
    help: str
    quick: Any = None
    choices: tuple[str, ...] | None = None
    reads: Callable[[str], Any] | None = None

    @property
    def dest(self) -> str:
        """The attribute the parsed value lands on."""
        return self.flag.removeprefix("--").replace("-", "_")

    def value(self, given: Any, is_quick: bool) -> Any:
        """Return the value of a run: as given, else the quick or normal default."""
        quick = self.default if self.quick is None else self.quick
        return pick(given, self.default, quick, is_quick)

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        """Declare the option on ``parser`` (its default resolved later by :func:`settle`)."""
        shown = self.default
        if isinstance(shown, list):
            shown = ",".join(str(item) for item in shown)
        elif isinstance(shown, float):
            shown = f"{shown:g}"
        text = self.help.replace("{default}", str(shown))
        if self.default is not None and not isinstance(self.default, bool):
            text = text if "default" in text else f"{text} (default {shown})"
        if isinstance(self.default, bool):
            parser.add_argument(self.flag, action="store_true", default=None, help=text)
            return
        reads = self.reads or _reader(self.default)
        parser.add_argument(self.flag, type=reads, choices=self.choices, help=text)


def declare(parser: argparse.ArgumentParser, options: Iterable[Option]) -> None:
    """Add ``options`` to ``parser``."""
    for option in options:
        option.add_to(parser)


def settle(args: argparse.Namespace, options: Sequence[Option], quick: bool) -> argparse.Namespace:
    """Return a copy of ``args`` with each of ``options`` resolved for the run."""
    settled = argparse.Namespace(**vars(args))
    for option in options:
        setattr(settled, option.dest, option.value(getattr(args, option.dest, None), quick))
    return settled


#: The options of every scenario (and of ``all``).
COMMON = (
    Option("--quick", False, "tiny configuration: checks the harness, not speed"),
    Option(
        "--dir",
        None,
        "keep the run's data under this directory (default: a temporary one, removed)",
        reads=Path,
    ),
    Option("--out", DEFAULT_OUT, "where the JSON results and plots go (default bench/results/)"),
    Option("--no-plots", False, "do not draw PNG plots"),
    Option("--no-progress", False, "no progress bars"),
    Option("--log-level", "warning", "sharedesk log level on stderr"),
)


def pick(given: T | None, default: T, quick: T, is_quick: bool) -> T:
    """Return the option as given, else the quick or normal default."""
    if given is not None:
        return given
    return quick if is_quick else default


def int_list(text: str) -> list[int]:
    """Parse ``"1,4,16"`` (``_`` allowed as a digit separator) into ``[1, 4, 16]``."""
    values = [int(part.strip().replace("_", "")) for part in text.split(",") if part.strip()]
    if not values or any(v <= 0 for v in values):
        raise ValueError(f"expected a comma-separated list of positive ints, got {text!r}")
    return values


def _reader(default: Any) -> Callable[[str], Any]:
    if isinstance(default, list):
        return int_list
    if isinstance(default, int | float | Path):
        return type(default)
    return str
