"""The Rust core of ratekeeper (``ratekeeper._core``). Import the public names from ``ratekeeper``."""

import asyncio
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, ClassVar, Literal, TypeAlias, final

from typing_extensions import disjoint_base

from ratekeeper._stats import Algorithm, PolicyName, SharedStats, Stats

__all__ = [
    "NANOS_PER_SEC",
    "Decision",
    "GroupPolicy",
    "Limit",
    "Limiter",
    "ManualClock",
    "QuotaInfo",
    "Quotas",
    "Rate",
    "Redis",
    "Resolution",
    "Rule",
    "Shared",
    "_Completions",
    "_FetchJob",
    "_FetchQueue",
    "_FetchResult",
    "_HttpxSend",
    "_Outgoing",
    "_Plan",
    "_Reservation",
    "_Take",
    "_Ticket",
    "__version__",
    "_inspect_region",
    "_read_server_word",
]

__version__: str
NANOS_PER_SEC: int

@final
class Rate:
    """``count`` requests per ``period``.

    Args:
        spec: a rate string such as ``"10/min"``, ``"3/60s"``, ``"5/second"``, ``"100/hour"``,
            ``"1000/day"`` or ``"2/500ms"``; or a count, when ``per`` is given; or a ``Rate``.
        per: the period in seconds, with a count: ``Rate(10, per=60.0)``.

    Raises:
        InvalidValue: not a rate (the message quotes it), a count of 0, a period of 0 or over ten years.
        InvalidType: neither a str nor a Rate.
    """

    def __new__(cls, spec: str | int | Rate, per: float | None = None) -> Rate: ...
    @property
    def count(self) -> int:
        """Requests allowed per period."""
    @property
    def period(self) -> float:
        """The period in seconds."""
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class Limit:
    """One limit: a rate enforced by an algorithm, or a number of concurrent requests.

    Args:
        rate: e.g. ``"10/s"`` or a [`Rate`][ratekeeper.Rate]. For ``leaky_bucket``, ``"R/T"`` means R tokens leak
            every T.
        burst: requests admitted at once: the burst (``gcra``, ``token_bucket``), the limit per window
            (``fixed_window``, ``sliding_window``, ``sliding_log``) or the bucket's capacity
            (``leaky_bucket``). Default: the rate's count.
        algorithm: ``"gcra"`` (default), ``"token_bucket"``, ``"fixed_window"``, ``"sliding_window"``,
            ``"sliding_log"`` or ``"leaky_bucket"``.
        concurrency: instead of a rate, at most this many requests in flight per key, held with
            [`ratekeeper.Limiter.concurrent`][ratekeeper.Limiter.concurrent].
        adaptive: instead of a rate, a concurrency limit whose permits move with the latency and the outcome
            of the requests it admits: ``"gradient"`` (follows the ratio of the unloaded latency to the
            sampled one) or ``"aimd"`` (+1 a window, x ``backoff`` on overload). See
            [Adaptive concurrency](adaptive-concurrency.md). The settings below go with it only; each has
            a default, so none needs choosing.
        min_limit: the floor: never fewer permits; also the permits a probe pins the limit to. Default 1.
        max_limit: the ceiling. Default 1000.
        initial: the permits before anything is learned. Default 10 (within the bounds).
        per: ``"group"`` (default: one limit for every peer of the group, as the service behind it has
            one capacity) or ``"key"`` (one per key, e.g. outgoing calls keyed by the upstream they go to).
        window: seconds between updates of the limit. Default 0.1.
        tolerance: a window's mean latency above ``baseline x (1 + tolerance)`` is a sign of queueing.
            Default 0.2 (AIMD), 0.1 (gradient).
        backoff: the factor a drop or a timeout (and, for AIMD, latency above the threshold) multiply the
            limit by, from 0.5 to below 1. Default 0.9; a window of nothing but drops and timeouts halves it.
        smoothing: gradient: the share of the way to its target the limit goes in a window when it
            decreases, above 0 and at most 1. Default 0.25.
        threshold: AIMD: a fixed latency threshold in seconds; ``None`` (default): the learned baseline x
            (1 + ``tolerance``).
        probe_interval: seconds between probes that re-learn the baseline (the limit is pinned to
            ``min_limit`` until ``probe_samples`` requests admitted after the drain are measured). Default 30.
        probe_samples: requests a probe measures. Default 10.
        jitter: timers vary by up to this share either way (seeded per limit, so manual-clock runs
            repeat). Default 0.1, at most 0.5.

    Raises:
        InvalidValue: a bad rate, burst, algorithm, or both or neither of ``rate`` and ``concurrency``;
            an adaptive setting out of its range, or given without ``adaptive``.
        InvalidType: a setting of the wrong type.
    """

    def __new__(
        cls,
        rate: str | Rate | None = None,
        *,
        burst: int | None = None,
        algorithm: Algorithm = "gcra",
        concurrency: int | None = None,
        adaptive: Literal["gradient", "aimd"] | None = None,
        min_limit: int | None = None,
        max_limit: int | None = None,
        initial: int | None = None,
        per: Literal["group", "key"] | None = None,
        window: float | None = None,
        tolerance: float | None = None,
        backoff: float | None = None,
        smoothing: float | None = None,
        threshold: float | None = None,
        probe_interval: float | None = None,
        probe_samples: int | None = None,
        jitter: float | None = None,
    ) -> Limit: ...
    @property
    def adaptive(self) -> Literal["gradient", "aimd"] | None:
        """The controller of an adaptive limit; ``None`` for any other limit."""
    @property
    def adaptive_settings(self) -> dict[str, int | float | str | None] | None:
        """An adaptive limit's settings by keyword (``min_limit``, ``max_limit``, ``initial``, ``per``,
        ``window``, ``tolerance``, ``backoff``, ``smoothing``, ``threshold``, ``probe_interval``,
        ``probe_samples``, ``jitter``), defaults filled in; ``None`` for any other limit."""
    @property
    def rate(self) -> Rate | None:
        """The rate; ``None`` for a concurrency limit."""
    @property
    def burst(self) -> int:
        """Requests admitted at once: the burst, a window's limit, a bucket's capacity, or the permits."""
    @property
    def algorithm(self) -> Algorithm | Literal["concurrency"]:
        """The algorithm that enforces it, or ``"concurrency"`` for permits."""
    @property
    def concurrency(self) -> int | None:
        """The permits of a concurrency limit; ``None`` for a rate limit."""
    @property
    def window(self) -> float | None:
        """Seconds the burst is counted over, as a ``RateLimit-Policy`` header's ``w`` states it: the time
        a full burst takes to come back at the rate (``"10/min"``: 60.0; ``"10/s"`` with burst 20: 2.0),
        or a window algorithm's window; an adaptive limit's update window. ``None`` for concurrency."""
    def __eq__(self, value: object, /) -> bool: ...

@final
class Rule:
    """A routing rule: requests whose path matches ``pattern`` count against ``group``.

    Args:
        pattern: a regular expression searched in the path (like ``re.search``: anchor it with ``^``);
            ``""`` matches every path and requests without a path.
        group: the name of the group; rules naming the same group share its state and must agree on
            its limits.
        rate: the group's one limit, e.g. ``"10/min"`` or a [`Rate`][ratekeeper.Rate] (or give ``limits``).
        burst: requests admitted at once (default: the rate's count, so ``"3/60s"`` admits 3 at once,
            then one every 20 s).
        algorithm: the algorithm of ``rate``; see [`Limit`][ratekeeper.Limit].
        limits: several [`Limit`][ratekeeper.Limit] (or rate strings) instead of ``rate``.
        policy: how the rate limits combine: ``"all"`` (every one must admit; a refusal consumes
            nothing) or ``"fallback"`` (the first that admits takes the request). Concurrency limits
            are gates in either policy.
        reduction: whether [`ratekeeper.Limiter.reduce`][ratekeeper.Limiter.reduce] may give tokens back to this group.

    Raises:
        InvalidValue: an invalid pattern (``loc`` ``("pattern",)``; compiled once, here), rate, burst,
            algorithm, policy, or both or neither of ``rate`` and ``limits``.
        InvalidType: a pattern or group that is not a str, a limit that is not a Limit or a str.
    """

    def __new__(
        cls,
        pattern: str,
        group: str,
        rate: str | Rate | None = None,
        *,
        burst: int | None = None,
        algorithm: Algorithm = "gcra",
        limits: Iterable[Limit | str | Rate] | None = None,
        policy: PolicyName = "all",
        reduction: bool = True,
    ) -> Rule: ...
    @property
    def pattern(self) -> str:
        """The regex the request's path is searched with (``""``: every path)."""
    @property
    def group(self) -> str:
        """The group whose limits the matching requests share."""
    @property
    def limits(self) -> list[Limit]:
        """The group's limits, rate and concurrency, in order."""
    @property
    def rate(self) -> Rate | None:
        """The rate of the first limit."""
    @property
    def burst(self) -> int:
        """The burst of the first limit."""
    @property
    def algorithm(self) -> Algorithm | Literal["concurrency"]:
        """The algorithm of the first limit."""
    @property
    def policy(self) -> PolicyName:
        """``"all"``: every rate limit must admit; ``"fallback"``: the first that admits does."""
    @property
    def reduction(self) -> bool:
        """Whether ``Limiter.reduce`` may give tokens back to the group."""

@final
class ManualClock:
    """A clock that moves only when told to, for tests. Waits on it advance it instead of sleeping.

    Args:
        start: the initial reading in seconds, from 0 to 2**62 ns (about 146 years).

    Raises:
        InvalidValue: a ``start`` that is negative, NaN, infinite or past 2**62 ns.
        InvalidType: a ``start`` that is not a number (a bool included).
    """

    def __new__(cls, start: float = 0.0) -> ManualClock: ...
    def now(self) -> float:
        """The current reading in seconds."""
    def advance(self, seconds: float) -> None:
        """Moves the clock forward.

        Raises:
            InvalidValue: a negative, NaN or infinite number of seconds, or a move that would carry the
                clock past 2**62 ns (about 146 years; the clock is then unchanged). Past 2**64 ns time
                would saturate and every request be admitted.
            InvalidType: ``seconds`` that is not a number (a bool included).
        """
    def _advance_to_ns(self, deadline_ns: int) -> None: ...

@final
class Decision:
    """What the limiter decided for one request. ``bool(decision)`` is ``decision.allowed``."""

    @staticmethod
    def _refusal(retry_after: float) -> Decision:
        """A refusal no limit made: by rate, in no group, to be retried after ``retry_after`` seconds (0 when
        it is not a finite wait of 0 or more). The outgoing engine's, for a call refused while its host's
        first answer is awaited."""

    @property
    def _admitted_at(self) -> int:
        """The limiter's clock reading (ns) of the decision (for an adaptive limit's permits: when they were
        taken), from which ``Limiter._release(admitted_at=...)`` measures the request's latency."""
    @property
    def _peer(self) -> str | None:
        """The key a web request was decided for, when the core read it (``_admit_web``,
        ``_admit_scope``): a refusal's or a permit's receipt takes it from here. ``None`` otherwise."""
    @property
    def allowed(self) -> bool:
        """Whether the request may go ahead."""
    @property
    def group(self) -> str | None:
        """The group that limited the request; ``None`` if no rule matched, the peer or path is exempt,
        or the limiter is off."""
    @property
    def limit(self) -> int | None:
        """The group's burst: requests admitted at once (``None`` when not limited)."""
    @property
    def remaining(self) -> int | None:
        """Requests of cost 1 the key could make right now (``None`` when not limited)."""
    @property
    def retry_after(self) -> float:
        """Seconds until the same request would be admitted; 0.0 when allowed, ``inf`` when it never
        can be (a cost above the burst)."""
    @property
    def reset_after(self) -> float:
        """Seconds until the key is back to its full burst; 0.0 when not limited."""
    @property
    def window(self) -> float | None:
        """Seconds of the window ``limit`` is counted over (the ``w`` of a ``RateLimit-Policy`` header):
        for ``"10/min"`` 60.0. ``None`` for exempt or unrouted requests and for concurrency permits."""
    @property
    def next_after(self) -> float:
        """Seconds until the key may make one more request than ``remaining`` (the ``t`` of a
        ``RateLimit`` header): exact for GCRA, the time to the full limit for the other algorithms
        (when their next unit comes back at the latest); 0.0 at the full limit."""
    @property
    def refused_by(self) -> Literal["rate", "concurrency"] | None:
        """What refused the request: a rate limit, or concurrency permits all in use (``retry_after``
        is 0.0 then: a permit frees when a request finishes). ``None`` when allowed."""
    @property
    def permits_held(self) -> bool:
        """Whether this admission took concurrency permits that must be given back (``concurrent`` and
        the web integrations do it when the request ends); False for a refusal or a group without them."""
    def __bool__(self) -> bool: ...
    def _fields(self, ietf: bool, legacy: bool) -> tuple[tuple[str, str], ...]:
        """The rate-limit fields of a response to this decision (draft-ietf-httpapi-ratelimit-headers-10),
        as ``(name, value)`` str pairs for a WSGI ``start_response``.

        Args:
            ietf: the ``RateLimit-Policy`` and ``RateLimit`` fields.
            legacy: the ``X-RateLimit-Limit``, ``-Remaining`` and ``-Reset`` fields.

        Returns:
            A refusal's ``Retry-After`` first (none when it can never pass), then the fields asked for;
            none of those for an exempt or unrouted request. The same tuple may be handed out again for
            a decision with the same fields (a small cache: building the strings costs more than the
            decision).
        """
    def _raw_fields(self, ietf: bool, legacy: bool) -> tuple[tuple[bytes, bytes], ...]:
        """``_fields`` as lower-case latin-1 bytes pairs, ready to append to an ASGI message's headers."""

@final
class GroupPolicy:
    """What a ``RateLimit-Policy`` header says of a group; see
    [`Limiter.group_policy`][ratekeeper.Limiter.group_policy]."""

    @property
    def group(self) -> str:
        """The group the policy describes."""
    @property
    def quota(self) -> int:
        """Requests per window (``q``): the burst of the group's first rate limit, or its permits."""
    @property
    def window(self) -> float | None:
        """Seconds (``w``); ``None`` for a group of concurrency permits only."""
    @property
    def unit(self) -> Literal["requests", "concurrent-requests"]:
        """The quota unit (``qu``)."""

@final
class Resolution:
    """Where a request goes and what limits it; see [`Limiter.resolve`][ratekeeper.Limiter.resolve]."""

    @property
    def group(self) -> str:
        """The group the request is routed to."""
    @property
    def limits(self) -> list[Limit]:
        """The group's limits for this key: a per-key quota replaces the first rate limit."""
    @property
    def policy(self) -> PolicyName:
        """The group's policy (``"all"`` or ``"fallback"``)."""

@final
class Quotas:
    """How per-key quotas are obtained: ``Limiter(..., quotas=Quotas(provider, failsafe="5/min"))``.

    Args:
        provider: ``(peer, group) -> Rate | str | None``, or an ``async def`` of the same: each key's
            quota, which replaces the rate of its group's first rate limit (``None``: the rule's rate).
            Called off the hot path by worker threads, once per key at a time; a request never waits
            for it unless ``wait`` says so. Raising ``LookupError`` says "no such key": the key stays on
            the failsafe and is asked for again after ``ttl`` (logged at DEBUG). Other failures keep
            the last good quota and retry with backoff (logged once as a WARNING).
        failsafe: the rate of a key whose first fetch has not landed; default: the rule's rate.
        ttl: seconds after which the next use of a key fetches its quota again (the old one serves
            meanwhile).
        timeout: seconds a fetch may take before it counts as failed.
        workers: threads calling a sync provider (an async one runs on one private event loop).
        wait: seconds the first request of a key waits for its fetch (``check``, ``allow``,
            ``throttle`` block; ``athrottle`` awaits); 0: decide at once on the failsafe.

    Raises:
        InvalidValue: a bad failsafe, a duration that is not a positive number, ``workers`` outside 1-256.
        InvalidType: a provider that is not callable.
    """

    def __new__(
        cls,
        provider: _QuotaProvider | None = None,
        *,
        failsafe: str | Rate | None = None,
        ttl: float = 300.0,
        timeout: float = 5.0,
        workers: int = 4,
        wait: float = 0.0,
    ) -> Quotas: ...
    @property
    def provider(self) -> _QuotaProvider | None:
        """The callable (sync or async) that fetches a key's quota; ``None``: quotas are only set with ``set_quota``."""
    @property
    def failsafe(self) -> Rate | None:
        """The rate a key gets while its quota is being fetched or its fetch failed (``None``: the group's own)."""
    @property
    def ttl(self) -> float:
        """Seconds a fetched quota stays fresh before it is fetched again."""
    @property
    def timeout(self) -> float:
        """Seconds a fetch may take before it counts as failed."""
    @property
    def workers(self) -> int:
        """Fetches run at once, on threads of the limiter's own."""
    @property
    def wait(self) -> float:
        """Seconds a key's first request waits for its quota to land (0: decide on the failsafe at once)."""

@final
class QuotaInfo:
    """What a key's quota is; see [`Limiter.quota`][ratekeeper.Limiter.quota]."""

    @property
    def rate(self) -> Rate | None:
        """The rate in force for the key's first rate limit (``None`` for a group without one)."""
    @property
    def source(self) -> str:
        """``"provider"`` (fetched), ``"failsafe"`` (first fetch not landed), ``"stale"`` (the last good
        quota, kept while fetches fail), ``"set"`` ([`Limiter.set_quota`][ratekeeper.Limiter.set_quota]) or ``"rule"``
        (the rule's own rate: the provider said ``None``, or nothing is known and there is no failsafe)."""
    @property
    def age(self) -> float | None:
        """Seconds on the limiter's clock since this quota took effect; ``None`` if the key has no record."""
    @property
    def fetching(self) -> bool:
        """Whether a fetch for the key is running."""
    @property
    def failures(self) -> int:
        """Failed fetches in a row."""

@final
class _FetchQueue:
    def take(self, timeout: float) -> _FetchJob | None: ...
    def done(self) -> None: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...

@final
class _FetchJob:
    @property
    def peer(self) -> str: ...
    @property
    def group(self) -> str: ...

@final
class _FetchResult:
    @property
    def outcome(self) -> Literal["landed", "late", "unknown", "failed"]: ...
    @property
    def warning(self) -> str | None: ...

@final
class _Completions:
    """One event loop's channel for replies from the Redis client's thread (``loop.add_reader``)."""

    def __new__(cls) -> _Completions: ...
    def fileno(self) -> int: ...
    def drain(self) -> None: ...

@final
class _Take:
    """What a decision takes of a group's limits (the private protocol's enum)."""

    RATES: ClassVar[_Take]
    PERMITS: ClassVar[_Take]
    BOTH: ClassVar[_Take]

@final
class _Reservation:
    @property
    def decision(self) -> Decision: ...
    @property
    def wait(self) -> float: ...
    @property
    def deadline_ns(self) -> int: ...

@final
class Redis:
    """Where a limiter keeps its states so that every process using the same Redis shares its limits:
    ``rk.Limiter(rules=..., backend=rk.Redis("redis://10.0.0.5:6379/0"))``.

    Exact mode: each decision is one call of a Lua script that reads, decides and writes the key's
    states atomically, on Redis's own clock (``TIME``; Redis >= 5): a Redis Function (``FCALL``,
    loaded on first use) on Redis >= 7, ``EVALSHA`` before. It runs the same algorithms and
    arithmetic as the in-memory core, so it gives the same decisions. A limiter with a
    [`ManualClock`][ratekeeper.ManualClock] passes the clock's time instead (tests stay deterministic). The client is
    the Rust ``redis`` crate (one multiplexed, pipelined connection that reconnects with backoff); a
    decision waits for Redis without the GIL.

    Args:
        url: ``redis://[user:password@]host[:port][/db]``, ``rediss://`` (TLS),
            ``unix:///path/to/redis.sock[?db=N]``, or a Redis Cluster:
            ``redis+cluster://[user:password@]host:port,host:port`` (``rediss+cluster://`` with TLS).
        mode: ``"exact"``, or ``"sync"`` (local counts, synced): decisions stay in this process's memory at
            in-memory speed, and every ``sync_interval`` seconds one pipelined round trip pushes each
            key's usage since the last push to a counter in Redis and charges what the other processes
            used meanwhile to the local state. Over-admission is bounded (see the README); ``on_error``
            does not apply (a failed sync keeps its usage for the next). Or ``"lease"``: a process takes a
            lease of part of a key's budget in one script call and decides against it in memory, never above
            the limit; it asks for more before it runs out and gives back what a key idle for
            ``lease_span`` did not use. Fixed and sliding windows, GCRA and the token bucket are leased,
            and concurrency permits (alone or beside rates, all or nothing); waits, ``peek``,
            ``policy="fallback"``, the sliding log and the leaky bucket are decided as in exact mode (see
            the workers-and-machines page).
        timeout: the longest a decision waits for Redis, in seconds, before ``on_error`` decides.
        prefix: the start of every key ratekeeper writes (keys are ``<prefix>{<group>:<peer>}:<limit>:<algorithm>``;
            long peers are hashed).
        sync_interval: sync mode's interval in seconds (default 1.0); only with ``mode="sync"``.
        tls_ca_file: for ``rediss://``, a PEM file of the certificates to trust instead of the
            system's (a private CA).
        lease_ttl: concurrency permits are leases in Redis that expire after this many seconds, so
            that a crashed process's permits come back; a request held longer stops counting.
        lease_span: lease mode's span, in seconds (default 0.1; only with ``mode="lease"``): a lease holds
            about twice what its key spent over a span, and a key idle for a span gives its lease back. The
            capacity a process holds idle is at most that; a process killed with a lease loses only that
            lease.
        standing_shares: lease mode's standing shares (default None: none; only with ``mode="lease"``, 1 to
            1024): ``standing_fraction`` of each key's budget, in groups whose limits are all GCRA, split in
            advance into this many shares, one per process (a pool in Redis hands them out, each held for
            a time to live of ten spans, at least a second, and renewed every span). A process decides keys
            on its share with no round trip, even keys it has never seen; Redis keeps the rest for leases.
            Never above the limit; the cost is the shares nobody holds, and a share's keys start empty for
            one GCRA tolerance (burst / rate) after it is claimed. Give it the number of processes.
        standing_fraction: the part of each key's budget split into standing shares, between 0 and 1
            (default 0.5; only with ``standing_shares``).
        on_error: while Redis cannot answer: ``"local"`` decides in this process's memory,
            ``"allow"`` admits, ``"deny"`` refuses (``retry_after`` 1 s), ``"raise"`` raises
            [`BackendUnavailable`][ratekeeper.BackendUnavailable]. An outage is logged once, when it starts, and counted
            in ``Limiter.backend_errors``.

    Raises:
        InvalidValue: a URL that is not a Redis URL, an unknown ``mode`` or ``on_error``, a timeout
            or interval that is not positive, ``sync_interval``, ``lease_span`` or ``standing_shares`` given
            for another mode, ``standing_shares`` outside 1 to 1024, ``standing_fraction`` outside (0, 1) or
            without ``standing_shares``, a ``tls_ca_file`` that cannot be read.
        InvalidType: a URL that is not a str, a ``standing_fraction`` that is not a number.
    """

    def __new__(
        cls,
        url: str,
        *,
        mode: Literal["exact", "sync", "lease"] = "exact",
        timeout: float = 0.05,
        prefix: str = "ratekeeper:",
        on_error: Literal["local", "allow", "deny", "raise"] = "local",
        sync_interval: float | None = None,
        tls_ca_file: str | os.PathLike[str] | None = None,
        lease_ttl: float = 300.0,
        lease_span: float | None = None,
        standing_shares: int | None = None,
        standing_fraction: float | None = None,
    ) -> Redis: ...
    @property
    def standing_shares(self) -> int | None:
        """Lease mode's standing shares; ``None`` without them."""
    @property
    def standing_fraction(self) -> float | None:
        """The part of each key's budget split into standing shares; ``None`` without them."""
    @property
    def lease_ttl(self) -> float:
        """How long a concurrency permit's lease lives in Redis, in seconds."""
    @property
    def lease_span(self) -> float | None:
        """Lease mode's span in seconds; ``None`` in the other modes."""
    @property
    def url(self) -> str:
        """The server's URL (``redis://``, ``rediss://``, ``unix://``), password masked in ``repr``."""
    @property
    def mode(self) -> Literal["exact", "sync", "lease"]:
        """``"exact"``: one atomic script per decision; ``"sync"``: decide locally, push usage every
        ``sync_interval``; ``"lease"``: decide locally from leases of the keys' budgets."""
    @property
    def sync_interval(self) -> float | None:
        """Sync mode's interval in seconds; ``None`` in exact mode."""
    @property
    def timeout(self) -> float:
        """Seconds a round trip may take before ``on_error`` decides."""
    @property
    def prefix(self) -> str:
        """The prefix of every key the limiter writes."""
    @property
    def on_error(self) -> Literal["local", "allow", "deny", "raise"]:
        """What decides while Redis cannot answer: ``"local"`` (this process's states), ``"allow"``,
        ``"deny"`` or ``"raise"``."""

@final
class Shared:
    """Where a limiter keeps its states so that every worker process of one machine shares them, with
    no server to run: ``rk.Limiter(rules=..., backend=rk.Shared("myapp"))``. Every process that opens
    the same name (gunicorn or ``uvicorn --workers`` workers, a multiprocessing pool, separate
    services) decides on the same states, exactly, at close to in-memory speed.

    The states live in a file mapped into each process: ``/dev/shm/ratekeeper-NAME``, or ``path``. The
    first process creates it (mode 0600, exclusively) sized from the limiter's ``max_keys`` and
    ``log_entries`` alone, whatever the rules (about 47 bytes a key, plus 17 bytes a sliding-log entry:
    48.9 MB for 1,000,000 keys, within Docker's 64 MB ``/dev/shm``), its space reserved at once, so a
    full ``/dev/shm`` is an error then and never a crash later; the others attach to it, whatever the
    start method. Processes whose rules differ (a rolling deploy, a ``reload()``) convert each other's
    states as ``update_rule`` does: each state says what limit wrote it. The
    core's own algorithms decide on it under one robust lock per shard: a worker killed while holding
    one costs the others nothing but that worker's decision in flight. Time is the kernel's monotonic
    clock, one for every process (a [`ManualClock`][ratekeeper.ManualClock] still drives tests). When full, idle states
    are dropped first, then the least used, as in memory. Concurrency permits held by a process that
    dies come back at the next request the gate would refuse.

    The file outlives the processes (a restart keeps its limits; a reboot clears ``/dev/shm``). A
    file removed or replaced while workers run is followed: each worker moves to the file at the path
    within a quarter of a second, carrying what each key used. To start afresh, or to change
    ``max_keys``, stop every worker and remove the file.

    Args:
        name: the region's name: letters, digits, ``.``, ``_``, ``-``.
        path: the region's file instead of a name (e.g. on a tmpfs of your own).
        log_entries: sliding-log (stamp, units) entries the region's pool holds, one key's log up to
            all of them; default: an eighth of ``max_keys``, at least 16,384 (256 KiB), whatever the rules
            (so every deploy fits the region the first process made; the creator's number holds). When
            the pool is full, a log evicts the least used states of its shard.
        on_stall: what decides a request whose shard another process has held for 50 ms (a process
            stopped holding it: SIGSTOP, a debugger, a frozen container): ``"allow"`` admits it,
            ``"deny"`` refuses it (``retry_after`` 0.05 s), without its states either way; counted in
            ``stats()["shared"]["stalls"]``.

    Raises:
        InvalidValue: neither or both of ``name`` and ``path``, a name with other characters, an
            ``on_stall`` other than ``"allow"`` or ``"deny"``; when the
            limiter is built: a region owned by another user, open to other users, a symbolic link, in
            a folder other users may write to (unless sticky, as ``/dev/shm``), made by another version
            (layout) or for another ``max_keys``; a file that is not a region, a corrupt header, a file
            truncated or extended (never removed: only an unfinished region whose creator died, or an
            empty file, is made anew); or no room for it.
        InvalidType: a name that is not a str, a path that is not a str or ``os.PathLike``.
    """

    def __new__(
        cls,
        name: str | None = None,
        *,
        path: str | os.PathLike[str] | None = None,
        log_entries: int | None = None,
        on_stall: Literal["allow", "deny"] = "allow",
    ) -> Shared: ...
    @property
    def name(self) -> str | None:
        """The region's name (its file under the folder), or ``None`` when given by ``path``."""
    @property
    def path(self) -> str:
        """The region's file."""
    @property
    def log_entries(self) -> int | None:
        """Sliding-log stamps the region holds for all its keys (``None``: the default, ``max_keys / 8``,
        at least 16,384)."""
    @property
    def on_stall(self) -> Literal["allow", "deny"]:
        """What a decision answers when a stopped process holds its shard's lock past 50 ms."""

def _inspect_region(path: str | os.PathLike[str]) -> SharedStats:
    """Looks at the region at ``path`` without writing to it or taking its locks."""

_Budget: TypeAlias = tuple[str, int, float, int | None, float | None]
_Unmade: TypeAlias = tuple[str, int, float, int, float, Literal["gcra", "fixed_window"]]

def _read_server_word(
    headers: Iterable[tuple[str | bytes, str | bytes]] | Mapping[str, str],
    status: int,
    now: float,
    dialect: str | None = None,
) -> tuple[str, list[_Budget], float | None]:
    """What the response with ``headers`` and ``status`` says about the server's limits, read as of ``now`` (epoch
    seconds) in ``dialect`` (``None``: the one it carries): ``(dialect, budgets, retry_after)``, the dialect ``""``
    for none and each budget ``(name, remaining, reset_after, limit, window)``. Headers are (name, value) pairs of
    str or bytes, httpx's ``Headers._list`` triples, or a dict of names to values (or to (name, value) pairs, as
    requests' ``CaseInsensitiveDict._store``). Values ignored are logged once per dialect and field through
    ``ratekeeper._server_words._warn``; nothing a server sends raises.

    Raises:
        InvalidValue: ``dialect`` is not a dialect.
    """

@final
class _Ticket:
    """One admitted attempt of an outgoing call, for ``_Outgoing.settle``."""

    @property
    def key(self) -> str:
        """The key the call's budgets are kept under."""
    @property
    def host(self) -> str:
        """The host called."""
    @property
    def budgets(self) -> dict[str, str]:
        """Budget -> the group the call spent in."""
    @property
    def estimate(self) -> dict[str, int]:
        """Budget -> the units the cost function estimated (empty without one)."""
    def age(self) -> float:
        """Seconds since the call was admitted."""

@final
class _Plan:
    """Where an outgoing call spends (``_Outgoing.plan``)."""

    @property
    def steps(self) -> list[tuple[str, int, bool]]:
        """``(group, units, whether the group is a budget's)``, in the order they are spent."""

@final
class _Outgoing:
    """The per-call work of ``ratekeeper._outgoing.Outgoing``: admissions, replies, auto-groups made, counters."""

    def __new__(
        cls,
        limiter: Limiter,
        groups: Mapping[str, str],
        *,
        auto_groups: bool,
        window: float,
        dialect: str | None,
        obey: bool,
    ) -> _Outgoing: ...
    def admit(
        self, key: str, host: str, path: str | None, estimate: Mapping[str, int] | None, guard: bool
    ) -> _Ticket | Decision | float:
        """Spends the call's units in every group that applies to it, all or nothing: its routed group (1 unit, or
        ``estimate["requests"]``), then each budget's group (declared, else the host's auto-group; 1 unit, or the
        budget's estimate). The ticket when admitted; else the refusal's ``Decision``, or the seconds to hold a call
        admitted closer to a more-than-half-used budget's window end than calls to ``host`` take (not with
        ``guard=False``): what it took is given back either way."""
    def admit_heard(self, host: str, path: str | None) -> _Ticket | None:
        """The short way's ``admit``, for calls keyed by their host with no cost estimate: the ticket of a call to
        ``host``'s ``path`` admitted now, or ``None`` (nothing spent) when no call to ``host`` came back yet
        (``heard_from``) or this one is not admitted at once: it goes the long way (``admit``)."""
    def admit_parts(self, parts: tuple[Any, ...]) -> _Ticket | Literal[False] | None:
        """``admit_heard`` of a call whose URL httpx keeps parsed as ``parts`` (``httpx._urlparse.ParseResult``:
        scheme, userinfo, host, port, path, query, fragment; the port ``None`` when it is the scheme's default), its
        host and path read here; ``False`` when they are for Python to read (an IDNA host, a path with escapes or
        none, parts of another shape), which then asks ``admit_heard``."""
    def heard_from(self, host: str) -> None:
        """A call to ``host`` came back (answered, failed or refused): its calls may take the short way."""
    def plan(self, key: str, host: str, path: str | None, estimate: Mapping[str, int] | None) -> _Plan:
        """Where the call spends, for asyncio over a store that waits on I/O, which awaits each check itself
        (``Limiter.acheck``) and then asks for its ``ticket``; no I/O here."""
    def crossing(self, host: str, ends: list[float]) -> float:
        """Seconds to hold a call admitted ``min(ends)`` seconds before the end of a budget's window that is more
        than half used, when calls to ``host`` take longer to reach the server; else 0.0."""
    def ticket(self, key: str, host: str, plan: _Plan, estimate: Mapping[str, int] | None) -> _Ticket:
        """The ticket of a call admitted now in every step of ``plan``."""
    def settle(self, ticket: _Ticket, headers: Any, status: int) -> tuple[float | None, tuple[_Unmade, ...]] | None:
        """Takes in the reply to ``ticket``'s call: its ``headers`` as the client keeps them (see
        ``_read_server_word``) and ``status``. Reads the server's word, counts the reply and keeps the word in the
        counters, caps the groups of its budgets (a word a group does not take is logged), keeps how long calls to
        the host take. ``None`` when nothing is left for Python; else ``(retry, unmade)``: the seconds to wait
        before sending the call again (``None``: the reply is the answer), and ``(budget, limit, window, remaining,
        reset_after, algorithm)`` of each budget whose auto-group is to be made (``made``) and capped: a
        ``"gcra"`` for a budget that refills all the time (OpenAI's, Anthropic's), else a ``"fixed_window"``."""
    def made(self, host: str, budget: str, group: str, limit: int, window: float) -> None:
        """Python made (or resized) ``group`` for ``budget`` at ``host``, ``limit`` per ``window`` seconds."""
    def guessing(self, key: str, host: str, group: str) -> bool:
        """Whether a refusal by ``group`` for ``key``'s call to ``host`` is the limit's own guess, which the
        server's next word may end sooner: ``group`` is one of the host's budgets and no word of the server's
        holds now (none came for ``key``, or every reset it said has passed)."""
    def unspend(self, ticket: _Ticket) -> None:
        """Gives back what ``ticket``'s call spent: it never reached the server (no connection was made)."""
    def made_group(self, host: str, budget: str) -> tuple[str, int, float] | None:
        """``(group, limit, window)`` of ``budget``'s auto-group at ``host`` as last made, or ``None``."""
    def count(self, key: str, *, waits: int = 0, waited: float = 0.0, refused: int = 0, retries: int = 0) -> None:
        """Adds to ``key``'s counters."""
    def stats(self) -> dict[str, Any]:
        """Each key's counters as ``HostStats`` dicts (copies), in the order the keys were first counted."""

@final
class _HttpxSend:
    """``ratekeeper.httpx.Transport.handle_request`` for the calls that take the short way, in one call into the
    core: the admission, the inner transport's ``handle_request`` and the reply's reading, with no frame of
    Python's and no ``_Ticket`` made. A URL for Python to read (an escaped path) goes to ``whole(request)``; a
    call not admitted at once (or the first to its host) to ``long_way(request)``; a reply that leaves work for
    Python (groups to make, a retry) to ``finish(ticket, settled, response, request)``; a send that raised to
    ``failed(ticket, error)`` before the error is raised."""

    def __new__(
        cls,
        outgoing: _Outgoing,
        send: Callable[[Any], Any],
        whole: Callable[[Any], Any],
        long_way: Callable[[Any], Any],
        finish: Callable[[_Ticket, Any, Any, Any], Any],
        failed: Callable[[_Ticket, BaseException], Any],
    ) -> _HttpxSend: ...
    def handle_request(self, request: Any) -> Any:
        """Sends an ``httpx.Request``; its ``httpx.Response``."""

_QuotaProvider: TypeAlias = Callable[[str, str], Rate | str | Awaitable[Rate | str | None] | None]

@disjoint_base
class Limiter:
    """The Rust half of [`ratekeeper.Limiter`][ratekeeper.Limiter]: construction and the non-blocking calls.

    Args:
        rate: a catch-all limit (group ``"default"``) for every path no rule matches, e.g. ``"10/min"``.
        rules: [`Rule`][ratekeeper.Rule] objects, tried in order; the first whose pattern matches the path wins.
            A path that matches no rule (and no catch-all ``rate``) is not limited.
        exempt_peers: peers that are never limited (exact match); counted in ``stats()["exempt"]``.
        exempt_paths: regular expressions of paths that are never limited.
        max_keys: the most (peer, group) states kept; past it, idle states are dropped first, then the
            least frequently used are evicted, so one-shot keys never push out busy ones.
        burst: the burst of ``rate`` (default: its count).
        algorithm: the algorithm of ``rate`` (see [`Limit`][ratekeeper.Limit]).
        clock: a [`ManualClock`][ratekeeper.ManualClock] for tests; default: the monotonic clock.
        quotas: per-key quotas, see [`Quotas`][ratekeeper.Quotas]; default: none (each key runs on its rule's rate).
        track_usage: record each key's admissions for [`drain_pending`][ratekeeper.Limiter.drain_pending] (syncing usage
            between nodes); this keeps the peer strings of keys admitted since the last drain.
        backend: [`Redis`][ratekeeper.Redis] to keep the states in Redis, shared by every process that uses it;
            [`Shared`][ratekeeper.Shared] to keep them in shared memory, shared by every process of the machine;
            default: this process's memory.

    Raises:
        InvalidValue: neither ``rate`` nor ``rules``, a bad rate, burst or algorithm, a group defined
            twice with different limits (``loc`` ``("rules", 1, "group")``), a bad exempt path
            (``("exempt_paths", 0)``), ``max_keys`` below 1, ``max_keys`` below 1.
        InvalidType: a rule that is not a [`Rule`][ratekeeper.Rule], a str where a list of str is expected,
            ``quotas`` that is not a [`Quotas`][ratekeeper.Quotas].
    """

    def __new__(
        cls,
        rate: str | Rate | None = None,
        *,
        rules: Iterable[Rule] | None = None,
        exempt_peers: Iterable[str] | None = None,
        exempt_paths: Iterable[str] | None = None,
        max_keys: int = 1_000_000,
        burst: int | None = None,
        algorithm: Algorithm = "gcra",
        clock: ManualClock | None = None,
        quotas: Quotas | None = None,
        track_usage: bool = False,
        backend: Redis | Shared | None = None,
    ) -> Limiter: ...
    @property
    def backend(self) -> Redis | Shared | None:
        """The backend the states live in; ``None``: this process's memory."""
    @property
    def _waits_on_io(self) -> bool: ...
    def _check_region(self) -> None: ...
    def sync_now(self) -> tuple[int, int]:
        """Sync mode: pushes this process's usage and absorbs the others' now, without waiting for the
        timer: ``(keys synced, units the others used that were charged here)``. Lease mode: gives back
        now what the leases of keys idle for ``lease_span`` hold, as the sweeper does every span:
        ``(leases given back, units)``.

        Raises:
            InvalidValue: the limiter's backend is in neither sync nor lease mode.
            BackendUnavailable: Redis did not answer (the usage is kept for the next sync).
        """
    @property
    def backend_errors(self) -> tuple[int, bool]:
        """Round trips to the backend that failed (each decided by its ``on_error``) and whether the last
        one did: ``(0, False)`` without a backend."""
    def check(self, peer: str | int, path: str | None = None, *, cost: int = 1, group: str | None = None) -> Decision:
        """Decides one request without blocking. A refusal changes no state, so retrying is free.

        Args:
            peer: who makes the request (client address, API key, account id ...): a str, or an int, which
                is the same peer as its decimal text (`42` and `"42"`).
            path: what is requested, routed by the rules; ``None`` is routed like ``""``.
            cost: how many requests this one counts for.
            group: decide for this group by name instead of routing ``path`` (per-route limits);
                exempt peers stay exempt.

        Raises:
            InvalidType: a peer or path that is not a str, a cost that is not an int.
            InvalidValue: a cost below 1, an unknown group, or both ``path`` and ``group``.
        """
    def allow(self, peer: str | int, path: str | None = None, *, cost: int = 1, group: str | None = None) -> bool:
        """``check(...).allowed`` without building a Decision: the fastest call."""
    def peek(self, peer: str | int, path: str | None = None, *, cost: int = 1, group: str | None = None) -> Decision:
        """What [`check`][ratekeeper.Limiter.check] would decide now, counting nothing, in every store: the key's states
        are left as they are, the stats count no decision, and the Decision's ``remaining``, ``reset_after`` and
        ``retry_after`` describe the key before this request (``allowed``: a ``check`` of ``cost`` now
        would pass). What a "read the usage" asks (django-ratelimit's ``increment=False``).

        Raises:
            InvalidType: a peer or path that is not a str, a cost that is not an int.
            InvalidValue: a cost below 1, an unknown group, or both ``path`` and ``group``.
        """
    def _reserve(
        self,
        peer: str | int,
        path: str | None = None,
        *,
        group: str | None = None,
        cost: int = 1,
        timeout: float | None,
        take: _Take = ...,
        wait_quota: bool = True,
    ) -> _Reservation: ...
    def _reserve_later(
        self,
        peer: str | int,
        path: str | None = None,
        *,
        group: str | None = None,
        cost: int = 1,
        timeout: float | None,
        take: _Take = ...,
        report: bool = True,
        counts_refusal: bool = True,
        future: asyncio.Future[_Reservation],
        completions: _Completions,
    ) -> None: ...
    def _refund(self, reservation: _Reservation) -> None: ...
    def _acquire(
        self, peer: str | int, path: str | None = None, *, group: str | None = None, cost: int = 1, take: _Take = ...
    ) -> Decision: ...
    def _admit_web(
        self, ietf: bool, legacy: bool, raw: bool, peer: str | int, path: str
    ) -> tuple[tuple[Any, Any], ...] | Decision:
        """``_acquire(peer, path, take=_Take.BOTH)`` for a web adapter's hot path.

        Args:
            ietf: the allowed response's ``RateLimit-Policy`` and ``RateLimit`` fields.
            legacy: its ``X-RateLimit-*`` fields.
            raw: the fields as lower-case bytes pairs (ASGI), not str pairs (WSGI).
            peer: the key.
            path: what the rules route on.

        Returns:
            For a request allowed without concurrency permits, its response's fields, as
            ``Decision._fields`` / ``Decision._raw_fields`` give them (no ``Decision`` is made);
            for any other, its [`Decision`][ratekeeper.Decision].
        """
    def _admit_view(
        self, ietf: bool, legacy: bool, group: str | None, cost: int, peer: str | int, path: str | None = None
    ) -> tuple[tuple[str, str], ...] | Decision | None:
        """``_admit_web`` of a request a view's wrapper decides (Flask), in a group or by the rules.

        Args:
            ietf: the allowed response's ``RateLimit-Policy`` and ``RateLimit`` fields.
            legacy: its ``X-RateLimit-*`` fields.
            group: the group deciding the request; ``None``: the rules on ``path``.
            cost: what the request counts for.
            peer: the key.
            path: what the rules route on (only without ``group``).

        Returns:
            ``None`` while the limiter is off (nothing is decided); for a request allowed without
            concurrency permits, its response's fields as ``Decision._fields`` gives them (no
            ``Decision`` is made); for any other, its [`Decision`][ratekeeper.Decision].
        """
    def _admit_scope(
        self, ietf: bool, legacy: bool, header: bytes | None, scope: Mapping[str, Any]
    ) -> tuple[tuple[bytes, bytes], ...] | Decision | None:
        """``_admit_web`` of an ASGI HTTP ``scope`` (raw fields), its key and path read from the scope
        in one call: what the ASGI middleware's hot path makes of a request.

        Args:
            ietf: the allowed response's ``RateLimit-Policy`` and ``RateLimit`` fields.
            legacy: its ``X-RateLimit-*`` fields.
            header: the request header holding the key (lower-case bytes, read as ``keys.header`` reads
                it), or ``None`` for the client's address (as ``keys.client_ip()`` with no proxies).
            scope: the ASGI scope.

        Returns:
            What ``_admit_web`` returns (a ``Decision`` carries the key read, ``Decision._peer``); ``None``,
            having decided nothing, when the scope is not an
            HTTP request, carries no key, or holds anything unusual: the caller reads it in Python.
        """

    def _release(
        self,
        peer: str | int,
        path: str | None = None,
        *,
        group: str | None = None,
        cost: int = 1,
        admitted_at: int | None = None,
        outcome: Literal["ok", "dropped", "timeout"] = "ok",
    ) -> None:
        """Gives back ``cost`` concurrency permits an admission took; ``group=`` names the group that took
        them (the decision's), which, when a reload has removed it since, has nothing left to give back.
        With ``admitted_at`` (the admission's ``Decision._admitted_at``) the group's adaptive limits learn
        from the request: its latency until now on the limiter's clock, and its ``outcome``."""
    def reduce(self, peer: str | int, path: str | None = None, n: int = 1, *, group: str | None = None) -> bool:
        """Gives ``n`` tokens back to the key (manual reduction, e.g. when a handler's transaction
        succeeded): under policy ``"all"`` to every rate limit of the group (each counted the request);
        under ``"fallback"`` to the last rate limit only, the fallback (e.g. a leaky bucket's tokens), since
        the limits before it take what they admit back on their own.

        Returns:
            False when no group limits the request or the group was made with ``reduction=False``.
        """
    def cap(
        self,
        peer: str | int,
        path: str | None = None,
        *,
        group: str | None = None,
        remaining: int,
        reset_after: float,
        age: float = 0,
    ) -> bool:
        """A server's word for the key: it may spend at most ``remaining`` more before ``reset_after``
        seconds from now (e.g. ``RateLimit: "api";r=3;t=40``, or ``X-RateLimit-Remaining`` and
        ``-Reset``). Taken by the group's ``fixed_window`` limits: the window ends at the server's reset
        with what it has left or ``remaining``, whichever is less (requests on their way are not counted
        by the server yet); after the reset, windows of the limit's own follow until the next word. In
        every store: with [`Shared`][ratekeeper.Shared] or [`Redis`][ratekeeper.Redis] every process
        obeys the word together.

        Resets are taken as rounded to whole seconds at most. A word whose window ends more than a second
        after the one the key keeps (counted from its request's admission: ``age`` ago) is from the
        server's next window, which has begun: the key's window ends and the next has ``remaining``, what
        the ended one had left aside. One whose reset comes more than two seconds before the window's end is
        a late reply about an earlier window and is ignored; after one of ``remaining=0``, words for
        requests admitted before it are ignored.

        A ``gcra`` limit takes a word as a server's bucket that refills all the time (OpenAI's and
        Anthropic's budgets, whose reset is when they are full again): the key's arrival time moves to the
        later of "``remaining`` left now" and "full again ``reset_after`` from now", never earlier, so a
        stale word changes nothing.

        Args:
            age: seconds since the request whose reply brought the word was admitted. A word about a
                window that has ended since (the reply came late) is ignored, as is a reset already
                past; a word does not move windows that waiters of ``throttle`` reserved (wait with
                ``check`` and ``retry_after`` for keys that take words).

        Returns:
            True when a fixed window (or a GCRA) took the word; False when it changed nothing (stale, a reset past,
            reservations ahead), when no group limits the request, or when Redis could not be reached
            (``on_error`` other than ``"raise"``; with ``"local"``, whether this process's memory took it).

        Raises:
            InvalidValue: the group has no ``fixed_window`` or ``gcra`` limit; ``remaining`` below 0;
                ``reset_after`` or ``age`` negative, not finite, or above 2**53 ns (about 104 days).
            InvalidType: a value that is not a number.
        """
    def resolve(self, peer: str | int, path: str | None = None, *, group: str | None = None) -> Resolution | None:
        """Where the request goes and what limits it, the key's quota applied, without deciding:
        ``None`` when it is exempt, routed nowhere, or the limiter is off."""
    def group_policy(self, group: str, peer: str | int | None = None) -> GroupPolicy:
        """What a ``RateLimit-Policy`` header says of ``group``: its first rate limit's burst as the
        quota and its window (with ``peer``, that peer's per-key quota). Reads no keys.

        Raises:
            InvalidValue: an unknown group.
        """
    def off(self) -> None:
        """Turns limiting off: every request is allowed and no state is touched, until [`on`][ratekeeper.Limiter.on]."""
    def on(self) -> None:
        """Turns limiting back on."""
    @property
    def enabled(self) -> bool:
        """False between [`off`][ratekeeper.Limiter.off] and [`on`][ratekeeper.Limiter.on]."""
    @property
    def clock(self) -> ManualClock | None:
        """The [`ManualClock`][ratekeeper.ManualClock] given at construction, or ``None`` for the monotonic clock."""
    @property
    def max_keys(self) -> int:
        """The keys the limiter holds at most; the least used go first."""
    @property
    def groups(self) -> list[str]:
        """The group names, in rule order."""
    @property
    def rules(self) -> list[Rule]:
        """The rules in force, in routing order (after [`update_rule`][ratekeeper.Limiter.update_rule] and ``reload``
        too)."""
    @property
    def exempt_peers(self) -> list[str]:
        """Peers never limited."""
    @property
    def exempt_paths(self) -> list[str]:
        """Regexes of paths never limited."""
    @property
    def quotas(self) -> Quotas:
        """The quota settings in force."""
    @property
    def track_usage(self) -> bool:
        """Whether admissions are kept for ``drain_pending`` (sync mode, or asked for)."""
    def reset(self, peer: str | int | None = None) -> None:
        """Forgets the state of ``peer`` in every group, or of every peer.

        With a Redis backend, in Redis too: ``reset(peer)`` removes the peer's keys in every group of
        the rules in force, ``reset()`` every key under the backend's prefix (``SCAN`` and ``UNLINK``
        in batches, on every primary of a Cluster); in sync mode also the usage not yet pushed.

        Raises:
            BackendUnavailable: Redis could not answer (whatever ``on_error`` says); this process's state
                was reset, the keys in Redis were not: call it again.
        """
    def stats(self) -> Stats:
        """Counters and sizes (see [`ratekeeper.Stats`][ratekeeper.Stats]), summed one shard at a time."""
    def top_refused(self, n: int = 10, group: str | None = None) -> list[tuple[str, int]]:
        """The ``n`` peers refused most since the limiter was made, in ``group`` or in every group
        together, as ``(peer, refusals)``, most first.

        Counted in fixed-size sketches (Space-Saving, 16 counters per shard and group), so memory stays
        bounded whatever the number of peers: a count is never below the true count and at most
        [`top_refused_error`][ratekeeper.Limiter.top_refused_error] above it (a peer is counted in one shard only), and
        every peer refused more often than that is found.

        Raises:
            InvalidValue: ``group`` names no group.
        """
    def top_refused_error(self, group: str | None = None) -> int:
        """The most [`top_refused`][ratekeeper.Limiter.top_refused]'s counts may be off by: 0 while every refused peer
        has a counter, at most the refusals of a shard divided by 16.

        Raises:
            InvalidValue: ``group`` names no group.
        """
    def __len__(self) -> int:
        """The number of states tracked: one per (peer, group) and limit."""
    def drain_pending(self) -> list[tuple[str, str, int]]:
        """Each key's admitted units since the last drain, as ``(peer, group, units)``; then forgets
        them. A reservation given back (a cancelled wait) is taken off.

        Raises:
            InvalidValue: the limiter was made without ``track_usage=True``.
        """
    def absorb(self, peer: str | int, group: str, n: int) -> None:
        """Counts ``n`` units that ``peer`` used in ``group`` elsewhere (another node) as used now: the
        key may then be refused until they drain. Not reported by [`drain_pending`][ratekeeper.Limiter.drain_pending].

        Raises:
            InvalidValue: an unknown group, ``n`` below 1.
        """
    def set_quota(self, peer: str | int, group: str, rate: str | Rate | None) -> None:
        """Sets the quota of ``peer`` in ``group`` (``None``: back to the rule's rate), e.g. on a billing
        event. It supersedes a running fetch; with a provider, the key is fetched again after
        ``ttl``. The key keeps what it has used, counted in requests.

        Raises:
            InvalidValue: an unknown group (naming the groups), a group without a rate limit, a bad rate.
        """
    def quota(self, peer: str | int, group: str) -> QuotaInfo:
        """What the key of ``peer`` in ``group`` runs on. Never starts a fetch.

        Raises:
            InvalidValue: an unknown group.
        """
    def wait_quotas(self, timeout: float | None = None) -> bool:
        """Blocks (without the GIL) until no fetch is queued or running, for tests and warm-ups.

        Returns:
            True when idle, False when ``timeout`` seconds passed first.
        """
    @property
    def quota_wait(self) -> float:
        """Seconds the first request of a key waits for its quota fetch."""
    def update_rule(self, group: str, rate: str | Rate | None = None, burst: int | None = None) -> None:
        """Changes the rate and/or burst of ``group``'s first rate limit, in place and at once.

        Every key keeps its state, so nobody gets a burst of extra admissions: a key's usage is read
        under the new limit (GCRA keeps its debt in time). A fixed window a server's word announced
        (``cap``) still ends at the server's reset, with what the new limit leaves of its usage: nothing is
        carried past it. A burst that was never given follows the
        new rate's count. Per-key quotas stay in force. Safe to call from several threads at once.

        Raises:
            InvalidValue: an unknown group, a group without a rate limit, a bad rate or burst.
        """
    def _quota_pending(self, peer: str | int, path: str | None = None, *, group: str | None = None) -> bool: ...
    def _fetch_queue(self) -> _FetchQueue: ...
    def _start_fetch(self, job: _FetchJob) -> bool: ...
    def _fetch_time_left(self, job: _FetchJob) -> float: ...
    def _finish_fetch(self, job: _FetchJob, answer: object, error: BaseException | None = None) -> _FetchResult: ...
    def _reconfigure(
        self,
        rules: Iterable[Rule],
        exempt_peers: Iterable[str] | None = None,
        exempt_paths: Iterable[str] | None = None,
    ) -> None: ...
