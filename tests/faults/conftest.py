"""Fixtures of the fault suite: the per-module case counter (see ``tests.faults.counting``)
and the figures line every process fault prints (``report``, from the LMDB process faults).
"""

from tests.faults.counting import FaultCounter, fault_counter, pytest_terminal_summary
from tests.faults.test_lmdb_processes import report

__all__ = ["FaultCounter", "fault_counter", "pytest_terminal_summary", "report"]
