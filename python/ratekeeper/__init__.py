"""ratekeeper: a rate limiter for Python services with its core in Rust.

>>> import ratekeeper as rk
>>> lim = rk.Limiter("3/60s", clock=rk.ManualClock())
>>> [lim.allow("alice") for _ in range(4)]
[True, True, True, False]
"""

from ratekeeper._core import Decision, Limit, ManualClock, QuotaInfo, Rate, Rule, __version__
from ratekeeper._errors import RateLimited
from ratekeeper.limiter import Limiter, Permit

__all__ = [
    "Decision",
    "Limit",
    "Limiter",
    "ManualClock",
    "Permit",
    "QuotaInfo",
    "Rate",
    "RateLimited",
    "Rule",
    "__version__",
]
