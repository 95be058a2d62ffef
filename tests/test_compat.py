"""Every private attribute the agent reaches in a library still exists on the installed version
(agent/compat: one module per library, each listing what it reaches in ``PRIVATE``).

An upgrade that removes or renames one fails here, naming the library, its version and the
attribute, instead of in the field. The owners are live objects: classes, and instances built
the way the agent builds them (a real websocket connection on loopback where the attribute only
exists on a connected one). A second test keeps the private names inside agent/compat.
"""

from __future__ import annotations

import ast
import asyncio
import importlib.metadata as md
from typing import Any

import aiohttp
import engineio
import engineio.base_client
import pytest
import socketio
import websockets.asyncio.client
import websockets.asyncio.server
from aiohttp import web

from agent.compat import aiohttp as aiohttp_compat
from agent.compat import engineio as engineio_compat
from agent.compat import socketio as socketio_compat
from agent.compat import websockets as websockets_compat
from agent.testing.ports import free_port
from tests.conftest import ROOT

#: library (distribution) -> its compat module
COMPAT = {"python-socketio": socketio_compat, "python-engineio": engineio_compat, "aiohttp": aiohttp_compat,
          "websockets": websockets_compat}


async def _socketio_owners() -> dict[str, Any]:
    server = socketio.AsyncServer(async_mode="aiohttp")
    return {"socketio.AsyncClient": socketio.AsyncClient, "socketio.AsyncClient()": socketio.AsyncClient(),
            "socketio.AsyncServer": socketio.AsyncServer, "socketio.AsyncServer()": server,
            "socketio.AsyncServer().manager": server.manager}


async def _engineio_owners() -> dict[str, Any]:
    return {"engineio.base_client": engineio.base_client, "engineio.AsyncClient()": engineio.AsyncClient(),
            "asyncio.Queue()": asyncio.Queue()}


async def _aiohttp_owners() -> dict[str, Any]:
    async def echo(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for _ in ws:
            pass
        return ws

    app = web.Application()
    app.router.add_get("/", echo)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        async with aiohttp.ClientSession() as session, session.ws_connect(f"http://127.0.0.1:{port}/") as ws:
            owners = {"aiohttp.ClientWebSocketResponse()": ws}
            owners["aiohttp WebSocketWriter"] = getattr(ws, "_writer", None)
            return owners
    finally:
        await runner.cleanup()


async def _websockets_owners() -> dict[str, Any]:
    async def echo(conn: Any) -> None:
        async for _ in conn:
            pass

    port = free_port()
    async with websockets.asyncio.server.serve(echo, "127.0.0.1", port):
        async with websockets.asyncio.client.connect(f"ws://127.0.0.1:{port}/") as conn:
            return {"websockets.asyncio.client.ClientConnection()": conn,
                    "websockets.protocol.Protocol()": getattr(conn, "protocol", None)}


OWNERS = {"python-socketio": _socketio_owners, "python-engineio": _engineio_owners, "aiohttp": _aiohttp_owners,
          "websockets": _websockets_owners}


def missing(library: str, owners: dict[str, Any]) -> list[str]:
    """``owner.attribute`` of every entry of the library's PRIVATE that the installed version lacks."""
    out = []
    for owner, attr in COMPAT[library].PRIVATE:
        assert owner in owners, f"tests/test_compat.py builds no live {owner!r} for {library}"
        if owners[owner] is None or not hasattr(owners[owner], attr):
            out.append(f"{owner}.{attr}")
    return out


@pytest.mark.parametrize("library", sorted(COMPAT))
async def test_every_private_attribute_the_agent_reaches_exists(library):
    gone = missing(library, await OWNERS[library]())
    module = COMPAT[library].__name__.replace(".", "/") + ".py"
    assert not gone, (f"{library} {md.version(library)} lacks {', '.join(gone)}, which {module} relies on: "
                      f"adapt {module} to this version (or keep the version bound in pyproject.toml)")


def test_a_removed_attribute_is_named(monkeypatch):
    """The check above can fail: an attribute the installed library lacks is reported by name."""
    monkeypatch.setattr(socketio_compat, "PRIVATE", socketio_compat.PRIVATE + (("socketio.AsyncClient", "_gone"),))
    assert missing("python-socketio", asyncio.run(_socketio_owners())) == ["socketio.AsyncClient._gone"]


def _own_attributes(tree: ast.AST) -> set[str]:
    """Names a module assigns on ``self`` (its own attributes, e.g. ``self._writer = ...``)."""
    out = set()
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) else []
        out |= {t.attr for t in targets if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                and t.value.id == "self"}
    return out


def private_uses(path, names: set[str]) -> list[str]:
    """``file:line: name`` of every use of a name in ``names`` in ``path``: an attribute, a method
    defined (an override) or a string (``getattr``), except the module's own ``self`` attributes."""
    tree = ast.parse(path.read_text(), str(path))
    names = names - _own_attributes(tree)
    found = []
    for node in ast.walk(tree):
        name = node.attr if isinstance(node, ast.Attribute) else node.name if isinstance(
            node, ast.FunctionDef | ast.AsyncFunctionDef) else None
        if name is None and isinstance(node, ast.Constant) and isinstance(node.value, str):
            name = node.value
        if name in names:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
    return found


def test_private_library_attributes_are_reached_only_from_agent_compat():
    names = {attr for mod in COMPAT.values() for _, attr in mod.PRIVATE if attr.startswith("_")}
    compat = ROOT / "agent" / "compat"
    found = [use for path in sorted((ROOT / "agent").rglob("*.py")) if compat not in path.parents
             for use in private_uses(path, names)]
    assert not found, f"private library attributes outside agent/compat: {found}"


def test_a_private_use_outside_compat_is_found(tmp_path, monkeypatch):
    monkeypatch.setattr("tests.test_compat.ROOT", tmp_path)
    planted = tmp_path / "agent" / "adapters" / "planted.py"
    planted.parent.mkdir(parents=True)
    planted.write_text("def backlog(eio):\n    return eio.queue._unfinished_tasks\n")
    assert private_uses(planted, {"_unfinished_tasks"}) == ["agent/adapters/planted.py:2: _unfinished_tasks"]
