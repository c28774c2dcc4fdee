"""Build a [`Limiter`][ratekeeper.Limiter] from a mapping or a TOML / YAML file.

``Limiter.from_config(mapping)`` takes a mapping (from ``tomllib``, ``yaml.safe_load``, JSON or a dict
literal); ``Limiter.from_file(path)`` reads a ``.toml`` (``tomllib``, or ``tomli`` before Python 3.11)
or a ``.yaml`` / ``.yml`` file (PyYAML, imported only then); both are built on this module.
``python -m ratekeeper check-config FILE`` validates a file and prints its routing table.

The format, in TOML:

    max_keys = 100_000                  # bound on tracked (peer, group) states (default 1_000_000)
    exempt_peers = ["127.0.0.1"]        # never limited (exact match)
    exempt_paths = ["^/health$"]        # regexes searched in the path: never limited
    default = "100/min"                 # optional catch-all (group "default"), tried after every group

    [groups.login]                      # a group: its name is the table's name
    paths = ["^/login$"]                # regexes routed to it (searched, like re.search: anchor with ^)
    rate = "3/min"                      # one limit: rate, with optional burst and algorithm
    burst = 3
    algorithm = "gcra"

    [groups.api]
    paths = ["^/api/", "^/v2/"]
    policy = "all"                      # several limits: "all" (each must admit) or "fallback"
    limits = [
        "10/s",                                             # a rate string
        { rate = "1000/hour", algorithm = "sliding_window" },  # a table: rate, burst, algorithm
        { concurrency = 5 },                                # at most 5 in flight per peer (lim.concurrent)
        { adaptive = "gradient" },                          # as many in flight as latency allows (all peers)
    ]
    reduction = true                    # whether lim.reduce() may give tokens back (default true)

Routing: groups are tried in file order and, within a group, its ``paths`` in order; the first regex
that matches wins. ``default`` (a rate string, or a table with the group keys except ``paths``) comes
last and catches every other path, and requests without a path. Without ``default`` a path that no
group matches is not limited. A file with no groups and no default gives a limiter that limits nothing.

Group keys: ``paths`` (required, a non-empty list of regexes); either ``rate`` (+ ``burst``,
``algorithm``) or ``limits`` (a list of rate strings or tables with ``rate`` / ``burst`` /
``algorithm``, or ``concurrency``, or ``adaptive`` with its optional settings: ``min_limit``, ``max_limit``,
``initial``, ``per``, ``window``, ``tolerance``, ``backoff``, ``smoothing``, ``threshold``,
``probe_interval``, ``probe_samples``, ``jitter``, as [`Limit`][ratekeeper.Limit] takes them);
``policy`` (``"all"``, the default, or ``"fallback"``);
``reduction`` (bool). Algorithms: ``gcra`` (default), ``token_bucket``, ``sliding_window``,
``sliding_log``, ``fixed_window``, ``leaky_bucket``. Rates: ``"10/min"``, ``"3/60s"``, ``"2/500ms"``,
``"100/hour"``, ``"1000/day"``.

Errors are [`InvalidValue`][ratekeeper.InvalidValue] (a ``ValueError``) / [`InvalidType`][ratekeeper.InvalidType] (a
``TypeError``) whose ``loc`` is the place in the config (``("groups", "api", "limits", 1, "rate")``) and
whose ``file`` is the file's name when read from a file; their text names both:

    ratekeeper.toml: groups.api.limits[1].rate: "10/fortnight" is not a rate (unknown unit) ...
    groups.api.paths[0]: "^/api/(v1" is not a valid regex: unclosed group
    groups.login: unknown key 'rpm' (known keys: paths, rate, burst, ...)
    max_keys: must be an int, got str

A ``[backend]`` table keeps the limits in Redis ([`Redis`][ratekeeper.Redis]; ``url`` is required):

    [backend]
    url = "redis://10.0.0.5:6379/0"
    mode = "exact"                      # or "sync", with sync_interval = 1.0
    timeout = 0.05
    prefix = "ratekeeper:"
    on_error = "local"                  # "allow", "deny" or "raise"

Or in shared memory, for the worker processes of one machine ([`Shared`][ratekeeper.Shared]; ``shared``
names the region, or ``path`` gives its file):

    [backend]
    shared = "myapp"                    # /dev/shm/ratekeeper-myapp
    log_entries = 250000                # optional: sliding-log entries the region holds

It applies when a limiter is built from the file; reloading a file does not change a limiter's backend.

Unknown keys are errors, so a misspelt setting never silently does nothing.

The work is split in two: [`plan_from_config`][ratekeeper.config.plan_from_config] /
[`plan_from_file`][ratekeeper.config.plan_from_file] validate a config into a
[`LimiterPlan`][ratekeeper.config.LimiterPlan] (rules, exemptions, max_keys, routes), which
[`LimiterPlan.build`][ratekeeper.config.LimiterPlan.build] turns into a limiter and
[`LimiterPlan.apply`][ratekeeper.config.LimiterPlan.apply] applies to a running one. The routing table is read from the
limiter itself ([`Limiter.rules`][ratekeeper.Limiter.rules]), so it shows what is in force, also after ``update_rule``.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import json
import logging
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, TypeVar, Union

from ratekeeper._core import Limit, ManualClock, Redis, Rule, Shared
from ratekeeper._core import Limiter as _CoreLimiter
from ratekeeper._errors import InvalidArgument, InvalidType, InvalidValue, Loc, format_loc

# RulePlaces and move_rule_error are not listed: helpers of this module and compat (which imports them), not API.
__all__ = [
    "LimiterPlan",
    "Route",
    "describe_limit",
    "load_file",
    "plan_from_config",
    "plan_from_file",
    "reconfigure_from_config",
    "reconfigure_from_file",
    "routes_of",
    "routing_table",
]

PathLike = Union[str, "os.PathLike[str]"]
# Any limiter class: the core's, or ratekeeper.Limiter (which builds and reloads through this module,
# so this module names only the core's class and never imports ratekeeper.limiter).
L = TypeVar("L", bound=_CoreLimiter)
E = TypeVar("E", bound=InvalidArgument)

TOP_KEYS = ("max_keys", "exempt_peers", "exempt_paths", "default", "groups", "backend")
# The [backend] table is Redis's parameters, read from its signature so that a new option of Redis is a
# key of the file at once. Those whose default is a float are durations in seconds (timeout, lease_ttl), and
# the modes' own intervals, whose default (None) is the mode's.
_REDIS_PARAMETERS = inspect.signature(Redis).parameters
BACKEND_KEYS = tuple(_REDIS_PARAMETERS)
# A [backend] table with one of these is a shared-memory region instead (rk.Shared).
SHARED_BACKEND_KEYS = ("shared", "path", "log_entries")
BACKEND_SECONDS_KEYS = tuple(
    name
    for name, parameter in _REDIS_PARAMETERS.items()
    if type(parameter.default) is float or name in ("sync_interval", "lease_span")
)
GROUP_KEYS = ("paths", "rate", "burst", "algorithm", "limits", "policy", "reduction")
DEFAULT_KEYS = tuple(key for key in GROUP_KEYS if key != "paths")
#: The settings of an adaptive limit (``Limit(adaptive=...)``'s keywords besides ``adaptive``).
ADAPTIVE_KEYS = (
    "min_limit",
    "max_limit",
    "initial",
    "per",
    "window",
    "tolerance",
    "backoff",
    "smoothing",
    "threshold",
    "probe_interval",
    "probe_samples",
    "jitter",
)
LIMIT_KEYS = ("rate", "burst", "algorithm", "concurrency", "adaptive", *ADAPTIVE_KEYS)
DEFAULT_GROUP = "default"


@dataclass(frozen=True)
class Route:
    """One line of the routing table: requests whose path matches ``pattern`` count against ``group``.

    ``place`` is where the route is written in a config (``"groups.api.paths[0]"``); ``None`` for a
    route read from a limiter, which does not know where its rules came from.
    """

    pattern: str
    group: str
    limits: tuple[str, ...]
    policy: str
    reduction: bool
    place: str | None = None


@dataclass(frozen=True)
class RulePlaces:
    """Where one rule of a plan is written in the config, to move the core's errors about it there.

    Attributes:
        group: the group's table: ``("groups", "api")``, or ``("default",)``.
        pattern: the rule's pattern: ``("groups", "api", "paths", 0)``, or ``("default",)``.
        limits: for each of the rule's limits, its place and whether it was written as a bare rate
            string (then an error about its ``rate`` is at the place itself): a limit of ``limits`` is
            at ``("groups", "api", "limits", 1)``; the one limit of ``rate = ...`` at the group's table.
    """

    group: Loc
    pattern: Loc
    limits: tuple[tuple[Loc, bool], ...]

    @classmethod
    def of_option(cls, loc: Loc) -> RulePlaces:
        """A rule given whole by one option (a preset's ``routes['^/api/']``, whose key is the pattern):
        errors about its group or pattern are at ``loc``, those about its limits under it (``loc.limits[0]``)."""
        return cls(loc, loc, ())

    def move(self, error: E, start: int) -> E:
        """``error``, whose ``loc`` from index ``start`` on is relative to the rule, at its config place."""
        rest = error.loc[start:]
        if not rest or rest[0] == "group":
            return error.at(*self.group, drop=start + len(rest[:1]))
        if rest[0] == "pattern":
            return error.at(*self.pattern, drop=start + 1)
        if rest[0] == "limits" and len(rest) > 1 and isinstance(rest[1], int) and rest[1] < len(self.limits):
            place, bare = self.limits[rest[1]]
            return _limit_error(error, place, bare, start + 2)
        return error.at(*self.group, drop=start)


def move_rule_error(error: E, places: Sequence[RulePlaces]) -> E:
    """A core error about a limiter's ``rules[i]`` at the place that gave rule ``i`` (``places[i]``); an
    error about anything else as it is."""
    loc = error.loc
    if len(loc) >= 2 and loc[0] == "rules" and isinstance(loc[1], int) and 0 <= loc[1] < len(places):
        return places[loc[1]].move(error, 2)
    return error


def _limit_error(error: E, place: Loc, bare: bool, start: int) -> E:
    """A core error about a limit (its ``loc`` from ``start`` on: ``rate``, ``burst`` ...) at ``place``."""
    if bare and error.loc[start : start + 1] == ("rate",):
        return error.at(*place, drop=start + 1)
    return error.at(*place, drop=start)


@dataclass
class LimiterPlan:
    """A validated config: what a limiter is built from, and where each rule is written in the config.

    Attributes:
        rules: the rules in routing order (one per pattern of each group, the catch-all last).
        exempt_peers, exempt_paths: the exemptions (empty when the config has none).
        max_keys: the config's ``max_keys``, or ``None`` for the limiter's default.
        routes: the routing table, with each route's place in the config.
        places: for each rule, where it is written, to move the core's errors there.
        file: the file the config was read from, named in every error.
    """

    rules: list[Rule] = field(default_factory=list)
    exempt_peers: list[str] = field(default_factory=list)
    exempt_paths: list[str] = field(default_factory=list)
    max_keys: int | None = None
    backend: Redis | Shared | None = None
    routes: list[Route] = field(default_factory=list)
    places: list[RulePlaces] = field(default_factory=list)
    file: str | None = None

    def build(self, cls: type[L], *, clock: ManualClock | None = None) -> L:
        """``cls(rules=..., exempt_peers=..., exempt_paths=..., max_keys=..., clock=clock)``.

        Raises:
            InvalidValue, InvalidType: what the core refuses, at its place in the config.
        """
        extra: dict[str, Any] = {} if self.max_keys is None else {"max_keys": self.max_keys}
        if self.backend is not None:
            extra["backend"] = self.backend
        try:
            return cls(
                rules=self.rules, exempt_peers=self.exempt_peers, exempt_paths=self.exempt_paths, clock=clock, **extra
            )
        except InvalidArgument as error:
            raise self.place(error) from None

    def apply(self, limiter: _CoreLimiter) -> None:
        """Replaces the rules and exemptions of ``limiter`` with the plan's, keeping its state.

        ``max_keys`` is fixed when a limiter is built: a different one in the plan is logged, not applied.

        Raises:
            InvalidValue, InvalidType: what the core refuses, at its place in the config; the limiter is
                then unchanged.
        """
        try:
            limiter._reconfigure(self.rules, self.exempt_peers, self.exempt_paths)
        except InvalidArgument as error:
            raise self.place(error) from None
        if self.max_keys is not None and self.max_keys != limiter.max_keys:
            logging.getLogger("ratekeeper").warning(
                "max_keys is fixed when a limiter is built: keeping %d, not %d", limiter.max_keys, self.max_keys
            )

    def place(self, error: E) -> E:
        """A core error about the plan's limiter (``rules[3].limits[0].rate``) at its place in the config
        (``groups.api.limits[0].rate``), in the plan's file. Exemptions and ``max_keys`` have the same
        names in the config and in the limiter, so they stay where they are."""
        error = move_rule_error(error, self.places)
        return error.in_file(self.file) if self.file is not None else error


def _type_name(value: object) -> str:
    return type(value).__name__


def _fail_type(loc: Loc, expected: str, value: object) -> NoReturn:
    raise InvalidType(loc, f"must be {expected}, got {_type_name(value)}")


def _check_keys(table: Mapping[Any, Any], known: Sequence[str], loc: Loc) -> None:
    for key in table:
        if not isinstance(key, str):
            where = "" if loc else " at the top level"
            raise InvalidType(loc, f"keys must be str{where}, got {_type_name(key)} {key!r}")
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            where = "" if loc else " at the top level"
            raise InvalidValue(loc, f"unknown key {key!r}{where} (known keys: {', '.join(known)}){hint}")


def _table(value: object, loc: Loc) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        _fail_type(loc, "a table", value)
    return value


def _int(value: object, loc: Loc) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        _fail_type(loc, "an int", value)
    return value


def _str(value: object, loc: Loc) -> str:
    if not isinstance(value, str):
        _fail_type(loc, "a str", value)
    return value


def _bool(value: object, loc: Loc) -> bool:
    if not isinstance(value, bool):
        _fail_type(loc, "a bool (true or false)", value)
    return value


def _str_list(value: object, loc: Loc) -> list[str]:
    if isinstance(value, str):
        raise InvalidType(loc, f"must be a list of str, got a single str (write [{json.dumps(value)}])")
    if not isinstance(value, (list, tuple)):
        _fail_type(loc, "a list of str", value)
    return [_str(item, (*loc, index)) for index, item in enumerate(value)]


def describe_limit(limit: Limit) -> str:
    """A short description of a limit: ``"10/s burst 20 gcra"``, ``"concurrency 5"``, ``"adaptive gradient"``."""
    if limit.adaptive is not None:
        return f"adaptive {limit.adaptive}"
    if limit.concurrency is not None:
        return f"concurrency {limit.concurrency}"
    return f"{limit.rate} burst {limit.burst} {limit.algorithm}"


def _limit(spec: object, loc: Loc) -> Limit:
    """One entry of ``limits``: a rate string or a table of rate / burst / algorithm / concurrency."""
    if isinstance(spec, str):
        try:
            return Limit(spec)
        except InvalidArgument as error:
            raise _limit_error(error, loc, True, 0) from None
    if not isinstance(spec, Mapping):
        _fail_type(loc, "a rate string or a table", spec)
    _check_keys(spec, LIMIT_KEYS, loc)
    if "adaptive" in spec:
        return _adaptive_limit(spec, loc)
    if "rate" in spec and "concurrency" in spec:
        raise InvalidValue(loc, "give either rate or concurrency, not both")
    if "rate" not in spec and "concurrency" not in spec:
        raise InvalidValue(loc, 'needs a rate (e.g. rate = "10/s") or a concurrency (e.g. concurrency = 5)')
    rate = _str(spec["rate"], (*loc, "rate")) if "rate" in spec else None
    concurrency = _int(spec["concurrency"], (*loc, "concurrency")) if "concurrency" in spec else None
    burst = _int(spec["burst"], (*loc, "burst")) if "burst" in spec else None
    # Any: a name read from the config, which the core checks (its error is moved to the place here).
    algorithm: Any = _str(spec["algorithm"], (*loc, "algorithm")) if "algorithm" in spec else "gcra"
    if concurrency is not None and ("burst" in spec or "algorithm" in spec):
        extra = "burst" if "burst" in spec else "algorithm"
        raise InvalidValue((*loc, extra), "only with a rate, not with concurrency")
    try:
        return Limit(rate, burst=burst, algorithm=algorithm, concurrency=concurrency)
    except InvalidArgument as error:
        raise _limit_error(error, loc, False, 0) from None


def _adaptive_limit(spec: Mapping[str, Any], loc: Loc) -> Limit:
    """A table with ``adaptive``: the controller's name and its settings, each checked by the core."""
    for other in ("rate", "concurrency", "burst", "algorithm"):
        if other in spec:
            raise InvalidValue((*loc, other), "an adaptive limit takes no rate, concurrency, burst or algorithm")
    settings: dict[str, Any] = {key: spec[key] for key in ADAPTIVE_KEYS if key in spec}
    try:
        return Limit(adaptive=spec["adaptive"], **settings)
    except InvalidArgument as error:
        raise _limit_error(error, loc, False, 0) from None


def _group(
    name: str,
    spec: Mapping[str, Any],
    loc: Loc,
    patterns: list[tuple[str, Loc]],
    plan: LimiterPlan,
    *,
    bare_rate: bool = False,
) -> None:
    """Adds the rules of one group (one rule per pattern) to the plan.

    ``bare_rate``: the group is a rate string written at ``loc`` (``default = "100/min"``), so an error
    about its rate is at ``loc`` itself, not at ``loc.rate``.
    """
    if "rate" in spec and "limits" in spec:
        raise InvalidValue(loc, "give either rate (one limit) or limits (several), not both")
    limit_places: tuple[tuple[Loc, bool], ...]
    if "rate" in spec:
        single: dict[str, Any] = {key: spec[key] for key in ("rate", "burst", "algorithm") if key in spec}
        limits = [_limit(spec["rate"] if bare_rate else single, loc)]
        limit_places = ((loc, bare_rate),)
    elif "limits" in spec:
        entries = spec["limits"]
        if isinstance(entries, (str, Mapping)) or not isinstance(entries, (list, tuple)):
            _fail_type((*loc, "limits"), "a list of limits", entries)
        if not entries:
            raise InvalidValue((*loc, "limits"), "must list at least one limit")
        for key in ("burst", "algorithm"):
            if key in spec:
                raise InvalidValue((*loc, key), "only with rate; with limits, set it in each limit")
        limits = [_limit(entry, (*loc, "limits", index)) for index, entry in enumerate(entries)]
        limit_places = tuple(((*loc, "limits", index), isinstance(entry, str)) for index, entry in enumerate(entries))
    else:
        raise InvalidValue(loc, 'needs a rate (e.g. rate = "10/s") or limits (e.g. limits = ["10/s", "1000/h"])')
    policy: Any = _str(spec["policy"], (*loc, "policy")) if "policy" in spec else "all"  # the core checks it
    reduction = _bool(spec["reduction"], (*loc, "reduction")) if "reduction" in spec else True
    descriptions = tuple(describe_limit(limit) for limit in limits)
    for pattern, pattern_loc in patterns:
        places = RulePlaces(loc, pattern_loc, limit_places)
        try:
            rule = Rule(pattern, name, limits=limits, policy=policy, reduction=reduction)
        except InvalidArgument as error:
            raise places.move(error, 0) from None
        plan.rules.append(rule)
        plan.routes.append(Route(pattern, name, descriptions, policy, reduction, format_loc(pattern_loc)))
        plan.places.append(places)


def plan_from_config(config: Mapping[str, Any]) -> LimiterPlan:
    """Validates a config mapping (the format is in this module's docstring) into a
    [`LimiterPlan`][ratekeeper.config.LimiterPlan].

    Raises:
        InvalidValue: a bad value or an unknown key, at its place (``groups.api.rate: ...``).
        InvalidType: a value of the wrong type (``max_keys: must be an int, got str``).
    """
    if not isinstance(config, Mapping):
        raise InvalidType((), f"the config must be a table, got {_type_name(config)}")
    _check_keys(config, TOP_KEYS, ())
    plan = LimiterPlan()
    groups = _table(config.get("groups", {}), ("groups",))
    for name, spec in groups.items():
        if not isinstance(name, str):
            raise InvalidType(("groups",), f"group names must be str, got {_type_name(name)} {name!r}")
        loc: Loc = ("groups", name)
        table = _table(spec, loc)
        _check_keys(table, GROUP_KEYS, loc)
        if "paths" not in table:
            raise InvalidValue(loc, 'needs paths, the regexes routed to it (e.g. paths = ["^/api/"])')
        paths = _str_list(table["paths"], (*loc, "paths"))
        if not paths:
            raise InvalidValue((*loc, "paths"), "must list at least one regex")
        _group(name, table, loc, [(path, (*loc, "paths", index)) for index, path in enumerate(paths)], plan)
    if "default" in config:
        if DEFAULT_GROUP in groups:
            raise InvalidValue(
                ("default",),
                f"the catch-all is the group {DEFAULT_GROUP!r}, already defined by groups.{DEFAULT_GROUP}; "
                "rename that group or drop one of them",
            )
        default = config["default"]
        if isinstance(default, str):  # a bad rate is reported as "default: ...", not "default.rate: ..."
            _group(DEFAULT_GROUP, {"rate": default}, ("default",), [("", ("default",))], plan, bare_rate=True)
        elif isinstance(default, Mapping):
            _check_keys(default, DEFAULT_KEYS, ("default",))
            _group(DEFAULT_GROUP, default, ("default",), [("", ("default",))], plan)
        else:
            _fail_type(("default",), "a rate string or a table", default)
    if "max_keys" in config:
        plan.max_keys = _int(config["max_keys"], ("max_keys",))
    if "exempt_peers" in config:
        plan.exempt_peers = _str_list(config["exempt_peers"], ("exempt_peers",))
    if "exempt_paths" in config:
        plan.exempt_paths = _str_list(config["exempt_paths"], ("exempt_paths",))
    if "backend" in config:
        plan.backend = _backend(_table(config["backend"], ("backend",)))
    return plan


def _backend(table: Mapping[str, Any]) -> Redis | Shared:
    """The ``[backend]`` table: ``url`` and [`Redis`][ratekeeper.Redis]'s keyword options, or ``shared``
    (or ``path``) and [`Shared`][ratekeeper.Shared]'s."""
    if any(key in table for key in ("shared", "path")):
        return _shared_backend(table)
    _check_keys(table, BACKEND_KEYS, ("backend",))
    if "url" not in table:
        raise InvalidValue(("backend",), 'needs url, e.g. url = "redis://10.0.0.5:6379/0"')
    options: dict[str, Any] = {}
    for key, value in table.items():
        loc: Loc = ("backend", key)
        if key in BACKEND_SECONDS_KEYS:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                _fail_type(loc, "a number of seconds", value)
            options[key] = float(value)
        elif key == "standing_shares":
            options[key] = _int(value, loc)
        elif key == "standing_fraction":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                _fail_type(loc, "a number between 0 and 1", value)
            options[key] = float(value)
        elif key != "url":
            options[key] = _str(value, loc)
    url = _str(table["url"], ("backend", "url"))  # outside the try: its loc is already in the config
    try:
        return Redis(url, **options)
    except InvalidArgument as error:
        raise error.at("backend") from None


def _shared_backend(table: Mapping[str, Any]) -> Shared:
    """A ``[backend]`` table of a shared-memory region."""
    _check_keys(table, SHARED_BACKEND_KEYS, ("backend",))
    if "shared" in table and "path" in table:
        raise InvalidValue(("backend",), "give shared (a name) or path, not both")
    name = _str(table["shared"], ("backend", "shared")) if "shared" in table else None
    path = _str(table["path"], ("backend", "path")) if "path" in table else None
    log_entries = _int(table["log_entries"], ("backend", "log_entries")) if "log_entries" in table else None
    try:
        return Shared(name, path=path, log_entries=log_entries)
    except InvalidArgument as error:
        # Shared's `name` is the table's `shared`.
        raise (error.at("backend", "shared", drop=1) if error.loc[:1] == ("name",) else error.at("backend")) from None


def plan_from_file(path: PathLike) -> LimiterPlan:
    """Reads a TOML or YAML config file ([`load_file`][ratekeeper.config.load_file]) and validates it
    ([`plan_from_config`][ratekeeper.config.plan_from_config]).

    Every error the plan raises, now or when it builds or applies a limiter, has the file's name as
    ``file`` (its text starts with it).

    Raises:
        InvalidValue, InvalidType: as [`plan_from_config`][ratekeeper.config.plan_from_config] and
            [`load_file`][ratekeeper.config.load_file], in the file.
        ImportError: a YAML file without PyYAML installed.
        OSError: the file cannot be read.
    """
    name = os.fspath(path)
    config = load_file(name)
    try:
        plan = plan_from_config(config)
    except InvalidArgument as error:
        raise error.in_file(name) from None
    plan.file = name
    return plan


def reconfigure_from_config(limiter: _CoreLimiter, config: Mapping[str, Any]) -> None:
    """Replaces the rules and exemptions of ``limiter`` with those of ``config``, keeping its state.

    Groups that keep their name (and a limit its algorithm) keep their keys' states; new groups start
    empty. ``max_keys`` is fixed at construction: a different value in ``config`` is logged and ignored.

    Raises:
        InvalidValue, InvalidType: as [`plan_from_config`][ratekeeper.config.plan_from_config]; the limiter is then
            unchanged.
    """
    plan_from_config(config).apply(limiter)


def reconfigure_from_file(limiter: _CoreLimiter, path: PathLike) -> None:
    """[`reconfigure_from_config`][ratekeeper.config.reconfigure_from_config] with a TOML or YAML file; errors carry the
    file's name."""
    plan_from_file(path).apply(limiter)


def load_file(path: PathLike) -> dict[str, Any]:
    """Reads a ``.toml``, ``.yaml`` or ``.yml`` config file into a dict.

    Raises:
        InvalidValue: an unknown file extension, or a file that does not parse (``file`` is its name).
        InvalidType: a YAML file whose top level is not a mapping.
        ImportError: a YAML file without PyYAML installed.
        OSError: the file cannot be read.
    """
    name = os.fspath(path)
    suffix = Path(name).suffix.lower()
    if suffix == ".toml":
        # Imported here, so that `import ratekeeper` never needs tomli on Python < 3.11.
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # pragma: no cover - Python < 3.11 only
            try:
                import tomli as tomllib
            except ImportError:
                raise ImportError(f"{name}: reading TOML on Python < 3.11 needs tomli: pip install tomli") from None
        with open(name, "rb") as file:
            try:
                return tomllib.load(file)
            except tomllib.TOMLDecodeError as error:
                raise InvalidValue((), f"not valid TOML: {error}", file=name) from None
    if suffix in (".yaml", ".yml"):
        try:
            yaml = importlib.import_module("yaml")
        except ImportError:
            raise ImportError(f"{name}: reading YAML needs PyYAML: pip install pyyaml") from None
        with open(name, encoding="utf-8") as file:
            try:
                data = yaml.safe_load(file)
            except yaml.YAMLError as error:
                raise InvalidValue((), f"not valid YAML: {error}", file=name) from None
        if data is None:
            return {}
        if not isinstance(data, dict):
            raise InvalidType((), f"the top level must be a mapping, got {_type_name(data)}", file=name)
        return data
    raise InvalidValue((), f"unknown config format {suffix or '(no extension)'!r}; use .toml, .yaml or .yml", file=name)


def _route(rule: Rule) -> Route:
    return Route(
        rule.pattern, rule.group, tuple(describe_limit(limit) for limit in rule.limits), rule.policy, rule.reduction
    )


def routes_of(limiter_or_config: _CoreLimiter | Mapping[str, Any]) -> tuple[Route, ...]:
    """The routes in routing order: those in force in a limiter (read from [`Limiter.rules`][ratekeeper.Limiter.rules],
    so after ``update_rule`` or ``reload`` too; ``place`` is ``None``), or those of a config mapping
    (validated like [`plan_from_config`][ratekeeper.config.plan_from_config], with their places in the config)."""
    if isinstance(limiter_or_config, _CoreLimiter):
        return tuple(_route(rule) for rule in limiter_or_config.rules)
    plan = plan_from_config(limiter_or_config)
    plan.build(_CoreLimiter)  # what only the core checks: exempt_paths, max_keys
    return tuple(plan.routes)


def _table_text(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    body = [list(row) for row in rows]
    widths = [max([len(header)] + [len(row[i]) for row in body]) for i, header in enumerate(headers)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(headers, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * width for width in widths))
    lines.extend("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in body)
    return lines


def routing_table(limiter_or_config: _CoreLimiter | Mapping[str, Any]) -> str:
    """A readable table of the routing: order, pattern, group, limits, policy, plus exemptions.

    Takes any limiter (the table shows what is in force now), or a config mapping (validated first, so
    it raises like [`plan_from_config`][ratekeeper.config.plan_from_config]).
    """
    if isinstance(limiter_or_config, _CoreLimiter):
        limiter = limiter_or_config
    else:
        limiter = plan_from_config(limiter_or_config).build(_CoreLimiter)
    routes = routes_of(limiter)
    rows = []
    for order, route in enumerate(routes, 1):
        pattern = route.pattern if route.pattern else "(any other path)"
        policy = route.policy if route.reduction else f"{route.policy}, no reduction"
        rows.append([str(order), pattern, route.group, " + ".join(route.limits), policy])
    lines = []
    if rows:
        lines.extend(_table_text(["#", "pattern", "group", "limits", "policy"], rows))
    else:
        lines.append("no groups: nothing is limited")
    if not any(route.pattern == "" for route in routes) and rows:
        lines.append("paths matching no pattern: not limited")
    exempt = []
    if limiter.exempt_peers:
        exempt.append("exempt peers: " + ", ".join(limiter.exempt_peers))
    if limiter.exempt_paths:
        exempt.append("exempt paths: " + ", ".join(limiter.exempt_paths))
    if exempt:
        lines.append("")
        lines.extend(exempt)
    lines.append(f"max_keys: {limiter.max_keys}")
    return "\n".join(lines)
