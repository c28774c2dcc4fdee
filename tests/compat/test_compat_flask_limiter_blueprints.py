"""Flask-Limiter 4.1's promises about blueprints and class-based views (its tests/test_blueprints.py and
test_views.py), kept by :class:`ratekeeper.flask.RateLimit` with ``algorithm="fixed_window"``.

Same requests, same statuses, on a ManualClock. Where we decide otherwise on purpose (a blueprint's
limits are one budget for its views; exempting a blueprint exempts the ones nested in it), the test
asserts our answer and says why; the migration page lists each difference.
"""

from __future__ import annotations

from pathlib import Path

import flask
import flask.views
import ratekeeper as rk
from _compat_flask import codes, extension
from ratekeeper.flask import RateLimit


def test_blueprint(clock: rk.ManualClock) -> None:
    app, rate_limit = extension(clock, default_limits=["1/minute"])
    bp = flask.Blueprint("main", __name__)

    @bp.route("/t1")
    def t1() -> str:
        return "test"

    @bp.route("/t2")
    @rate_limit.limit("10 per minute")
    def t2() -> str:
        return "test"

    app.register_blueprint(bp)
    client = app.test_client()
    assert codes(client, "GET", "/t1", 2) == [200, 429]
    assert codes(client, "GET", "/t2", 11) == [200] * 10 + [429]


def test_blueprint_static_exempt(clock: rk.ManualClock, tmp_path: Path) -> None:
    (tmp_path / "image.png").write_bytes(b"\x89PNG")
    app, _ = extension(clock, default_limits=["1/minute"])
    bp = flask.Blueprint("main", __name__, static_folder=str(tmp_path), static_url_path="/static")
    app.register_blueprint(bp, url_prefix="/bp")
    assert codes(app.test_client(), "GET", "/bp/static/image.png", 2) == [200, 200]


def test_blueprint_limit_with_route_limits(clock: rk.ManualClock) -> None:
    app, rate_limit = extension(clock, default_limits=["1/minute"])
    bp = flask.Blueprint("main", __name__)

    @app.route("/")
    def root() -> str:
        return "root"

    @bp.route("/t1")
    def t1() -> str:
        return "test"

    @bp.route("/t2")
    @rate_limit.limit("10 per minute")
    def t2() -> str:
        return "test"

    rate_limit.limit("2/minute")(bp)
    app.register_blueprint(bp)
    client = app.test_client()
    assert codes(client, "GET", "/", 2) == [200, 429]
    assert codes(client, "GET", "/t1", 3) == [200, 200, 429]
    assert codes(client, "GET", "/t2", 11) == [200] * 10 + [429]


def _nested(clock: rk.ManualClock) -> tuple[flask.Flask, flask.Blueprint, flask.Blueprint, RateLimit]:
    app, rate_limit = extension(clock, default_limits=["1/minute"])
    parent = flask.Blueprint("parent", __name__, url_prefix="/parent")
    child = flask.Blueprint("child", __name__, url_prefix="/child")
    app.add_url_rule("/", "root", lambda: "42")
    parent.add_url_rule("/", "parent", lambda: "41")
    child.add_url_rule("/", "child", lambda: "40")
    return app, parent, child, rate_limit


def test_nested_blueprint_exemption_explicit(clock: rk.ManualClock) -> None:
    app, parent, child, rate_limit = _nested(clock)
    rate_limit.exempt(parent)
    rate_limit.exempt(child)
    parent.register_blueprint(child)
    app.register_blueprint(parent)
    client = app.test_client()
    assert codes(client, "GET", "/", 2) == [200, 429]
    assert codes(client, "GET", "/parent/", 2) == [200, 200]
    assert codes(client, "GET", "/parent/child/", 2) == [200, 200]


def test_nested_blueprint_exemption_covers_the_nested_ones(clock: rk.ManualClock) -> None:
    # Flask-Limiter's test_nested_blueprint_exemption_nested (flags DEFAULT | DESCENDENTS) is our default;
    # its test_nested_blueprint_exemption_legacy (the child keeps the defaults) is not: ours on purpose,
    # an exempt blueprint's nested blueprints are exempt unless they have limits of their own.
    app, parent, child, rate_limit = _nested(clock)
    rate_limit.exempt(parent)
    parent.register_blueprint(child)
    app.register_blueprint(parent)
    client = app.test_client()
    assert codes(client, "GET", "/", 2) == [200, 429]
    assert codes(client, "GET", "/parent/", 2) == [200, 200]
    assert codes(client, "GET", "/parent/child/", 2) == [200, 200]


def test_nested_blueprint_exemption_child_only(clock: rk.ManualClock) -> None:
    app, parent, child, rate_limit = _nested(clock)
    rate_limit.exempt(child)
    parent.register_blueprint(child)
    app.register_blueprint(parent)
    app.register_blueprint(child)  # also at the top, as the peer's test does
    client = app.test_client()
    assert codes(client, "GET", "/", 2) == [200, 429]
    assert codes(client, "GET", "/parent/", 2) == [200, 429]
    assert codes(client, "GET", "/parent/child/", 2) == [200, 200]  # ignored before: 200, 429
    assert codes(client, "GET", "/child/", 2) == [200, 200]


def test_nested_blueprint_child_explicit_limit(clock: rk.ManualClock) -> None:
    app, parent, child, rate_limit = _nested(clock)
    rate_limit.limit("2/minute")(child)
    parent.register_blueprint(child)
    app.register_blueprint(parent)
    client = app.test_client()
    assert codes(client, "GET", "/", 2) == [200, 429]
    assert codes(client, "GET", "/parent/", 2) == [200, 429]
    assert codes(client, "GET", "/parent/child/", 3) == [200, 200, 429]  # ignored before: the defaults


def test_nested_blueprint_child_explicit_limit_with_our_default_algorithm(clock: rk.ManualClock) -> None:
    # Issue 32, bug 2: "2/minute" on a nested blueprint admitted 200, 200, 200 (its mark was never found).
    app = flask.Flask(__name__)
    rate_limit = RateLimit(app, limiter=rk.Limiter(rules=[], clock=clock))
    parent = flask.Blueprint("parent", __name__, url_prefix="/parent")
    child = flask.Blueprint("child", __name__, url_prefix="/child")
    child.add_url_rule("/", "child", lambda: "40")
    rate_limit.limit_blueprint(child, "2/minute")
    parent.register_blueprint(child)
    app.register_blueprint(parent)
    assert codes(app.test_client(), "GET", "/parent/child/", 3) == [200, 200, 429]


def test_nested_blueprint_child_explicit_nested_limits(clock: rk.ManualClock) -> None:
    app, parent, child, rate_limit = _nested(clock)
    grand_child = flask.Blueprint("grand_child", __name__, url_prefix="/grand_child")
    grand_child.add_url_rule("/", "grand_child", lambda: "39")
    rate_limit.limit("3/hour")(parent)
    rate_limit.limit("2/minute")(child)
    child.register_blueprint(grand_child)
    parent.register_blueprint(child)
    app.register_blueprint(parent)
    client = app.test_client()
    assert codes(client, "GET", "/", 2) == [200, 429]
    assert codes(client, "GET", "/parent/", 4) == [200, 200, 200, 429]
    assert codes(client, "GET", "/parent/child/", 3) == [200, 200, 429]
    clock.advance(60)
    assert codes(client, "GET", "/parent/child/", 2) == [200, 200]  # the parent's limit is not the child's


def test_register_blueprint(clock: rk.ManualClock) -> None:
    app, rate_limit = extension(clock, default_limits=["1/minute"])
    bp_1, bp_3, bp_4 = (flask.Blueprint(name, __name__) for name in ("bp1", "bp3", "bp4"))
    bp_1.add_url_rule("/t1", "t1", lambda: "test")
    bp_1.add_url_rule("/t2", "t2", lambda: "test")
    bp_3.add_url_rule("/t4", "t4", lambda: "test")
    bp_4.add_url_rule("/t5", "t5", lambda: "test")
    for bp in (bp_1, bp_3, bp_4):
        app.register_blueprint(bp)
    rate_limit.limit("1/second")(bp_1)  # after registering: found at the first request
    rate_limit.exempt(bp_3)
    rate_limit.limit(lambda: "1/second")(bp_4)
    client = app.test_client()
    assert codes(client, "GET", "/t1", 2) == [200, 429]
    clock.advance(1)
    assert codes(client, "GET", "/t1", 1) == [200]
    # Ours on purpose: a blueprint's limit is one budget for all its views (Flask-Limiter's is per view,
    # and admits /t2 here). A view that needs its own budget takes its own @limit.
    assert codes(client, "GET", "/t2", 1) == [429]
    clock.advance(1)
    assert codes(client, "GET", "/t2", 1) == [200]
    assert codes(client, "GET", "/t4", 10) == [200] * 10
    assert codes(client, "GET", "/t5", 2) == [200, 429]


def test_pluggable_views(clock: rk.ManualClock) -> None:
    app, rate_limit = extension(clock, default_limits=["1/hour"])

    class Va(flask.views.View):
        methods = (
            "GET",
            "POST",
        )
        decorators = (rate_limit.limit("2/second"),)

        def dispatch_request(self) -> str:
            return flask.request.method.lower()

    class Vb(flask.views.View):
        methods = ("GET",)
        decorators = (rate_limit.limit("1/second, 3/minute"),)

        def dispatch_request(self) -> str:
            return flask.request.method.lower()

    class Vc(flask.views.View):
        methods = ("GET",)

        def dispatch_request(self) -> str:
            return flask.request.method.lower()

    app.add_url_rule("/a", view_func=Va.as_view("a"))
    app.add_url_rule("/b", view_func=Vb.as_view("b"))
    app.add_url_rule("/c", view_func=Vc.as_view("c"))
    client = app.test_client()
    assert codes(client, "GET", "/a", 2) == [200, 200]
    assert codes(client, "POST", "/a", 1) == [429]
    for _ in range(3):
        assert codes(client, "GET", "/b", 1) == [200]
        clock.advance(1)
    assert codes(client, "GET", "/b", 1) == [429]
    assert codes(client, "GET", "/c", 2) == [200, 429]


def test_pluggable_method_views(clock: rk.ManualClock) -> None:
    app, rate_limit = extension(clock, default_limits=["1/hour"])

    class Va(flask.views.MethodView):
        decorators = (rate_limit.limit("2/second"),)

        def get(self) -> str:
            return flask.request.method.lower()

        def post(self) -> str:
            return flask.request.method.lower()

    class Vb(flask.views.MethodView):
        decorators = (rate_limit.limit("1/second, 3/minute"),)

        def get(self) -> str:
            return flask.request.method.lower()

    class Vc(flask.views.MethodView):
        def get(self) -> str:
            return flask.request.method.lower()

    class Vd(flask.views.MethodView):
        decorators = (rate_limit.limit("1/minute", methods=["get"]),)

        def get(self) -> str:
            return flask.request.method.lower()

        def post(self) -> str:
            return flask.request.method.lower()

    for name, view in (("a", Va), ("b", Vb), ("c", Vc), ("d", Vd)):
        app.add_url_rule(f"/{name}", view_func=view.as_view(name))
    client = app.test_client()
    assert codes(client, "GET", "/a", 3) == [200, 200, 429]
    assert codes(client, "POST", "/a", 1) == [429]
    for _ in range(3):
        assert codes(client, "GET", "/b", 1) == [200]
        clock.advance(1)
    assert codes(client, "GET", "/b", 1) == [429]
    assert codes(client, "GET", "/c", 2) == [200, 429]
    assert codes(client, "GET", "/d", 2) == [200, 429]
    assert codes(client, "POST", "/d", 2) == [200, 429]  # the defaults, for the method not limited
    clock.advance(3600)
    assert codes(client, "POST", "/d", 1) == [200]


def test_pluggable_view_with_two_limits_by_method(clock: rk.ManualClock) -> None:
    # Flask-Limiter's test_flask_restful_resource's Vd, on a MethodView (flask-restful is not a dependency).
    app, rate_limit = extension(clock, default_limits=["1/hour"])

    class Vd(flask.views.MethodView):
        decorators = (
            rate_limit.limit("2/second", methods=["GET"]),
            rate_limit.limit("1/second", methods=["POST"]),
        )

        def get(self) -> str:
            return "get"

        def post(self) -> str:
            return "post"

    app.add_url_rule("/d", view_func=Vd.as_view("d"))
    client = app.test_client()
    assert codes(client, "GET", "/d", 3) == [200, 200, 429]
    assert codes(client, "POST", "/d", 2) == [200, 429]
