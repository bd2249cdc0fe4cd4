"""Who a web request is: participants named ``KIND:ID[:LABEL]`` and the tokens file.

A tokens file holds one ``TOKEN KIND:ID[:LABEL]`` a line (``#`` starts a comment, blank
lines are skipped), as for ``sharedesk mcp``. Tokens are kept only as SHA-256 digests, so
looking one up takes the same time whatever it shares with a known one.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import msgspec

from sharedesk.protocol.authors import Agent, Operator, Person, SessionAuthor
from sharedesk.protocol.errors import ValidationError
from sharedesk.protocol.validation import check_author

__all__ = ["Tokens", "parse_participant"]


def parse_participant(text: str, *, label: bool = True) -> SessionAuthor:
    """Parse ``KIND:ID[:LABEL]`` (``person``, ``agent``) or ``operator``.

    Args:
        text: The participant as written.
        label: Whether a third part is the label (else it belongs to the id).

    Returns:
        The author; the label defaults to the id.

    Raises:
        ValidationError: Another kind, an empty id or label, or a malformed string.

    Cost: O(len(text)).
    """
    if text == "operator":
        return Operator()
    kind, _, rest = text.partition(":")
    ident, _, name = rest.partition(":") if label else (rest, "", "")
    if kind not in ("person", "agent") or not ident:
        raise ValidationError(
            f"a participant is person:ID[:LABEL] or agent:ID[:LABEL], got {text!r}"
        )
    author: SessionAuthor
    name = name or ident
    author = Person(id=ident, label=name) if kind == "person" else Agent(id=ident, label=name)
    return check_author(author)


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


class Tokens(msgspec.Struct, frozen=True):
    """The known tokens of a server, each naming the participant its holder acts as.

    Attributes:
        holders: SHA-256 digest of each token -> its participant.
    """

    holders: dict[bytes, Any]

    @classmethod
    def parse(cls, text: str) -> Tokens:
        """Read a tokens file's text (``TOKEN KIND:ID[:LABEL]`` a line).

        Raises:
            ValidationError: A malformed line (named by its number, never by its token),
                a token given twice, or no token at all.

        Cost: O(len(text)).
        """
        holders: dict[bytes, SessionAuthor] = {}
        for number, line in enumerate(text.splitlines(), 1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            if len(words) != 2:
                raise ValidationError(f"tokens line {number}: expected TOKEN KIND:ID[:LABEL]")
            token, who = words
            try:
                author = parse_participant(who)
            except ValidationError as exc:
                raise ValidationError(f"tokens line {number}: {exc}") from None
            if isinstance(author, Operator):
                raise ValidationError(f"tokens line {number}: a token names a person or agent")
            if _digest(token) in holders:
                raise ValidationError(f"tokens line {number}: a token given twice")
            holders[_digest(token)] = author
        if not holders:
            raise ValidationError("the tokens file holds no token")
        return cls(holders=holders)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Tokens:
        """Read the tokens file at ``path`` (``OSError`` if unreadable; see :meth:`parse`)."""
        with open(path, encoding="utf-8") as file:
            return cls.parse(file.read())

    def holder(self, token: str | None) -> SessionAuthor | None:
        """Return the participant of ``token``, or ``None`` for an unknown one. Cost: O(1)."""
        if not token:
            return None
        author: SessionAuthor | None = self.holders.get(_digest(token))
        return author
