"""The sharedesk bench harness: ``python -m bench SCENARIO [options]`` from the checkout.

Scenarios (``append``, ``async``, ``desk``, ``scale``, ``long``, ``read``, ``crash``,
``imports``, ``all``) measure sharedesk and, in the same run, baselines without our code
(raw py-lmdb, stdlib sqlite3, eventsourcing and raw psycopg on PostgreSQL, and
openai-agents' ``SQLiteSession`` when installed), so every headline figure is a ratio
that names its baseline.
See ``python -m bench --help``.
"""
