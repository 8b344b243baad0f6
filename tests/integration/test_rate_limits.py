"""Rate limits: N starts per period, counted in the database for every worker.

Every test but the first runs on SQLite, PostgreSQL and MariaDB. Instants are the jobs'
``started_at``, stamped by the database's clock in the claim transaction.
"""

from __future__ import annotations

import math
import threading
from datetime import timedelta

import pytest

import readyq
from readyq.claim_order import ClaimOrder
from readyq.store import NewJob

LIMIT, PER = 5, 1.0


def most_in_any_window(starts: list[float], per: float) -> int:
    """The largest number of starts inside one half-open window of ``per`` seconds."""
    starts = sorted(starts)
    # 1 ms of slack: SQLite's clock has millisecond precision.
    return max(sum(1 for s in starts[i:] if s < first + per - 0.001)
               for i, first in enumerate(starts))


def test_bad_definitions_are_refused() -> None:
    queue = readyq.Queue("sqlite://")
    for limit in (0, -1, 1.5, True, None, "5", 100_001):
        with pytest.raises(readyq.InvalidRateLimit, match="limit must be"):
            queue.rate_limit("api", limit, per=1)  # type: ignore[arg-type]
    for per in (0, -1.0, math.nan, math.inf, "1", None, True, timedelta(0)):
        with pytest.raises(readyq.InvalidRateLimit, match="per must be"):
            readyq.RateLimit("api", 5, per=per)  # type: ignore[arg-type]
    for name in ("", " api", "x" * 201, 3):
        with pytest.raises(readyq.InvalidRateLimit, match="name"):
            queue.rate_limit(name, 5, per=1)  # type: ignore[arg-type]
    with pytest.raises(readyq.InvalidRateLimit, match="not defined"):
        queue.handler("call", rate_limit="api")
    assert queue.rate_limit("api", 5, per=timedelta(seconds=2)) == readyq.RateLimit("api", 5, 2.0)
    queue.rate_limit("api", 5, per=2)  # the same definition again is fine
    with pytest.raises(readyq.InvalidRateLimit, match="already defined"):
        queue.rate_limit("api", 6, per=2)
    with pytest.raises(readyq.InvalidRateLimit, match="already defined"):
        queue.handler("call", rate_limit=readyq.RateLimit("api", 5, per=3))
    assert issubclass(readyq.InvalidRateLimit, readyq.ConfigurationError)
    assert queue.handlers == {}


def test_two_workers_share_one_limit(db: str, queue: readyq.Queue) -> None:
    """5 starts per second, 20 jobs, two workers with their own engines: never more than
    5 starts in any one-second window, every job done, and other types unthrottled."""
    queue.enqueue_many([readyq.JobSpec("call", {"i": i}) for i in range(20)]
                       + [readyq.JobSpec("free", {"i": i}) for i in range(5)])
    workers = [readyq.Queue(db) for _ in range(2)]
    stats: list[readyq.WorkerStats] = []
    try:
        for w in workers:
            w.rate_limit("api", LIMIT, per=PER)

            @w.handler("call", rate_limit="api")
            def call(job: readyq.Job) -> int:
                return int(job.args["i"])

            @w.handler("free")
            def free(job: readyq.Job) -> int:
                return int(job.args["i"])

        def run(w: readyq.Queue) -> None:
            stats.append(w.run_worker(until_idle=True, concurrency=30, poll_interval=0.02))

        threads = [threading.Thread(target=run, args=(w,)) for w in workers]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        for w in workers:
            w.close()
    assert queue.counts() == {"done": 25}
    assert sum(s.claimed for s in stats) == 25
    infos = [queue.get(i) for i in range(1, 26)]
    calls = [i.started_at.timestamp() for i in infos if i.type == "call"]  # type: ignore[union-attr]
    frees = [i.started_at.timestamp() for i in infos if i.type == "free"]  # type: ignore[union-attr]
    assert most_in_any_window(calls, PER) == LIMIT
    assert max(calls) - min(calls) >= 3 * PER - 0.001  # 20 starts need 4 windows
    assert max(frees) - min(calls) < PER


def test_the_budget_follows_the_database_clock_and_the_definition(queue: readyq.Queue) -> None:
    """Store-level claims, with the database clock moved forward instead of sleeping."""
    store = queue.store
    for i in range(12):
        store.enqueue(NewJob(type="call", args_json=f'{{"i": {i}}}'))
    store.enqueue(NewJob(type="other", args_json="{}"))

    def claim(limit: readyq.RateLimit, n: int = 20) -> list[str]:
        got = store.claim_jobs(ClaimOrder(
            owner="w", cap=100, limit=n, lease_ttl=30, types=["call", "other"],
            rate_limits={"call": limit},
        ))
        return sorted(c.type for c in got)

    three = readyq.RateLimit("api", 3, per=60)
    assert claim(three) == ["call", "call", "call", "other"]
    assert claim(three) == []
    store.clock_offset += 59.5
    assert claim(three) == []
    store.clock_offset += 0.6
    assert claim(three, n=2) == ["call", "call"]  # capped by the claim
    assert claim(three) == ["call"]  # the third slot of this window
    # A larger limit adds slots at once; a smaller one keeps the latest starts.
    assert claim(readyq.RateLimit("api", 5, per=60)) == ["call", "call"]
    assert claim(readyq.RateLimit("api", 2, per=60)) == []
    store.clock_offset += 61
    assert claim(readyq.RateLimit("api", 2, per=60)) == ["call", "call"]
    assert claim(readyq.RateLimit("api", 2, per=60)) == []
    assert queue.counts() == {"leased": 11, "ready": 2}
    with pytest.raises(ValueError, match="job types"):
        store.claim_jobs(ClaimOrder(
            owner="w", cap=100, limit=1, lease_ttl=30, types=None, rate_limits={"call": three},
        ))
