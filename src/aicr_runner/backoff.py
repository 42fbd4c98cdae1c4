"""Waiting between retries: exponential back-off with jitter, ``Retry-After``, and a budget.

Shared by the release download and the Kubernetes API writes so both honour a
server's ``Retry-After`` the same way and neither sleeps past its budget.
"""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["parse_retry_after"]


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP-date)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    import email.utils  # only for an HTTP-date (it imports socket): a rare answer

    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())
