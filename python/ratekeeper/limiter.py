"""The ``Limiter`` facade: the Rust core's non-blocking ``check``/``allow`` plus waiting in Python.

``check`` and ``allow`` are the Rust methods themselves (inherited, no Python frame). Waiting happens
here: the core reserves the caller's slot and says how long to wait, then ``time.sleep`` (which
releases the GIL and is interrupted by Ctrl-C) or ``asyncio.sleep`` waits it out. A wait that ends
early (an exception, Ctrl-C, a cancelled task) gives the slot back.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import math
import os
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from ratekeeper._core import Decision, Limit, ManualClock, Rate, Rule, _Completions, _Reservation, _Take
from ratekeeper._core import Limiter as _CoreLimiter
from ratekeeper._errors import InvalidArgument, InvalidType, InvalidValue, RateLimited
from ratekeeper._manual_wait import ManualWaits
from ratekeeper._offload import off_loop_soon
from ratekeeper._quota import QuotaWorkers
from ratekeeper._stats import PolicyName

if TYPE_CHECKING:
    from typing_extensions import ParamSpec, Self

    P = ParamSpec("P")
    R = TypeVar("R")

__all__ = ["NAMED_ONLY", "Limited", "Limiter", "Permit"]

#: How a request admitted by an adaptive limit ended (see ``Permit.mark_dropped``).
Outcome = Literal["ok", "dropped", "timeout"]
#: What ``Limiter.limited`` keys a call by: a fixed key, or a callable of the call's arguments.
KeySource = str | int | Callable[..., str | int]
#: What a limited call costs: a fixed count, or a callable of the call's arguments.
CostSource = int | Callable[..., int]

#: The pattern of a group reached only by name (``add_group``): it matches no path (the core, which knows it as
#: ``rules::NAMED_ONLY``, leaves such groups out of routing).
NAMED_ONLY = "a^"

# One channel per event loop through which the Redis client's thread completes futures: the loop
# watches its pipe and settles every queued reply in one callback (see src/python/aio.rs).
_channels: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Completions] = weakref.WeakKeyDictionary()


def _channel(loop: asyncio.AbstractEventLoop) -> _Completions:
    channel = _channels.get(loop)
    if channel is None:
        channel = _Completions()
        loop.add_reader(channel.fileno(), channel.drain)
        _channels[loop] = channel
    return channel


class Permit:
    """Concurrency permits held for one request; see [`Limiter.concurrent`][ratekeeper.Limiter.concurrent].

    A Permit is entered one block at a time, like a lock, and may be reused after it is left: each
    ``with`` / ``async with`` is a new admission (the rate limits are charged and the permits taken
    again, and ``decision`` is that entry's), and leaving gives that entry's permits back.

    Entering a Permit that is already entered (a nested block, or another thread or task using the same
    object) raises ``RuntimeError`` and takes nothing: one object holds one entry's permits, so a second
    entry could not be told apart when leaving and its permits would never be given back. It is a
    ``RuntimeError``, as for re-entering any single-entry context manager, rather than an
    [`InvalidValue`][ratekeeper.InvalidValue]: no argument is wrong, the object is misused, and ``except ValueError``
    around a decision must not hide it. Call [`Limiter.concurrent`][ratekeeper.Limiter.concurrent] once per request
    instead.

    An adaptive limit ([`Limit`][ratekeeper.Limit] with ``adaptive=``) learns from each entry when it is left:
    its latency (from admission to leaving, on the limiter's clock) and its outcome, ``"ok"`` unless the
    block raised (``"dropped"``) or the handler said otherwise with [`mark_dropped`][ratekeeper.Permit.mark_dropped]
    or [`mark_timed_out`][ratekeeper.Permit.mark_timed_out].

    Attributes:
        decision: the [`Decision`][ratekeeper.Decision] of the current (or last) entry; ``None`` before the first.
    """

    __slots__ = (
        "_cost",
        "_entered",
        "_group",
        "_held",
        "_limiter",
        "_max_wait",
        "_outcome",
        "_path",
        "_peer",
        "_take",
        "decision",
    )

    def __init__(
        self,
        limiter: Limiter,
        peer: str | int,
        path: str | None,
        group: str | None,
        cost: int,
        take: _Take,
        max_wait: float | None = None,
    ) -> None:
        self._limiter, self._peer, self._path, self._group = limiter, peer, path, group
        self._cost, self._take, self._max_wait = cost, take, max_wait
        # Locked from entering to leaving: testing and setting it is one atomic step, so two threads
        # entering at once cannot both get in (a plain flag could be read by both before either sets it).
        self._entered = threading.Lock()
        self._held = False
        self._outcome: Outcome | None = None
        self.decision: Decision | None = None

    def mark_dropped(self) -> None:
        """Tells the group's adaptive limits that this request failed from overload (e.g. the service
        behind it answered 503): a sign to lower the limit, as an exception leaving the block is."""
        self._outcome = "dropped"

    def mark_timed_out(self) -> None:
        """Tells the group's adaptive limits that this request was given up on (a timeout): a sign to lower
        the limit; its latency is not taken as the service's."""
        self._outcome = "timeout"

    def mark_ok(self) -> None:
        """Tells the group's adaptive limits that this request was served, even if the block then raises."""
        self._outcome = "ok"

    def _enter(self) -> None:
        if not self._entered.acquire(blocking=False):
            raise RuntimeError(
                "this Permit is already entered (a nested block, or another thread or task using the same "
                "object); call limiter.concurrent(...) once per request"
            )

    def _entered_with(self, decision: Decision) -> Decision:
        if not decision.allowed:
            self._entered.release()  # a refusal holds nothing: the Permit may be entered again
            raise RateLimited(decision)
        self._held = decision.permits_held
        self._outcome = None
        self.decision = decision
        return decision

    def __enter__(self) -> Decision:
        self._enter()
        limiter = self._limiter
        try:
            if self._max_wait is None:
                decision = limiter._acquire(self._peer, self._path, group=self._group, cost=self._cost, take=self._take)
            else:
                decision = limiter._throttle_permits(self._peer, self._path, self._group, self._cost, self._max_wait)
        except BaseException:
            self._entered.release()
            raise
        return self._entered_with(decision)

    def __exit__(self, exc_type: type[BaseException] | None = None, *exc_info: object) -> None:
        if not self._entered.locked():
            return  # not entered: nothing to give back
        try:
            if self._held:
                self._held = False
                # To the group that took them, not the path routed again: a reload since may route it elsewhere.
                assert self.decision is not None
                outcome = self._outcome
                admitted_at: int | None = self.decision._admitted_at
                if outcome is None:
                    outcome = "ok" if exc_type is None else "dropped"
                    if exc_type is not None and not issubclass(exc_type, Exception):
                        admitted_at = None  # a cancelled task or Ctrl-C says nothing of the service: no sample
                self._limiter._release(
                    self._peer, group=self.decision.group, cost=self._cost, admitted_at=admitted_at, outcome=outcome
                )
        finally:
            self._entered.release()

    async def __aenter__(self) -> Decision:
        if self._max_wait is None:
            return self.__enter__()
        self._enter()
        try:
            decision = await self._limiter._athrottle_permits(
                self._peer, self._path, self._group, self._cost, self._max_wait
            )
        except BaseException:
            self._entered.release()
            raise
        return self._entered_with(decision)

    async def __aexit__(self, exc_type: type[BaseException] | None = None, *exc_info: object) -> None:
        self.__exit__(exc_type)


class Limited:
    """Calls that wait their turn; see [`Limiter.limited`][ratekeeper.Limiter.limited]. A decorator of sync and async
    functions, and a context manager (``with`` and ``async with``).

    It holds no state between calls: one object may limit any number of calls at once, from threads and
    tasks alike.
    """

    __slots__ = ("_cost", "_group", "_key", "_limiter", "_path", "_timeout")

    def __init__(
        self,
        limiter: Limiter,
        key: KeySource,
        path: str | None,
        group: str | None,
        cost: CostSource,
        timeout: float | None,
    ) -> None:
        if (not isinstance(key, (str, int)) and not callable(key)) or isinstance(key, bool):
            raise InvalidType(
                "key", f"must be a str, an int or a callable of the call's arguments, got {type(key).__name__}"
            )
        if not callable(cost):
            _check_count("cost", cost)
        if timeout is not None:
            _check_seconds("timeout", timeout)
        for name, value in (("path", path), ("group", group)):
            if value is not None and not isinstance(value, str):
                raise InvalidType(name, f"must be a str, got {type(value).__name__}")
        if path is not None and group is not None:
            raise InvalidValue("group", "give a path or a group, not both")
        self._limiter, self._key, self._path, self._group = limiter, key, path, group
        self._cost, self._timeout = cost, timeout

    def _request(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str | int, int]:
        """The key and the cost of one call, from its arguments where they are callables."""
        key = self._key
        if callable(key):
            key = key(*args, **kwargs)
            if not isinstance(key, (str, int)) or isinstance(key, bool):
                raise InvalidType("key", f"must return a str or an int, got {type(key).__name__}")
        cost = self._cost
        if callable(cost):
            cost = cost(*args, **kwargs)
            _check_count("cost", cost, "must return")
        return key, cost

    def __call__(self, function: Callable[P, R]) -> Callable[P, R]:
        """Limits every call of ``function``: a coroutine function awaits its turn (``athrottle``), any
        other blocks its thread (``throttle``)."""
        if not callable(function):
            raise InvalidType("function", f"must be callable, got {type(function).__name__}")
        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def waits_its_turn(*args: P.args, **kwargs: P.kwargs) -> Any:
                key, cost = self._request(args, kwargs)
                async with self._permit(key, cost):
                    return await function(*args, **kwargs)

            return cast("Callable[P, R]", waits_its_turn)

        @functools.wraps(function)
        def blocks_its_turn(*args: P.args, **kwargs: P.kwargs) -> R:
            key, cost = self._request(args, kwargs)
            with self._permit(key, cost):
                return function(*args, **kwargs)

        return blocks_its_turn

    def _permit(self, key: str | int, cost: int) -> Permit:
        """One call's admission: its rate slot waited for (up to the timeout), then the group's concurrency
        permits held for the call, which an adaptive limit learns from (an exception is a drop)."""
        wait = math.inf if self._timeout is None else self._timeout
        return Permit(self._limiter, key, self._path, self._group, cost, _Take.BOTH, wait)

    def _fixed(self) -> tuple[str | int, int]:
        if callable(self._key) or callable(self._cost):
            raise InvalidType(
                "key" if callable(self._key) else "cost",
                "a with block has no arguments to read: give a fixed value (a callable suits the decorator)",
            )
        return self._key, self._cost

    # A with block waits for its rate slot only: Limited holds no state between calls, so it has nowhere to
    # keep one block's permits. The decorator holds them; a block that needs them takes
    # ``limiter.concurrent(key, max_wait=...)``.
    def __enter__(self) -> Decision:
        key, cost = self._fixed()
        return self._limiter.throttle(key, self._path, cost=cost, timeout=self._timeout, group=self._group)

    def __exit__(self, *exc_info: object) -> None:
        return None  # a rate slot is spent by the call: nothing to give back when it ends

    async def __aenter__(self) -> Decision:
        key, cost = self._fixed()
        return await self._limiter.athrottle(key, self._path, cost=cost, timeout=self._timeout, group=self._group)

    async def __aexit__(self, *exc_info: object) -> None:
        return None

    def __repr__(self) -> str:
        where = f"group={self._group!r}" if self._group is not None else f"path={self._path!r}"
        return f"<ratekeeper.Limited key={self._key!r} {where} cost={self._cost!r} timeout={self._timeout!r}>"


def _check_count(name: str, value: object, verb: str = "must be") -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidType(name, f"{verb} an int, got {type(value).__name__}")
    if not 1 <= value < 2**63:
        raise InvalidValue(name, f"{verb} a positive integer, got {value}")


def _check_seconds(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidType(name, f"must be a number of seconds, got {type(value).__name__}")
    try:
        value = float(value)
    except OverflowError:  # an int no float holds: for ever, as throttle takes it (or below 0)
        value = math.inf if value > 0 else -math.inf
    if math.isnan(value) or value < 0:
        raise InvalidValue(name, f"must be >= 0 seconds, got {value!r}")


# The quota keywords Limiter took before Quotas, and the setting of Quotas that replaced each one.
_REMOVED_QUOTA_KEYWORDS = {
    "quota_provider": "provider",
    "failsafe": "failsafe",
    "quota_ttl": "ttl",
    "quota_timeout": "timeout",
    "quota_workers": "workers",
    "quota_wait": "wait",
}


class Limiter(_CoreLimiter):
    """A rate limiter: ``check``/``allow`` decide at once, ``throttle``/``athrottle`` wait for a slot.

    Args:
        rate: a catch-all limit (group ``"default"``) for every path no rule matches, e.g. ``"10/min"``.
        rules: [`Rule`][ratekeeper.Rule] objects, tried in order; the first whose pattern matches the path wins.
        exempt_peers: peers never limited (exact match).
        exempt_paths: path regexes never limited.
        max_keys: the most (peer, group) states kept; past it idle ones are dropped, then the least used.
        burst: the burst of ``rate`` (default: its count; see "What a rate means" in the guide).
        algorithm: the algorithm of ``rate`` (``"gcra"``, ``"token_bucket"``, ``"fixed_window"``,
            ``"sliding_window"``, ``"sliding_log"``, ``"leaky_bucket"``).
        clock: a [`ManualClock`][ratekeeper.ManualClock] for tests.
        quotas: per-key quotas, a [`Quotas`][ratekeeper.Quotas]. With a provider, worker threads fetch quotas;
            [`close`][ratekeeper.Limiter.close] (or a ``with`` block) stops them.
        track_usage: record admissions per key for [`drain_pending`][ratekeeper.Limiter.drain_pending] (syncing usage
            between nodes).
        backend: where the states live: ``None`` (this process's memory), [`Shared`][ratekeeper.Shared] (every process
            of this machine) or [`Redis`][ratekeeper.Redis] (every machine).

    Raises:
        InvalidValue, InvalidType: a bad argument; ``.loc`` says where (``("rules", 2, "pattern")``).
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        old = [name for name in kwargs if name in _REMOVED_QUOTA_KEYWORDS]
        if old:
            # The core would refuse them as unknown keywords; this says what replaced them.
            settings = ", ".join(f"{_REMOVED_QUOTA_KEYWORDS[name]}=..." for name in old)
            raise TypeError(f"Limiter() no longer takes {', '.join(old)}: give quotas=ratekeeper.Quotas({settings})")
        # The core builds an instance of cls, a subclass too (its stub can only say _core.Limiter).
        return cast("Self", super().__new__(cls, *args, **kwargs))

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # The Rust constructor validated the arguments and holds the settings; only the workers start here.
        quotas = self.quotas
        if quotas.provider is not None:
            self.__dict__["_quota_workers_"] = QuotaWorkers(self, quotas.provider, quotas.workers)

    def close(self) -> None:
        """Stops the quota workers (idempotent). Decisions keep working on the quotas already known."""
        workers: QuotaWorkers | None = self.__dict__.get("_quota_workers_")
        if workers is not None:
            workers.close()

    def __enter__(self) -> Limiter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def set_quota(self, peer: str | int, group: str, rate: Rate | str | None) -> None:
        """Sets the quota of ``peer`` in ``group`` directly (e.g. on a billing event); see the base class."""
        super().set_quota(peer, group, rate)
        workers: QuotaWorkers | None = self.__dict__.get("_quota_workers_")
        if workers is not None:
            workers.waiters.wake()

    def add_group(
        self,
        name: str,
        limits: Sequence[Limit | Rate | str],
        *,
        policy: PolicyName = "all",
        reduction: bool = True,
    ) -> None:
        """Adds a group that requests reach by name (``group=``), not by path: per-route limits.

        Adding a group that exists with the same limits does nothing, so a route declared twice (or in
        every worker) is fine. Other groups keep their keys' states.

        Raises:
            InvalidValue: ``name`` is a group with other limits, or a bad limit.
            InvalidType: ``name`` is not a str, ``limits`` not a list of limits.
        """
        try:
            # Rule takes any iterable of limits and refuses a single str (list() would split it up).
            wanted = Rule(NAMED_ONLY, name, limits=limits, policy=policy, reduction=reduction)
        except InvalidArgument as error:
            raise (error.at("name", drop=1) if error.loc[:1] == ("group",) else error) from None
        rules = self.rules
        for rule in rules:
            if rule.group == name:
                if (rule.limits, rule.policy, rule.reduction) != (wanted.limits, wanted.policy, wanted.reduction):
                    raise InvalidValue("name", f"group {name!r} already exists with other limits: {rule!r}")
                return
        self._reconfigure([*rules, wanted], self.exempt_peers, self.exempt_paths)

    def reload(self, path: str | os.PathLike[str]) -> None:
        """Re-reads a TOML/YAML config file (the format of [`from_file`][ratekeeper.Limiter.from_file]) and applies it
        in place.

        Groups that keep their name keep every key's state (a limit whose algorithm changed starts
        afresh), so no key gets a burst of extra admissions; new groups start empty; routes and
        exemptions follow the file. Quotas and the quota settings are kept.

        Raises:
            ValueError, TypeError: naming the place in the file; the limiter is then unchanged.
        """
        # Imported when called (here and below): ratekeeper.config takes 12-25 ms to import, which a limiter
        # built in code never needs.
        from ratekeeper.config import plan_from_file

        plan_from_file(path).apply(self)

    @classmethod
    def from_config(cls, config: Mapping[str, Any], *, clock: ManualClock | None = None) -> Self:
        """A limiter from a mapping in the format of [`ratekeeper.config`][ratekeeper.config] (groups, rules,
        exemptions).

        Raises:
            InvalidValue, InvalidType: naming the place, e.g. ``groups.api.limits[1].rate: ...``.
        """
        from ratekeeper.config import plan_from_config

        return plan_from_config(config).build(cls, clock=clock)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], *, clock: ManualClock | None = None) -> Self:
        """A limiter from a TOML file (or YAML, with PyYAML installed); errors start with the file name."""
        from ratekeeper.config import plan_from_file

        return plan_from_file(path).build(cls, clock=clock)

    async def acheck(
        self, peer: str | int, path: str | None = None, *, cost: int = 1, group: str | None = None
    ) -> Decision:
        """The asyncio twin of [`check`][ratekeeper.Limiter.check]. With a Redis backend in exact mode it awaits the
        round trip without blocking the event loop (or a thread per call); in memory and in sync mode (whose
        decisions are local) it is ``check`` itself."""
        if not self._waits_on_io:  # inline, not off_loop: the hot path (0.7 us here, 2.6 us through a future)
            return self.check(peer, path, cost=cost, group=group)
        return (await self._areserve(peer, path, group, cost, 0.0)).decision

    async def aallow(
        self, peer: str | int, path: str | None = None, *, cost: int = 1, group: str | None = None
    ) -> bool:
        """The asyncio twin of [`allow`][ratekeeper.Limiter.allow] (see [`acheck`][ratekeeper.Limiter.acheck])."""
        if not self._waits_on_io:  # as acheck: inline on the hot path
            return self.allow(peer, path, cost=cost, group=group)
        # As allow(): no remaining / reset figures asked of Redis; and no coroutine between the caller
        # and the future (this is the hot path of an asyncio service).
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_Reservation] = loop.create_future()
        self._reserve_later(
            peer, path, group=group, cost=cost, timeout=0.0, report=False, future=future, completions=_channel(loop)
        )
        try:
            # Shielded: a task cancelled while the store decides leaves the answer to come, and what it admitted is
            # given back then (a cancelled future would drop it, keeping what the store took).
            return (await asyncio.shield(future)).decision.allowed
        except asyncio.CancelledError:
            future.add_done_callback(functools.partial(self._unused_answer, peer, path, group, cost))
            raise

    async def _areserve(
        self,
        peer: str | int,
        path: str | None,
        group: str | None,
        cost: int,
        max_wait: float | None,
        take: _Take = _Take.RATES,
        *,
        counts_refusal: bool = True,
    ) -> _Reservation:
        """``_reserve`` awaited: the store's reply completes a future on this loop (at once when the
        store decides without I/O). ``counts_refusal=False``: a look at a turn, taken again until it comes,
        whose refusal is not counted in the group's stats (an outgoing call's)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_Reservation] = loop.create_future()
        self._reserve_later(
            peer, path, group=group, cost=cost, timeout=max_wait, take=take, counts_refusal=counts_refusal,
            future=future, completions=_channel(loop),
        )  # fmt: skip
        if take is not _Take.RATES:  # permits: given back by the holder's release or their lease's end
            return await future
        try:
            return await asyncio.shield(future)  # as aallow's
        except asyncio.CancelledError:
            future.add_done_callback(functools.partial(self._unused_answer, peer, path, group, cost))
            raise

    def _unused_answer(
        self, peer: str | int, path: str | None, group: str | None, cost: int, future: asyncio.Future[_Reservation]
    ) -> None:
        """Gives back, off the loop, what the store admitted for a task cancelled while it decided: a slot to
        wait for as a cancelled wait's (``_refund``), an admission at once as a reduction of its cost, which
        admissions made since do not stop (a refund gives back only the key's newest slot)."""
        if future.cancelled() or future.exception() is not None:
            return
        reservation = future.result()
        if not reservation.decision.allowed:
            return
        if reservation.wait > 0:
            off_loop_soon(future.get_loop(), functools.partial(self._refund, reservation))
        else:
            off_loop_soon(future.get_loop(), functools.partial(self.reduce, peer, path, cost, group=group))

    def throttle(
        self,
        peer: str | int,
        path: str | None = None,
        *,
        cost: int = 1,
        timeout: float | None = None,
        group: str | None = None,
    ) -> Decision:
        """Blocks until the request is admitted and returns its Decision.

        Waiters on one key are served in arrival order, each with a single core call: the first call
        reserves the slot. The GIL is released while waiting, and Ctrl-C interrupts the wait.

        Raises:
            RateLimited: the wait would last longer than ``timeout`` seconds (nothing is reserved).
        """
        return self._throttled(peer, path, group, cost, timeout).decision

    def _throttled(
        self, peer: str | int, path: str | None, group: str | None, cost: int, timeout: float | None
    ) -> _Reservation:
        """``throttle``'s reservation, its wait done (so a caller may still give it back with ``_refund``)."""
        reservation = self._reserve(peer, path, group=group, cost=cost, timeout=timeout)
        if not reservation.decision.allowed:
            raise RateLimited(reservation.decision)
        if reservation.wait > 0:
            try:
                self._wait(reservation.wait, reservation.deadline_ns)
            except BaseException:
                self._refund(reservation)
                raise
        return reservation

    def _throttle_permits(
        self, peer: str | int, path: str | None, group: str | None, cost: int, timeout: float | None
    ) -> Decision:
        """Waits for the rate slot (``throttle``), then takes the group's concurrency permits alone: how
        ``concurrent(max_wait=...)`` and the web integrations' delay mode admit a request.

        One request, whatever the order of the gates: the permits' decision is counted as part of the
        rate admission (not as a second request), and a refused permit gives the rate slot back, so a
        refusal consumes nothing. The permits are taken after the wait, not held through it: a waiting
        request is not in flight.

        Raises:
            RateLimited: the wait would pass ``timeout``, or every permit is in use.
        """
        reservation = self._throttled(peer, path, group, cost, timeout)
        try:
            decision = self._acquire(peer, path, group=group, cost=cost)
        except BaseException:
            self._refund(reservation)
            raise
        if not decision.allowed:
            self._refund(reservation)
            raise RateLimited(decision)
        return decision

    async def _athrottle_permits(
        self, peer: str | int, path: str | None, group: str | None, cost: int, timeout: float | None
    ) -> Decision:
        """The asyncio twin of ``_throttle_permits`` (a backend's round trips off the event loop). A task cancelled
        while its permits are being taken (in a worker thread) gives them back, with its rate slot, once taken."""
        reservation = await self._athrottled(peer, path, group, cost, timeout)
        if not self._waits_on_io:
            decision = self._acquire(peer, path, group=group, cost=cost)
        else:
            taking = asyncio.get_running_loop().run_in_executor(
                None, functools.partial(self._acquire, peer, path, group=group, cost=cost)
            )
            try:
                decision = await asyncio.shield(taking)
            except asyncio.CancelledError:
                taking.add_done_callback(functools.partial(self._unused_permits, peer, cost, reservation))
                raise
        if not decision.allowed:
            self._refund_soon(reservation)  # not awaited: a cancellation cannot stop it
            raise RateLimited(decision)
        return decision

    def _unused_permits(
        self, peer: str | int, cost: int, reservation: _Reservation, taking: asyncio.Future[Decision]
    ) -> None:
        """Gives back, off the loop, the permits a cancelled task took (when it did) and its rate slot."""
        taken = None if taking.cancelled() or taking.exception() is not None else taking.result()

        def give_back() -> None:
            if taken is not None and taken.allowed:
                self._release(peer, group=taken.group, cost=cost, outcome="dropped")
            self._refund(reservation)

        off_loop_soon(taking.get_loop(), give_back)

    async def athrottle(
        self,
        peer: str | int,
        path: str | None = None,
        *,
        cost: int = 1,
        timeout: float | None = None,
        group: str | None = None,
    ) -> Decision:
        """The asyncio twin of [`throttle`][ratekeeper.Limiter.throttle]: waits with ``asyncio.sleep``, never blocking
        the loop.

        Cancelling the task gives the reserved slot back.

        Raises:
            RateLimited: the wait would last longer than ``timeout`` seconds (nothing is reserved).
        """
        return (await self._athrottled(peer, path, group, cost, timeout)).decision

    async def _athrottled(
        self, peer: str | int, path: str | None, group: str | None, cost: int, timeout: float | None
    ) -> _Reservation:
        """``athrottle``'s reservation, its wait done (so a caller may still give it back with ``_refund``)."""
        workers: QuotaWorkers | None = self.__dict__.get("_quota_workers_")
        if workers is not None and self.quota_wait > 0:
            await workers.waiters.wait(lambda: self._quota_pending(peer, path, group=group), self.quota_wait)
        if not self._waits_on_io:
            # Inline where this process decides: through a future an athrottle takes 2.9 us, not 1.4.
            reservation = self._reserve(peer, path, group=group, cost=cost, timeout=timeout, wait_quota=False)
        else:
            reservation = await self._areserve(peer, path, group, cost, timeout)
        if not reservation.decision.allowed:
            raise RateLimited(reservation.decision)
        if reservation.wait > 0:
            try:
                if self.clock is None:
                    await asyncio.sleep(reservation.wait)
                else:
                    await self._manual_waits().sleep_until(reservation.deadline_ns)
            except BaseException:
                self._refund_soon(reservation)
                raise
        return reservation

    def _refund_soon(self, reservation: _Reservation) -> None:
        """Gives back a cancelled asyncio wait's slot: at once in memory; through a worker thread when
        the store waits on I/O, so that a cancellation never blocks the event loop for a round trip.

        Not ``off_loop``: the refund is not awaited, so the cancelled task ends without waiting for it."""
        if not self._waits_on_io:
            self._refund(reservation)
        else:
            off_loop_soon(asyncio.get_running_loop(), functools.partial(self._refund, reservation))

    def concurrent(
        self,
        peer: str | int,
        path: str | None = None,
        *,
        cost: int = 1,
        group: str | None = None,
        rates: bool = True,
        max_wait: float | None = None,
    ) -> Permit:
        """A context manager (``with`` or ``async with``) holding the group's concurrency permits.

        Entering admits the request like [`check`][ratekeeper.Limiter.check] and also takes the permits of the group's
        concurrency limits; leaving gives the permits back, also on exceptions and cancellation.

        With ``max_wait`` (seconds), entering first waits for the rate slot up to that long, as
        [`throttle`][ratekeeper.Limiter.throttle] / [`athrottle`][ratekeeper.Limiter.athrottle] with ``timeout`` do,
        then takes the permits: one request in the counters, and a refused permit gives the slot back (a refusal
        consumes nothing).

        With ``rates=False`` only the permits are taken: for a request that already has its rate
        admission, so its rate limits are not charged twice; its permit decision is counted as part of
        that request (refused, the request counts as refused). Its rate slot is not given back when the
        permit is refused: prefer ``max_wait``.

        Raises:
            RateLimited: on entering, when a rate limit refuses (or, with ``max_wait``, its slot is
                further away) or every permit is in use (``retry_after`` is 0.0 and
                ``decision.refused_by`` is ``"concurrency"`` then: a permit frees when a request
                finishes).
            RuntimeError: on entering a [`Permit`][ratekeeper.Permit] that is already entered (nested, or by another
                thread or task); one Permit may be reused after its block ends.
        """
        if not isinstance(rates, bool):
            raise InvalidType("rates", f"must be a bool, got {type(rates).__name__}")
        if max_wait is not None and not rates:
            raise InvalidValue("max_wait", "waits for the rate slot: it cannot go with rates=False")
        return Permit(self, peer, path, group, cost, _Take.BOTH if rates else _Take.PERMITS, max_wait)

    def limited(
        self,
        key: KeySource,
        path: str | None = None,
        *,
        group: str | None = None,
        cost: CostSource = 1,
        timeout: float | None = None,
    ) -> Limited:
        """Calls you make, limited: a decorator, or a context manager, that waits for the call's turn.

        >>> @lim.limited("payments", timeout=5.0)
        ... def charge(card: str, amount: int) -> Receipt: ...
        >>> @lim.limited(lambda *args, **kw: kw["api_key"], group="search")
        ... async def search(query: str, *, api_key: str) -> list[Hit]: ...
        >>> with lim.limited("payments"): ...
        >>> async with lim.limited("payments"): ...

        A decorated coroutine function awaits its turn ([`athrottle`][ratekeeper.Limiter.athrottle]: the event loop goes
        on); any other function, and a ``with`` block, blocks its thread ([`throttle`][ratekeeper.Limiter.throttle]).
        A decorated call also holds the group's concurrency permits while it runs (refused at once, with
        ``RateLimited``, when none is free); an adaptive limit ([`Limit`][ratekeeper.Limit] ``adaptive=``) learns
        from its latency, an exception being a drop. A ``with`` block waits for its rate slot only.
        Waiters on one key are served in arrival order. The decorated function keeps its signature for type checkers.

        Args:
            key: the key the calls are limited under: a str (e.g. the remote service's name), or a
                callable of the decorated function's arguments returning one (e.g. the API key a call
                uses). ``with`` blocks take a str.
            path: routed by the limiter's rules, like a request's path; or
            group: the group to decide in, by name (e.g. one made with [`add_group`][ratekeeper.Limiter.add_group]).
            cost: what a call counts for: an int, or a callable of the call's arguments.
            timeout: the longest a call waits, in seconds; ``None`` waits as long as it takes.

        Raises:
            InvalidType, InvalidValue: a bad argument, named by ``loc`` (here or, for what a key or cost
                callable returns, at the call).
            RateLimited: at a call, when its turn is further away than ``timeout`` (nothing is reserved
                and the function is not called).
        """
        return Limited(self, key, path, group, cost, timeout)

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

    def __repr__(self) -> str:
        state = "on" if self.enabled else "off"
        return f"<ratekeeper.Limiter groups={list(self.groups)} keys={len(self)} {state}>"


# help() and inspect.signature() show the constructor's real parameters, not (*args, **kwargs).
Limiter.__signature__ = inspect.signature(_CoreLimiter)  # type: ignore[attr-defined]
