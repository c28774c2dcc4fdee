"""Runs a limiter call from asyncio code without blocking the event loop on a store's round trip.

A limiter whose store decides in this process (memory, a shared region, Redis in sync mode) answers
in nanoseconds: the call runs inline, with no thread hop and no extra coroutine step. A limiter whose
store waits on I/O (Redis in exact mode) has the call run in a worker thread, so the loop keeps
serving other tasks while the round trip is in flight.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from ratekeeper._core import Limiter

__all__ = ["off_loop", "off_loop_soon", "off_loop_through"]

P = ParamSpec("P")
R = TypeVar("R")


async def off_loop(limiter: Limiter, call: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """``call(*args, **kwargs)``: inline when ``limiter`` decides in this process, else in a worker
    thread (``asyncio.to_thread``) so that the event loop is not blocked while the store answers."""
    if not limiter._waits_on_io:
        return call(*args, **kwargs)
    return await asyncio.to_thread(call, *args, **kwargs)


async def off_loop_through(limiter: Limiter, call: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """``off_loop`` for what must happen once begun (permits released, counts given back): a cancellation of
    the awaiting task does not stop it, where a job cancelled before a thread took it up would never run."""
    if not limiter._waits_on_io:
        return call(*args, **kwargs)
    job = functools.partial(call, *args, **kwargs)
    return await asyncio.shield(asyncio.get_running_loop().run_in_executor(None, job))


def off_loop_soon(loop: asyncio.AbstractEventLoop, call: Callable[[], object]) -> None:
    """``call()`` in ``loop``'s worker threads, not awaited: what a cancelled task gives back, which its
    cancellation must not stop (an awaited job cancelled before a thread took it up would never run). In a
    thread of its own when the loop is closing, its executor taking no more work."""
    try:
        loop.run_in_executor(None, call)
    except RuntimeError:
        threading.Thread(target=call, daemon=True).start()
