"""Build a :class:`~ratekeeper.Limiter` from a mapping or a TOML / YAML file.

``limiter_from_config(mapping)`` takes a mapping (from ``tomllib``, ``yaml.safe_load``, JSON or a dict
literal); ``limiter_from_file(path)`` reads a ``.toml`` (``tomllib``, or ``tomli`` before Python 3.11)
or a ``.yaml`` / ``.yml`` file (PyYAML, imported only then). ``python -m ratekeeper check-config FILE``
validates a file and prints its routing table.

The format, in TOML::

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
    ]
    reduction = true                    # whether lim.reduce() may give tokens back (default true)

Routing: groups are tried in file order and, within a group, its ``paths`` in order; the first regex
that matches wins. ``default`` (a rate string, or a table with the group keys except ``paths``) comes
last and catches every other path, and requests without a path. Without ``default`` a path that no
group matches is not limited. A file with no groups and no default gives a limiter that limits nothing.

Group keys: ``paths`` (required, a non-empty list of regexes); either ``rate`` (+ ``burst``,
``algorithm``) or ``limits`` (a list of rate strings or tables with ``rate`` / ``burst`` /
``algorithm``, or ``concurrency``); ``policy`` (``"all"``, the default, or ``"fallback"``);
``reduction`` (bool). Algorithms: ``gcra`` (default), ``token_bucket``, ``sliding_window``,
``sliding_log``, ``fixed_window``, ``leaky_bucket``. Rates: ``"10/min"``, ``"3/60s"``, ``"2/500ms"``,
``"100/hour"``, ``"1000/day"``.

Errors are ``ValueError`` / ``TypeError`` whose message names the place in the file, prefixed with the
file's name when read from a file::

    ratekeeper.toml: groups.api.limits[1].rate: "10/fortnight" is not a rate (unknown unit) ...
    groups.api.paths[0]: "^/api/(v1" is not a valid regex: unclosed group
    groups.login: unknown key 'rpm' (known keys: paths, rate, burst, ...)
    max_keys: must be an int, got str

Unknown keys are errors, so a misspelt setting never silently does nothing.
"""

from __future__ import annotations

import difflib
import importlib
import json
import logging
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, Union

from ratekeeper._core import Limit, ManualClock, Rule
from ratekeeper.limiter import Limiter

__all__ = [
    "Route",
    "describe_limit",
    "limiter_from_config",
    "limiter_from_file",
    "load_file",
    "routes_of",
    "routing_table",
]

PathLike = Union[str, "os.PathLike[str]"]

TOP_KEYS = ("max_keys", "exempt_peers", "exempt_paths", "default", "groups")
GROUP_KEYS = ("paths", "rate", "burst", "algorithm", "limits", "policy", "reduction")
DEFAULT_KEYS = tuple(key for key in GROUP_KEYS if key != "paths")
LIMIT_KEYS = ("rate", "burst", "algorithm", "concurrency")
DEFAULT_GROUP = "default"

# Where a limiter built from a config keeps its routes and exemptions, for routing_table().
_ROUTES_ATTR = "_ratekeeper_config_routes_"
_EXEMPT_ATTR = "_ratekeeper_config_exempt_"

# "field: message" or "rules[2].pattern: message", as the core words its errors.
_FIELD_MESSAGE = re.compile(r"([A-Za-z_]\w*(?:\[\d+\])?(?:\.[A-Za-z_]\w*(?:\[\d+\])?)*): (.*)", re.DOTALL)
_RULE_FIELD = re.compile(r"rules\[(\d+)\](?:\.(\w+))?")


@dataclass(frozen=True)
class Route:
    """One line of the routing table: requests whose path matches ``pattern`` count against ``group``."""

    pattern: str
    group: str
    limits: tuple[str, ...]
    policy: str
    reduction: bool
    place: str


def _join(place: str, field: str) -> str:
    return f"{place}.{field}" if place else field


def _type_name(value: object) -> str:
    return type(value).__name__


def _fail_type(place: str, expected: str, value: object) -> NoReturn:
    raise TypeError(f"{place}: must be {expected}, got {_type_name(value)}")


def _reword(error: ValueError | TypeError, place: str, fields: Mapping[str, str] | None = None) -> NoReturn:
    """Re-raises a core error with its field replaced by the place in the config."""
    message = str(error)
    match = _FIELD_MESSAGE.fullmatch(message)
    if match is None:
        text = f"{place}: {message}" if place else message
    else:
        field, rest = match.group(1), match.group(2)
        head = field.split(".", 1)[0].split("[", 1)[0]
        if fields is not None and field in fields:
            where = fields[field]
        elif fields is not None and head in fields:
            where = fields[head] + field[len(head) :]
        else:
            where = _join(place, field)
        text = f"{where}: {rest}"
    kind = TypeError if isinstance(error, TypeError) else ValueError
    raise kind(text) from None


def _check_keys(table: Mapping[Any, Any], known: Sequence[str], place: str) -> None:
    for key in table:
        if not isinstance(key, str):
            raise TypeError(f"{place or 'the top level'}: keys must be str, got {_type_name(key)} {key!r}")
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            where = f"{place}: unknown key {key!r}" if place else f"unknown key {key!r} at the top level"
            raise ValueError(f"{where} (known keys: {', '.join(known)}){hint}")


def _table(value: object, place: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        _fail_type(place, "a table", value)
    return value


def _int(value: object, place: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        _fail_type(place, "an int", value)
    return value


def _str(value: object, place: str) -> str:
    if not isinstance(value, str):
        _fail_type(place, "a str", value)
    return value


def _bool(value: object, place: str) -> bool:
    if not isinstance(value, bool):
        _fail_type(place, "a bool (true or false)", value)
    return value


def _str_list(value: object, place: str) -> list[str]:
    if isinstance(value, str):
        raise TypeError(f"{place}: must be a list of str, got a single str (write [{json.dumps(value)}])")
    if not isinstance(value, (list, tuple)):
        _fail_type(place, "a list of str", value)
    return [_str(item, f"{place}[{index}]") for index, item in enumerate(value)]


def describe_limit(limit: Limit) -> str:
    """A short description of a limit: ``"10/s burst 20 gcra"``, ``"concurrency 5"``."""
    if limit.concurrency is not None:
        return f"concurrency {limit.concurrency}"
    return f"{limit.rate} burst {limit.burst} {limit.algorithm}"


def _limit(spec: object, place: str) -> Limit:
    """One entry of ``limits``: a rate string or a table of rate / burst / algorithm / concurrency."""
    if isinstance(spec, str):
        try:
            return Limit(spec)
        except (ValueError, TypeError) as error:
            _reword(error, place, {"rate": place})
    if not isinstance(spec, Mapping):
        _fail_type(place, "a rate string or a table", spec)
    _check_keys(spec, LIMIT_KEYS, place)
    if "rate" in spec and "concurrency" in spec:
        raise ValueError(f"{place}: give either rate or concurrency, not both")
    if "rate" not in spec and "concurrency" not in spec:
        raise ValueError(f'{place}: needs a rate (e.g. rate = "10/s") or a concurrency (e.g. concurrency = 5)')
    rate = _str(spec["rate"], _join(place, "rate")) if "rate" in spec else None
    concurrency = _int(spec["concurrency"], _join(place, "concurrency")) if "concurrency" in spec else None
    burst = _int(spec["burst"], _join(place, "burst")) if "burst" in spec else None
    algorithm = _str(spec["algorithm"], _join(place, "algorithm")) if "algorithm" in spec else "gcra"
    if concurrency is not None and ("burst" in spec or "algorithm" in spec):
        extra = "burst" if "burst" in spec else "algorithm"
        raise ValueError(f"{_join(place, extra)}: only with a rate, not with concurrency")
    try:
        return Limit(rate, burst=burst, algorithm=algorithm, concurrency=concurrency)
    except (ValueError, TypeError) as error:
        _reword(error, place)


@dataclass
class _Plan:
    rules: list[Rule]
    routes: list[Route]
    # For each rule: the place of its group and of its pattern, to reword the Limiter's errors.
    places: list[tuple[str, str]]


def _group(name: str, spec: Mapping[str, Any], place: str, patterns: list[tuple[str, str]], plan: _Plan) -> None:
    """Adds the rules of one group (one rule per pattern) to the plan."""
    if "rate" in spec and "limits" in spec:
        raise ValueError(f"{place}: give either rate (one limit) or limits (several), not both")
    if "rate" in spec:
        single: dict[str, Any] = {key: spec[key] for key in ("rate", "burst", "algorithm") if key in spec}
        limits = [_limit(single, place)]
    elif "limits" in spec:
        entries = spec["limits"]
        if isinstance(entries, (str, Mapping)) or not isinstance(entries, (list, tuple)):
            _fail_type(_join(place, "limits"), "a list of limits", entries)
        if not entries:
            raise ValueError(f"{_join(place, 'limits')}: must list at least one limit")
        for key in ("burst", "algorithm"):
            if key in spec:
                raise ValueError(f"{_join(place, key)}: only with rate; with limits, set it in each limit")
        limits = [_limit(entry, f"{place}.limits[{index}]") for index, entry in enumerate(entries)]
    else:
        raise ValueError(f'{place}: needs a rate (e.g. rate = "10/s") or limits (e.g. limits = ["10/s", "1000/h"])')
    policy = _str(spec["policy"], _join(place, "policy")) if "policy" in spec else "all"
    reduction = _bool(spec["reduction"], _join(place, "reduction")) if "reduction" in spec else True
    descriptions = tuple(describe_limit(limit) for limit in limits)
    for pattern, pattern_place in patterns:
        try:
            rule = Rule(pattern, name, limits=limits, policy=policy, reduction=reduction)
        except (ValueError, TypeError) as error:
            _reword(error, place, {"pattern": pattern_place, "group": place})
        plan.rules.append(rule)
        plan.routes.append(Route(pattern, name, descriptions, policy, reduction, pattern_place))
        plan.places.append((place, pattern_place))


def _plan(config: Mapping[str, Any]) -> _Plan:
    plan = _Plan([], [], [])
    groups = _table(config.get("groups", {}), "groups")
    for name, spec in groups.items():
        if not isinstance(name, str):
            raise TypeError(f"groups: group names must be str, got {_type_name(name)} {name!r}")
        place = f"groups.{name}"
        table = _table(spec, place)
        _check_keys(table, GROUP_KEYS, place)
        if "paths" not in table:
            raise ValueError(f'{place}: needs paths, the regexes routed to it (e.g. paths = ["^/api/"])')
        paths = _str_list(table["paths"], _join(place, "paths"))
        if not paths:
            raise ValueError(f"{place}.paths: must list at least one regex")
        _group(name, table, place, [(path, f"{place}.paths[{i}]") for i, path in enumerate(paths)], plan)
    if "default" in config:
        if DEFAULT_GROUP in groups:
            raise ValueError(
                f"default: the catch-all is the group {DEFAULT_GROUP!r}, already defined by groups.{DEFAULT_GROUP}; "
                "rename that group or drop one of them"
            )
        default = config["default"]
        default_table: Mapping[str, Any]
        if isinstance(default, str):
            _limit(default, "default")  # a bad rate is reported as "default: ...", not "default.rate: ..."
            default_table = {"rate": default}
        elif isinstance(default, Mapping):
            _check_keys(default, DEFAULT_KEYS, "default")
            default_table = default
        else:
            _fail_type("default", "a rate string or a table", default)
        _group(DEFAULT_GROUP, default_table, "default", [("", "default")], plan)
    return plan


def limiter_from_config(config: Mapping[str, Any], *, clock: ManualClock | None = None) -> Limiter:
    """Builds a Limiter from a config mapping (the format is in this module's docstring).

    Args:
        config: the parsed config, e.g. ``tomllib.load(f)``.
        clock: a :class:`~ratekeeper.ManualClock` for tests; default: the monotonic clock.

    Raises:
        ValueError: a bad value or an unknown key; the message starts with its place (``groups.api.rate: ...``).
        TypeError: a value of the wrong type (``max_keys: must be an int, got str``).
    """
    table = _table(config, "the config")
    _check_keys(table, TOP_KEYS, "")
    plan = _plan(table)
    kwargs: dict[str, Any] = {}
    if "max_keys" in table:
        kwargs["max_keys"] = _int(table["max_keys"], "max_keys")
    for key in ("exempt_peers", "exempt_paths"):
        if key in table:
            kwargs[key] = _str_list(table[key], key)
    try:
        limiter = Limiter(rules=plan.rules, clock=clock, **kwargs)
    except (ValueError, TypeError) as error:
        _reword_limiter_error(error, plan)
    limiter.__dict__[_ROUTES_ATTR] = tuple(plan.routes)
    limiter.__dict__[_EXEMPT_ATTR] = (kwargs.get("exempt_peers", []), kwargs.get("exempt_paths", []))
    return limiter


def reconfigure_from_config(limiter: Limiter, config: Mapping[str, Any]) -> None:
    """Replaces the rules and exemptions of ``limiter`` with those of ``config``, keeping its state.

    Groups that keep their name (and a limit its algorithm) keep their keys' states; new groups start
    empty. ``max_keys`` is fixed at construction: a different value in ``config`` is logged and ignored.

    Raises:
        ValueError, TypeError: as :func:`limiter_from_config`; the limiter is then unchanged.
    """
    table = _table(config, "the config")
    _check_keys(table, TOP_KEYS, "")
    plan = _plan(table)
    if "max_keys" in table and _int(table["max_keys"], "max_keys") != limiter.max_keys:
        logging.getLogger("ratekeeper").warning(
            "max_keys is fixed when a limiter is built: keeping %d, not %s", limiter.max_keys, table["max_keys"]
        )
    exempt = {key: _str_list(table[key], key) if key in table else [] for key in ("exempt_peers", "exempt_paths")}
    try:
        limiter._reconfigure(plan.rules, exempt["exempt_peers"], exempt["exempt_paths"])
    except (ValueError, TypeError) as error:
        _reword_limiter_error(error, plan)
    limiter.__dict__[_ROUTES_ATTR] = tuple(plan.routes)
    limiter.__dict__[_EXEMPT_ATTR] = (exempt["exempt_peers"], exempt["exempt_paths"])


def reconfigure_from_file(limiter: Limiter, path: PathLike) -> None:
    """:func:`reconfigure_from_config` with a TOML or YAML file; errors start with the file's name."""
    config = load_file(path)
    try:
        reconfigure_from_config(limiter, config)
    except (ValueError, TypeError) as error:
        kind = TypeError if isinstance(error, TypeError) else ValueError
        raise kind(f"{os.fspath(path)}: {error}") from None


def _reword_limiter_error(error: ValueError | TypeError, plan: _Plan) -> NoReturn:
    match = _FIELD_MESSAGE.fullmatch(str(error))
    if match is not None:
        rule = _RULE_FIELD.fullmatch(match.group(1))
        if rule is not None and int(rule.group(1)) < len(plan.places):
            group_place, pattern_place = plan.places[int(rule.group(1))]
            field = rule.group(2)
            where = pattern_place if field == "pattern" else group_place
            if field not in (None, "pattern", "group"):
                where = _join(group_place, field)
            kind = TypeError if isinstance(error, TypeError) else ValueError
            raise kind(f"{where}: {match.group(2)}") from None
    raise error


def load_file(path: PathLike) -> dict[str, Any]:
    """Reads a ``.toml``, ``.yaml`` or ``.yml`` config file into a dict.

    Raises:
        ValueError: an unknown file extension, or a file that does not parse (its name first).
        TypeError: a YAML file whose top level is not a mapping.
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
                raise ValueError(f"{name}: not valid TOML: {error}") from None
    if suffix in (".yaml", ".yml"):
        try:
            yaml = importlib.import_module("yaml")
        except ImportError:
            raise ImportError(f"{name}: reading YAML needs PyYAML: pip install pyyaml") from None
        with open(name, encoding="utf-8") as file:
            try:
                data = yaml.safe_load(file)
            except yaml.YAMLError as error:
                raise ValueError(f"{name}: not valid YAML: {error}") from None
        if data is None:
            return {}
        if not isinstance(data, dict):
            raise TypeError(f"{name}: the top level must be a mapping, got {_type_name(data)}")
        return data
    raise ValueError(f"{name}: unknown config format {suffix or '(no extension)'!r}; use .toml, .yaml or .yml")


def limiter_from_file(path: PathLike, *, clock: ManualClock | None = None) -> Limiter:
    """Reads a TOML or YAML config file and builds its Limiter; errors start with the file's name.

    Raises:
        ValueError, TypeError: as :func:`limiter_from_config` and :func:`load_file`, prefixed with the file.
        ImportError: a YAML file without PyYAML installed.
        OSError: the file cannot be read.
    """
    config = load_file(path)
    try:
        return limiter_from_config(config, clock=clock)
    except (ValueError, TypeError) as error:
        kind = TypeError if isinstance(error, TypeError) else ValueError
        raise kind(f"{os.fspath(path)}: {error}") from None


def routes_of(limiter_or_config: Limiter | Mapping[str, Any]) -> tuple[Route, ...]:
    """The routes of a limiter built from a config, or of a config mapping (validated), in routing order."""
    if isinstance(limiter_or_config, Limiter):
        routes: tuple[Route, ...] | None = limiter_or_config.__dict__.get(_ROUTES_ATTR)
        if routes is None:
            raise ValueError("routing table: this limiter was not built from a config (use limiter_from_config)")
        return routes
    limiter = limiter_from_config(limiter_or_config)
    built: tuple[Route, ...] = limiter.__dict__[_ROUTES_ATTR]
    return built


def _table_text(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    body = [list(row) for row in rows]
    widths = [max([len(header)] + [len(row[i]) for row in body]) for i, header in enumerate(headers)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(headers, widths)).rstrip()]
    lines.append("  ".join("-" * width for width in widths))
    lines.extend("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in body)
    return lines


def routing_table(limiter_or_config: Limiter | Mapping[str, Any]) -> str:
    """A readable table of the routing: order, pattern, group, limits, policy, plus exemptions.

    Takes a limiter built by :func:`limiter_from_config` / :func:`limiter_from_file`, or a config mapping
    (validated first, so it raises like :func:`limiter_from_config`).
    """
    limiter = limiter_or_config if isinstance(limiter_or_config, Limiter) else limiter_from_config(limiter_or_config)
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
    exempt = _exemptions(limiter)
    if exempt:
        lines.append("")
        lines.extend(exempt)
    lines.append(f"max_keys: {limiter.max_keys}")
    return "\n".join(lines)


def _exemptions(limiter: Limiter) -> list[str]:
    config: tuple[list[str], list[str]] | None = limiter.__dict__.get(_EXEMPT_ATTR)
    if config is None:
        return []
    peers, paths = config
    lines = []
    if peers:
        lines.append("exempt peers: " + ", ".join(peers))
    if paths:
        lines.append("exempt paths: " + ", ".join(paths))
    return lines
