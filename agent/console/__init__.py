"""Local operator console in the browser: see, drive and stop the tank (docs/console.md).

:func:`build_console` makes the ``console`` adapter for the agent (agent.app); the page,
its script and style are in ``static/``.
"""

from agent.console.server import Console, build_console

__all__ = ["Console", "build_console"]
