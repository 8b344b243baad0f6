"""Ambiguous commits: the COMMIT reaches the database but its reply is lost (here: the
driver's commit succeeds, then the connection "drops"). Store.write runs the unit again;
a finalization must be recognised as already recorded (reported applied, propagated
once), a claim's first batch must be handed back, uncharged, before the claim runs again,
and an enqueue, which is not safe to repeat, must raise rather than insert twice."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import pytest
import sqlalchemy as sa

import readyq
from readyq.claim_order import ClaimOrder, StartPolicy
from readyq.store import NewJob, Outcome

TTL = 30.0


def lost_reply(engine: sa.Engine) -> Exception:
    """A driver error that SQLAlchemy and readyq take for a dropped connection."""
    dbapi = engine.dialect.loaded_dbapi
    name = engine.dialect.name
    if name == "postgresql":  # what a backend killed mid-COMMIT says (SQLSTATE 57P01)
        message = "terminating connection due to administrator command"
        if engine.dialect.driver == "asyncpg":  # asyncpg's error, as SQLAlchemy adapts it
            err = dbapi.OperationalError(message, SimpleNamespace(sqlstate="57P01"))
            # SQLAlchemy 2.1 reads the code from the error it adapts; 2.0 sets it after.
            err.pgcode = err.sqlstate = "57P01"
            return err
        return dbapi.errors.AdminShutdown(message)
    if name in ("mysql", "mariadb"):
        return dbapi.OperationalError(2013, "Lost connection to server during query")
    return dbapi.OperationalError("database is locked")


@contextmanager
def ambiguous_commits(
    queue: readyq.Queue, times: int = 1, *, land: bool = True
) -> Iterator[list[int]]:
    """The next ``times`` COMMITs of write transactions land (with ``land=False``: are
    rolled back), then report a lost connection. (Read-only transactions end with a
    COMMIT too; theirs are left alone.) A write of one statement in autocommit has no
    COMMIT: its statement's end stands for it, and it lands."""
    dialect = queue.engine.dialect
    store = queue.store
    original = dialect.do_commit
    original_write = store.write
    fired: list[int] = []
    writing = [0]

    def do_commit(dbapi_connection: Any) -> None:
        failing = writing[0] and len(fired) < times
        if failing and not land:
            dbapi_connection.rollback()
        else:
            original(dbapi_connection)
        if failing:
            fired.append(1)
            raise lost_reply(queue.engine)

    def statement_ended(conn: sa.Connection, *args: Any) -> None:
        autocommit = conn.get_execution_options().get("isolation_level") == "AUTOCOMMIT"
        if autocommit and writing[0] and len(fired) < times:
            assert land, "a statement in autocommit cannot be rolled back"
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
    sa.event.listen(queue.engine, "after_cursor_execute", statement_ended)
    try:
        yield fired
    finally:
        sa.event.remove(queue.engine, "after_cursor_execute", statement_ended)
        dialect.do_commit = original  # type: ignore[method-assign]
        store.write = original_write  # type: ignore[method-assign]


def job(queue: readyq.Queue, job_id: int) -> Any:
    j = queue.store.tables.jobs
    with queue.engine.connect() as conn:
        return conn.execute(sa.select(j).where(j.c.id == job_id)).one()


def claim_one(queue: readyq.Queue, owner: str) -> Any:
    _, [claimed] = queue.store.finish_and_claim([], ClaimOrder(
        owner=owner, cap=10, limit=1, lease_ttl=TTL, types=None,
        start={"t": StartPolicy(None, True)},
    ))
    return claimed


@pytest.mark.parametrize("kind", ["done", "retry", "fail", "release"])
def test_an_outcome_whose_commit_reply_was_lost_is_recognised_and_propagated_once(
    queue: readyq.Queue, kind: str
) -> None:
    store = queue.store
    box = store.enqueue(NewJob(type="box", args_json="null", is_container=True))
    target = store.enqueue(NewJob(type="t", args_json="null", parent=box, max_attempts=3))
    after = store.enqueue(NewJob(type="t", args_json="null", depends_on=(target,)))
    c = claim_one(queue, "W")
    assert c.id == target
    outcome = Outcome(job=c, kind=kind, result_json='{"ok": 1}' if kind == "done" else None,
                      error=f"boom ({kind})" if kind in ("retry", "fail") else None,
                      delay=60.0)
    with ambiguous_commits(queue) as fired:
        applied = store.record_outcomes("W", [outcome])
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
    assert store.record_outcomes("X", [outcome]) == {(target, c.lease_token): False}


def test_a_claim_whose_commit_reply_was_lost_hands_its_jobs_back_before_claiming_again(
    queue: readyq.Queue,
) -> None:
    """The lost claim landed: its job is handed back, uncharged, in the transaction that
    claims again, rather than left leased to a worker that does not know it until the
    lease expires (which would charge an attempt: a job allowed one would fail unrun)."""
    store = queue.store
    first = store.enqueue(NewJob(type="t", args_json="null", max_attempts=1))
    second = store.enqueue(NewJob(type="t", args_json="null", max_attempts=1))
    with ambiguous_commits(queue) as fired:
        got = claim_one(queue, "W")
    assert fired == [1]
    # Handed back, then claimed again by the same transaction: it is the first in line.
    assert (got.id, got.attempt) == (first, 1)
    claimed = job(queue, first)
    assert (claimed.state, claimed.lease_owner, claimed.attempts) == ("running", "W", 1)
    assert claimed.lease_token == got.lease_token == 2  # the lost claim's token was 1
    waiting = job(queue, second)
    assert (waiting.state, waiting.attempts) == ("ready", 0)
    store.clock_offset += 1
    assert store.reclaim_expired().total == 0  # no lease left behind for the sweep


def test_a_claim_whose_commit_did_not_land_hands_nothing_back(queue: readyq.Queue) -> None:
    """The same error when the COMMIT did not land: the hand-back, fenced by the tokens the
    lost claim would have set, matches nothing, and the claim simply runs again."""
    store = queue.store
    first = store.enqueue(NewJob(type="t", args_json="null", max_attempts=1))
    with ambiguous_commits(queue, land=False) as failed:
        got = claim_one(queue, "W")
    assert failed == [1]
    assert (got.id, got.attempt, got.lease_token) == (first, 1, 1)
    claimed = job(queue, first)
    assert (claimed.state, claimed.attempts, claimed.lease_token) == ("running", 1, 1)


def test_an_enqueue_whose_commit_reply_was_lost_raises_instead_of_inserting_twice(
    queue: readyq.Queue,
) -> None:
    with ambiguous_commits(queue) as fired, pytest.raises(sa.exc.DBAPIError):
        queue.enqueue("t", {"n": 1})
    assert fired == [1]
    # Not retried: the job exists once (the caller cannot know, and must check).
    assert queue.counts() == {"ready": 1}


def test_an_async_claim_whose_commit_reply_was_lost_hands_its_jobs_back(db: str) -> None:
    """The asyncio API reads the claimed rows before its COMMIT; the hand-back is the same."""

    from async_support import Runner, async_engine

    engine = async_engine(db)
    queue = readyq.AsyncQueue(engine)
    dialect = engine.sync_engine.dialect
    error = lost_reply(engine.sync_engine)
    original = dialect.do_commit
    fired: list[int] = []
    armed = [False]

    def do_commit(dbapi_connection: Any) -> None:
        original(dbapi_connection)
        if armed[0] and not fired:
            fired.append(1)
            raise error

    async def scenario() -> tuple[Any, Any, Any]:
        await queue.create_schema()
        first = await queue.enqueue("t", max_attempts=1)
        second = await queue.enqueue("t", max_attempts=1)
        store = queue.queue.store
        dialect.do_commit = do_commit  # type: ignore[method-assign]
        armed[0] = True
        try:
            _, claimed = await queue.run(
                store.finish_and_claim, [], ClaimOrder(
                    owner="W", cap=10, limit=1, lease_ttl=TTL, types=None,
                    start={"t": StartPolicy(None, True)},
                ),
            )
        finally:
            armed[0] = False
            dialect.do_commit = original  # type: ignore[method-assign]
        return claimed, await queue.get(first), await queue.get(second)

    runner = Runner()
    try:
        claimed, first, second = runner.run(scenario())
    finally:
        runner.run(queue.close())
        runner.run(engine.dispose())
        runner.close()
    assert fired == [1]
    assert [(c.id, c.attempt) for c in claimed] == [(first.id, 1)]
    assert (first.state.value, first.attempts) == ("running", 1)
    assert (second.state.value, second.attempts) == ("ready", 0)
