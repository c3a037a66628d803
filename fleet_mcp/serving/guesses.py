"""Per-user mode against token guessing: Coder asked only about tokens that may be real, and not too often.

Every token the server has not seen accepted costs one `GET /api/v2/users/me`,
so whoever reaches the port could relay guesses, and load, to Coder, spending
the share of Coder's rate limit the server's address spends on every user's checks. Hence:

- a token Coder refused is refused again, without asking, for
  `FLEET_MCP_AUTH_CACHE_S` (kept by its SHA-256, the newest `KEPT` at most);
- each client address (an IPv6 one by its /64, which one machine holds whole)
  may have Coder check `FLEET_MCP_AUTH_REFUSALS_PER_MINUTE` tokens that turn
  out refused: a bucket of that many, refilled steadily over a minute. A check
  takes one unit before Coder is asked and an accepted token gives it back, so
  only refusals (and checks in flight) count. With the bucket empty the answer
  is 429 with `Retry-After` (whole seconds until a unit is back), and Coder is
  not asked.

Tokens Coder accepted are never limited, nor slowed: a signed-in user's calls,
and a valid user's first call from an address that is not guessing, go
straight through. Behind a reverse proxy the client address is the one the
proxy forwards (`X-Forwarded-For`, which uvicorn takes from the loopback
proxy; see deploy/nginx.conf).
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from ipaddress import ip_network

__all__ = ["KEPT", "Guesses", "address_key"]

KEPT = 4096  # refused tokens and client addresses remembered, each (~100 bytes an entry)


def address_key(address: str | None) -> str:
    """What a client address is limited by: itself, an IPv6 one its /64 (`-` when unknown)."""
    if not address:
        return "-"
    try:
        network = ip_network(f"{address}/64" if ":" in address else address, strict=False)
    except ValueError:
        return address
    return str(network)


class Guesses:
    """Refused tokens (by hash) remembered for `remember_s`; per address, `per_minute` refusals at most."""

    def __init__(self, per_minute: int, remember_s: float, clock: Callable[[], float] = time.monotonic,
                 kept: int = KEPT) -> None:
        self.per_minute = per_minute
        self.remember_s = remember_s
        self._clock = clock
        self._kept = kept
        self._refused: OrderedDict[str, float] = OrderedDict()  # token hash -> when Coder refused it
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # address -> (units, when)

    def refused(self, key: str) -> bool:
        """Whether Coder refused the token of hash `key` less than `remember_s` ago."""
        at = self._refused.get(key)
        if at is None:
            return False
        if self._clock() - at < self.remember_s:
            return True
        del self._refused[key]
        return False

    def take(self, address: str | None) -> int:
        """Take one unit of `address`' bucket before Coder is asked: 0 when taken, else the seconds (at least 1)
        until a unit is back, and nothing is taken."""
        where = address_key(address)
        units = self._units(where)
        if units >= 1:
            self._set(where, units - 1)
            return 0
        return max(1, math.ceil((1 - units) * 60 / self.per_minute))

    def accepted(self, address: str | None) -> None:
        """Coder accepted the token (or could not be asked): the unit taken for it goes back."""
        where = address_key(address)
        self._set(where, min(self.per_minute, self._units(where) + 1))

    def refusal(self, key: str) -> None:
        """Coder refused the token of hash `key`: remembered; the unit taken for it stays spent."""
        self._refused[key] = self._clock()
        self._refused.move_to_end(key)
        while len(self._refused) > self._kept:
            self._refused.popitem(last=False)

    def _units(self, where: str) -> float:
        units, at = self._buckets.get(where, (float(self.per_minute), 0.0))
        return min(float(self.per_minute), units + (self._clock() - at) * self.per_minute / 60)

    def _set(self, where: str, units: float) -> None:
        self._buckets[where] = (units, self._clock())
        self._buckets.move_to_end(where)
        while len(self._buckets) > self._kept:
            self._buckets.popitem(last=False)  # the least recently seen: at worst it starts afresh, full
