"""While a worker runs, the heap that existed when it started stays out of the garbage
collector's passes, and is handed back when the last worker of the process returns.

Each handler reads ``gc.get_freeze_count()`` while its job runs: the objects frozen are
the ones the collector skips.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import readyq
from readyq.errors import ConfigurationError


@pytest.fixture(autouse=True)
def thawed() -> Iterator[None]:
    """Each test starts from an unfrozen heap and leaves one behind, whatever happens."""
    gc.unfreeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _seen_while_running(queue: readyq.Queue, **options: Any) -> list[int]:
    seen: list[int] = []

    @queue.handler("t")
    def record(job: readyq.Job) -> None:
        seen.append(gc.get_freeze_count())

    queue.enqueue("t")
    queue.run_worker(until_idle=True, poll_interval=0.01, **options)
    return seen


def test_a_worker_freezes_the_heap_while_it_runs_and_hands_it_back(
    queue: readyq.Queue,
) -> None:
    seen = _seen_while_running(queue)
    assert len(seen) == 1 and seen[0] > 1000  # the modules and caches loaded before
    assert gc.get_freeze_count() == 0


def test_freeze_gc_false_leaves_the_collector_alone(queue: readyq.Queue) -> None:
    assert _seen_while_running(queue, freeze_gc=False) == [0]
    assert gc.get_freeze_count() == 0


def test_a_heap_the_application_froze_stays_frozen(queue: readyq.Queue) -> None:
    gc.freeze()
    frozen = gc.get_freeze_count()
    seen = _seen_while_running(queue)
    # Not frozen again (what came later is collected as usual), nor thawed; reference
    # counting may free a few of the frozen objects meanwhile.
    assert len(seen) == 1 and frozen - 100 < seen[0] <= frozen
    assert frozen - 100 < gc.get_freeze_count() <= frozen


def test_the_heap_stays_frozen_until_the_last_worker_of_the_process_returns(
    queue: readyq.Queue,
) -> None:
    holding = threading.Event()
    release = threading.Event()

    @queue.handler("long")
    def long(job: readyq.Job) -> None:
        holding.set()
        assert release.wait(30)

    @queue.handler("short")
    def short(job: readyq.Job) -> None:
        pass

    queue.enqueue("long")
    queue.enqueue("short")
    # The cap is global: 2, so that the second worker finds a free slot.
    first = queue.worker(types=["long"], concurrency=2, poll_interval=0.01)
    thread = threading.Thread(target=first.run, kwargs={"handle_signals": False})
    thread.start()
    try:
        assert holding.wait(30)
        queue.run_worker(types=["short"], concurrency=2, until_idle=True, poll_interval=0.01)
        # The second worker returned; the first still runs its job.
        assert gc.get_freeze_count() > 0
    finally:
        release.set()
        first.stop(grace=30)
        thread.join(30)
    assert not thread.is_alive()
    assert gc.get_freeze_count() == 0
    assert queue.counts() == {"done": 2}


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_freeze_gc_must_be_a_bool(queue: readyq.Queue, value: object) -> None:
    @queue.handler("t")
    def noop(job: readyq.Job) -> None:
        pass

    with pytest.raises(ConfigurationError, match="freeze_gc"):
        queue.worker(freeze_gc=value)  # type: ignore[arg-type]
