"""A Socket.IO client that a hostile or broken ARTEX hub cannot wedge.

python-socketio's ``AsyncClient`` trusts its server: a binary-event header whose
attachments never come makes it swallow every later message as the missing
attachment (a ``stop`` included, or worse: the stop completes a pending
``forward``); an event named ``connect`` or ``disconnect`` reaches the client's
own handlers; ``2/robot,{}``, ``2/robot,null``, ``7/robot,[]`` or ``8`` end the
per-message task with "Task exception was never retrieved"; ``4true`` (a
CONNECT_ERROR for ``/``) marks the client disconnected while the socket lives.

:class:`HubClient` subclasses it (nothing is patched globally) and checks every
Engine.IO message before python-socketio sees it:

- attachments are always binary, so a text message while attachments are awaited
  ends the pending binary packet: it is discarded and counted, and the text
  message is handled as what it is; a pending packet older than
  :data:`ATTACHMENT_WAIT_S` is discarded too;
- a declared attachment count must be 1..:data:`MAX_ATTACHMENTS` and equal the
  placeholders in the data; a binary message nobody waits for is discarded;
- events must be a list whose first item is a string that is not a reserved
  name (:data:`RESERVED_EVENTS`); acks must carry a list;
- CONNECT / CONNECT_ERROR only for a namespace being connected; DISCONNECT only
  for a connected one (a kick is honoured);
- a JSON object that gives a key twice (``{"vx": 0, "vx": 0.9}``) is refused, never read as its
  last value (agent.support.jsonkeys); a ``command`` event that is a stop in either reading (the
  first or the last value of each repeated key) is handed on as that stop (stop always wins), with
  a WARNING naming the key; the same for a stop sent as a binary event, once its attachments came;
- anything that still raises (decoding, a handler) is caught.

Every such fault is reported as ``on_fault(kind, detail)`` (the adapter logs it
once per kind and counts it); ``detail`` is already escaped and clipped. A repeated key adds a third
argument, ``key 'vx'``: the adapter's next line of the kind names those it held back.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable

import socketio
from engineio import json as eio_json
from socketio import packet as sio_packet

from agent.compat import engineio as eio_compat
from agent.compat.socketio import HookedAsyncClient
from agent.support.jsonkeys import RepeatedKey, first_keys, unique_keys
from agent.support.ratelimit import RateLimitedLog, safe

log = logging.getLogger(__name__)

__all__ = ["ATTACHMENT_WAIT_S", "MAX_ATTACHMENTS", "RESERVED_EVENTS", "HubClient", "HubPacket", "HubRefused",
           "KickCounter"]

#: Most binary attachments one packet may declare (the ARTEX hub sends none; the agent's video has one per camera).
MAX_ATTACHMENTS = 16
#: A binary packet still missing attachments after this long is discarded, s.
ATTACHMENT_WAIT_S = 1.0
#: Event names the client library uses itself; a hub event by one of these names is refused.
RESERVED_EVENTS = frozenset({"connect", "connect_error", "disconnect", "__disconnect_final", "message", "*"})

#: A session the hub ends (server-side disconnect) within this long of connecting counts as a kick, s.
KICK_WINDOW_S = 30.0

Fault = Callable[..., None]
#: ``is_stop_event(data)``: whether an event (``[name, *args]``) is a stop the robot must obey
StopCheck = Callable[[list], bool]


class HubRefused(ConnectionError):
    """The hub refused the robot on purpose: the namespace connect was rejected (a CONNECT_ERROR:
    auth refused), or the hub kicked the robot twice in a row (:class:`KickCounter`). The
    Reconnector waits its longer ``refused_s`` period after it and says so at WARNING once."""


class KickCounter:
    """Tells a kick from a hub restart: one server-side disconnect reconnects at once; a second in a
    row, each within :data:`KICK_WINDOW_S` of connecting, is a refusal.

    Args:
        clock: monotonic clock, s.
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._up_at = 0.0
        self.kicks = 0

    def up(self) -> None:
        """A session is up."""
        self._up_at = self._clock()

    def ended(self, by_server: bool) -> None:
        """The session ended; raises :class:`HubRefused` at the second quick server-side disconnect."""
        if not by_server:
            self.kicks = 0
            return
        self.kicks = self.kicks + 1 if self._clock() - self._up_at < KICK_WINDOW_S else 1
        if self.kicks >= 2:
            raise HubRefused(f"kicked: the hub disconnected the robot {self.kicks} times in a row, each "
                             f"within {KICK_WINDOW_S:.0f} s of connecting")


#: python-socketio's packet separators, as one encoder kept (``json.dumps`` with any argument builds a new
#: one per call) that skips the circular-reference bookkeeping (packets are trees): the same text, ~40 %
#: less CPU per ``telem``.
_COMPACT = json.JSONEncoder(separators=(",", ":"), check_circular=False)
_PACKET_ARGS = {"separators": (",", ":")}


def _dumps(obj: object, **kwargs) -> str:
    if kwargs == _PACKET_ARGS:
        return _COMPACT.encode(obj)
    return eio_json.dumps(obj, **kwargs)


class _Json:
    """engineio's ``json`` (the text of its ``dumps`` unchanged: the wire bytes stay the library's) whose
    ``loads`` builds objects with ``hook`` (an ``object_pairs_hook``)."""

    dumps = staticmethod(_dumps)

    def __init__(self, hook: Callable[[list], dict]) -> None:
        self._hook = hook

    def loads(self, text: str, **kwargs) -> object:
        return eio_json.loads(text, object_pairs_hook=self._hook, **kwargs)


#: Types :meth:`HubPacket.data_is_binary` passes over at once (never binary, never containers).
_SCALARS = frozenset({str, int, float, bool, type(None)})


class HubPacket(sio_packet.Packet):
    """A packet class whose decoding errors are :class:`ValueError` only (RecursionError too); a key
    given twice in an object raises :class:`agent.support.jsonkeys.RepeatedKey` (a ValueError)."""

    json = _Json(unique_keys)

    def decode(self, encoded_packet: str) -> int:
        try:
            return super().decode(encoded_packet)
        except RecursionError as err:
            raise ValueError(f"nesting too deep: {err}") from err

    @classmethod
    def data_is_binary(cls, data: object) -> bool:
        """python-socketio's answer (bytes or bytearray anywhere within the lists and dicts of
        ``data``: a binary event), found without its list per level and call per value: scalars are
        passed over by their type, the walk stops at the first bytes. Every ``emit`` asks it (a
        ``telem`` dict has ~60 values)."""
        stack = [data]
        while stack:
            item = stack.pop()
            if type(item) in _SCALARS:
                continue
            if isinstance(item, (bytes, bytearray)):
                return True
            if isinstance(item, list):
                stack.extend(item)
            elif isinstance(item, dict):
                stack.extend(item.values())
        return False


class _FirstReading(sio_packet.Packet):
    """The packet as a parser that keeps the first value of a repeated key reads it."""

    json = _Json(first_keys)


class _LastReading(sio_packet.Packet):
    """The packet as python-socketio's own parser reads it (the last value of a repeated key)."""


def _placeholders(data: object, depth: int = 0) -> int:
    """How many binary placeholders ``data`` holds (bounded depth: decoded JSON is finite)."""
    if depth > 64:
        raise ValueError("nesting too deep")
    if isinstance(data, dict):
        if data.get("_placeholder") is True and "num" in data:
            return 1
        return sum(_placeholders(v, depth + 1) for v in data.values())
    if isinstance(data, list):
        return sum(_placeholders(v, depth + 1) for v in data)
    return 0


class HubClient(HookedAsyncClient):
    """``socketio.AsyncClient`` with checked packet handling (see the module docstring).

    Args:
        on_fault: ``on_fault(kind, detail)`` for every discarded message; kinds: ``undecodable``,
            ``repeated_key``, ``incomplete_binary``, ``stray_attachment``, ``bad_attachments``, ``bad_event``,
            ``reserved_event``, ``bad_ack``, ``unexpected_connect``, ``unknown_type``, ``handler_error``.
        attachment_wait_s: how long a binary packet may wait for its attachments, s.
        is_stop_event: which events are stops, obeyed even with a key given twice (default: none).
        kwargs: ``socketio.AsyncClient`` arguments.
    """

    def __init__(self, *, on_fault: Fault, attachment_wait_s: float = ATTACHMENT_WAIT_S,
                 is_stop_event: StopCheck | None = None, **kwargs) -> None:
        super().__init__(serializer=HubPacket, **kwargs)
        self._on_fault = on_fault
        self._is_stop_event = is_stop_event
        self._warn = RateLimitedLog(log)
        self._attachment_wait_s = attachment_wait_s
        self._binary_timer: asyncio.TimerHandle | None = None
        #: what the hub said when it rejected the namespace connect (a CONNECT_ERROR packet), else None
        self.refusal: str | None = None

    async def eio_message(self, data: str | bytes) -> None:
        try:
            await self._checked_message(data)
        except asyncio.CancelledError:
            raise
        except Exception as err:  # a handler or the library failed on hub input: never an unretrieved task
            log.debug("ARTEX: message handling failed", exc_info=True)
            self._on_fault("handler_error", f"{type(err).__name__}: {safe(str(err), 120)}")

    async def _checked_message(self, data: str | bytes) -> None:
        if self.pending_binary is not None:
            if isinstance(data, (bytes, bytearray)):
                await self._attachment(data)
                return
            self._drop_binary("a text message came instead of an attachment")
        elif isinstance(data, (bytes, bytearray)):
            self._on_fault("stray_attachment", f"a binary message of {len(data)} bytes nobody waited for")
            return
        try:
            pkt = self.packet_class(encoded_packet=data)
        except RepeatedKey as err:
            await self._repeated_key(data, err)
            return
        except ValueError as err:
            self._on_fault("undecodable", f"undecodable packet from the hub: {safe(str(err), 120)}")
            return
        problem = self._problem(pkt)
        if problem is not None:
            self._on_fault(problem[0], f"{problem[1]}: {safe(data, 80)}")
            return
        if pkt.packet_type in (sio_packet.BINARY_EVENT, sio_packet.BINARY_ACK):
            self._await_attachments(pkt)
            return
        await self.library_eio_message(data)

    def _await_attachments(self, pkt: sio_packet.Packet) -> None:
        """A checked binary packet waits for its attachments (at most ``attachment_wait_s``)."""
        self.pending_binary = pkt
        self._binary_timer = asyncio.get_running_loop().call_later(
            self._attachment_wait_s, self._drop_binary, "its attachments did not come in time", pkt)

    async def _repeated_key(self, data: str, err: RepeatedKey) -> None:
        """A packet with a key given twice: refused, unless it is a stop event in either reading; a stop
        sent as a binary event (type 5) then waits for its attachments as any binary event does."""
        stop = self._stop_reading(data)
        what = f"key '{err.key}'"                 # escaped where it is logged (RateLimitedLog)
        if stop is None:
            self._on_fault("repeated_key", f"{err}: {safe(data, 80)}", what)
            return
        self._warn.log(logging.WARNING, "repeated_key_stop", "ARTEX: %s; the stop in it is obeyed (stop always "
                       "wins): %s", err, safe(data, 80), detail=what)
        if stop.packet_type == sio_packet.BINARY_EVENT:
            self._await_attachments(stop)
        else:
            await self.dispatch_event(stop.namespace, stop.id, stop.data)

    def _stop_reading(self, data: str) -> sio_packet.Packet | None:
        """The reading of ``data`` that is a stop event (first or last value of each repeated key), or None."""
        if self._is_stop_event is None:
            return None
        for reading in (_FirstReading, _LastReading):
            try:
                pkt = reading(encoded_packet=data)
            except (ValueError, RecursionError):
                return None
            if (pkt.packet_type in (sio_packet.EVENT, sio_packet.BINARY_EVENT) and self._problem(pkt) is None
                    and self._is_stop_event(pkt.data)):
                return pkt
        return None

    async def _attachment(self, data: bytes) -> None:
        pkt = self.pending_binary
        if not pkt.add_attachment(data):
            return
        self._clear_binary()
        if pkt.packet_type == sio_packet.BINARY_EVENT:
            await self.dispatch_event(pkt.namespace, pkt.id, pkt.data)
        else:
            await self.dispatch_ack(pkt.namespace, pkt.id, pkt.data)

    def _clear_binary(self) -> None:
        self.pending_binary = None
        if self._binary_timer is not None:
            self._binary_timer.cancel()
            self._binary_timer = None

    def _drop_binary(self, why: str, pkt: object = None) -> None:
        pending = self.pending_binary
        if pending is None or (pkt is not None and pkt is not pending):
            return
        self._clear_binary()
        self._on_fault("incomplete_binary", f"binary packet with {len(pending.attachments)} of "
                       f"{pending.attachment_count} attachments discarded: {why}")

    def _problem(self, pkt: sio_packet.Packet) -> tuple[str, str] | None:
        """Why a decoded packet must not reach python-socketio, or None."""
        kind, nsp = pkt.packet_type, pkt.namespace or "/"
        if kind in (sio_packet.EVENT, sio_packet.BINARY_EVENT):
            data = pkt.data
            if not isinstance(data, list) or not data or not isinstance(data[0], str):
                return "bad_event", "an event must be a list starting with its name"
            if data[0] in RESERVED_EVENTS:
                return "reserved_event", f"event name {safe(data[0], 40)} is reserved"
        elif kind in (sio_packet.ACK, sio_packet.BINARY_ACK):
            if not isinstance(pkt.data, list):
                return "bad_ack", "an ack must carry a list"
        elif kind in (sio_packet.CONNECT, sio_packet.CONNECT_ERROR):
            if nsp not in self.connection_namespaces or nsp in self.namespaces:
                return "unexpected_connect", f"CONNECT/CONNECT_ERROR for {safe(nsp, 40)} outside a connect"
        elif kind == sio_packet.DISCONNECT:
            if nsp not in self.namespaces:
                return "unexpected_connect", f"DISCONNECT for {safe(nsp, 40)}, not connected"
        else:
            return "unknown_type", f"unknown packet type {safe(kind, 20)}"
        if kind in (sio_packet.BINARY_EVENT, sio_packet.BINARY_ACK):
            count = pkt.attachment_count
            if not 1 <= count <= MAX_ATTACHMENTS:
                return "bad_attachments", f"{count} attachments declared, 1..{MAX_ATTACHMENTS} allowed"
            if _placeholders(pkt.data) != count:
                return "bad_attachments", f"{count} attachments declared, {_placeholders(pkt.data)} placeholders"
        return None

    async def connect_refused(self, namespace, data) -> None:
        """A CONNECT_ERROR from the hub (not a network failure, which the library also reports as
        ``connect_error``): remembered as :attr:`refusal`."""
        self.refusal = safe(data if data is not None else "no reason given", 200)
        await super().connect_refused(namespace, data)

    async def transport_lost(self, reason) -> None:
        self._clear_binary()
        await super().transport_lost(reason)

    async def close(self, timeout_s: float = 0.5) -> None:
        """Disconnect politely within ``timeout_s`` s, else drop the transport: never longer, no
        "Unclosed client session" (the aiohttp session is closed either way). Never raises."""
        if not eio_compat.read_loop_started(self.eio):
            # cancelled mid-connect (the agent stopping): python-engineio's disconnect would await a
            # read loop it has not started yet (TypeError: NoneType can't be used in 'await')
            await self._drop_transport()
            return
        try:
            async with asyncio.timeout(timeout_s):
                await self.disconnect()
        except (TimeoutError, OSError, socketio.exceptions.SocketIOError) as err:
            log.debug("ARTEX: polite disconnect failed (%s); dropping the transport", type(err).__name__)
        except asyncio.CancelledError:
            await self._drop_transport()
            raise
        await self._drop_transport()

    async def _drop_transport(self) -> None:
        self.connected = False
        no_namespaces: dict[str, str] = {}
        self.namespaces = no_namespaces
        self._clear_binary()
        await eio_compat.drop_transport(self.eio)


#: resolver errors (glibc gai_strerror texts, as aiohttp's ClientConnectorError repeats them)
UNRESOLVED = ("Name or service not known", "Temporary failure in name resolution", "No address associated",
              "nodename nor servname", "getaddrinfo failed")


def unresolved_hint(server: object, err: BaseException) -> str:
    """Advice for the first failed connection to ``server``: a hub name that does not resolve (the
    examples' placeholder ``http://artex.arcon`` included) says what to set; "" for other errors."""
    if any(w in str(err) for w in UNRESOLVED):
        return (f"the hub's host name in `server` ({server}) does not resolve: set `server` in "
                "params.json to your ARTEX hub (http://artex.arcon is the SDK's default, a placeholder off its "
                "network) or to null to turn ARTEX off; said once, retried quietly")
    return ""
