"""MCP over streamable HTTP at ``/mcp``, each client named by its bearer token.

The tokens file holds one ``TOKEN KIND:ID[:LABEL]`` a line (blank lines and ``#``
comments skipped). :class:`BearerGate` wraps the SDK's ASGI app: a request without a
known ``Authorization: Bearer TOKEN`` gets HTTP 401 before it reaches the SDK, so it
touches no desk; a known one carries its participant in the ASGI scope, where
:func:`participant_of` finds it for the tools.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any, Final

from sharedesk.protocol import Agent, Person, SessionAuthor, ValidationError
from sharedesk.servers._mcp_tools import parse_participant

__all__ = ["SCOPE_KEY", "BearerGate", "parse_host_port", "participant_of", "read_tokens"]

#: Where the gate puts the participant in the ASGI scope.
SCOPE_KEY: Final = "sharedesk.participant"

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


def read_tokens(path: str | Path) -> dict[str, Agent | Person]:
    """Read a tokens file: ``TOKEN KIND:ID[:LABEL]`` per line.

    Raises:
        ValidationError: A malformed line (named by its number), a token given twice,
            or no token at all.
        OSError: The file could not be read.
    """
    tokens: dict[str, Agent | Person] = {}
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        token, _, who = text.partition(" ")
        if not who.strip():
            raise ValidationError(f"{path}:{number}: a line is TOKEN KIND:ID[:LABEL]")
        if token in tokens:
            raise ValidationError(f"{path}:{number}: the token is given twice")
        try:
            tokens[token] = parse_participant(who.strip())
        except ValidationError as exc:
            raise ValidationError(f"{path}:{number}: {exc}") from None
    if not tokens:
        raise ValidationError(f"{path}: no token")
    return tokens


def parse_host_port(text: str) -> tuple[str, int]:
    """Parse ``HOST:PORT`` (``[::1]:8000`` for IPv6).

    Raises:
        ValidationError: No port, or one that is not in 0..65535.
    """
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValidationError(f"--http takes HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def participant_of(request: Any) -> SessionAuthor | None:
    """Return the participant the gate found for an HTTP request (``None``: none)."""
    scope = getattr(request, "scope", None)
    if not isinstance(scope, dict):
        return None
    who = scope.get(SCOPE_KEY)
    return who if isinstance(who, Agent | Person) else None


class BearerGate:
    """ASGI middleware: 401 unless the request's bearer token is known."""

    def __init__(self, app: App, tokens: dict[str, Agent | Person]) -> None:
        self._app = app
        self._tokens = dict(tokens)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection (lifespan passes through)."""
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        who = self._who(scope)
        if who is None:
            await _refuse(send)
            return
        scope[SCOPE_KEY] = who
        await self._app(scope, receive, send)

    def _who(self, scope: Scope) -> Agent | Person | None:
        for name, value in scope.get("headers", ()):
            if name.lower() == b"authorization":
                scheme, _, token = value.decode("latin-1").partition(" ")
                if scheme.lower() != "bearer":
                    return None
                return self._lookup(token.strip())
        return None

    def _lookup(self, token: str) -> Agent | Person | None:
        found = None
        for known, who in self._tokens.items():  # constant time per known token
            if hmac.compare_digest(known.encode(), token.encode()):
                found = who
        return found


async def _refuse(send: Send) -> None:
    body = b'{"error": "unauthorized: a known bearer token is required"}'
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", b'Bearer realm="sharedesk"'),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
