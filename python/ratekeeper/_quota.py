"""Quota workers: daemon threads that take fetch jobs from the core and call the user's provider.

The core queues one job per key that needs a quota (single flight); a worker calls the provider and
hands back whatever came of it, the answer or the exception, through ``Limiter._finish_fetch``: the
core judges it (a rate, ``None``, ``LookupError`` for "no such key", too late, nonsense) and says what
to log. A worker waits for jobs without the GIL and holds only the job queue and a
weak reference to its limiter, so a limiter nobody references is collected, and its collection closes
the queue, which stops the workers. Async providers run on one private event loop thread; sync ones on
the workers themselves. ``close()`` (or interpreter exit) stops the threads promptly; a provider call
that never returns only keeps its own daemon thread.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import inspect
import logging
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # The core's class: the workers use only its fetch methods (ratekeeper.limiter starts them).
    from ratekeeper._core import Limiter, _FetchJob

__all__ = ["FirstFetchWaiters", "QuotaWorkers"]

log = logging.getLogger("ratekeeper")

# A closed queue wakes its workers at once; the poll only bounds how long a stray one lingers. A worker
# stuck in a sync provider cannot be interrupted: close() gives the workers this long, then leaves them
# (daemon threads do not hold the interpreter).
_POLL_SECONDS = 1.0
_JOIN_SECONDS = 0.5

_live: weakref.WeakSet[QuotaWorkers] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    # Before finalisation: a daemon thread woken after it could not take the GIL back cleanly.
    for workers in list(_live):
        workers.close()


class QuotaWorkers:
    """``count`` threads calling ``provider(peer, group)`` for the jobs of ``limiter``."""

    def __init__(self, limiter: Limiter, provider: Callable[[str, str], Any], count: int) -> None:
        self._limiter = weakref.ref(limiter)
        self._queue = limiter._fetch_queue()
        self._provider = provider
        self._waiters = FirstFetchWaiters()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._loop_lock = threading.Lock()
        self._running: set[concurrent.futures.Future[Any]] = set()
        self._threads = [
            threading.Thread(target=self._work, name=f"ratekeeper-quota-{i}", daemon=True) for i in range(count)
        ]
        for thread in self._threads:
            thread.start()
        _live.add(self)

    @property
    def waiters(self) -> FirstFetchWaiters:
        return self._waiters

    def close(self) -> None:
        """Stops the workers and the provider's event loop; idempotent."""
        self._queue.close()
        with self._loop_lock:
            running, self._running = self._running, set()
        for future in running:  # wakes the workers waiting on an async provider
            future.cancel()
        current = threading.current_thread()
        deadline = time.monotonic() + _JOIN_SECONDS
        for worker in self._threads:
            if worker is not current:
                worker.join(max(0.0, deadline - time.monotonic()))
        with self._loop_lock:
            loop, loop_thread, self._loop, self._loop_thread = self._loop, self._loop_thread, None, None
        if loop is not None and loop_thread is not None:
            # Cancel what the provider still runs and let it unwind before the loop stops.
            shutdown = asyncio.run_coroutine_threadsafe(_cancel_tasks(), loop)
            with contextlib.suppress(Exception):
                shutdown.result(max(0.0, deadline - time.monotonic()))
            loop.call_soon_threadsafe(loop.stop)
            loop_thread.join(max(0.0, deadline - time.monotonic()))
            if not loop_thread.is_alive():
                # A busy machine may stop the loop before the cancellation ran: finish that same one here
                # (the loop no longer runs), so no task or coroutine is left pending at interpreter exit. A
                # second _cancel_tasks would race the first, which would cancel it.
                if not shutdown.done():
                    with contextlib.suppress(Exception, asyncio.CancelledError):
                        loop.run_until_complete(asyncio.wrap_future(shutdown, loop=loop))
                loop.close()
        self._waiters.wake()
        _live.discard(self)

    def _work(self) -> None:
        while True:
            job = self._queue.take(_POLL_SECONDS)
            if job is None:
                if self._queue.closed:
                    return
                continue
            limiter = self._limiter()
            if limiter is None:
                self._queue.done()
                return
            try:
                if not limiter._start_fetch(job):  # superseded while it waited: nobody wants its answer
                    continue
                answer, error = self._fetch(limiter, job)
                result = limiter._finish_fetch(job, answer, error)
                # A fetch cut short by close() is not the provider's failure.
                if result.warning is not None and not self._queue.closed:
                    log.warning("%s", result.warning)
                elif result.outcome == "unknown":
                    log.debug("ratekeeper: the quota provider knows no peer %r in group %r", job.peer, job.group)
            finally:
                # Only now: wait_quotas() returns once every job is done, logging included.
                del limiter
                self._queue.done()
                self._waiters.wake()

    def _fetch(self, limiter: Limiter, job: _FetchJob) -> tuple[Any, BaseException | None]:
        """Calls the provider: (its answer, or what it raised). An async one is waited for only as long
        as the job's quota timeout (``Quotas(timeout=)``) leaves."""
        try:
            answer = self._provider(job.peer, job.group)
            if inspect.isawaitable(answer):
                answer = self._run_async(answer, limiter._fetch_time_left(job))
        # Anything, SystemExit and KeyboardInterrupt too: in a worker thread they can only come from the
        # provider itself (signals reach the main thread), and letting one through would end the worker
        # and strand every queued fetch. It is the provider's failure, counted and logged like any other.
        except BaseException as error:
            return None, error
        return answer, None

    def _run_async(self, awaitable: Awaitable[Any], timeout: float) -> Any:
        async def wait() -> tuple[Any, BaseException | None]:
            try:
                return await awaitable, None
            except asyncio.CancelledError:
                raise  # our own cancellation (timeout, close): the future reports it
            # SystemExit or KeyboardInterrupt escaping a task would stop the loop for every later fetch;
            # handed to the worker instead, which counts it as a failure.
            except BaseException as error:
                return None, error

        future = asyncio.run_coroutine_threadsafe(wait(), self._event_loop())
        with self._loop_lock:
            self._running.add(future)
        try:
            answer, error = future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise
        finally:
            with self._loop_lock:
                self._running.discard(future)
        if error is not None:
            raise error
        return answer

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        with self._loop_lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="ratekeeper-quota-loop", daemon=True)
                thread.start()
                self._loop, self._loop_thread = loop, thread
            return self._loop


class FirstFetchWaiters:
    """Coroutines waiting for a key's first fetch (``athrottle`` with ``quota_wait``), woken by workers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    async def wait(self, pending: Callable[[], bool], timeout: float) -> None:
        """Returns once ``pending()`` is false (re-checked after each landing) or ``timeout`` seconds pass."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            future: asyncio.Future[None] = loop.create_future()
            entry = (loop, future)
            with self._lock:
                self._waiters.append(entry)
            try:
                remaining = deadline - loop.time()
                if not pending() or remaining <= 0:
                    return
                try:
                    await asyncio.wait_for(future, remaining)
                except asyncio.TimeoutError:  # not the builtin TimeoutError before Python 3.11
                    return
            finally:
                with self._lock:
                    if entry in self._waiters:
                        self._waiters.remove(entry)

    def wake(self) -> None:
        with self._lock:
            waiters, self._waiters = self._waiters, []
        for loop, future in waiters:
            with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits any more
                loop.call_soon_threadsafe(_resolve, future)


async def _cancel_tasks() -> None:
    tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
