"""ratekeeper: a rate limiter for Python services with its core in Rust.

>>> import ratekeeper as rk
>>> lim = rk.Limiter("3/60s", clock=rk.ManualClock())
>>> [lim.allow("alice") for _ in range(4)]
[True, True, True, False]
"""

from ratekeeper._core import (
    Decision,
    GroupPolicy,
    Limit,
    ManualClock,
    QuotaInfo,
    Quotas,
    Rate,
    Redis,
    Resolution,
    Rule,
    __version__,
)
from ratekeeper._errors import BackendUnavailable, InvalidArgument, InvalidType, InvalidValue, RateLimited
from ratekeeper._http import HeaderOptions
from ratekeeper._stats import Algorithm, GroupStats, Histogram, LimitStats, PolicyName, Stats
from ratekeeper.limiter import Limiter, Permit

__all__ = [
    "Algorithm",
    "BackendUnavailable",
    "Decision",
    "GroupPolicy",
    "GroupStats",
    "HeaderOptions",
    "Histogram",
    "InvalidArgument",
    "InvalidType",
    "InvalidValue",
    "Limit",
    "LimitStats",
    "Limiter",
    "ManualClock",
    "Permit",
    "PolicyName",
    "QuotaInfo",
    "Quotas",
    "Rate",
    "RateLimited",
    "Redis",
    "Resolution",
    "Rule",
    "Stats",
    "__version__",
]
