"""Device I/O: the drivers' owners (docs/architecture.md, "Layers").

Builds drivers from their config sections (:mod:`agent.devices.build`, :mod:`agent.devices.hardware`),
runs their blocking I/O off the event loop on device threads (:mod:`agent.devices.worker`: the
motor controller, :mod:`agent.devices.motorio`; each I2C bus, :mod:`agent.devices.i2cbus`; and
:mod:`agent.devices.estopinput`), supervises and reopens them (:mod:`agent.devices.supervisor`,
:mod:`agent.devices.health`), and the in-process simulated tank (:mod:`agent.devices.simtank`).
``robot-agent probe`` and ``robot-agent selftest`` live here too (:mod:`agent.devices.probe`,
:mod:`agent.devices.selftest`). Imports drivers/, agent.config, agent.model, agent.errors and
agent.support; nothing above.
"""
