"""Servers that expose a Hub to clients outside the process.

Each module here serves one protocol over a :class:`~sharedesk.Hub` or
:class:`~sharedesk.AsyncHub` it is given, on a store named by an LMDB path or a PostgreSQL
DSN: the Model Context Protocol server (one participant's desks as tools and resources)
and the web page of a desk. A server is an edge, like the CLI: it imports ``actors`` and
everything below it, and nothing in the core imports a server. Importing ``sharedesk``
or this package starts nothing and imports no server's dependencies (an extra each).
"""
