"""Small utilities every layer uses (docs/architecture.md, "Layers").

Rate-limited logging and backoff (:mod:`agent.support.ratelimit`), the reconnect loop of every
link (:mod:`agent.support.reconnect`), atomic file writes (:mod:`agent.support.atomicfile`),
returning freed heap to the OS (:mod:`agent.support.heap`), per-thread nice values
(:mod:`agent.support.threadprio`), the in-memory log tail (:mod:`agent.support.logtail`) and the
command line's Ctrl-C handling (:mod:`agent.support.sigint`).
Imports only the standard library and agent.ports.
"""
