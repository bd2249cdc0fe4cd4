"""Bench scenarios: each module has ``NAME``, ``HELP``, ``OPTIONS`` and ``run``.

``OPTIONS`` are the scenario's own :class:`~bench.options.Option` values (the common
ones are added by ``python -m bench``); ``run`` settles them for the run.
"""

from __future__ import annotations

from bench import adk
from bench.scenarios import aio, append, crash, desk, imports, long, mcp, read, scale, web

#: Every scenario module, in the order ``all`` runs them: ``scale`` before ``read``, whose
#: million-row desk would otherwise leave its memory in the RSS that ``scale`` reports
#: (``long`` measures its RSS first, for the same reason).
SCENARIOS = (append, aio, desk, scale, long, read, crash, imports, adk, web, mcp)
