"""A hub name that does not resolve (the examples' placeholder ``http://artex.arcon`` off the
ARTEX network): the agent says so once at WARNING, naming ``server`` and what to set, and retries
quietly. ``.invalid`` never resolves (RFC 6761, section 6.4)."""

from __future__ import annotations

import logging

from tests.conftest import running_agent, sim_config, wait_for


async def test_an_unresolvable_hub_name_is_said_once_at_warning(caplog):
    caplog.set_level(logging.DEBUG, logger="agent.adapters.artex")
    params = sim_config(server="http://robot-agent-hub.invalid",
                        artex={"reconnect_delay_s": 0.05, "reconnect_delay_max_s": 0.1})
    async with running_agent(params) as agent:
        link = agent.adapters["artex"]._link
        assert await wait_for(lambda: link.total_failures >= 4, 20), link.last_error
    said = [r for r in caplog.records if "does not resolve" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING, [r.getMessage() for r in said]
    assert "robot-agent-hub.invalid" in said[0].getMessage() and "set `server`" in said[0].getMessage()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "ARTEX: connection" in r.getMessage()]
    assert len(warnings) == 1                                              # not one per retry
