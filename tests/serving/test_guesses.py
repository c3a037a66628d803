"""Per-user mode against token guessing (issue 25 item 2): refused tokens remembered, refusals per client address
limited (429 with Retry-After), a valid user's first call never slowed.

The rules on a virtual clock; the verifier in-process over the emulator; the attack's figure against a real
`fleet-mcp --transport http` process in per-user mode and a real `fleet-mcp emulator`.
"""

from __future__ import annotations

import secrets
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
from fastmcp.server.auth import AccessToken
from starlette.requests import Request

from fleet_mcp.emulator import Emulator
from fleet_mcp.serving.guesses import Guesses, address_key
from fleet_mcp.serving.tokens import LIMITED, CoderTokens
from fleet_mcp.serving.users import Users, key_of
from fleet_mcp.settings import Settings
from tests.processes import INIT, MCP_HEADERS, emulator_process, per_user_server
from tests.support import ALICE_TOKEN, TOKEN

USERS_ME = "GET /api/v2/users/{user}"
PER_MINUTE = 10  # the default of FLEET_MCP_AUTH_REFUSALS_PER_MINUTE


def claims(access: AccessToken | None) -> dict[str, object]:
    """What a verified token's holder is said to be (the verifier let it through)."""
    assert access is not None
    return access.claims


class VirtualClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def attack() -> list[str]:
    """600 bad tokens as the issue measured them: 500 random, 100 repeating one, interleaved."""
    repeated = "guessed-" + secrets.token_hex(12)
    randoms = iter(secrets.token_hex(16) for _ in range(500))
    return [repeated if i % 6 == 5 else next(randoms) for i in range(600)]


# --- the rules ------------------------------------------------------------------------------------------------

def test_a_refusal_is_remembered_for_its_time_then_forgotten():
    clock = VirtualClock()
    guesses = Guesses(PER_MINUTE, remember_s=60, clock=clock)
    guesses.refusal(key_of("bad"))
    assert guesses.refused(key_of("bad")) and not guesses.refused(key_of("other"))
    clock.now += 59.9
    assert guesses.refused(key_of("bad"))
    clock.now += 0.2
    assert not guesses.refused(key_of("bad"))


def test_an_address_may_have_per_minute_tokens_refused_then_waits_for_the_bucket_to_refill():
    clock = VirtualClock()
    guesses = Guesses(PER_MINUTE, remember_s=60, clock=clock)
    assert [guesses.take("198.51.100.7") for _ in range(PER_MINUTE + 1)] == [0] * PER_MINUTE + [6]
    assert guesses.take("198.51.100.8") == 0  # another address has its own bucket
    clock.now += 5.5
    assert guesses.take("198.51.100.7") == 1  # Retry-After: whole seconds, at least 1
    clock.now += 0.5
    assert guesses.take("198.51.100.7") == 0 and guesses.take("198.51.100.7") == 6
    guesses.accepted("198.51.100.7")  # an accepted token gives its unit back
    assert guesses.take("198.51.100.7") == 0


def test_an_ipv6_client_counts_by_its_64_and_memory_is_bounded():
    assert address_key("2001:db8:1:2::5") == address_key("2001:db8:1:2:ffff::9") == "2001:db8:1:2::/64"
    assert address_key("2001:db8:1:3::5") != address_key("2001:db8:1:2::5")
    assert address_key(None) == "-" and address_key("198.51.100.7") == "198.51.100.7/32"
    guesses = Guesses(PER_MINUTE, remember_s=60, clock=VirtualClock(), kept=3)
    for n in range(10):
        guesses.refusal(key_of(f"t{n}"))
        guesses.take(f"198.51.100.{n}")
    assert len(guesses._refused) == 3 and len(guesses._buckets) == 3
    assert guesses.refused(key_of("t9")) and not guesses.refused(key_of("t0"))


# --- the verifier, in-process over the emulator -------------------------------------------------------------------

@contextmanager
def from_address(host: str) -> Iterator[None]:
    """Verify as if the HTTP request came from `host` (what FastMCP's request context holds in a server)."""
    from fastmcp.server.http import set_http_request

    with set_http_request(Request({"type": "http", "method": "POST", "path": "/mcp", "headers": [],
                                   "client": (host, 50000)})):
        yield


def coder_checks(emulator: Emulator) -> int:
    return emulator.backend.requests[USERS_ME]


async def test_600_guessed_tokens_cost_coder_a_bucket_and_a_valid_first_call_is_not_slowed(emulator):
    clock = VirtualClock()
    users = Users(Settings(coder_url="http://coder.test", auth="coder", retry_budget_s=0),
                  transport=httpx.ASGITransport(app=emulator.app))
    verifier = CoderTokens(users, Guesses(PER_MINUTE, remember_s=60, clock=clock))
    try:
        before = coder_checks(emulator)
        answers: Counter[str] = Counter()
        with from_address("198.51.100.7"):
            for token in attack():
                access = await verifier.verify_token(token)
                answers["refused" if access is None else "limited" if LIMITED in access.claims else "valid"] += 1
        spent = coder_checks(emulator) - before
        # The bucket (no time passes on this clock), the repeated token included; refused again 99 times unasked.
        assert spent == PER_MINUTE and answers == {"refused": PER_MINUTE + 99, "limited": 600 - PER_MINUTE - 99}
        assert len(users) == 0  # nothing is kept open for a refused token

        with from_address("203.0.113.9"):  # a valid user elsewhere: straight through, one check
            t0 = time.perf_counter()
            assert claims(await verifier.verify_token(ALICE_TOKEN))["username"] == "alice"
            first_call_s = time.perf_counter() - t0
        assert coder_checks(emulator) - before == spent + 1 and first_call_s < 1
        with from_address("198.51.100.7"):  # the guessing address: a token never accepted waits, Coder not asked
            assert LIMITED in claims(await verifier.verify_token(TOKEN))
            assert claims(await verifier.verify_token(ALICE_TOKEN))["username"] == "alice"  # accepted: not limited
        assert coder_checks(emulator) - before == spent + 1
    finally:
        await users.aclose()


async def test_a_token_accepted_before_is_checked_again_unlimited_and_its_refusal_remembered(emulator):
    clock = VirtualClock()
    users = Users(Settings(coder_url="http://coder.test", auth="coder", retry_budget_s=0, auth_cache_s=0),
                  transport=httpx.ASGITransport(app=emulator.app))
    verifier = CoderTokens(users, Guesses(1, remember_s=60, clock=clock))
    try:
        with from_address("198.51.100.7"):
            assert await verifier.verify_token("bad-token-1") is None  # the address's one unit is spent
            assert LIMITED in claims(await verifier.verify_token(TOKEN))  # new token: waits
        with from_address("203.0.113.9"):
            assert claims(await verifier.verify_token(TOKEN))["username"] == "demo"
        with from_address("198.51.100.7"):
            assert claims(await verifier.verify_token(TOKEN))["username"] == "demo"  # known: asked again, unlimited
            next(u for u in emulator.backend.users.values() if u.username == "demo").tokens.discard(TOKEN)
            assert await verifier.verify_token(TOKEN) is None  # revoked
            before = coder_checks(emulator)
            assert await verifier.verify_token(TOKEN) is None and coder_checks(emulator) == before  # remembered
    finally:
        await users.aclose()


# --- the figure, over HTTP against real processes -----------------------------------------------------------------

@pytest.fixture(scope="module")
def coder():
    with emulator_process() as emulated:
        yield emulated


@pytest.mark.system
def test_600_bad_requests_cost_coder_at_most_100_requests_over_http(coder, tmp_path, capsys):
    with per_user_server(tmp_path, coder.url) as running, httpx.Client(timeout=10) as http:
        def checks() -> int:
            counts = http.get(coder.url + "/emulator/requests", headers={"Coder-Session-Token": TOKEN}).json()
            routes: int = counts["routes"].get(USERS_ME, 0)
            return routes

        def post(token: str, **headers: str) -> httpx.Response:
            return http.post(running.url, json=INIT,
                             headers={**MCP_HEADERS, "Authorization": f"Bearer {token}", **headers})

        before = checks()
        statuses: Counter[int] = Counter()
        retry_after: set[str] = set()
        t0 = time.perf_counter()
        for token in attack():
            answer = post(token)
            statuses[answer.status_code] += 1
            if answer.status_code == 429:
                retry_after.add(answer.headers["retry-after"])
                assert answer.json()["details"]["retry_after_s"] == int(answer.headers["retry-after"])
        attack_s = time.perf_counter() - t0
        spent = checks() - before
        # A valid user's first call from another client (a proxy on loopback forwards its address): not slowed.
        t0 = time.perf_counter()
        valid = post(ALICE_TOKEN, **{"X-Forwarded-For": "203.0.113.9"})
        first_call_ms = (time.perf_counter() - t0) * 1000
        spent_by_valid = checks() - before - spent
        logs = running.logs()
    with capsys.disabled():
        print(f"\nguesses: 600 bad tokens (500 random, 100 repeating one) in {attack_s:.1f} s cost Coder {spent} "
              f"requests; answers {dict(statuses)}; Retry-After {sorted(retry_after, key=int)} s; a valid user's "
              f"first call from another address: {valid.status_code} in {first_call_ms:.0f} ms")
    assert spent <= 100
    assert spent <= PER_MINUTE + 1 + attack_s * PER_MINUTE / 60 + 1  # the bucket, the refill while it ran
    # Refused: the tokens Coder checked, and the repeated one each time after its first; the rest waits.
    assert statuses[401] == spent + 99 and statuses[429] == 600 - statuses[401]
    assert all(1 <= int(s) <= 60 // PER_MINUTE for s in retry_after)
    assert valid.status_code == 200 and spent_by_valid == 1
    assert ALICE_TOKEN not in logs
