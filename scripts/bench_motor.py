#!/usr/bin/env python3
"""Benchmark the serial motor drivers against their pty emulators.

For RoboClaw, Sabertooth and the line-protocol firmware at their configured
(default) baud rates, times ``set_duty()`` (and RoboClaw's ``read_feedback()``)
through the real driver and the emulator on a pty pair, and prints p50 / p99
next to the physical floor of the same transaction on a real wire:
bytes x 10 bits / baud (8N1), request plus reply.

A pty has no baud limit: the measured times are the software cost (driver,
kernel tty layer, emulator thread, scheduling). On the robot the wire floor
comes on top of the software cost; compare the two to see which dominates.

Usage: python scripts/bench_motor.py [--samples N]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from agent.config.drivers import LineMotorConfig, RoboclawConfig, SabertoothConfig
from drivers import linemotor as lp
from drivers import roboclaw as rc
from drivers.emulators.linemotor import LineMotorEmulator
from drivers.emulators.roboclaw import RoboclawEmulator
from drivers.emulators.sabertooth import SabertoothEmulator
from drivers.sabertooth import Sabertooth
from drivers.serialport import transfer_s

#: RoboClaw read_feedback after the first: 3 requests of 2 bytes; replies 78/79: 8 + CRC, then one of
#: 24: 2 + CRC, 49: 4 + CRC, 90: 4 + CRC (4-byte status) in turn (counted as 6).
ROBOCLAW_FEEDBACK_BYTES = 3 * 2 + 2 * 10 + 6
#: RoboClaw cmd 34: addr cmd 4 data CRC16, then the 0xFF ack.
ROBOCLAW_DUTY_BYTES = 8 + 1
#: Sabertooth: two 4-byte packets, no reply.
SABERTOOTH_DUTY_BYTES = 8


def line_duty_bytes(seq: int = 1234) -> int:
    """A typical P request and its OK reply with sequence number and checksum (firmware ends in CR LF)."""
    request = lp.encode_line("P 128 -128", seq=seq, with_checksum=True)
    reply = lp.encode_line("OK", seq=seq, with_checksum=True, eol="\r\n")
    return len(request) + len(reply)


def measure(call: Callable[[int], None], samples: int) -> tuple[float, float]:
    """p50 and p99 of ``call(i)`` over ``samples`` runs, s (after 20 warm-up calls)."""
    for i in range(20):
        call(i)
    times = []
    for i in range(samples):
        t0 = time.perf_counter()
        call(i)
        times.append(time.perf_counter() - t0)
    q = statistics.quantiles(times, n=100)
    return q[49], q[98]


def duty_pattern(i: int) -> tuple[float, float]:
    d = ((i % 21) - 10) / 10
    return d, -d


def row(name: str, what: str, baud: int, n_bytes: int, p50: float, p99: float) -> None:
    floor = transfer_s(n_bytes, baud)
    print(f"{name:<11} {what:<14} {baud:>7} {n_bytes:>6} {floor * 1e3:>9.2f} {p50 * 1e3:>9.3f} {p99 * 1e3:>9.3f}")


def bench_roboclaw(samples: int) -> None:
    with RoboclawEmulator() as emu:
        cfg = RoboclawConfig(kind="roboclaw", port=emu.port)
        with rc.Roboclaw(cfg) as drv:
            p50, p99 = measure(lambda i: drv.set_duty(*duty_pattern(i)), samples)
            row("roboclaw", "set_duty", cfg.baud, ROBOCLAW_DUTY_BYTES, p50, p99)
            p50, p99 = measure(lambda i: drv.read_feedback(), samples)
            row("roboclaw", "read_feedback", cfg.baud, ROBOCLAW_FEEDBACK_BYTES, p50, p99)


def bench_sabertooth(samples: int) -> None:
    with SabertoothEmulator() as emu:
        cfg = SabertoothConfig(kind="sabertooth", port=emu.port, autobaud_wait_s=0.0)
        with Sabertooth(cfg) as drv:
            p50, p99 = measure(lambda i: drv.set_duty(*duty_pattern(i)), samples)
            row("sabertooth", "set_duty", cfg.baud, SABERTOOTH_DUTY_BYTES, p50, p99)


def bench_line(samples: int) -> None:
    with LineMotorEmulator() as emu:
        cfg = LineMotorConfig(kind="line", port=emu.port)
        with lp.LineMotor(cfg) as drv:
            p50, p99 = measure(lambda i: drv.set_duty(*duty_pattern(i)), samples)
            row("line", "set_duty", cfg.baud, line_duty_bytes(), p50, p99)
            p50, p99 = measure(lambda i: drv.read_feedback(), samples)
            feedback_bytes = (len(lp.encode_line("E", seq=1234, with_checksum=True))
                              + len(lp.encode_line("E 123456 -123456 4000000", seq=1234, with_checksum=True,
                                                   eol="\r\n"))
                              + len(lp.encode_line("?", seq=1234, with_checksum=True))
                              + len(lp.encode_line("ST 00 128 -128", seq=1234, with_checksum=True, eol="\r\n")))
            row("line", "read_feedback", cfg.baud, feedback_bytes, p50, p99)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=300, help="timed calls per row (default 300)")
    args = parser.parse_args()
    print("Serial motor drivers over pty emulators. A pty has NO baud limit: measured times are")
    print("the software cost only; a real wire adds at least the floor (bytes x 10 / baud, 8N1).")
    print()
    print(f"{'controller':<11} {'call':<14} {'baud':>7} {'bytes':>6} {'floor ms':>9} {'p50 ms':>9} {'p99 ms':>9}")
    bench_roboclaw(args.samples)
    bench_sabertooth(args.samples)
    bench_line(args.samples)
    print()
    print("bytes: request + reply of one call (RoboClaw read_feedback = 3 transactions: cmds 78, 79 and one of 24, 49, 90;")
    print("line read_feedback = E and ?; Sabertooth never replies).")


if __name__ == "__main__":
    main()
