"""How an attempt ends: one decision, whoever records it.

An attempt ends in the worker that ran it (the handler returned or raised), in that
worker's watch of a child process (a timeout, a crash, a memory limit, a lost lease, a
terminating cancel) or in any worker's sweep (a deadline passed, a lease expired).
Each of them names what happened and asks :func:`attempt_end` what follows, so that the
same facts end the same way wherever they are seen.

The rules, in order:

1. A handler that returned a result ends the job ``done``, even when a cancel was asked
   meanwhile: the work is done.
2. A cancel asked while the attempt ran wins over anything else: ``cancel``.
3. An attempt that could not run as stored (args that are not JSON), or whose outcome
   the database refused, ``fail``s: running it again would meet the same value.
4. A timeout ``fail``s when the job's policy says not to retry timeouts.
5. Otherwise ``retry`` while attempts remain, else ``fail``.
"""

from __future__ import annotations

from enum import Enum
from typing import Literal

End = Literal["done", "retry", "fail", "cancel"]


class Ended(str, Enum):
    """What happened to an attempt."""

    RETURNED = "returned"
    """The handler returned a result that can be stored."""
    RAISED = "raised"
    """The handler raised, or returned a result that cannot be stored."""
    TIMED_OUT = "timed_out"
    """The attempt passed its deadline (its child killed, or a sweep saw it)."""
    LEASE_EXPIRED = "lease_expired"
    """Its worker stopped heartbeating and a sweep found the lease expired."""
    LEASE_LOST = "lease_lost"
    """Its worker learned, or decided, that the lease was gone, and killed its child."""
    CHILD_DIED = "child_died"
    """Its child process died on its own, or was killed past its memory limit."""
    TERMINATED = "terminated"
    """Its child process was killed on a terminating cancel."""
    UNRUNNABLE = "unrunnable"
    """It cannot run as stored, or the database refused its outcome."""


def attempt_end(
    ended: Ended,
    *,
    cancel_requested: bool,
    attempt: int,
    max_attempts: int,
    retry_on_timeout: bool = True,
) -> End:
    """How an attempt that ``ended`` so ends the job: see the module's rules."""
    if ended is Ended.RETURNED:
        return "done"
    if ended is Ended.TERMINATED or cancel_requested:
        return "cancel"
    if ended is Ended.UNRUNNABLE:
        return "fail"
    if ended is Ended.TIMED_OUT and not retry_on_timeout:
        return "fail"
    return "retry" if attempt < max_attempts else "fail"
