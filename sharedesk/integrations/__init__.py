"""Integrations with agent frameworks; each module imports its framework (an extra).

Importing ``sharedesk`` or this package imports no framework: import the module you use,
e.g. ``sharedesk.integrations.openai_agents`` (``pip install 'sharedesk[agents]'``).
"""
