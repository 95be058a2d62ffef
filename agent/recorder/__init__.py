"""The flight recorder and fleet metrics (docs/recorder.md).

``recorder`` the thread and its queues, ``feeds`` its event-loop tasks, ``writer`` the MCAP files,
``channels`` topics and schemas, ``incidents``, ``export``, ``metrics`` (/metrics), ``web`` the
console's routes, ``cli`` ``robot-agent incidents`` / ``export``.
"""
