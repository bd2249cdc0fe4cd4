"""Bench scenarios: each module has ``NAME``, ``HELP``, ``add_arguments`` and ``run``."""

from __future__ import annotations

from bench.scenarios import aio, append, crash, desk, imports, read, scale

#: Every scenario module, in the order ``all`` runs them: ``scale`` before ``read``, whose
#: million-row desk would otherwise leave its memory in the RSS that ``scale`` reports.
SCENARIOS = (append, aio, desk, scale, read, crash, imports)
