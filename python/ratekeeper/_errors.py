"""Exceptions raised by ratekeeper's Python layer."""

from __future__ import annotations

from ratekeeper._core import Decision

__all__ = ["RateLimited"]


class RateLimited(Exception):
    """A request was refused: raised by ``throttle`` when the wait would pass its timeout.

    Attributes:
        decision: the refusing :class:`Decision` (its ``group``, ``limit``, ``remaining`` ...).
        retry_after: seconds until the same request would be admitted (``inf``: never, e.g. a cost
            larger than the burst).
    """

    decision: Decision
    retry_after: float

    def __init__(self, decision: Decision) -> None:
        self.decision = decision
        self.retry_after = decision.retry_after
        group = f" in group {decision.group!r}" if decision.group is not None else ""
        super().__init__(f"rate limited{group}: retry after {decision.retry_after:.3f}s")

    def __reduce__(self) -> tuple[type[RateLimited], tuple[Decision]]:
        return (type(self), (self.decision,))
