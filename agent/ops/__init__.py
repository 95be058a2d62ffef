"""Operating the agent as a service (docs/architecture.md, "Layers").

The systemd service around the app (:mod:`agent.ops.service`), the status file and
``robot-agent status`` (:mod:`agent.ops.status`), the e-stop control socket
(:mod:`agent.ops.estopctl`), the e-stop kept across restarts (:mod:`agent.ops.estopstore`), the
command line's logging (:mod:`agent.ops.logs`). The top layer:
imports agent.app and below; nothing imports it but ``agent.__main__``.
"""
