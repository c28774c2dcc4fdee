"""What each process of the multi-process tests runs: asyncio tasks calling a rate-limited API through
``ratekeeper.httpx.AsyncTransport`` for a while, on a limiter whose store the processes share. A module of its
own, importing little, so that spawned processes start fast."""

from __future__ import annotations

import asyncio
import time
import traceback
from collections import Counter
from typing import Any

import httpx
import ratekeeper as rk
from ratekeeper.httpx import AsyncTransport

#: How the processes' limiters keep their states: ("shared", region path) or ("redis", url, key prefix).
Store = tuple[str, ...]


def limiter_on(store: Store) -> rk.Limiter:
    if store[0] == "shared":
        return rk.Limiter(rules=[], max_keys=1_000, backend=rk.Shared(path=store[1]))
    return rk.Limiter(rules=[], backend=rk.Redis(store[1], prefix=store[2], on_error="raise", timeout=2.0))


def call_for_a_while(
    url: str, store: Store, declared: str | None, tasks: int, seconds: float, barrier: Any, results: Any
) -> None:
    """Waits at ``barrier`` for the other processes, then runs ``tasks`` tasks calling ``url`` for ``seconds``;
    puts (status counts, the transport's stats, None) in ``results``, or ({}, {}, the error) if it failed.

    ``declared``: a rate such as ``"100/2s"`` for a group declared up front for the server's budget (``"api"``),
    or ``None`` to let the transport make the group on the server's first word."""
    limiter = limiter_on(store)
    options: dict[str, Any] = {"timeout": 30.0, "window": 2.0}
    if declared is not None:
        limiter.add_group("api", [rk.Limit(declared, algorithm="fixed_window")])
        options["groups"] = {"api": "api"}
    transport = AsyncTransport(limiter, **options)

    async def main() -> Counter[int]:
        end = time.monotonic() + seconds
        async with httpx.AsyncClient(transport=transport, base_url=url, timeout=30.0) as client:

            async def task() -> Counter[int]:
                codes: Counter[int] = Counter()
                while time.monotonic() < end:
                    codes[(await client.get("/")).status_code] += 1
                return codes

            return sum(await asyncio.gather(*(task() for _ in range(tasks))), Counter())

    barrier.wait(timeout=60)
    try:
        codes = asyncio.run(main())
    except BaseException as error:  # the test fails with it, not with a process that never reported
        results.put(({}, {}, f"{type(error).__name__}: {error}\n{traceback.format_exc()}"))
        raise
    results.put((dict(codes), transport.stats(), None))
