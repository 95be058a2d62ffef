"""websockets internals (pyproject.toml: ``websockets>=17,<18``; tested 17.4).

agent/video/wsframes.py writes its own frames on a client connection's transport (the
library's ``send`` is not used for data meanwhile); it needs the transport and whether the
connection is open.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PRIVATE", "is_connection", "is_open", "transport"]

#: ``(owner, attribute)``: every undocumented attribute of websockets this module reaches.
PRIVATE: tuple[tuple[str, str], ...] = (
    ("websockets.asyncio.client.ClientConnection()", "transport"),
    ("websockets.asyncio.client.ClientConnection()", "protocol"),
    ("websockets.protocol.Protocol()", "state"),
)


def is_connection(obj: Any) -> bool:
    """``obj`` is a websockets asyncio connection (has a transport and a Sans-I/O protocol)."""
    return hasattr(obj, "transport") and hasattr(obj, "protocol")


def transport(connection: Any) -> Any:
    """The asyncio transport of a websockets connection (or None), or None."""
    return getattr(connection, "transport", None)


def is_open(connection: Any) -> bool:
    """The connection still takes data: OPEN and its transport not closing."""
    tr = transport(connection)
    return tr is not None and not tr.is_closing() and connection.protocol.state.name == "OPEN"
