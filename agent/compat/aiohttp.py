"""aiohttp internals (pyproject.toml: ``aiohttp>=3.14,<3.15``; tested 3.14.5).

A client websocket's asyncio transport (its writer's), to read its write buffer and shrink the
kernel send buffer (agent/video/links.py).
"""

from __future__ import annotations

from typing import Any

__all__ = ["PRIVATE", "websocket_transport"]

#: ``(owner, attribute)``: every private attribute of aiohttp this module reaches.
PRIVATE: tuple[tuple[str, str], ...] = (
    ("aiohttp.ClientWebSocketResponse()", "_writer"),
    ("aiohttp WebSocketWriter", "transport"),
)


def websocket_transport(ws: Any) -> Any:
    """The asyncio transport under an ``aiohttp.ClientWebSocketResponse`` (or None), or None."""
    return getattr(getattr(ws, "_writer", None), "transport", None)
