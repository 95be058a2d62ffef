"""Free loopback ports for peers started by tests and benchmarks."""

from __future__ import annotations

import socket

__all__ = ["free_port", "free_ports"]


def free_ports(count: int) -> list[int]:
    """``count`` distinct port numbers free on 127.0.0.1 for TCP and UDP right now.

    Every pick stays bound until all are picked, so one call never returns a port twice
    (separate ``free_port()`` calls may: the kernel can hand a just-released port out again).
    """
    held: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < count:
            tcp = socket.socket()
            held.append(tcp)
            tcp.bind(("127.0.0.1", 0))
            port = tcp.getsockname()[1]
            udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            held.append(udp)
            try:
                udp.bind(("127.0.0.1", port))
            except OSError:
                continue                     # taken for UDP: keep it held, pick another
            ports.append(port)
    finally:
        for s in held:
            s.close()
    return ports


def free_port() -> int:
    """A port free on 127.0.0.1 (TCP and UDP) right now."""
    return free_ports(1)[0]
