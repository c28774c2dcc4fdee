"""Types of the core's values: the algorithm and policy names, and the shape of
[`ratekeeper.Limiter.stats`][ratekeeper.Limiter.stats] as typed dicts, so ``stats()["groups"]["api"]["allowed"]``
type-checks and reads like before."""

from __future__ import annotations

from typing import Literal, TypedDict

__all__ = ["Algorithm", "GroupStats", "Histogram", "LimitStats", "PolicyName", "Stats"]

Algorithm = Literal["gcra", "token_bucket", "fixed_window", "sliding_window", "sliding_log", "leaky_bucket"]
"""The algorithms a rate limit can use (see "What a rate means")."""
PolicyName = Literal["all", "fallback"]
"""How a group's rate limits combine: ``"all"`` must each admit; under ``"fallback"`` the first that admits
does."""


class LimitStats(TypedDict):
    """One limit of a group: ``rate`` (``None`` for concurrency permits), ``burst``, ``algorithm``."""

    rate: str | None
    burst: int
    algorithm: str


class Histogram(TypedDict):
    """Observations in buckets: ``counts[i]`` are those above ``bounds[i - 1]`` and at most ``bounds[i]``
    (seconds); the last count, one more than the bounds, is those above every bound (``+Inf``)."""

    bounds: list[float]
    counts: list[int]
    #: Of every observation, in seconds.
    sum: float
    count: int


class AdaptiveStats(TypedDict):
    """One adaptive limit of a group (see [`Limit`][ratekeeper.Limit]'s ``adaptive``), as this process decides it
    (with [`Shared`][ratekeeper.Shared]: every process of the machine)."""

    controller: Literal["gradient", "aimd"]
    per: Literal["group", "key"]
    #: Permits now (``per="key"``: summed over the keys' gates).
    limit: int
    #: Requests holding a permit now (``per="key"``: summed).
    in_flight: int
    #: The learned unloaded latency, seconds (``per="key"``: the keys' mean); ``None`` before the first probe.
    baseline_latency: float | None
    #: A moving mean of recent windows' mean latency, seconds; ``None`` before the first window.
    recent_latency: float | None
    #: Whether a probe pins the limit to its floor now, re-learning the baseline.
    probing: bool
    #: Gates: 1 for ``per="group"`` once used (0 before), one per key seen for ``per="key"``.
    gates: int
    #: Released requests learned from; of them dropped and timed out.
    samples: int
    drops: int
    timeouts: int
    #: Probes ended.
    probes: int


class GroupStats(TypedDict):
    """One group's counters since the limiter was made (they survive reconfiguration by name)."""

    limits: list[LimitStats]
    policy: str
    #: Limited requests decided: ``allowed + refused``.
    requests: int
    allowed: int
    refused: int
    #: Admitted after a wait that really happened (a reservation given back is not counted).
    delayed: int
    #: Requests of exempt peers or paths whose path routes to this group.
    exempt: int
    #: States the group holds now (one per key and limit).
    keys: int
    #: States of the group evicted as least used (idle states dropped are not evictions).
    evictions: int
    reductions: int
    quota_fetches: int
    #: Fetches that failed: the provider raised (not ``LookupError``), timed out, or answered nonsense.
    quota_failures: int
    #: Fetches the provider answered with ``LookupError`` ("no such key"): the key stays on the failsafe.
    quota_unknown: int
    #: Idle states dropped to make room for new keys (not evictions: a drop never lets a key admit more).
    dropped: int
    #: Waits given back (a timeout, a cancelled task): no longer in ``delayed``.
    abandoned: int
    #: How long each wait granted was, given back or not (1 ms to 60 s buckets): ``waits["count"] ==
    #: delayed + abandoned``.
    waits: Histogram
    #: The group's adaptive limits, in the order of its limits; ``[]`` for a group without one.
    adaptive: list[AdaptiveStats]


class SharedStats(TypedDict):
    """The whole shared region (``backend=rk.Shared(...)``), counted by every process that uses it."""

    #: The region's file.
    path: str
    #: States held in the region, and its bound (the ``max_keys`` it was made for).
    keys: int
    max_keys: int
    #: States evicted as least used, and idle states dropped to make room, by any process.
    evictions: int
    dropped: int
    #: Decisions of every process since the region was made.
    allowed: int
    refused: int
    #: The peers refused most across every process, as ``(peer, refusals)``, most first (each shard
    #: keeps its 4 most refused; counts never below the truth).
    top_refused: list[tuple[str, int]]
    #: States held per group name.
    groups: dict[str, int]
    #: Decisions this process made without their states, another process having held their shard for
    #: 50 ms (stopped holding it), decided by ``rk.Shared(on_stall=...)`` (0 from ``inspect``).
    stalls: int
    #: The clock every process reads the region's times on: ``"tsc"`` (the CPU's counter, calibrated once
    #: in the region and checked against the kernel's clock: within 100 µs of it) or ``"kernel"``
    #: (``CLOCK_MONOTONIC``, where the counter cannot be trusted).
    clock: str


class Stats(TypedDict):
    """The whole limiter; read one shard at a time, so not one instant's snapshot under load."""

    enabled: bool
    keys: int
    max_keys: int
    evictions: int
    #: Every exempt request, those routed to a group included.
    exempt: int
    memory_bytes: int
    quota_records: int
    quota_queue: int
    quota_running: int
    #: Round trips to the backend (Redis) that failed, each decided by its ``on_error``; 0 without one.
    backend_errors: int
    #: Whether the last round trip to the backend failed (an outage in progress).
    backend_down: bool
    #: Outages begun: failed round trips after one that succeeded.
    backend_outages: int
    #: Lease mode's standing share this process holds (``1`` to ``standing_shares``), or ``None``: none
    #: held (not yet claimed, every one held, or ``standing_shares`` not set).
    standing_share: int | None
    #: Decision latency in this process, sampled: one decision in 64 per thread, from before its shard is
    #: locked to after (100 ns to 100 ms buckets).
    decision_seconds: Histogram
    #: The backend's round trip per decision, every one (empty without a backend).
    backend_seconds: Histogram
    groups: dict[str, GroupStats]
    #: The shared region's own counts, every process's together (``None`` unless
    #: ``backend=rk.Shared(...)``); ``keys`` and each group's ``keys`` above are region-wide too, the
    #: other counts this process's.
    shared: SharedStats | None
