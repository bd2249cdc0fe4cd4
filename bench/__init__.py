"""The sharedesk bench harness: ``python -m bench SCENARIO [options]`` from the checkout.

Scenarios (``append``, ``desk``, ``read``, ``scale``, ``crash``, ``all``) measure sharedesk
and, in the same run, baselines without our code (raw py-lmdb, stdlib sqlite3, and
openai-agents' ``SQLiteSession`` when installed), so every headline figure is a ratio.
See ``python -m bench --help``.
"""
