"""``python -m sharedesk``: the ``sharedesk`` command (see :mod:`sharedesk.cli`)."""

from sharedesk.cli import main

raise SystemExit(main())
