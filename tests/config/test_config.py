"""``ratekeeper.config``: limiters built from mappings and TOML / YAML files, errors naming their place, the CLI."""

from __future__ import annotations

import ast
import inspect
import logging
import sys
from pathlib import Path
from typing import Any

import pytest
import ratekeeper as rk
from ratekeeper import config
from ratekeeper.__main__ import main
from ratekeeper._errors import InvalidArgument, InvalidType, InvalidValue

EXAMPLE = Path(__file__).resolve().parent.parent.parent / "examples" / "ratekeeper.toml"

API_TOML = """\
max_keys = 1000
exempt_peers = ["127.0.0.1"]
exempt_paths = ["^/health$"]

[groups.login]
paths = ["^/login$"]
rate = "3/min"

[groups.api]
paths = ["^/api/"]
limits = [{ rate = "10/fortnight" }]
"""


def build(mapping: dict[str, Any], clock: rk.ManualClock) -> rk.Limiter:
    return rk.Limiter.from_config(mapping, clock=clock)


def admitted(lim: rk.Limiter, peer: str, path: str | None, n: int) -> int:
    """How many of ``n`` immediate checks are admitted."""
    return sum(lim.allow(peer, path) for _ in range(n))


# --- building -------------------------------------------------------------------------------------


def test_one_rate_group_limits_its_paths(clock: rk.ManualClock) -> None:
    lim = build({"groups": {"login": {"paths": ["^/login$"], "rate": "3/min"}}}, clock)
    assert admitted(lim, "alice", "/login", 5) == 3
    refused = lim.check("alice", "/login")
    assert not refused.allowed
    assert refused.group == "login"
    assert lim.allow("bob", "/login")  # per peer
    assert lim.check("alice", "/other").group is None  # no rule, no default: not limited
    assert admitted(lim, "alice", "/other", 50) == 50


def test_groups_are_tried_in_file_order_and_first_match_wins(clock: rk.ManualClock) -> None:
    lim = build(
        {
            "groups": {
                "admin": {"paths": ["^/api/admin"], "rate": "1/min"},
                "api": {"paths": ["^/api/", "^/v2/"], "rate": "2/min"},
                "never": {"paths": ["^/api/admin/x"], "rate": "100/min"},
            }
        },
        clock,
    )
    assert lim.check("a", "/api/admin/x").group == "admin"
    assert lim.check("a", "/api/items").group == "api"
    assert lim.check("a", "/v2/items").group == "api"  # second path of the group, shares its budget
    assert not lim.allow("a", "/api/other")
    assert lim.groups == ["admin", "api", "never"]


def test_default_is_a_catch_all_tried_last(clock: rk.ManualClock) -> None:
    lim = build({"default": "2/min", "groups": {"login": {"paths": ["^/login$"], "rate": "1/min"}}}, clock)
    assert lim.check("a", "/login").group == "login"
    decision = lim.check("a", "/anything")
    assert decision.group == "default"
    assert lim.check("a").group == "default"  # no path: routed like ""
    assert not lim.allow("a", "/else")  # 2/min used by /anything and the path-less request


def test_default_as_a_table_takes_group_keys(clock: rk.ManualClock) -> None:
    lim = build({"default": {"rate": "1/min", "burst": 3}}, clock)
    assert admitted(lim, "a", "/x", 5) == 3


def test_exemptions_and_max_keys(clock: rk.ManualClock) -> None:
    lim = build({"max_keys": 1234, "exempt_peers": ["admin"], "exempt_paths": ["^/health$"], "default": "1/min"}, clock)
    assert lim.max_keys == 1234
    assert admitted(lim, "admin", "/x", 10) == 10
    assert admitted(lim, "alice", "/health", 10) == 10
    assert admitted(lim, "alice", "/x", 10) == 1


def test_algorithm_is_passed_to_the_core(clock: rk.ManualClock) -> None:
    # 3/60s: GCRA admits one more 20 s after a burst; a token bucket waits for its 60 s window.
    lim = build(
        {
            "groups": {
                "gcra": {"paths": ["^/g"], "rate": "3/60s"},
                "bucket": {"paths": ["^/b"], "rate": "3/60s", "algorithm": "token_bucket"},
            }
        },
        clock,
    )
    assert admitted(lim, "a", "/g", 4) == 3
    assert admitted(lim, "a", "/b", 4) == 3
    clock.advance(20)
    assert lim.allow("a", "/g")
    assert not lim.allow("a", "/b")
    clock.advance(40)
    assert admitted(lim, "a", "/b", 4) == 3


def test_burst_of_a_single_rate(clock: rk.ManualClock) -> None:
    lim = build({"groups": {"api": {"paths": ["^/api/"], "rate": "1/s", "burst": 5}}}, clock)
    assert admitted(lim, "a", "/api/x", 10) == 5


def test_several_limits_all_must_admit_and_a_refusal_consumes_nothing(clock: rk.ManualClock) -> None:
    lim = build(
        {"groups": {"api": {"paths": ["^/api/"], "policy": "all", "limits": ["2/s", {"rate": "3/min"}]}}}, clock
    )
    assert admitted(lim, "a", "/api/x", 5) == 2  # the 2/s limit refuses the third
    clock.advance(1)
    # The refusals above took nothing from 3/min: one of its 3 is left.
    assert admitted(lim, "a", "/api/x", 5) == 1
    clock.advance(1)
    assert not lim.allow("a", "/api/x")  # 2/s has room again, 3/min does not


def test_fallback_policy_from_config(clock: rk.ManualClock) -> None:
    lim = build(
        {
            "groups": {
                "sync": {
                    "paths": ["^/sync/"],
                    "policy": "fallback",
                    "limits": [
                        {"rate": "2/1000ms", "algorithm": "sliding_window"},
                        {"rate": "3/30s", "burst": 3, "algorithm": "leaky_bucket"},
                    ],
                }
            }
        },
        clock,
    )
    assert admitted(lim, "a", "/sync/x", 10) == 5  # 2 by the window, then 3 leaky tokens


def test_concurrency_limit_from_config(clock: rk.ManualClock) -> None:
    lim = build({"groups": {"api": {"paths": ["^/api/"], "limits": ["100/s", {"concurrency": 2}]}}}, clock)
    with lim.concurrent("a", "/api/x"), lim.concurrent("a", "/api/y"):
        with pytest.raises(rk.RateLimited), lim.concurrent("a", "/api/z"):
            pass
        with lim.concurrent("b", "/api/x"):  # per peer
            pass
    with lim.concurrent("a", "/api/x"):  # released on exit
        pass


def test_reduction_flag(clock: rk.ManualClock) -> None:
    limits = [{"rate": "1/30s", "burst": 1, "algorithm": "leaky_bucket"}]
    lim = build(
        {
            "groups": {
                "on": {"paths": ["^/on"], "limits": limits},
                "off": {"paths": ["^/off"], "limits": limits, "reduction": False},
            }
        },
        clock,
    )
    assert lim.allow("a", "/on")
    assert lim.allow("a", "/off")
    assert not lim.allow("a", "/on")
    assert not lim.allow("a", "/off")
    assert lim.reduce("a", "/on") is True
    assert lim.reduce("a", "/off") is False
    assert lim.allow("a", "/on")
    assert not lim.allow("a", "/off")


def test_empty_config_limits_nothing(clock: rk.ManualClock) -> None:
    lim = build({}, clock)
    assert admitted(lim, "a", "/x", 100) == 100
    assert lim.check("a", "/x").group is None
    assert lim.groups == []


def test_from_config_of_a_subclass_builds_the_subclass(clock: rk.ManualClock) -> None:
    class MyLimiter(rk.Limiter):
        pass

    limiter = MyLimiter.from_config({"groups": {"api": {"paths": ["^/api"], "rate": "2/min"}}}, clock=clock)
    assert type(limiter) is MyLimiter
    assert limiter.clock is clock
    assert admitted(limiter, "alice", "/api/x", 5) == 2


# --- errors ---------------------------------------------------------------------------------------


def group(**spec: Any) -> dict[str, Any]:
    """A config with one group ``g`` routed from ``^/g``, with ``spec`` on top."""
    return {"groups": {"g": {"paths": ["^/g"], **spec}}}


BAD_CONFIGS: list[tuple[str, dict[str, Any], type[Exception], str]] = [
    ("max_keys str", {"max_keys": "10"}, TypeError, "max_keys: must be an int, got str"),
    ("max_keys bool", {"max_keys": True}, TypeError, "max_keys: must be an int, got bool"),
    ("max_keys zero", {"max_keys": 0}, ValueError, "max_keys: "),
    ("top-level unknown", {"rpm": 1}, ValueError, "unknown key 'rpm' at the top level (known keys: max_keys"),
    ("top-level typo", {"max_key": 1}, ValueError, "unknown key 'max_key' at the top level"),
    ("exempt_peers str", {"exempt_peers": "127.0.0.1"}, TypeError, "exempt_peers: must be a list of str"),
    ("exempt_peers int", {"exempt_peers": [1]}, TypeError, "exempt_peers[0]: must be a str, got int"),
    ("exempt_paths regex", {"exempt_paths": ["^/ok$", "("]}, ValueError, "exempt_paths[1]: "),
    ("groups list", {"groups": []}, TypeError, "groups: must be a table, got list"),
    ("group str", {"groups": {"g": "3/min"}}, TypeError, "groups.g: must be a table, got str"),
    ("group unknown key", group(rate="3/min", rpm=3), ValueError, "groups.g: unknown key 'rpm' (known keys: paths"),
    ("no paths", {"groups": {"g": {"rate": "3/min"}}}, ValueError, "groups.g: needs paths"),
    ("paths str", {"groups": {"g": {"paths": "^/g", "rate": "1/s"}}}, TypeError, "groups.g.paths: must be a list"),
    ("paths empty", {"groups": {"g": {"paths": [], "rate": "1/s"}}}, ValueError, "groups.g.paths: must list"),
    ("paths int", {"groups": {"g": {"paths": [1], "rate": "1/s"}}}, TypeError, "groups.g.paths[0]: must be a str"),
    ("bad regex", {"groups": {"g": {"paths": ["^/a", "^/api/(v1"], "rate": "1/s"}}}, ValueError, "groups.g.paths[1]: "),
    ("no limit", group(), ValueError, "groups.g: needs a rate"),
    ("rate and limits", group(rate="1/s", limits=["1/s"]), ValueError, "groups.g: give either rate"),
    ("bad rate", group(rate="10/fortnight"), ValueError, "groups.g.rate: "),
    ("rate int", group(rate=10), TypeError, "groups.g.rate: must be a str, got int"),
    ("burst zero", group(rate="1/s", burst=0), ValueError, "groups.g.burst: "),
    ("burst bool", group(rate="1/s", burst=True), TypeError, "groups.g.burst: must be an int, got bool"),
    ("bad algorithm", group(rate="1/s", algorithm="leaky"), ValueError, "groups.g.algorithm: "),
    ("policy", group(limits=["1/s"], policy="any"), ValueError, "groups.g.policy: "),
    ("policy int", group(limits=["1/s"], policy=1), TypeError, "groups.g.policy: must be a str, got int"),
    ("reduction str", group(rate="1/s", reduction="yes"), TypeError, "groups.g.reduction: must be a bool"),
    ("limits str", group(limits="1/s"), TypeError, "groups.g.limits: must be a list of limits, got str"),
    ("limits empty", group(limits=[]), ValueError, "groups.g.limits: must list at least one limit"),
    ("burst with limits", group(limits=["1/s"], burst=3), ValueError, "groups.g.burst: only with rate"),
    ("limit int", group(limits=["1/s", 5]), TypeError, "groups.g.limits[1]: must be a rate string or a table"),
    ("limit bad str", group(limits=["1/s", "10/fortnight"]), ValueError, "groups.g.limits[1]: "),
    ("limit bad rate", group(limits=["1/s", {"rate": "10/fortnight"}]), ValueError, "groups.g.limits[1].rate: "),
    ("limit unknown", group(limits=[{"rate": "1/s", "brust": 3}]), ValueError, "groups.g.limits[0]: unknown key"),
    ("limit empty", group(limits=[{}]), ValueError, "groups.g.limits[0]: needs a rate"),
    ("limit both", group(limits=[{"rate": "1/s", "concurrency": 2}]), ValueError, "groups.g.limits[0]: give either"),
    ("limit burst", group(limits=[{"rate": "1/s", "burst": 0}]), ValueError, "groups.g.limits[0].burst: "),
    ("limit algorithm", group(limits=[{"rate": "1/s", "algorithm": "x"}]), ValueError, "groups.g.limits[0].algorithm"),
    ("concurrency 0", group(limits=[{"concurrency": 0}]), ValueError, "groups.g.limits[0].concurrency: "),
    ("concurrency str", group(limits=[{"concurrency": "5"}]), TypeError, "groups.g.limits[0].concurrency: must be"),
    ("concurrency burst", group(limits=[{"concurrency": 5, "burst": 2}]), ValueError, "groups.g.limits[0].burst: "),
    ("default int", {"default": 5}, TypeError, "default: must be a rate string or a table, got int"),
    ("default bad rate", {"default": "10/fortnight"}, ValueError, "default: "),
    ("default paths", {"default": {"rate": "1/s", "paths": ["^/"]}}, ValueError, "default: unknown key 'paths'"),
    (
        "default twice",
        {"default": "1/s", "groups": {"default": {"paths": ["^/"], "rate": "1/s"}}},
        ValueError,
        "default: ",
    ),
]


@pytest.mark.parametrize(
    ("mapping", "kind", "message"), [case[1:] for case in BAD_CONFIGS], ids=[case[0] for case in BAD_CONFIGS]
)
def test_errors_name_their_place(mapping: dict[str, Any], kind: type[Exception], message: str) -> None:
    with pytest.raises(kind) as info:
        rk.Limiter.from_config(mapping)
    assert type(info.value) is (InvalidValue if kind is ValueError else InvalidType)
    assert str(info.value).startswith(message), str(info.value)


def test_unknown_keys_suggest_a_close_match() -> None:
    with pytest.raises(
        ValueError, match=r"^groups\.g: unknown key 'brust' \(known keys: .*\); did you mean 'burst'\?$"
    ):
        rk.Limiter.from_config(group(rate="3/min", brust=3))


def test_bad_rate_error_quotes_the_value() -> None:
    with pytest.raises(ValueError, match=r"^groups\.api\.limits\[1\]\.rate: ") as info:
        rk.Limiter.from_config({"groups": {"api": {"paths": ["^/api/"], "limits": ["1/s", {"rate": "10/fortnight"}]}}})
    assert "10/fortnight" in str(info.value)


def test_bad_regex_error_quotes_the_pattern() -> None:
    with pytest.raises(ValueError, match=r"^groups\.api\.paths\[0\]: ") as info:
        rk.Limiter.from_config({"groups": {"api": {"paths": ["^/api/(v1"], "rate": "1/s"}}})
    assert "^/api/(v1" in str(info.value)
    assert "regex" in str(info.value)


def test_the_config_must_be_a_mapping() -> None:
    with pytest.raises(TypeError, match="must be a table, got list"):
        rk.Limiter.from_config([])  # type: ignore[arg-type]


# --- files ----------------------------------------------------------------------------------------


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_toml_file(tmp_path: Path, clock: rk.ManualClock) -> None:
    path = write(tmp_path, "rk.toml", API_TOML.replace("10/fortnight", "2/s"))
    lim = rk.Limiter.from_file(path, clock=clock)
    assert lim.max_keys == 1000
    assert admitted(lim, "alice", "/login", 5) == 3
    assert admitted(lim, "alice", "/api/x", 5) == 2
    assert admitted(lim, "127.0.0.1", "/login", 5) == 5
    assert admitted(lim, "alice", "/health", 5) == 5
    assert config.load_file(str(path))["max_keys"] == 1000  # str paths too


def test_file_errors_start_with_the_file_name(tmp_path: Path) -> None:
    path = write(tmp_path, "ratekeeper.toml", API_TOML)
    with pytest.raises(ValueError, match=r"ratekeeper\.toml: groups\.api\.limits\[0\]\.rate: ") as info:
        rk.Limiter.from_file(path)
    assert str(info.value).startswith(f"{path}: groups.api.limits[0].rate: ")


def test_file_type_errors_keep_their_type(tmp_path: Path) -> None:
    path = write(tmp_path, "rk.toml", 'max_keys = "many"\n')
    with pytest.raises(TypeError, match=r"rk\.toml: max_keys: must be an int, got str"):
        rk.Limiter.from_file(path)


def test_invalid_toml(tmp_path: Path) -> None:
    path = write(tmp_path, "rk.toml", "[groups.api\n")
    with pytest.raises(ValueError, match=r"rk\.toml: not valid TOML"):
        config.load_file(path)


def test_unknown_extension(tmp_path: Path) -> None:
    path = write(tmp_path, "rk.ini", "")
    with pytest.raises(ValueError, match=r"rk\.ini: unknown config format '\.ini'; use \.toml, \.yaml or \.yml"):
        config.load_file(path)


def test_missing_file() -> None:
    with pytest.raises(FileNotFoundError):
        config.load_file("/nonexistent/ratekeeper.toml")


YAML = """\
exempt_paths: ["^/health$"]
default: 2/min
groups:
  login:
    paths: ["^/login$"]
    rate: 1/min
"""


@pytest.mark.parametrize("suffix", [".yaml", ".yml"])
def test_yaml_file(tmp_path: Path, clock: rk.ManualClock, suffix: str) -> None:
    lim = rk.Limiter.from_file(write(tmp_path, "rk" + suffix, YAML), clock=clock)
    assert admitted(lim, "a", "/login", 3) == 1
    assert admitted(lim, "a", "/x", 3) == 2
    assert admitted(lim, "a", "/health", 3) == 3


def test_yaml_errors(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"rk\.yaml: the top level must be a mapping, got list"):
        config.load_file(write(tmp_path, "rk.yaml", "- 1\n- 2\n"))
    with pytest.raises(ValueError, match=r"rk\.yaml: not valid YAML"):
        config.load_file(write(tmp_path, "rk.yaml", "groups: [\n"))
    with pytest.raises(ValueError, match=r"^.*rk\.yaml: groups\.login\.rate: "):
        rk.Limiter.from_file(write(tmp_path, "rk.yaml", YAML.replace("1/min", "1/fortnight")))
    assert config.load_file(write(tmp_path, "empty.yaml", "")) == {}


def test_yaml_without_pyyaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "yaml", None)  # makes `import yaml` raise ImportError
    with pytest.raises(ImportError, match=r"rk\.yaml: reading YAML needs PyYAML: pip install pyyaml"):
        config.load_file(write(tmp_path, "rk.yaml", YAML))


# --- the example and the routing table ------------------------------------------------------------


def test_example_file_builds_the_documented_limiter(clock: rk.ManualClock) -> None:
    lim = rk.Limiter.from_file(EXAMPLE, clock=clock)
    assert lim.max_keys == 100_000
    assert lim.check("a", "/login").group == "login"
    assert lim.check("a", "/password-reset").group == "login"  # shares the login budget
    assert admitted(lim, "a", "/login", 5) == 1  # 3/min: the two checks above used two
    assert lim.check("a", "/api/items").group == "api"
    assert lim.check("a", "/sync/x").group == "sync"
    assert lim.check("a", "/export/x").group == "export"
    assert lim.check("a", "/static/app.js").group == "default"
    assert lim.check("a", "/health").group is None
    assert lim.check("127.0.0.1", "/login").group is None
    assert lim.groups == ["login", "api", "sync", "export", "default"]


def test_routing_table_of_the_example() -> None:
    table = config.routing_table(rk.Limiter.from_file(EXAMPLE))
    lines = table.splitlines()
    assert lines[0].split() == ["#", "pattern", "group", "limits", "policy"]
    rows = [line.split()[:3] for line in lines[2:9]]
    assert rows == [
        ["1", "^/login$", "login"],
        ["2", "^/password-reset$", "login"],
        ["3", "^/api/", "api"],
        ["4", "^/sync/", "sync"],
        ["5", "^/chunk/", "sync"],
        ["6", "^/export/", "export"],
        ["7", "(any", "other"],
    ]
    assert "3/min burst 3 gcra" in lines[2]
    assert "10/s burst 20 gcra + 1000/hour burst 1000 sliding_window + concurrency 5" in lines[4]
    assert lines[4].rstrip().endswith("all")
    assert "fallback" in lines[5]
    assert "100/hour burst 100 token_bucket" in lines[7]
    assert "default" in lines[8]
    assert "100/min" in lines[8]
    assert "exempt peers: 127.0.0.1, ::1" in lines
    assert "exempt paths: ^/health$, ^/metrics$" in lines
    assert "max_keys: 100000" in lines


def test_routing_table_of_a_mapping_without_default() -> None:
    table = config.routing_table(group(limits=["1/s"], reduction=False))
    lines = table.splitlines()
    assert lines[2].split() == ["1", "^/g", "g", "1/s", "burst", "1", "gcra", "all,", "no", "reduction"]
    assert "paths matching no pattern: not limited" in lines
    assert config.routing_table({}).splitlines()[0] == "no groups: nothing is limited"


def test_routing_table_validates_a_mapping() -> None:
    with pytest.raises(ValueError, match=r"^groups\.g\.rate: "):
        config.routing_table(group(rate="1/fortnight"))


def test_routing_table_of_a_limiter_not_built_from_a_config() -> None:
    lim = rk.Limiter(rules=[rk.Rule("^/a", "a", "2/s", burst=4)], exempt_peers=["admin"], exempt_paths=["^/ok$"])
    lines = config.routing_table(lim).splitlines()
    assert lines[2].split() == ["1", "^/a", "a", "2/s", "burst", "4", "gcra", "all"]
    assert "paths matching no pattern: not limited" in lines
    assert "exempt peers: admin" in lines
    assert "exempt paths: ^/ok$" in lines
    assert config.routes_of(lim) == (config.Route("^/a", "a", ("2/s burst 4 gcra",), "all", True),)


def test_routing_table_shows_the_rate_in_force_after_update_rule() -> None:
    # A defect once: the table was the config's, kept aside, so it went on showing 10/s.
    lim = rk.Limiter.from_config({"groups": {"api": {"paths": ["^/api/"], "rate": "10/s"}}})
    lim.update_rule("api", rate="20/s")
    table = config.routing_table(lim)
    assert "20/s burst 20 gcra" in table
    assert "10/s" not in table
    assert config.routes_of(lim)[0].limits == ("20/s burst 20 gcra",)


def test_routing_table_follows_a_reload(tmp_path: Path) -> None:
    lim = rk.Limiter.from_file(write(tmp_path, "rk.toml", API_TOML.replace("10/fortnight", "2/s")))
    config.reconfigure_from_file(lim, write(tmp_path, "rk.toml", 'exempt_peers = ["ops"]\ndefault = "5/min"\n'))
    lines = config.routing_table(lim).splitlines()
    assert [line.split()[:3] for line in lines[2:3]] == [["1", "(any", "other"]]
    assert "5/min burst 5 gcra" in lines[2]
    assert "exempt peers: ops" in lines
    assert not any(line.startswith("exempt paths") for line in lines)
    assert "max_keys: 1000" in lines  # fixed at construction


def test_routes_of_a_config() -> None:
    routes = config.routes_of(group(rate="1/s"))
    assert routes == (config.Route("^/g", "g", ("1/s burst 1 gcra",), "all", True, "groups.g.paths[0]"),)


# --- plans ----------------------------------------------------------------------------------------


def test_plan_from_config_holds_the_validated_config() -> None:
    plan = config.plan_from_config(
        {
            "max_keys": 10,
            "exempt_peers": ["admin"],
            "groups": {"api": {"paths": ["^/api/", "^/v2/"], "limits": ["1/s", {"concurrency": 2}]}},
            "default": "5/min",
        }
    )
    assert [(rule.pattern, rule.group) for rule in plan.rules] == [("^/api/", "api"), ("^/v2/", "api"), ("", "default")]
    assert (plan.exempt_peers, plan.exempt_paths, plan.max_keys, plan.file) == (["admin"], [], 10, None)
    assert [route.place for route in plan.routes] == ["groups.api.paths[0]", "groups.api.paths[1]", "default"]
    assert plan.places[1] == config.RulePlaces(
        ("groups", "api"),
        ("groups", "api", "paths", 1),
        ((("groups", "api", "limits", 0), True), (("groups", "api", "limits", 1), False)),
    )
    assert config.plan_from_config({}).max_keys is None


def test_plan_build_makes_the_given_class(clock: rk.ManualClock) -> None:
    class MyLimiter(rk.Limiter):
        pass

    lim = config.plan_from_config({"max_keys": 7, "default": "1/min"}).build(MyLimiter, clock=clock)
    assert type(lim) is MyLimiter
    assert lim.max_keys == 7
    assert lim.clock is clock
    assert config.plan_from_config({}).build(rk.Limiter).max_keys == rk.Limiter(rules=[]).max_keys


def test_plan_moves_a_core_error_about_a_rule_to_its_place_in_the_config() -> None:
    plan = config.plan_from_config(
        {
            "groups": {
                "login": {"paths": ["^/login$"], "rate": "3/min"},
                "api": {"paths": ["^/a/", "^/b/"], "limits": ["1/s", {"rate": "2/s"}]},
            },
            "default": "5/min",
        }
    )

    def moved(*loc: str | int) -> str:
        return str(plan.place(InvalidValue(loc, "bad")))

    assert moved("rules", 2, "limits", 1, "rate") == "groups.api.limits[1].rate: bad"
    assert moved("rules", 2, "limits", 0, "rate") == "groups.api.limits[0]: bad"  # a bare rate string
    assert moved("rules", 0, "limits", 0, "burst") == "groups.login.burst: bad"  # rate = ... in the group
    assert moved("rules", 2, "pattern") == "groups.api.paths[1]: bad"
    assert moved("rules", 1, "group") == "groups.api: bad"
    assert moved("rules", 1) == "groups.api: bad"
    assert moved("rules", 1, "policy") == "groups.api.policy: bad"
    assert moved("rules", 3, "limits", 0, "rate") == "default: bad"
    assert moved("exempt_paths", 0) == "exempt_paths[0]: bad"
    assert moved("max_keys") == "max_keys: bad"
    assert plan.place(InvalidType(("rules", 0, "limits", 0, "rate"), "x")).loc == ("groups", "login", "rate")
    assert type(plan.place(InvalidType(("rules", 0), "x"))) is InvalidType


def test_plan_apply_reconfigures_and_logs_a_different_max_keys(
    clock: rk.ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    lim = rk.Limiter.from_config({"max_keys": 100, "default": "1/min"}, clock=clock)
    assert lim.allow("a", "/x")
    with caplog.at_level(logging.WARNING, logger="ratekeeper"):
        config.plan_from_config({"max_keys": 5, "default": "3/min", "exempt_paths": ["^/ok"]}).apply(lim)
    assert "max_keys is fixed when a limiter is built: keeping 100, not 5" in caplog.text
    assert lim.max_keys == 100
    assert lim.exempt_paths == ["^/ok"]
    assert sum(lim.allow("a", "/x") for _ in range(5)) == 2  # the default group kept its state


def test_plan_apply_of_a_bad_exempt_path_leaves_the_limiter_unchanged(clock: rk.ManualClock) -> None:
    lim = rk.Limiter.from_config({"exempt_paths": ["^/ok$"], "default": "1/min"}, clock=clock)
    with pytest.raises(InvalidValue) as info:
        config.reconfigure_from_config(lim, {"exempt_paths": ["^/a", "("], "default": "9/min"})
    assert info.value.loc == ("exempt_paths", 1)
    assert lim.exempt_paths == ["^/ok$"]
    assert [describe for route in config.routes_of(lim) for describe in route.limits] == ["1/min burst 1 gcra"]


def test_config_does_not_import_the_limiter_module_at_import_time() -> None:
    # ratekeeper.limiter imports ratekeeper.config to build and reload: the other way round is lazy.
    tree = ast.parse(Path(config.__file__).read_text(encoding="utf-8"))
    imported = []
    for node in tree.body:  # module level only; `if TYPE_CHECKING:` blocks are hints, never run
        if isinstance(node, ast.Import):
            imported += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            imported.append(node.module or "")
    assert "ratekeeper.limiter" not in imported
    assert "ratekeeper" not in imported


# --- structured errors ----------------------------------------------------------------------------


def test_unknown_key_error_has_a_structured_loc() -> None:
    with pytest.raises(InvalidValue) as info:
        rk.Limiter.from_config({"groups": {"login": {"paths": ["^/login$"], "rate": "3/min", "rpm": 3}}})
    assert info.value.loc == ("groups", "login")
    assert info.value.msg.startswith("unknown key 'rpm' (known keys: paths, rate, burst")
    assert info.value.file is None
    with pytest.raises(InvalidValue) as top:
        rk.Limiter.from_config({"rpm": 1})
    assert top.value.loc == ()


def test_bad_rate_inside_limits_has_a_structured_loc() -> None:
    with pytest.raises(InvalidValue) as info:
        rk.Limiter.from_config({"groups": {"api": {"paths": ["^/"], "limits": ["1/s", {"rate": "10/fortnight"}]}}})
    assert info.value.loc == ("groups", "api", "limits", 1, "rate")
    assert "10/fortnight" in info.value.msg
    with pytest.raises(InvalidValue) as bare:
        rk.Limiter.from_config({"groups": {"api": {"paths": ["^/"], "limits": ["1/s", "10/fortnight"]}}})
    assert bare.value.loc == ("groups", "api", "limits", 1)
    with pytest.raises(InvalidType) as kind:
        rk.Limiter.from_config({"groups": {"api": {"paths": ["^/"], "limits": [{"concurrency": "5"}]}}})
    assert kind.value.loc == ("groups", "api", "limits", 0, "concurrency")


def test_bad_regex_in_paths_has_a_structured_loc() -> None:
    with pytest.raises(InvalidValue) as info:
        rk.Limiter.from_config({"groups": {"api": {"paths": ["^/a", "^/api/(v1"], "rate": "1/s"}}})
    assert info.value.loc == ("groups", "api", "paths", 1)
    assert "^/api/(v1" in info.value.msg
    with pytest.raises(InvalidValue) as exempt:
        rk.Limiter.from_config({"exempt_paths": ["("]})
    assert exempt.value.loc == ("exempt_paths", 0)


def test_errors_from_a_file_carry_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "ratekeeper.toml", API_TOML)
    with pytest.raises(InvalidValue) as info:
        rk.Limiter.from_file(path)
    assert info.value.file == str(path)
    assert info.value.loc == ("groups", "api", "limits", 0, "rate")
    with pytest.raises(InvalidValue) as core:  # raised by the core when the limiter is built
        rk.Limiter.from_file(write(tmp_path, "core.toml", 'exempt_paths = ["("]\n'))
    assert (core.value.file, core.value.loc) == (str(tmp_path / "core.toml"), ("exempt_paths", 0))
    with pytest.raises(InvalidValue) as bad_toml:
        config.plan_from_file(write(tmp_path, "bad.toml", "[groups.api\n"))
    assert (bad_toml.value.file, bad_toml.value.loc) == (str(tmp_path / "bad.toml"), ())
    assert bad_toml.value.msg.startswith("not valid TOML")
    with pytest.raises(InvalidValue) as bad_yaml:
        config.load_file(write(tmp_path, "bad.yaml", "groups: [\n"))
    assert (bad_yaml.value.file, bad_yaml.value.loc) == (str(tmp_path / "bad.yaml"), ())
    with pytest.raises(InvalidType) as top:
        config.load_file(write(tmp_path, "list.yaml", "- 1\n"))
    assert top.value.file == str(tmp_path / "list.yaml")


def test_reload_errors_carry_the_file(tmp_path: Path, clock: rk.ManualClock) -> None:
    lim = rk.Limiter.from_file(write(tmp_path, "rk.toml", 'default = "1/min"\n'), clock=clock)
    path = write(tmp_path, "rk.toml", 'default = "1/min"\nexempt_paths = ["^/ok", "("]\n')
    with pytest.raises(InvalidValue) as info:
        lim.reload(path)
    assert (info.value.file, info.value.loc) == (str(path), ("exempt_paths", 1))
    assert str(info.value).startswith(f"{path}: exempt_paths[1]: ")
    assert isinstance(info.value, InvalidArgument)


# --- the CLI --------------------------------------------------------------------------------------


def test_check_config_prints_the_routing_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-config", str(EXAMPLE)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out.startswith(f"{EXAMPLE}: valid\n")
    assert config.routing_table(rk.Limiter.from_file(EXAMPLE)) in out


def test_check_config_reports_an_invalid_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "ratekeeper.toml", API_TOML)
    assert main(["check-config", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"error: {path}: groups.api.limits[0].rate: ")
    assert "10/fortnight" in err


def test_check_config_reports_a_missing_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-config", "/nonexistent/rk.toml"]) == 2
    assert capsys.readouterr().err == "error: /nonexistent/rk.toml: No such file or directory\n"


def test_check_config_reports_bad_toml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-config", str(write(tmp_path, "rk.toml", "max_keys = \n"))]) == 2
    assert "rk.toml: not valid TOML" in capsys.readouterr().err


def test_the_backend_table_takes_every_option_of_redis() -> None:
    # The keys are read from Redis's signature: an option added to Redis is a key of the file with no other change.
    parameters = inspect.signature(rk.Redis).parameters
    options = {name: p.default for name, p in parameters.items() if p.default not in (p.empty, None)}
    # Default None: the mode's own, given only with that mode.
    modes_own = {"sync_interval", "lease_span", "standing_shares", "standing_fraction"}
    assert set(options) | {"url", "tls_ca_file"} | modes_own == set(config.BACKEND_KEYS) == set(parameters)
    plan = config.plan_from_config({"default": "1/s", "backend": {"url": "redis://localhost:6379/0", **options}})
    assert isinstance(plan.backend, rk.Redis)
    leased = {"mode": "lease", "standing_shares": 4, "standing_fraction": 0.25}
    plan = config.plan_from_config({"default": "1/s", "backend": {"url": "redis://localhost:6379/0", **leased}})
    assert isinstance(plan.backend, rk.Redis)
    assert (plan.backend.standing_shares, plan.backend.standing_fraction) == (4, 0.25)
    with pytest.raises(InvalidValue, match=r"unknown key 'lease_tll'.*did you mean 'lease_ttl'") as info:
        config.plan_from_config({"backend": {"url": "redis://localhost", "lease_tll": 60.0}})
    assert info.value.loc == ("backend",)


def test_a_backend_url_of_the_wrong_type_is_named_once() -> None:
    with pytest.raises(InvalidType) as info:
        config.plan_from_config({"backend": {"url": 5}})
    assert info.value.loc == ("backend", "url")
    assert str(info.value).startswith("backend.url: must be a str, got int")
