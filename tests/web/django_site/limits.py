"""The test project's limiter: ``settings.RATEKEEPER["LIMITER"]`` names it."""

import ratekeeper as rk

clock = rk.ManualClock()
limiter = rk.Limiter(
    rules=[
        rk.Rule(r"^/api/", "api", "3/hour"),
        rk.Rule(r"^/async/api/", "async-api", "3/hour"),
        rk.Rule(r"^/routed/", "routed", "2/hour"),
    ],
    clock=clock,
)


def teapot(request: object, decision: rk.Decision) -> object:
    """An ``ON_REFUSED`` answer of the project's own."""
    from django.http import HttpResponse

    return HttpResponse(f"refused in {decision.group}, {decision.retry_after} s", status=418)
