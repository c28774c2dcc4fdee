"""A discrete-event simulation of a service behind an adaptive limit, on a ManualClock.

The service has ``capacity`` workers, each serving one request in ``base`` seconds (± 10 % noise); past
them requests queue in order, so latency is ``base`` up to the knee (``capacity`` in flight) and grows
linearly past it, and throughput is at most ``capacity / base``. ``clients`` clients form a closed loop:
each sends again as soon as it is answered. A refused client is answered at once and sends again; its
retry can only be admitted once the gate changes, which happens when a request ends, so the simulation
retries the waiting clients at each ending instead of spinning (the admissions are the same).

Everything goes through the public API: ``Limiter.concurrent`` to enter (admitted or ``RateLimited``),
``Permit.__exit__`` to leave (``mark_timed_out`` for a request given up on), ``ManualClock.advance`` to
move time, ``stats()`` to read the limit.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from dataclasses import dataclass, field

import ratekeeper as rk


@dataclass
class Phase:
    """From ``at`` seconds on, the service has ``capacity`` workers and takes ``base`` seconds a request
    (``hang``: never answers; clients give up after ``timeout``)."""

    at: float
    capacity: int
    base: float = 0.01
    hang: bool = False


@dataclass
class Run:
    """What a simulation saw: the limit every ``tick`` seconds, and each served request's (end, latency)."""

    times: list[float] = field(default_factory=list)
    limits: list[int] = field(default_factory=list)
    baselines: list[float | None] = field(default_factory=list)
    served: list[tuple[float, float]] = field(default_factory=list)
    refusals: int = 0

    def limit_between(self, start: float, end: float) -> list[int]:
        return [limit for t, limit in zip(self.times, self.limits, strict=True) if start <= t < end]

    def mean_limit(self, start: float, end: float) -> float:
        limits = self.limit_between(start, end)
        return sum(limits) / len(limits)

    def throughput(self, start: float, end: float) -> float:
        return sum(1 for t, _ in self.served if start <= t < end) / (end - start)

    def p99(self, start: float, end: float) -> float:
        latencies = sorted(latency for t, latency in self.served if start <= t < end)
        return latencies[int(0.99 * (len(latencies) - 1))]

    def follow_time(self, change: float, knee: int, end: float, window: float = 1.0) -> float:
        """Seconds after ``change`` until the mean limit over ``window`` seconds is within ±20 % of ``knee``."""
        t = change
        while t + window <= end:
            if abs(self.mean_limit(t, t + window) - knee) <= 0.2 * knee:
                return t - change
            t += 0.1
        return float("inf")


def simulate(
    limit: rk.Limit,
    phases: list[Phase],
    *,
    clients: int,
    duration: float,
    seed: int,
    timeout: float = 1.0,
    tick: float = 0.1,
) -> Run:
    rng = random.Random(seed)
    clock = rk.ManualClock()
    limiter = rk.Limiter(rules=[rk.Rule("/", "service", limits=[limit])], clock=clock)
    run = Run()
    # The service: busy workers, a queue of (arrival, permit), and a heap of (end, order, arrival, permit, timed out).
    busy = 0
    queue: deque[tuple[float, rk.Permit]] = deque()
    events: list[tuple[float, int, float, rk.Permit | None, bool]] = []
    order = 0
    phase = phases[0]
    waiting = clients  # clients refused, or not started: they send at the next chance
    now = 0.0

    def push(at: float, arrival: float, permit: rk.Permit | None, timed_out: bool) -> None:
        nonlocal order
        order += 1
        heapq.heappush(events, (at, order, arrival, permit, timed_out))

    def start(arrival: float, permit: rk.Permit) -> None:
        nonlocal busy
        if phase.hang:
            push(arrival + timeout, arrival, permit, True)
            return
        busy += 1
        push(now + phase.base * rng.uniform(0.9, 1.1), arrival, permit, False)

    def send_waiting() -> None:
        nonlocal waiting
        while waiting:
            permit = limiter.concurrent("client", "/")
            try:
                permit.__enter__()
            except rk.RateLimited:
                run.refusals += 1
                return
            waiting -= 1
            if phase.hang or busy < phase.capacity:
                start(now, permit)
            else:
                queue.append((now, permit))

    for t in range(1, int(duration / tick) + 1):
        push(t * tick, 0.0, None, False)  # ticks: read the limit, change phase
    send_waiting()
    while events:
        at, _, arrival, permit, timed_out = heapq.heappop(events)
        if at > duration:
            break
        clock.advance(at - now)
        now = at
        if permit is None:
            gate = limiter.stats()["groups"]["service"]["adaptive"][0]
            run.times.append(now)
            run.limits.append(gate["limit"])
            run.baselines.append(gate["baseline_latency"])
            for p in phases:
                if p.at <= now + 1e-9:
                    phase = p
            while busy < phase.capacity and queue:
                start(*queue.popleft())
            send_waiting()
            continue
        if timed_out:
            permit.mark_timed_out()
        else:
            busy -= 1
            run.served.append((now, now - arrival))
            while busy < phase.capacity and queue:
                start(*queue.popleft())
        permit.__exit__(None)
        waiting += 1
        send_waiting()
    return run
