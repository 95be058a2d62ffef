#!/usr/bin/env python3
"""Console login throttling benchmark: one run on loopback with the simulated tank, prints numbers.

1. One client address sends N wrong tokens back to back: how many were answered 401 (the
   token looked at), how many 429 (blocked, not looked at), and how long the N took.
2. Meanwhile another address opens the console with the right token M times: latency of
   its 302 answer (p50/p99), i.e. what the guessing costs the operator.
3. Many addresses (127.0.0.x) guessing K times each: 401s before the global backoff.

Usage: ``python scripts/bench_console_auth.py [--wrong 2000] [--right 50] [--addresses 40]``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp

from tests.conftest import free_port, running_agent, sim_config

TOKEN = "kV3q9ZtR0bWm-Lx7Yp2Hc_Ue5Na8Jd4G"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def client(address: str) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(address, 0)))


async def guess(base: str, address: str, count: int, tag: str) -> dict[int, int]:
    answers: dict[int, int] = {}
    async with client(address) as http:
        for i in range(count):
            async with http.get(f"{base}/?token={tag}-{i:06d}-zzzzzzzzzzzzzzzz", allow_redirects=False) as r:
                answers[r.status] = answers.get(r.status, 0) + 1
    return answers


async def right(base: str, address: str, count: int) -> list[float]:
    out = []
    async with client(address) as http:
        for _ in range(count):
            t0 = time.perf_counter()
            async with http.get(f"{base}/?token={TOKEN}", allow_redirects=False) as r:
                assert r.status == 302, r.status
            out.append(time.perf_counter() - t0)
            await asyncio.sleep(0.01)
    return out


async def main(args: argparse.Namespace) -> None:
    port = free_port()
    params = sim_config(console={"enabled": True, "port": port, "host": "0.0.0.0", "token": TOKEN})
    async with running_agent(params) as agent:
        console = agent.adapters["console"]
        await asyncio.wait_for(console.ready.wait(), 10.0)
        base = f"http://127.0.0.1:{port}"
        quiet = await right(base, "127.0.0.3", args.right)
        t0 = time.perf_counter()
        flood, during = await asyncio.gather(guess(base, "127.0.0.2", args.wrong, "one"),
                                             right(base, "127.0.0.3", args.right))
        elapsed = time.perf_counter() - t0
        print(f"{args.wrong} wrong tokens from one address in {elapsed:.2f} s: "
              f"{flood.get(401, 0)} answered 401 (token checked), {flood.get(429, 0)} answered 429 (blocked)")
        print(f"right token from another address, {args.right} logins: quiet p50 {pct(quiet, 50) * 1e3:.1f} ms "
              f"p99 {pct(quiet, 99) * 1e3:.1f} ms; during the flood p50 {pct(during, 50) * 1e3:.1f} ms "
              f"p99 {pct(during, 99) * 1e3:.1f} ms")
        many = await asyncio.gather(*(guess(base, f"127.0.1.{i + 1}", args.per_address, f"m{i}")
                                      for i in range(args.addresses)))
        checked = sum(a.get(401, 0) for a in many)
        blocked = sum(a.get(429, 0) for a in many)
        print(f"{args.addresses} addresses x {args.per_address} wrong tokens: {checked} answered 401, {blocked} 429")
        status = console.status()
        print(f"status: auth_refused {status['auth_refused']}, auth_throttled {status['auth_throttled']}")


if __name__ == "__main__":
    __import__("logging").disable(__import__("logging").WARNING)   # the 401/429 warnings (rate-limited anyway)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wrong", type=int, default=2000)
    parser.add_argument("--right", type=int, default=50)
    parser.add_argument("--addresses", type=int, default=40)
    parser.add_argument("--per-address", type=int, default=10)
    asyncio.run(main(parser.parse_args()))
