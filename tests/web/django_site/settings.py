"""The test project's settings: every ratekeeper integration for Django, on a limiter with a ManualClock.

Served in the test process by uvicorn (ASGI, so the tests move the clock) and by gunicorn (WSGI, where
the clock stays frozen at 0: waits are then exact).
"""

SECRET_KEY = "ratekeeper-tests"
DEBUG = False
ALLOWED_HOSTS = ["*"]
USE_TZ = True
ROOT_URLCONF = "django_site.urls"
DATABASES: dict[str, object] = {}  # no model is used: users come from a header (django_site.auth)
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "rest_framework"]
MIDDLEWARE = ["django_site.auth.HeaderUserMiddleware", "ratekeeper.django.RateLimitMiddleware"]

RATEKEEPER = {
    "LIMITER": "django_site.limits.limiter",
    "TRUSTED_PROXIES": ["127.0.0.1"],  # the tests' own client stands for the proxy; 127.0.0.2 does not
    # /routed/ is limited by RateKeeperThrottle on the same rules: the middleware leaves it alone.
    "EXEMPT_PATHS": [r"^/health$", r"^/routed/"],
}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["django_site.auth.HeaderAuthentication"],
    "DEFAULT_THROTTLE_CLASSES": ["ratekeeper.django.ScopedRateKeeperThrottle"],
    "DEFAULT_THROTTLE_RATES": {"items": "3/hour", "uploads": "2/min", "user": "4/hour", "anon": "2/hour"},
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
}
