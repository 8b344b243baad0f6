"""Ambiguous commits: the COMMIT reaches the database but its reply is lost (here: the
driver's commit succeeds, then the connection "drops"). Store.write runs the unit again;
a finalization must be recognised as already recorded (reported applied, propagated
once), a claim's first batch must not be lost (its lease expires and it is swept back),
and an enqueue, which is not safe to repeat, must raise rather than insert twice."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa

import readyq
from readyq import JobState
from readyq.store import NewJob, Outcome

TTL = 30.0


def lost_reply(engine: sa.Engine) -> Exception:
    """A driver error that SQLAlchemy and readyq take for a dropped connection."""
    dbapi = engine.dialect.loaded_dbapi
    name = engine.dialect.name
    if name == "postgresql":  # what a backend killed mid-COMMIT says (SQLSTATE 57P01)
        return dbapi.errors.AdminShutdown("terminating connection due to administrator command")
    if name in ("mysql", "mariadb"):
        return dbapi.OperationalError(2013, "Lost connection to server during query")
    return dbapi.OperationalError("database is locked")


@contextmanager
def ambiguous_commits(queue: readyq.Queue, times: int = 1) -> Iterator[list[int]]:
    """The next ``times`` COMMITs of write transactions land, then report a lost
    connection. (Read-only transactions end with a COMMIT too; theirs are left alone.)"""
    dialect = queue.engine.dialect
    store = queue._store
    original = dialect.do_commit
    original_write = store.write
    fired: list[int] = []
    writing = [0]

    def do_commit(dbapi_connection: Any) -> None:
        original(dbapi_connection)
        if writing[0] and len(fired) < times:
            fired.append(1)
            raise lost_reply(queue.engine)

    def write(*args: Any, **kwargs: Any) -> Any:
        writing[0] += 1
        try:
            return original_write(*args, **kwargs)
        finally:
            writing[0] -= 1

    dialect.do_commit = do_commit  # type: ignore[method-assign]
    store.write = write  # type: ignore[method-assign]
    try:
        yield fired
    finally:
        dialect.do_commit = original  # type: ignore[method-assign]
        store.write = original_write  # type: ignore[method-assign]


def job(queue: readyq.Queue, job_id: int) -> Any:
    j = queue._store.tables.jobs
    with queue.engine.connect() as conn:
        return conn.execute(sa.select(j).where(j.c.id == job_id)).one()


def claim_one(queue: readyq.Queue, owner: str) -> Any:
    _, [claimed] = queue._store.cycle(owner, [], cap=10, limit=1, ttl=TTL, types=None,
                                      start={"t": (None, True)})
    return claimed


@pytest.mark.parametrize("kind", ["done", "retry", "fail", "release"])
def test_an_outcome_whose_commit_reply_was_lost_is_recognised_and_propagated_once(
    queue: readyq.Queue, kind: str
) -> None:
    store = queue._store
    box = store.enqueue(NewJob(type="box", args_json="null", is_container=True))
    target = store.enqueue(NewJob(type="t", args_json="null", parent=box, max_attempts=3))
    after = store.enqueue(NewJob(type="t", args_json="null", depends_on=(target,)))
    c = claim_one(queue, "W")
    assert c.id == target
    outcome = Outcome(job=c, kind=kind, result_json='{"ok": 1}' if kind == "done" else None,
                      error=f"boom ({kind})" if kind in ("retry", "fail") else None,
                      delay=60.0)
    with ambiguous_commits(queue) as fired:
        applied = store.finish("W", [outcome])
    assert fired == [1], "the fault did not fire"
    assert applied == {(target, c.lease_token): True}  # recognised as ours, not reported fenced out
    row, dep, parent = job(queue, target), job(queue, after), job(queue, box)
    expected = {"done": "done", "retry": "ready", "fail": "failed", "release": "ready"}[kind]
    assert row.state == expected
    assert row.attempts == (0 if kind == "release" else 1)
    # Propagated exactly once: no counter went past zero.
    if kind == "done":
        assert (dep.state, dep.pending_deps) == ("ready", 0)
        assert (parent.state, parent.open_children, parent.failed_children) == ("done", 0, 0)
    elif kind == "fail":
        assert dep.state == "upstream_failed" and dep.pending_deps == 1
        assert (parent.state, parent.open_children, parent.failed_children) == ("failed", 0, 1)
    else:
        assert (dep.state, dep.pending_deps) == ("waiting", 1)
        assert (parent.state, parent.open_children) == ("active", 1)
    # A genuinely stale writer is still refused.
    assert store.finish("X", [outcome]) == {(target, c.lease_token): False}


def test_a_claim_whose_commit_reply_was_lost_is_swept_back_never_lost(
    queue: readyq.Queue,
) -> None:
    store = queue._store
    first = store.enqueue(NewJob(type="t", args_json="null", max_attempts=3))
    second = store.enqueue(NewJob(type="t", args_json="null", max_attempts=3))
    with ambiguous_commits(queue) as fired:
        got = claim_one(queue, "W")
    assert fired == [1]
    # The retry claimed the next job; the first claim landed too, unknown to the worker.
    assert got.id == second
    orphan = job(queue, first)
    assert (orphan.state, orphan.lease_owner, orphan.attempts) == ("running", "W", 1)
    assert store.reclaim().total == 0  # its lease is still live
    store.clock_offset += TTL + 1
    swept = store.reclaim()
    assert swept.retried == 2  # the orphan, and the job W knows about (not heartbeated)
    store.clock_offset += 10  # past the retry backoff
    again = [claim_one(queue, "V").id for _ in range(2)]
    assert sorted(again) == [first, second]
    info = queue.get(first)
    assert info.state is JobState.RUNNING and info.attempts == 2


def test_an_enqueue_whose_commit_reply_was_lost_raises_instead_of_inserting_twice(
    queue: readyq.Queue,
) -> None:
    with ambiguous_commits(queue) as fired, pytest.raises(sa.exc.DBAPIError):
        queue.enqueue("t", {"n": 1})
    assert fired == [1]
    # Not retried: the job exists once (the caller cannot know, and must check).
    assert queue.counts() == {"ready": 1}
