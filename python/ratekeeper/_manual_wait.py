"""Waiting on a ManualClock from asyncio: each waiter resumes when the clock reaches its own deadline.

A blocking wait simply moves the clock to its deadline. Async waiters must take turns, or the first
to run would move the clock past everyone's deadline before the others resume. So waiters queue by
deadline; the earliest one moves the clock, resumes, and only after its task has run does the next
one move it further. No waiter polls.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools

from ratekeeper._core import ManualClock

__all__ = ["ManualWaits"]


class ManualWaits:
    """The async waiters of one limiter on a manual clock, in deadline order."""

    def __init__(self, clock: ManualClock) -> None:
        self._clock = clock
        self._queue: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()
        self._waking = False

    async def sleep_until(self, deadline_ns: int) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._queue, (deadline_ns, next(self._order), future))
        self._schedule()
        await future

    def _schedule(self) -> None:
        if not self._waking:
            self._waking = True
            asyncio.get_running_loop().call_soon(self._wake_next)

    def _wake_next(self) -> None:
        self._waking = False
        while self._queue:
            deadline_ns, _, future = heapq.heappop(self._queue)
            if future.done():  # cancelled while queued
                continue
            self._clock._advance_to_ns(deadline_ns)
            future.set_result(None)
            # Scheduled after the woken task's own resumption, so it runs before the clock moves on.
            if self._queue:
                self._schedule()
            return
