"""The Rust core of ratekeeper (``ratekeeper._core``). Import the public names from ``ratekeeper``."""

from collections.abc import Awaitable, Callable, Iterable
from typing import Any, final

from typing_extensions import disjoint_base

__all__ = [
    "NANOS_PER_SEC",
    "Decision",
    "Limit",
    "Limiter",
    "ManualClock",
    "QuotaInfo",
    "Rate",
    "Rule",
    "_FetchQueue",
    "__version__",
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
        ValueError: not a rate (the message quotes it), a count of 0, a period of 0 or over ten years.
        TypeError: neither a str nor a Rate.
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
        rate: e.g. ``"10/s"`` or a :class:`Rate`. For ``leaky_bucket``, ``"R/T"`` means R tokens leak
            every T.
        burst: requests admitted at once: the burst (``gcra``, ``token_bucket``), the limit per window
            (``fixed_window``, ``sliding_window``, ``sliding_log``) or the bucket's capacity
            (``leaky_bucket``). Default: the rate's count.
        algorithm: ``"gcra"`` (default), ``"token_bucket"``, ``"fixed_window"``, ``"sliding_window"``,
            ``"sliding_log"`` or ``"leaky_bucket"``.
        concurrency: instead of a rate, at most this many requests in flight per key, held with
            :meth:`ratekeeper.Limiter.concurrent`.

    Raises:
        ValueError: a bad rate, burst, algorithm, or both or neither of ``rate`` and ``concurrency``.
    """

    def __new__(
        cls,
        rate: str | Rate | None = None,
        *,
        burst: int | None = None,
        algorithm: str = "gcra",
        concurrency: int | None = None,
    ) -> Limit: ...
    @property
    def rate(self) -> Rate | None: ...
    @property
    def burst(self) -> int: ...
    @property
    def algorithm(self) -> str: ...
    @property
    def concurrency(self) -> int | None: ...
    def __eq__(self, value: object, /) -> bool: ...

@final
class Rule:
    """A routing rule: requests whose path matches ``pattern`` count against ``group``.

    Args:
        pattern: a regular expression searched in the path (like ``re.search``: anchor it with ``^``);
            ``""`` matches every path and requests without a path.
        group: the name of the group; rules naming the same group share its state and must agree on
            its limits.
        rate: the group's one limit, e.g. ``"10/min"`` or a :class:`Rate` (or give ``limits``).
        burst: requests admitted at once (default: the rate's count, so ``"3/60s"`` admits 3 at once,
            then one every 20 s).
        algorithm: the algorithm of ``rate``; see :class:`Limit`.
        limits: several :class:`Limit` (or rate strings) instead of ``rate``.
        policy: how the rate limits combine: ``"all"`` (every one must admit; a refusal consumes
            nothing) or ``"fallback"`` (the first that admits takes the request). Concurrency limits
            are gates in either policy.
        reduction: whether :meth:`ratekeeper.Limiter.reduce` may give tokens back to this group.

    Raises:
        ValueError: an invalid pattern (named), rate, burst, algorithm, policy, or both or neither of
            ``rate`` and ``limits``.
        TypeError: a pattern or group that is not a str, a limit that is not a Limit or a str.
    """

    def __new__(
        cls,
        pattern: str,
        group: str,
        rate: str | Rate | None = None,
        *,
        burst: int | None = None,
        algorithm: str = "gcra",
        limits: Iterable[Limit | str | Rate] | None = None,
        policy: str = "all",
        reduction: bool = True,
    ) -> Rule: ...
    @property
    def pattern(self) -> str: ...
    @property
    def group(self) -> str: ...
    @property
    def limits(self) -> list[Limit]: ...
    @property
    def rate(self) -> Rate | None:
        """The rate of the first limit."""
    @property
    def burst(self) -> int:
        """The burst of the first limit."""
    @property
    def algorithm(self) -> str:
        """The algorithm of the first limit."""
    @property
    def policy(self) -> str: ...
    @property
    def reduction(self) -> bool: ...

@final
class ManualClock:
    """A clock that moves only when told to, for tests. Waits on it advance it instead of sleeping.

    Args:
        start: the initial reading in seconds.
    """

    def __new__(cls, start: float = 0.0) -> ManualClock: ...
    def now(self) -> float:
        """The current reading in seconds."""
    def advance(self, seconds: float) -> None:
        """Moves the clock forward.

        Raises:
            ValueError: a negative, NaN or infinite number of seconds.
        """
    def _advance_to_ns(self, deadline_ns: int) -> None: ...

@final
class Decision:
    """What the limiter decided for one request. ``bool(decision)`` is ``decision.allowed``."""

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
    def __bool__(self) -> bool: ...

@final
class QuotaInfo:
    """What a key's quota is; see :meth:`Limiter.quota`."""

    @property
    def rate(self) -> Rate | None:
        """The rate in force for the key's first rate limit (``None`` for a group without one)."""
    @property
    def source(self) -> str:
        """``"provider"`` (fetched), ``"failsafe"`` (first fetch not landed), ``"stale"`` (the last good
        quota, kept while fetches fail), ``"set"`` (:meth:`Limiter.set_quota`) or ``"rule"`` (the rule's
        own rate: the provider said ``None``, or nothing is known and there is no failsafe)."""
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
    def take(self, timeout: float) -> tuple[str, str, int] | None: ...
    def done(self) -> None: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...

_QuotaProvider = Callable[[str, str], Rate | str | Awaitable[Rate | str | None] | None]

@disjoint_base
class Limiter:
    """The Rust half of :class:`ratekeeper.Limiter`: construction and the non-blocking calls.

    Args:
        rate: a catch-all limit (group ``"default"``) for every path no rule matches, e.g. ``"10/min"``.
        rules: :class:`Rule` objects, tried in order; the first whose pattern matches the path wins.
            A path that matches no rule (and no catch-all ``rate``) is not limited.
        exempt_peers: peers that are never limited (exact match); counted in ``stats()["exempt"]``.
        exempt_paths: regular expressions of paths that are never limited.
        max_keys: the most (peer, group) states kept; past it, idle states are dropped first, then the
            least frequently used are evicted, so one-shot keys never push out busy ones.
        burst: the burst of ``rate`` (default: its count).
        algorithm: the algorithm of ``rate``: ``"gcra"`` or ``"token_bucket"``.
        clock: a :class:`ManualClock` for tests; default: the monotonic clock.
        quota_provider: ``(peer, group) -> Rate | str | None``, or an ``async def`` of the same: each
            key's quota, which replaces the rate of its group's first rate limit (``None``: the rule's
            rate). Called off the hot path by worker threads, once per key at a time; a request never
            waits for it unless ``quota_wait`` says so. Failures keep the last good quota.
        failsafe: the rate of a key whose first fetch has not landed; default: the rule's rate.
        quota_ttl: seconds after which the next use of a key fetches its quota again (the old one
            serves meanwhile).
        quota_timeout: seconds a fetch may take before it counts as failed.
        quota_workers: threads calling a sync provider (an async one runs on one private event loop).
        quota_wait: seconds the first request of a key waits for its fetch (``check``, ``allow``,
            ``throttle`` block; ``athrottle`` awaits); 0: decide at once on the failsafe.

    Raises:
        ValueError: neither ``rate`` nor ``rules``, a bad rate, burst, algorithm or pattern, a group
            defined twice with different limits (``rules[1].group``), ``max_keys`` below 1, a bad
            ``failsafe``, a quota duration that is not a positive number, ``quota_workers`` outside 1-256.
        TypeError: a rule that is not a :class:`Rule`, a str where a list of str is expected, a
            ``quota_provider`` that is not callable.
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
        algorithm: str = "gcra",
        clock: ManualClock | None = None,
        quota_provider: _QuotaProvider | None = None,
        failsafe: str | Rate | None = None,
        quota_ttl: float = 300.0,
        quota_timeout: float = 5.0,
        quota_workers: int = 4,
        quota_wait: float = 0.0,
    ) -> Limiter: ...
    def check(self, peer: str, path: str | None = None, *, cost: int = 1) -> Decision:
        """Decides one request without blocking. A refusal changes no state, so retrying is free.

        Args:
            peer: who makes the request (client address, API key, account id ...).
            path: what is requested, routed by the rules; ``None`` is routed like ``""``.
            cost: how many requests this one counts for.

        Raises:
            TypeError: a peer or path that is not a str, a cost that is not an int.
            ValueError: a cost below 1.
        """
    def allow(self, peer: str, path: str | None = None, *, cost: int = 1) -> bool:
        """``check(...).allowed`` without building a Decision: the fastest call."""
    def _reserve(
        self, peer: str, path: str | None, cost: int, max_wait: float | None, wait_quota: bool = True
    ) -> tuple[Decision, float, int, tuple[int, int]]: ...
    def _refund(self, peer: str, path: str | None, cost: int, receipt: tuple[int, int]) -> None: ...
    def _acquire(self, peer: str, path: str | None, cost: int) -> Decision: ...
    def _release(self, peer: str, path: str | None, cost: int) -> None: ...
    def reduce(self, peer: str, path: str | None = None, n: int = 1) -> bool:
        """Gives ``n`` tokens back to the rate limits of the group ``path`` routes to (seed 003's manual
        reduction, e.g. when a handler's transaction succeeded).

        Returns:
            False when no group limits the path or the group was made with ``reduction=False``.
        """
    def off(self) -> None:
        """Turns limiting off: every request is allowed and no state is touched, until :meth:`on`."""
    def on(self) -> None:
        """Turns limiting back on."""
    @property
    def enabled(self) -> bool:
        """False between :meth:`off` and :meth:`on`."""
    @property
    def clock(self) -> ManualClock | None:
        """The :class:`ManualClock` given at construction, or ``None`` for the monotonic clock."""
    @property
    def max_keys(self) -> int: ...
    @property
    def groups(self) -> list[str]:
        """The group names, in rule order."""
    def reset(self, peer: str | None = None) -> None:
        """Forgets the state of ``peer`` in every group, or of every peer."""
    def stats(self) -> dict[str, Any]:
        """Counters and sizes: ``enabled``, ``keys``, ``max_keys``, ``evictions``, ``exempt``,
        ``memory_bytes`` (the state map), and per group ``limits`` (``rate``, ``burst``,
        ``algorithm`` each), ``policy``, ``requests``, ``allowed``, ``refused``, ``delayed``,
        ``reductions``, ``quota_fetches``, ``quota_failures``; and ``quota_records`` (keys with a quota
        record), ``quota_queue`` and ``quota_running`` (fetches waiting for and held by workers)."""
    def __len__(self) -> int:
        """The number of states tracked: one per (peer, group) and limit."""
    def set_quota(self, peer: str, group: str, rate: str | Rate | None) -> None:
        """Sets the quota of ``peer`` in ``group`` (``None``: back to the rule's rate), e.g. on a billing
        event. It supersedes a running fetch; with a provider, the key is fetched again after
        ``quota_ttl``. The key keeps what it has used, counted in requests.

        Raises:
            ValueError: an unknown group (naming the groups), a group without a rate limit, a bad rate.
        """
    def quota(self, peer: str, group: str) -> QuotaInfo:
        """What the key of ``peer`` in ``group`` runs on. Never starts a fetch.

        Raises:
            ValueError: an unknown group.
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
        under the new limit (GCRA keeps its debt in time). A burst that was never given follows the
        new rate's count. Per-key quotas stay in force.

        Raises:
            ValueError: an unknown group, a group without a rate limit, a bad rate or burst.
        """
    def _quota_pending(self, peer: str, path: str | None) -> bool: ...
    def _fetch_queue(self) -> _FetchQueue: ...
    def _finish_fetch(
        self, peer: str, group: str, token: int, rate: Rate | str | None, ok: bool
    ) -> tuple[str, bool, str | None]: ...
    @property
    def _quota_provider(self) -> _QuotaProvider | None: ...
    @property
    def _quota_workers(self) -> int: ...
    def _reconfigure(
        self,
        rules: Iterable[Rule],
        exempt_peers: Iterable[str] | None = None,
        exempt_paths: Iterable[str] | None = None,
    ) -> None: ...
