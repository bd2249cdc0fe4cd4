"""Budgets shared by the folds, the stores and the actors (values fixed by the contract)."""

from typing import Final

#: Qualifying messages requested for a turn.
SESSION_WINDOW: Final = 30
#: Most raw rows asked of a log in one read.
PAGE_SIZE: Final = 512
#: Most raw rows inspected in one projection or delta.
SCAN_LIMIT: Final = 2048
#: Most sequences a sharing state may hold above its watermark.
PRESENT_SET_LIMIT: Final = 64
#: Smallest first read of a projection walk (reads grow from here toward ``PAGE_SIZE``).
MIN_PAGE: Final = 64
