"""The one lifecycle of a web request, whatever the framework: admit, fields, body, release, settle, refusal.

An adapter (``asgi``, ``flask``, ``fastapi``, ``django``, ``_drf``) reads the request (key, path, cost) and
writes the response; everything between is here:

1. **admit**: ``Gatekeeper.admit`` / ``aadmit`` (or ``admit_quick`` on a hot path, then ``admission``)
   decide the request once and give an ``Admission``: what was decided, the fields of the response, and
   the receipt of what it took (key, group, cost).
2. **fields**: ``Admission.fields``, in the gatekeeper's form (str pairs for WSGI and Django, lower-case
   bytes pairs for ASGI), for the adapter to add to the response.
3. **body**: ``Gatekeeper.body`` wraps a streamed body (sync or async iterable) so that the concurrency
   permits go back when it ends, fails or is closed.
4. **release** and **settle**: ``release`` gives the permits back, once, to the group that took them
   (the receipt, not the path routed again: a ``reload`` that re-routes the path or removes the group in
   the meantime is no matter); ``settle`` gives the request back when ``refund_when`` says its
   response's status should not count; ``give_back`` undoes an admission a later limit refused.
5. **refusal**: ``Gatekeeper.refusal`` gives the answer to a refused request as data (status, headers,
   body) for the adapter to write.

The ``a``-prefixed twins are for an event loop: a store that waits on I/O (Redis in exact mode) is
awaited or called on a thread, never on the loop. This is the one place the web integrations call the
limiter's private methods.
"""

from __future__ import annotations

import functools
import http
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ratekeeper._core import Decision, _Take
from ratekeeper._errors import InvalidValue, RateLimited
from ratekeeper._http import (
    Penalty,
    WebOptions,
    as_instants,
    missing_key_body,
    raw_response_headers,
    refusal_body,
    response_headers,
)
from ratekeeper._offload import off_loop, off_loop_through

if TYPE_CHECKING:
    from ratekeeper.limiter import Limiter, Outcome

__all__ = ["NOT_LIMITED", "STATUS_LINES", "Admission", "Gatekeeper", "Refusal"]

log = logging.getLogger("ratekeeper")
#: One record per refusal, when an integration is asked for them (``log_refusals=True``).
refusals_log = logging.getLogger("ratekeeper.refusals")


#: The answer to a refused request, for the adapter to write as it is: its status (429, or the missing key's),
#: its headers (``Content-Type``, ``Content-Length`` and the rate-limit fields, in the gatekeeper's form) and
#: its JSON body. A plain tuple: a flood of refusals makes one each, and a tuple costs a fraction of a class.
Refusal = tuple[int, list[tuple[Any, Any]], bytes]

#: The status lines of the statuses a refusal may have (429, a missing key's 401 or 403), as WSGI's
#: ``start_response`` takes them: ``STATUS_LINES[429] == "429 Too Many Requests"``.
STATUS_LINES = {status: f"{status} {http.HTTPStatus(status).phrase}" for status in (401, 403, 429, 503)}


class Admission:
    """What ``Gatekeeper`` decided for one request, and the receipt of what it took.

    Attributes:
        status: 0 to serve the request; else the status to answer it with (429, or the missing key's).
        fields: the headers of that answer, or, when served, the rate-limit fields to add to the response:
            ``(name, value)`` str pairs, or lower-case bytes pairs from a ``raw`` ``Gatekeeper``.
        body: the JSON body of the answer (empty when served).
        decision: the limiter's decision; ``None`` when nothing was decided (no key: unrouted or refused).
        peer, path, cost: the request's key, the path it was decided on (for the logs) and its cost.
        group: the group the decision was made in (the receipt: what is released or given back goes there).
        permits: whether concurrency permits are held (``Gatekeeper.release`` gives them back once).
        outcome: how the request ended, for the group's adaptive limits: ``"ok"``, ``"dropped"`` (a 5xx, or
            the app raised: ``Gatekeeper.observe`` / ``failed``), or ``None`` (cancelled, the client left:
            no sample).
    """

    __slots__ = ("body", "cost", "decision", "fields", "group", "outcome", "path", "peer", "permits", "status")

    def __init__(
        self,
        status: int,
        fields: Sequence[tuple[Any, Any]],
        body: bytes = b"",
        decision: Decision | None = None,
        route: tuple[str, str | None, str | None, int] = ("", None, None, 0),
    ) -> None:
        self.status, self.fields, self.body, self.decision = status, fields, body, decision
        self.peer, self.path, asked, self.cost = route
        self.outcome: Outcome | None = "ok"
        if decision is None:
            self.group, self.permits = asked, False
        else:
            decided = decision.group
            self.group = decided if decided is not None else asked
            self.permits = decision.permits_held

    @property
    def refused_by_limit(self) -> bool:
        """Refused by the limiter's decision (not for a missing key): what an ``on_refused`` hook answers."""
        return self.status != 0 and self.decision is not None

    @property
    def counted(self) -> bool:
        """Whether the request was counted in a group (allowed there): what ``give_back`` undoes."""
        decision = self.decision
        return decision is not None and decision.allowed and self.group is not None


#: A request needing no decision (no key, on a path no rule limits): served as it is, nothing owed.
NOT_LIMITED = Admission(0, ())


class Gatekeeper:
    """The lifecycle every adapter takes (see the module's docstring) for one set of ``WebOptions``."""

    __slots__ = ("admit_quick", "limiter", "options", "quick", "raw")

    def __init__(self, options: WebOptions, *, raw: bool = False) -> None:
        self.options = options
        self.limiter = options.limiter
        self.raw = raw  # the fields as ASGI's bytes pairs, not str pairs
        #: Whether :attr:`admit_quick` may stand for :meth:`admit` of a request with a key: refuse mode (delay
        #: mode waits in :meth:`admit`), cost 1 (no ``cost=``), nothing to settle after (no ``refund_when``).
        self.quick = (
            options.mode == "refuse"
            and options.cost is None
            and options.refund_when is None
            and options.penalty is None
            and not options.fields._rewritten
        )
        fields = options.fields
        #: ``admit_quick(peer, path)``: :meth:`admit` of a request with a key on ``path`` at cost 1 (when
        #: :attr:`quick`), for an adapter's hot path. A request allowed with no permits held owes nothing
        #: but its response's fields, and gets them (a tuple; no Decision or Admission is made); any other
        #: gets its Decision, for :meth:`admission`. A partial of the core's method: no Python frame.
        self.admit_quick: Callable[[str, str], tuple[tuple[Any, Any], ...] | Decision] = functools.partial(
            self.limiter._admit_web, fields.ietf and fields.on_allowed, fields.legacy and fields.on_allowed, raw
        )

    def view_admitter(self, group: str | None = None) -> Callable[..., tuple[tuple[Any, Any], ...] | Decision | None]:
        """``admit_quick`` for a view's wrapper (WSGI's str fields, when :attr:`quick`): the limiter's
        ``_admit_view`` with the fields' options, in ``group``, called with ``(cost, peer)``; without a group,
        by the rules, called with ``(cost, peer, path)``. ``None`` from it: the limiter is off, nothing was
        decided. A partial of the core's method: no Python frame."""
        fields = self.options.fields
        ietf, legacy = fields.ietf and fields.on_allowed, fields.legacy and fields.on_allowed
        return functools.partial(self.limiter._admit_view, ietf, legacy, group)

    # --- admit ----------------------------------------------------------------------------------------------

    def admission(self, decision: Decision, peer: str, path: str) -> Admission:
        """The admission of a request with a key on ``path`` that ``admit_quick`` gave a ``decision``."""
        return self._admission(decision, (peer, path, None, 1))

    def admit(self, peer: str | None, path: str, group: str | None = None, cost: int = 1) -> Admission:
        """Decides a request of ``peer`` (``None``: its key function found none) on ``path``, or in the
        per-route ``group`` when given."""
        who = peer if peer is not None else self._without_key(path, group)
        if isinstance(who, Admission):
            return who
        route = None if group is not None else path
        blocked = self._blocked(who) if self.options.penalty is not None else None
        if blocked is not None:
            return self._admission(blocked, (who, route, group, cost))
        if self.options.mode == "refuse":
            decision = self.limiter._acquire(who, route, group=group, cost=cost, take=_Take.BOTH)
        else:
            try:
                decision = self.limiter._throttle_permits(who, route, group, cost, self.options.max_delay)
            except RateLimited as refused:
                decision = refused.decision
        if self.options.penalty is not None and not decision.allowed and decision.group is not None:
            self._breached(who)
        return self._admission(decision, (who, route, group, cost))

    async def aadmit(self, peer: str | None, path: str, group: str | None = None, cost: int = 1) -> Admission:
        """``admit`` on an event loop: Redis answers while the loop serves other requests."""
        who = peer if peer is not None else self._without_key(path, group)
        if isinstance(who, Admission):
            return who
        route = None if group is not None else path
        limiter = self.limiter
        penalty = self.options.penalty is not None
        if penalty:
            blocked = await off_loop(limiter, self._blocked, who)
            if blocked is not None:
                return self._admission(blocked, (who, route, group, cost))
        if self.options.mode == "delay":
            try:
                decision = await limiter._athrottle_permits(who, route, group, cost, self.options.max_delay)
            except RateLimited as refused:
                decision = refused.decision
        elif not limiter._waits_on_io:  # a local decision: no coroutine, no thread hop
            decision = limiter._acquire(who, route, group=group, cost=cost, take=_Take.BOTH)
        else:  # Redis's own asyncio round trip, not a thread
            decision = (await limiter._areserve(who, route, group, cost, 0.0, _Take.BOTH)).decision
        if penalty and not decision.allowed and decision.group is not None:
            await off_loop(limiter, self._breached, who)
        return self._admission(decision, (who, route, group, cost))

    def _without_key(self, path: str, group: str | None) -> Admission | str:
        """The admission of a request without a key, or the anonymous key to decide it under."""
        if group is None and self.limiter.resolve(self.options.anonymous_key, path) is None:
            return NOT_LIMITED  # exempt or unrouted: no key needed
        if self.options.on_missing_key == "anonymous":
            return self.options.anonymous_key
        status = self.options.missing_key_status
        return Admission(status, (), missing_key_body(status))

    def _admission(self, decision: Decision, route: tuple[str, str | None, str | None, int]) -> Admission:
        fields = self.fields(decision)
        if decision.allowed:
            return Admission(0, fields, decision=decision, route=route)
        if not self.options.shadow:
            if self.options.log_refusals:
                _log_refusal(decision, route)
            status = self.options.concurrency_status if decision.refused_by == "concurrency" else 429
            return Admission(status, fields, refusal_body(decision, status), decision, route)
        log.info("ratekeeper shadow mode: would refuse %r on %s (group %r)", route[0], route[1], decision.group)
        # Served: the fields say what the limiter decided, without a Retry-After (nothing to retry).
        served = [field for field in fields if field[0] not in ("Retry-After", b"retry-after")]
        return Admission(0, served, decision=decision, route=route)

    # --- the penalty ----------------------------------------------------------------------------------------

    def _penalty_groups(self) -> Penalty:
        """The penalty, its two groups in the limiter (added at first use, and again after a reload
        that replaced the limiter's groups)."""
        penalty = self.options.penalty
        assert penalty is not None
        for name, limits in penalty._groups():
            if name not in self.limiter.groups:
                self.limiter.add_group(name, limits)
        return penalty

    def _blocked(self, peer: str) -> Decision | None:
        """The refusal of a key serving its penalty, else ``None``. Looks; counts nothing."""
        penalty = self.options.penalty
        assert penalty is not None
        try:
            look = self.limiter.peek(peer, group=penalty._blocked_group)
        except InvalidValue:  # not added yet, or a reload replaced the groups
            look = self.limiter.peek(peer, group=self._penalty_groups()._blocked_group)
        return None if look.allowed else look

    def _breached(self, peer: str) -> None:
        """Counts a refusal of ``peer``; the one that makes ``breaches`` within the window starts its block."""
        penalty = self._penalty_groups()
        self.limiter.allow(peer, group=penalty._breaches_group)
        if not self.limiter.peek(peer, group=penalty._breaches_group).allowed:
            self.limiter.allow(peer, group=penalty._blocked_group)
            refusals_log.warning(
                "ratekeeper: %r refused %d times within %gs: blocked for %gs",
                peer,
                penalty.breaches,
                penalty.within,
                penalty.block,
                extra={"peer": peer, "penalty": penalty},
            )

    # --- fields and refusals --------------------------------------------------------------------------------

    def fields(self, decision: Decision) -> Sequence[tuple[Any, Any]]:
        """The rate-limit fields of a response to ``decision``, in this gatekeeper's form."""
        serialize = raw_response_headers if self.raw else response_headers
        fields = serialize(decision, self.options.fields)
        return as_instants(fields, self.options.fields) if self.options.fields._rewritten else fields

    def refusal(self, admission: Admission, body: bytes | None = None) -> Refusal:
        """The answer to a refused ``admission``: ``(status, headers, body)``, the JSON body (``body`` when
        given) and its headers in this gatekeeper's form."""
        content = admission.body if body is None else body
        headers: list[tuple[Any, Any]]
        if self.raw:
            length = str(len(content)).encode()
            headers = [(b"content-type", b"application/json"), (b"content-length", length), *admission.fields]
        else:
            headers = [("Content-Type", "application/json"), ("Content-Length", str(len(content))), *admission.fields]
        return admission.status, headers, content

    # --- after the response: release, settle, give back -----------------------------------------------------

    def release(self, admission: Admission) -> None:
        """Gives the request's concurrency permits back to the group that took them, unless that was done
        already."""
        if admission.permits:
            admission.permits = False
            _release(self.limiter, admission)

    async def arelease(self, admission: Admission) -> None:
        """``release`` on an event loop."""
        if admission.permits:
            admission.permits = False
            await off_loop_through(self.limiter, _release, self.limiter, admission)

    @staticmethod
    def observe(admission: Admission, status: int) -> None:
        """Notes the response's ``status`` for the group's adaptive limits: a 5xx is a drop (a sign of overload)."""
        if status >= 500:
            admission.outcome = "dropped"

    @staticmethod
    def failed(admission: Admission, error: BaseException) -> None:
        """Notes that the app raised ``error`` while serving: a drop, unless it carries a status below 500
        (an ``HTTPException(404)`` answers the client, the service is fine); a cancellation (the client
        left, the server stops) says nothing of the service, and is no sample."""
        status = getattr(error, "status_code", None)
        if isinstance(status, int) and status < 500:
            return
        admission.outcome = "dropped" if isinstance(error, Exception) else None

    def _settles(self, admission: Admission, status: int) -> bool:
        refund_when = self.options.refund_when
        return refund_when is not None and admission.counted and refund_when(status)

    def settle(self, admission: Admission, status: int) -> None:
        """Gives the request back with the limiter's ``reduce`` when ``refund_when`` (the option's name,
        as users know it) says its response's ``status`` should not count (and ``observe``s it)."""
        self.observe(admission, status)
        if self._settles(admission, status):
            _reduce(self.limiter, admission)

    async def asettle(self, admission: Admission, status: int) -> None:
        """``settle`` on an event loop."""
        self.observe(admission, status)
        if self._settles(admission, status):
            await off_loop_through(self.limiter, _reduce, self.limiter, admission)

    def reduce(self, admission: Admission) -> None:
        """Gives back what an allowed admission counted, with the limiter's ``reduce`` (its permits stay
        held)."""
        if admission.counted:
            _reduce(self.limiter, admission)

    async def areduce(self, admission: Admission) -> None:
        """``reduce`` on an event loop."""
        if admission.counted:
            await off_loop_through(self.limiter, _reduce, self.limiter, admission)

    def give_back(self, admission: Admission) -> None:
        """Undoes an allowed admission, its count and its permits: a later limit refused the request,
        and a refused request counts against none of its limits."""
        self.reduce(admission)
        self.release(admission)

    async def agive_back(self, admission: Admission) -> None:
        """``give_back`` on an event loop."""
        await self.areduce(admission)
        await self.arelease(admission)

    # --- the body -------------------------------------------------------------------------------------------

    def body(self, admission: Admission, body: Iterable[Any]) -> ReleasingBody:
        """``body``, a streamed response's iterable, releasing the admission's permits once it is
        exhausted, fails or is closed (the client left), whichever comes first."""
        return ReleasingBody(body, functools.partial(self.release, admission))

    def abody(self, admission: Admission, body: AsyncIterator[Any]) -> AsyncReleasingBody:
        """``body`` for an async iterable (its ``close()``, called from a thread, releases too)."""
        return AsyncReleasingBody(body, self, admission)


def _release(limiter: Limiter, admission: Admission) -> None:
    """Gives ``admission``'s permits back to the group it took them in (nothing, when a reload removed it),
    with its latency and outcome for the group's adaptive limits."""
    decision, outcome = admission.decision, admission.outcome
    admitted_at = decision._admitted_at if decision is not None and outcome is not None else None
    limiter._release(
        admission.peer, group=admission.group, cost=admission.cost, admitted_at=admitted_at, outcome=outcome or "ok"
    )


def _reduce(limiter: Limiter, admission: Admission) -> None:
    """Gives back what ``admission`` counted, in the group that counted it."""
    try:
        limiter.reduce(admission.peer, None, admission.cost, group=admission.group)
    except InvalidValue:
        if admission.group in limiter.groups:
            raise
        # A reload removed the group since: nothing is left to give back.


class ReleasingBody:
    """A streamed body that calls ``release`` once its iterator is exhausted, raises, or is closed."""

    __slots__ = ("_body", "_iterator", "_release")

    def __init__(self, body: Iterable[Any], release: Callable[[], None]) -> None:
        self._body = body
        self._iterator: Iterator[Any] | None = None  # made on first use, as the server would
        self._release = release

    def __iter__(self) -> ReleasingBody:
        return self

    def __next__(self) -> Any:  # the body's chunks: str or bytes
        if self._iterator is None:
            self._iterator = iter(self._body)
        try:
            return next(self._iterator)
        except BaseException:  # StopIteration included: the last chunk has been handed to the server
            self._release()
            raise

    def close(self) -> None:  # WSGI servers and Django call it when the response ends
        try:
            close = getattr(self._body, "close", None)
            if close is not None:
                close()
        finally:
            self._release()


class AsyncReleasingBody:
    """An async streamed body that releases the admission's permits once it is exhausted, raises, or is
    closed (``close()`` is synchronous: Django calls it on a thread when the response closes)."""

    __slots__ = ("_admission", "_body", "_gatekeeper")

    def __init__(self, body: AsyncIterator[Any], gatekeeper: Gatekeeper, admission: Admission) -> None:
        self._body, self._gatekeeper, self._admission = body, gatekeeper, admission

    def __aiter__(self) -> AsyncReleasingBody:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self._body.__anext__()
        except BaseException:  # StopAsyncIteration included
            await self._gatekeeper.arelease(self._admission)
            raise

    def close(self) -> None:
        self._gatekeeper.release(self._admission)


def _log_refusal(decision: Decision, route: tuple[str, str | None, str | None, int]) -> None:
    peer, path, group = route[0], route[1], decision.group
    retry = decision.retry_after
    refusals_log.warning(
        "ratekeeper: refused %r on %s (group %r), retry after %.3fs",
        peer,
        path if path is not None else f"group {route[2]!r}",
        group,
        retry,
        extra={"peer": peer, "path": path, "group": group, "retry_after": retry},
    )
