"""python-socketio internals (pyproject.toml: ``python-socketio>=5.18,<5.19``; tested 5.18.1).

:class:`HookedAsyncClient` reaches ``socketio.AsyncClient``'s private packet handlers through
public-named methods, so the agent's :class:`agent.adapters.artex_client.HubClient` subclasses it
without naming a private attribute; :class:`AckHookServer` does the same for the one server hook the
test hub (agent/testing/artex_hub.py) overrides.
"""

from __future__ import annotations

from typing import Any

import socketio

__all__ = ["PRIVATE", "AckHookServer", "HookedAsyncClient"]

#: ``(owner, attribute)``: every private attribute of python-socketio this module reaches.
PRIVATE: tuple[tuple[str, str], ...] = (
    ("socketio.AsyncClient", "_handle_eio_message"),
    ("socketio.AsyncClient", "_handle_error"),
    ("socketio.AsyncClient", "_handle_eio_disconnect"),
    ("socketio.AsyncClient", "_handle_event"),
    ("socketio.AsyncClient", "_handle_ack"),
    ("socketio.AsyncClient()", "_binary_packet"),
    ("socketio.AsyncServer", "_handle_event_internal"),
    ("socketio.AsyncServer()", "eio"),
    ("socketio.AsyncServer().manager", "eio_sid_from_sid"),
)


class HookedAsyncClient(socketio.AsyncClient):
    """``socketio.AsyncClient`` with its private packet handlers behind public-named methods.

    Override :meth:`eio_message`, :meth:`connect_refused` or :meth:`transport_lost`; call the
    ``library_*`` methods for the library's own handling, :meth:`dispatch_event` /
    :meth:`dispatch_ack` to hand a complete packet on, :attr:`pending_binary` for the binary
    packet still waiting for attachments.
    """

    # -- the library's private hooks, routed to the public-named methods below
    async def _handle_eio_message(self, data: str | bytes) -> None:
        await self.eio_message(data)

    async def _handle_error(self, namespace: str, data: Any) -> None:
        await self.connect_refused(namespace, data)

    async def _handle_eio_disconnect(self, reason: Any) -> None:
        await self.transport_lost(reason)

    # -- override points (default: the library's handling)
    async def eio_message(self, data: str | bytes) -> None:
        """One Engine.IO message (text packet or binary attachment) from the server."""
        await self.library_eio_message(data)

    async def connect_refused(self, namespace: str, data: Any) -> None:
        """A CONNECT_ERROR for ``namespace`` (or a failed connect the library reports the same way)."""
        await socketio.AsyncClient._handle_error(self, namespace, data)

    async def transport_lost(self, reason: Any) -> None:
        """The Engine.IO connection ended (``reason`` as the library gives it)."""
        await socketio.AsyncClient._handle_eio_disconnect(self, reason)

    # -- the library's own handling
    async def library_eio_message(self, data: str | bytes) -> None:
        """python-socketio's handling of one Engine.IO message."""
        await socketio.AsyncClient._handle_eio_message(self, data)

    async def dispatch_event(self, namespace: str | None, id: int | None, data: Any) -> None:
        """Hand a decoded event to the registered handlers."""
        await self._handle_event(namespace, id, data)

    async def dispatch_ack(self, namespace: str | None, id: int | None, data: Any) -> None:
        """Hand a decoded acknowledgement to the waiting callback."""
        await self._handle_ack(namespace, id, data)

    @property
    def pending_binary(self) -> Any:
        """The binary packet waiting for its attachments, or None."""
        return self._binary_packet

    @pending_binary.setter
    def pending_binary(self, pkt: Any) -> None:
        self._binary_packet = pkt


class AckHookServer(socketio.AsyncServer):
    """``socketio.AsyncServer`` whose event handling may drop the client's ack request:
    :meth:`ack_wanted` decides per event (default: as asked)."""

    async def _handle_event_internal(self, server, sid, eio_sid, data, namespace, id):  # noqa: A002
        if id is not None and not self.ack_wanted(data):
            id = None  # noqa: A001
        return await super()._handle_event_internal(server, sid, eio_sid, data, namespace, id)

    def ack_wanted(self, data: Any) -> bool:
        """Whether an event asking for an ack (``data``: ``[name, *args]``) gets one."""
        return True

    async def send_raw(self, sid: str, namespace: str, message: str | bytes) -> None:
        """Send one raw Engine.IO message to the client connected as ``sid`` on ``namespace``."""
        await self.eio.send(self.manager.eio_sid_from_sid(sid, namespace), message)
