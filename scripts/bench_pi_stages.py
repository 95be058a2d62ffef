"""Where a bench_pi trial's time goes, stage by stage (bench-only instrumentation of the agent's child).

The agent's child stamps (``time.monotonic()``, CLOCK_MONOTONIC: comparable with the parent's send
times) what each command passes on its way to the motor, with wrappers set here and nothing in the
agent's own code:

    send      the parent sent the command (its trial's start)
    loop      robot_msg only: the receiving side woke with a message waiting: the socket's receiving
              thread (agent/adapters/robotmsg_receive.py), or in a tree that reads robot_msg on the
              event loop, the loop ran the ZeroMQ socket's event handler for a SUB socket
    read      robot_msg only: the adapter took the message to decode it
    submit    the adapter handed the command to ControlLoop.submit
    tick      the control tick that applies it started
    post      the tick posted the duty to the motor thread
    write     the motor thread started writing the duty packet (the line was free)
    receipt   the motor emulator applied the duty (its thread read the packet); the wire time of
              the packet is taken off this stage (bench_pi's figures are net of it)

:func:`stage_rows` matches each trial to the first stamp of each kind after the previous one;
:func:`print_stages` prints every stage's p50 / p99 per protocol and the slowest trials stage by stage.
"""

from __future__ import annotations

import time

#: Stage names, in order (see the module docstring); "loop" and "read" only for robot_msg.
STAGES = ("send", "loop", "read", "submit", "tick", "post", "write", "receipt")


class StageProbe:
    """Stamps of the instrumented calls (see the module docstring), appended from the threads that make them."""

    def __init__(self) -> None:
        self.events: dict[str, list[float]] = {k: [] for k in STAGES[1:-1]}

    def stamp(self, kind: str) -> None:
        self.events[kind].append(time.monotonic())

    def wrap(self, obj: object, name: str, kind: str) -> None:
        """Stamp ``kind`` each time ``obj.name`` is called, before the call."""
        inner = getattr(obj, name)

        def wrapped(*args, **kwargs):
            self.stamp(kind)
            return inner(*args, **kwargs)

        setattr(obj, name, wrapped)

    def watch_zmq(self) -> None:
        """Stamp ``loop`` when a zmq.asyncio SUB socket's event handler runs with a message waiting
        (class-level wrapper: call before the adapter opens its sockets)."""
        import zmq
        import zmq.asyncio

        inner = zmq.asyncio.Socket._handle_events

        def handle_events(sock, fd=0, events=0):
            shadow = sock._shadow_sock
            if not shadow.closed and shadow.type == zmq.SUB and shadow.get(zmq.EVENTS) & zmq.POLLIN:
                self.stamp("loop")
            return inner(sock, fd, events)

        zmq.asyncio.Socket._handle_events = handle_events

    def attach(self, agent) -> None:
        """Wrap the agent's robot_msg adapter (its decode), control tick, motor post and duty write."""
        robotmsg = agent.adapters.get("robot_msg")
        for reader in getattr(robotmsg, "_readers", {}).values():      # receiving threads
            self.wrap(reader, "_wake_up", "loop")
            self.wrap(reader, "_decode", "read")
        if robotmsg is not None and hasattr(robotmsg, "_decode"):      # received on the event loop
            self.wrap(robotmsg, "_decode", "read")
        self.wrap(agent.control._scheduler, "_tick", "tick")
        self.wrap(agent.hardware.motor_io, "post", "post")
        self.wrap(agent.hardware.motor_io.motor.driver, "_write_duty", "write")


def _after(times: list[float], t: float) -> float | None:
    return next((x for x in times if x >= t), None)


def stage_rows(sends: dict[str, list[float]], submits: list, events: dict[str, list[float]],
               receipts: list, limit_s: float) -> dict[str, list[dict[str, float]]]:
    """Per protocol, for each trial whose duty reached the emulator within ``limit_s``: stage -> time, s.

    ``submits``: (time, source) of each non-stop submit; ``receipts``: (time, left, right) of each
    duty the emulator applied. A stage is the first stamp of its kind after the stage before it
    (a tick may start between submit and its own stamp: the tick is the first one after submit).
    """
    out: dict[str, list[dict[str, float]]] = {}
    for proto, times in sends.items():
        rows = []
        for t0 in times:
            row = {"send": t0}
            if proto == "robot_msg":
                row["loop"] = _after(events["loop"], t0)
                row["read"] = _after(events["read"], row["loop"] or t0)
            row["submit"] = next((t for t, src in submits if t > t0 and src == proto), None)
            row["tick"] = _after(events["tick"], row["submit"]) if row["submit"] else None
            row["post"] = _after(events["post"], row["tick"]) if row["tick"] else None
            row["write"] = _after(events["write"], row["post"]) if row["post"] else None
            row["receipt"] = next((t for t, left, right in receipts if t > t0 and (left or right)), None)
            if None in row.values() or row["receipt"] - t0 >= limit_s or row["write"] > row["receipt"]:
                continue
            rows.append(row)
        out[proto] = rows
    return out


def queued_before(ticks: list, t: float) -> float:
    """How long the control thread waited on a run queue between the tick before ``t`` and the first
    tick starting at or after ``t`` (bench_pi_gaps.TickProbe rows), s: a wake-up the kernel delayed,
    as against one that waited for the GIL (asleep, not queued)."""
    i = next((k for k, row in enumerate(ticks) if row[0] >= t - 1e-4), None)
    if not i:
        return 0.0
    return (ticks[i][3] - ticks[i - 1][4]) / 1e9


def print_stages(rows_by_proto: dict[str, list[dict[str, float]]], wire_s: float, pct, worst: int = 3,
                 ticks: list | None = None) -> None:
    """Each stage's p50 / p99 per protocol (the receipt's net of ``wire_s``) and the ``worst`` trials;
    with ``ticks`` (bench_pi_gaps.TickProbe rows), the control thread's run-queue wait before the tick."""
    print("  stage by stage (ms; each stage ends at the stamp named, the receipt's net of the wire; "
          "loop/read: robot_msg's event loop handler and receive task):")
    for proto, rows in rows_by_proto.items():
        if not rows:
            continue
        names = [s for s in STAGES if s in rows[0]]
        cells = []
        for a, b in zip(names, names[1:]):
            values = [r[b] - r[a] - (wire_s if b == "receipt" else 0.0) for r in rows]
            cells.append(f"{b} {pct(values, 50) * 1e3:.2f}/{pct(values, 99) * 1e3:.2f}")
        print(f"    {proto:<9} p50/p99 (n={len(rows)}): " + "  ".join(cells))
        if ticks:
            queued = [queued_before(ticks, r["tick"]) for r in rows]
            print(f"      the control thread on a run queue before the tick: p50 {pct(queued, 50) * 1e3:.2f} "
                  f"p99 {pct(queued, 99) * 1e3:.2f} ms")
        slowest = sorted(rows, key=lambda r: r["receipt"] - r["send"])[-worst:]
        for r in reversed(slowest):
            parts = "  ".join(f"{b} {(r[b] - r[a] - (wire_s if b == 'receipt' else 0.0)) * 1e3:.2f}"
                              for a, b in zip(names, names[1:]))
            queued = f"  (control thread queued {queued_before(ticks, r['tick']) * 1e3:.2f})" if ticks else ""
            print(f"      slow: {(r['receipt'] - r['send'] - wire_s) * 1e3:6.2f} ms = {parts}{queued}")
