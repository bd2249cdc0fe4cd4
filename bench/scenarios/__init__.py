"""Bench scenarios: each module has ``NAME``, ``HELP``, ``add_arguments`` and ``run``."""

from __future__ import annotations

from bench.scenarios import append, crash, desk, read, scale

#: Every scenario module, in the order ``all`` runs them.
SCENARIOS = (append, desk, read, scale, crash)
