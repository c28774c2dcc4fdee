"""ratekeeper: a rate limiter for Python services with its core in Rust.

>>> import ratekeeper as rk
>>> lim = rk.Limiter("3/60s", clock=rk.ManualClock())
>>> [lim.allow("alice") for _ in range(4)]
[True, True, True, False]
"""

import logging

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
    Shared,
    __version__,
)
from ratekeeper._errors import BackendUnavailable, InvalidArgument, InvalidType, InvalidValue, RateLimited
from ratekeeper._http import HeaderOptions, Penalty
from ratekeeper._stats import (
    AdaptiveStats,
    Algorithm,
    GroupStats,
    Histogram,
    LimitStats,
    PolicyName,
    SharedStats,
    Stats,
)
from ratekeeper.limiter import Limited, Limiter, Permit

# A library's logger gets a handler that drops records: without one, an application that has not set up
# logging would get the package's warnings (a Redis outage) on stderr from logging's "last resort".
# An application's own handlers (on the root logger or on "ratekeeper") still receive every record.
logging.getLogger("ratekeeper").addHandler(logging.NullHandler())

__all__ = [
    "AdaptiveStats",
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
    "Limited",
    "Limiter",
    "ManualClock",
    "Penalty",
    "Permit",
    "PolicyName",
    "QuotaInfo",
    "Quotas",
    "Rate",
    "RateLimited",
    "Redis",
    "Resolution",
    "Rule",
    "Shared",
    "SharedStats",
    "Stats",
    "__version__",
]
