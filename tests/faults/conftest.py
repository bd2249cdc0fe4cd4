"""Fixtures of the fault suite: the per-module case counter (see ``tests.faults.counting``)."""

from tests.faults.counting import FaultCounter, fault_counter, pytest_terminal_summary

__all__ = ["FaultCounter", "fault_counter", "pytest_terminal_summary"]
