"""The one decision of how an attempt ends (readyq.planning.attempts), as a table."""

from __future__ import annotations

import itertools

import pytest

from readyq.planning.attempts import Ended, attempt_end


def expected(ended: Ended, cancel: bool, attempt: int, max_attempts: int,
             retry_on_timeout: bool) -> str:
    if ended is Ended.RETURNED:
        return "done"
    if cancel or ended is Ended.TERMINATED:
        return "cancel"
    if ended is Ended.UNRUNNABLE:
        return "fail"
    if ended is Ended.TIMED_OUT and not retry_on_timeout:
        return "fail"
    return "retry" if attempt < max_attempts else "fail"


@pytest.mark.parametrize(
    "ended, cancel, attempt, retry_on_timeout",
    list(itertools.product(Ended, (False, True), (1, 3), (True, False))),
)
def test_every_combination(ended: Ended, cancel: bool, attempt: int,
                           retry_on_timeout: bool) -> None:
    got = attempt_end(ended, cancel_requested=cancel, attempt=attempt, max_attempts=3,
                      retry_on_timeout=retry_on_timeout)
    assert got == expected(ended, cancel, attempt, 3, retry_on_timeout)


def test_the_cases_that_used_to_disagree() -> None:
    # A cancel asked before a timeout, with attempts left: cancelled, in a thread (seen
    # by a sweep) and in a child process (seen by the worker's watch) alike.
    for seen_by in (Ended.TIMED_OUT,):
        assert attempt_end(seen_by, cancel_requested=True, attempt=1, max_attempts=3) == "cancel"
    # A handler that returned wins over a cancel; a crash loses to it.
    assert attempt_end(Ended.RETURNED, cancel_requested=True, attempt=1,
                       max_attempts=1) == "done"
    assert attempt_end(Ended.CHILD_DIED, cancel_requested=True, attempt=1,
                       max_attempts=3) == "cancel"
