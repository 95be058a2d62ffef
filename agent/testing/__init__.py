"""Peers and helpers shared by the tests and the benchmarks under scripts/.

Not used by the agent at run time. :mod:`agent.testing.artex_hub` (an ARTEX
Socket.IO hub), :mod:`agent.testing.sim2bot_bridge` (the real ``sim2bot bridge``
as a subprocess), :mod:`agent.testing.running_agent` (the shipped simulated-tank
config and a running :class:`agent.app.Agent`), :mod:`agent.testing.ports` (free
loopback ports) and :mod:`agent.testing.clock` (a virtual clock and sleep for
periodic loops).
"""
