"""Console login off loopback: wrong tokens back off (per client and for all clients) with 429
and Retry-After, the right token is not slowed by someone else's guessing, and the session
cookie holds an HMAC-derived value for this console's port, never the token.

Server tests talk to the real agent over loopback from several client addresses (127.0.0.x);
they count answers, never time them. The backoff arithmetic runs on a virtual clock."""

from __future__ import annotations

import re
import time
from http.cookies import SimpleCookie

import aiohttp

from agent.console.auth import SESSION_S, Sessions, cookie_name
from agent.console.throttle import FREE, GLOBAL_FREE, Throttle, client_key
from agent.testing.clock import VirtualClock
from tests.conftest import free_port
from tests.console.peers import console_agent

TOKEN = "kV3q9ZtR0bWm-Lx7Yp2Hc_Ue5Na8Jd4G"


# ---------------------------------------------------------------- the backoff (virtual clock)

def test_a_client_backs_off_doubling_after_its_free_failures() -> None:
    clock = VirtualClock(100.0)
    throttle = Throttle(free=3, base_s=1.0, max_s=8.0, clock=clock.time)
    for _ in range(3):
        assert throttle.retry_after_s("10.0.0.5") == 0.0
        throttle.failed("10.0.0.5")
    assert throttle.retry_after_s("10.0.0.5") == 0.0          # 3 free
    waits = []
    for _ in range(5):
        throttle.failed("10.0.0.5")
        waits.append(throttle.retry_after_s("10.0.0.5"))
        clock.advance(waits[-1])
    assert waits == [1.0, 2.0, 4.0, 8.0, 8.0]                  # doubled, capped
    assert throttle.retry_after_s("10.0.0.6") == 0.0           # another client is not slowed
    throttle.succeeded("10.0.0.5")                             # the right token clears the count
    throttle.failed("10.0.0.5")
    assert throttle.retry_after_s("10.0.0.5") == 0.0


def test_counts_are_forgotten_after_a_quiet_while() -> None:
    clock = VirtualClock()
    throttle = Throttle(free=2, forget_s=60.0, clock=clock.time)
    for _ in range(2):
        throttle.failed("10.0.0.5")
    clock.advance(61.0)
    throttle.failed("10.0.0.5")
    assert throttle.retry_after_s("10.0.0.5") == 0.0


def test_many_addresses_guessing_block_everyone_but_clients_that_logged_in() -> None:
    clock = VirtualClock()
    throttle = Throttle(free=5, global_free=20, global_max_s=30.0, clock=clock.time)
    throttle.succeeded("192.168.1.10")                         # the operator, logged in before
    for i in range(25):
        throttle.failed(f"10.0.1.{i}")                          # one guess per address
    assert throttle.retry_after_s("10.0.2.1") == 16.0          # 5 over: 2^4 s
    assert throttle.retry_after_s("10.0.1.3") == 16.0
    assert throttle.retry_after_s("192.168.1.10") == 0.0       # keeps its way in
    clock.advance(16.0)
    assert throttle.retry_after_s("10.0.2.1") == 0.0


def test_an_ipv6_client_is_its_64_and_memory_is_bounded() -> None:
    assert client_key("2001:db8:1:2:aaaa::1") == client_key("2001:db8:1:2:bbbb::2") == "2001:db8:1:2::/64"
    assert client_key("::ffff:10.0.0.7") == "10.0.0.7" and client_key("10.0.0.7") == "10.0.0.7"
    throttle = Throttle(free=1, global_free=10**9, clock=VirtualClock().time)
    for i in range(10_000):
        throttle.failed(f"10.{i // 65536}.{i // 256 % 256}.{i % 256}")
    assert len(throttle._clients) <= 4096


# ---------------------------------------------------------------- on the real console

def client(address: str) -> aiohttp.ClientSession:
    """An HTTP client whose connections come from ``address`` (any 127.0.0.x is loopback on Linux)."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(address, 0)),
                                 cookie_jar=aiohttp.CookieJar(unsafe=True))


async def test_wrong_tokens_get_429_with_retry_after_and_the_right_token_gets_in() -> None:
    port = free_port()
    async with console_agent(port, host="0.0.0.0", token=TOKEN) as agent:
        base = f"http://127.0.0.1:{port}"
        statuses, retry = [], []
        async with client("127.0.0.2") as guesser:
            for i in range(40):
                async with guesser.get(f"{base}/?token=guess-{i:04d}-xxxxxxxxxxxxxxxx", allow_redirects=False) as r:
                    statuses.append(r.status)
                    if r.status == 429:
                        retry.append(r.headers["Retry-After"])
            async with guesser.get(f"{base}/?token={TOKEN}", allow_redirects=False) as r:
                assert r.status == 429                        # blocked: the token is not even looked at
        assert statuses[:FREE + 1] == [401] * (FREE + 1)        # free failures, then the one that blocks
        # the block doubles with every failure after it: 40 requests cannot make more than a few
        # of them unless the machine took > 31 s for them
        assert statuses.count(401) <= FREE + 5 and statuses.count(429) >= 40 - FREE - 5
        assert set(statuses) == {401, 429}
        assert all(re.fullmatch(r"[1-9][0-9]*", value) for value in retry)
        status = agent.adapters["console"].status()
        assert status["auth_throttled"] == statuses.count(429) + 1
        assert status["auth_refused"] == statuses.count(401)
        async with client("127.0.0.3") as operator:            # another address: not slowed
            async with operator.get(f"{base}/?token={TOKEN}", allow_redirects=False) as r:
                assert r.status == 302
            async with operator.get(f"{base}/") as r:
                assert r.status == 200
        assert agent.sim.motor_emulator.motor_duty == [0.0, 0.0]


async def test_a_global_block_keeps_out_new_clients_but_not_a_logged_in_operator() -> None:
    port = free_port()
    async with console_agent(port, host="0.0.0.0", token=TOKEN) as agent:
        clock = VirtualClock(1000.0)
        gate = agent.adapters["console"].gate
        gate.throttle = Throttle(clock=clock.time)              # the shipped limits, on virtual time
        base = f"http://127.0.0.1:{port}"
        async with client("127.0.0.2") as operator:
            async with operator.get(f"{base}/?token={TOKEN}", allow_redirects=False) as r:
                assert r.status == 302
            answers = []
            for host in range(10, 10 + GLOBAL_FREE // FREE + 2):   # FREE guesses from each address
                async with client(f"127.0.0.{host}") as guesser:
                    for i in range(FREE):
                        async with guesser.get(f"{base}/?token=wrong-{i}-yyyyyyyyyyyyyyyyyy") as r:
                            answers.append(r.status)
            assert answers.count(401) == GLOBAL_FREE + 1 and answers.count(429) == len(answers) - GLOBAL_FREE - 1
            async with client("127.0.0.99") as newcomer:        # even with the right token: wait
                async with newcomer.get(f"{base}/?token={TOKEN}", allow_redirects=False) as r:
                    assert r.status == 429 and int(r.headers["Retry-After"]) >= 1
            async with operator.get(f"{base}/") as r:            # the session in its cookie
                assert r.status == 200
            async with operator.get(f"{base}/?token={TOKEN}", allow_redirects=False) as r:
                assert r.status == 302
            clock.advance(gate.throttle.retry_after_s("127.0.0.99"))
            async with client("127.0.0.99") as newcomer:
                async with newcomer.get(f"{base}/?token={TOKEN}", allow_redirects=False) as r:
                    assert r.status == 302


async def test_the_cookie_holds_a_session_for_this_port_never_the_token() -> None:
    port = free_port()
    async with console_agent(port, host="0.0.0.0", token=TOKEN) as agent:
        base = f"http://127.0.0.1:{port}"
        async with client("127.0.0.2") as http:
            async with http.get(f"{base}/?token={TOKEN}", allow_redirects=False) as r:
                assert r.status == 302 and r.headers["Location"] == "/"
                header = r.headers["Set-Cookie"]
        assert TOKEN not in header
        cookie = SimpleCookie(header)
        (name,) = cookie.keys()
        morsel = cookie[name]
        assert name == cookie_name(port) == f"robot_console_{port}"
        assert re.fullmatch(r"[0-9]+\.[0-9a-f]{64}", morsel.value)
        assert abs(int(morsel.value.split(".")[0]) - time.time()) < 60
        assert morsel["httponly"] and morsel["samesite"] == "Strict" and morsel["path"] == "/"
        assert int(morsel["max-age"]) == SESSION_S
        assert Sessions(TOKEN, port).valid(morsel.value)
        assert not Sessions(TOKEN, port + 1).valid(morsel.value)           # not another port's console
        assert not Sessions(TOKEN[::-1], port).valid(morsel.value)         # not after a token change

        expired = Sessions(TOKEN, port, clock=lambda: time.time() - SESSION_S - 120).issue()
        for value in (morsel.value, TOKEN, Sessions(TOKEN, port + 1).issue(), expired, "1." + "0" * 64, "junk"):
            async with aiohttp.ClientSession(cookies={name: value}) as http:
                async with http.get(f"{base}/") as r:
                    assert r.status == (200 if value == morsel.value else 401), value
        assert agent.adapters["console"].status()["auth_refused"] == 5
