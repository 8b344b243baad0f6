"""Retry delays: exponential, capped, with optional jitter."""

from __future__ import annotations

import random
from collections.abc import Callable

DEFAULT_RETRY_BASE = 1.0
DEFAULT_RETRY_MAX = 300.0
DEFAULT_RETRY_JITTER = 0.1


def retry_delay(
    attempt: int,
    *,
    base: float = DEFAULT_RETRY_BASE,
    maximum: float = DEFAULT_RETRY_MAX,
    jitter: float = DEFAULT_RETRY_JITTER,
    rand: Callable[[], float] = random.random,
) -> float:
    """Seconds to wait before the retry that follows failed attempt ``attempt`` (1-based).

    ``base * 2**(attempt-1)``, capped at ``maximum``, then spread by ``±jitter`` so that
    jobs failing together do not retry together.
    """
    delay = min(maximum, base * (2.0 ** max(attempt - 1, 0)))
    return max(0.0, delay * (1.0 + jitter * (2.0 * rand() - 1.0)))
