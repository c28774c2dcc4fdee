"""The ``Limiter`` facade: the Rust core's non-blocking ``check``/``allow`` plus waiting in Python.

``check`` and ``allow`` are the Rust methods themselves (inherited, no Python frame). Waiting happens
here: the core reserves the caller's slot and says how long to wait, then ``time.sleep`` (which
releases the GIL and is interrupted by Ctrl-C) or ``asyncio.sleep`` waits it out. A wait that ends
early (an exception, Ctrl-C, a cancelled task) gives the slot back.
"""

from __future__ import annotations

import asyncio
import time

from ratekeeper._core import Decision, ManualClock
from ratekeeper._core import Limiter as _CoreLimiter
from ratekeeper._errors import RateLimited
from ratekeeper._manual_wait import ManualWaits

__all__ = ["Limiter"]


class Limiter(_CoreLimiter):
    """A rate limiter. See ``ratekeeper._core.Limiter`` for the constructor and the non-blocking calls."""

    def throttle(self, peer: str, path: str | None = None, *, cost: int = 1, timeout: float | None = None) -> Decision:
        """Blocks until the request is admitted and returns its Decision.

        Waiters on one key are served in arrival order, each with a single core call: the first call
        reserves the slot. The GIL is released while waiting, and Ctrl-C interrupts the wait.

        Raises:
            RateLimited: the wait would last longer than ``timeout`` seconds (nothing is reserved).
        """
        decision, wait, deadline_ns = self._reserve(peer, path, cost, timeout)
        if not decision.allowed:
            raise RateLimited(decision)
        if wait > 0:
            try:
                self._wait(wait, deadline_ns)
            except BaseException:
                self._refund(peer, path, cost)
                raise
        return decision

    async def athrottle(
        self, peer: str, path: str | None = None, *, cost: int = 1, timeout: float | None = None
    ) -> Decision:
        """The asyncio twin of :meth:`throttle`: waits with ``asyncio.sleep``, never blocking the loop.

        Cancelling the task gives the reserved slot back.

        Raises:
            RateLimited: the wait would last longer than ``timeout`` seconds (nothing is reserved).
        """
        decision, wait, deadline_ns = self._reserve(peer, path, cost, timeout)
        if not decision.allowed:
            raise RateLimited(decision)
        if wait > 0:
            try:
                if self.clock is None:
                    await asyncio.sleep(wait)
                else:
                    await self._manual_waits().sleep_until(deadline_ns)
            except BaseException:
                self._refund(peer, path, cost)
                raise
        return decision

    def _manual_waits(self) -> ManualWaits:
        waits: ManualWaits | None = self.__dict__.get("_manual_waits_")
        if waits is None:
            assert self.clock is not None
            waits = self.__dict__.setdefault("_manual_waits_", ManualWaits(self.clock))
        return waits

    def _wait(self, seconds: float, deadline_ns: int) -> None:
        clock: ManualClock | None = self.clock
        if clock is None:
            time.sleep(seconds)
        else:
            clock._advance_to_ns(deadline_ns)

    def __enter__(self) -> Limiter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None

    def __repr__(self) -> str:
        state = "on" if self.enabled else "off"
        return f"<ratekeeper.Limiter groups={list(self.groups)} keys={len(self)} {state}>"
