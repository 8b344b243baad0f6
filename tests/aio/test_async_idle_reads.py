"""An idle tick's one-statement reads through the asyncio API: on PostgreSQL (asyncpg and
psycopg's async driver) they run in autocommit, without the BEGIN and COMMIT round trips
of a transaction; the connection goes back to the pool as it came, and the claim and the
finish that follow still run in a transaction each (see tests/integration/test_idle_reads.py
for the sync API)."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

import readyq
from async_support import Runner, async_engine
from readyq.claim_order import ClaimOrder, StartPolicy
from readyq.store import Outcome, OutcomeKind


def transaction_open(driver: Any) -> bool | None:
    """Whether the driver's connection is inside a transaction (None: cannot tell)."""
    if hasattr(driver, "is_in_transaction"):  # asyncpg
        return bool(driver.is_in_transaction())
    status = getattr(getattr(driver, "info", None), "transaction_status", None)
    return None if status is None else status.name != "IDLE"


@pytest.mark.parametrize("pg_driver", ["asyncpg", "psycopg"])
def test_async_idle_reads_answer_without_a_transaction_of_their_own(
    db: str, dialect_name: str, pg_driver: str
) -> None:
    if pg_driver == "psycopg" and dialect_name != "postgresql":
        pytest.skip("psycopg's async driver is PostgreSQL's")
    engine = async_engine(db, pg_driver=pg_driver)
    runner = Runner()
    queue = readyq.AsyncQueue(engine)
    seen: list[bool] = []

    def record(conn: Any, cursor: Any, statement: str, params: Any, context: Any,
               executemany: bool) -> None:
        state = transaction_open(conn.connection.driver_connection)
        if state is not None:
            seen.append(state)

    def watched(fn: Any, *args: Any) -> tuple[Any, list[bool]]:
        seen.clear()
        sa.event.listen(engine.sync_engine, "after_cursor_execute", record)
        try:
            out = runner.run(queue.run(fn, *args))
        finally:
            sa.event.remove(engine.sync_engine, "after_cursor_execute", record)
        return out, list(seen)

    try:
        runner.run(queue.create_schema())
        store = queue.queue.store

        def idle_tick() -> list[bool]:
            return [store.runnable_exists(["t"]), store.has_unfinished(["t"]),
                    store.reclaim_expired().total > 0]

        answers, idle = watched(idle_tick)
        assert answers == [False, False, False]
        runner.run(queue.enqueue("t"))
        answers, busy = watched(idle_tick)
        assert answers == [True, True, False]

        def claim_and_finish() -> None:
            (job,) = store.claim_jobs(ClaimOrder(
                owner="w", cap=1, limit=1, lease_ttl=30, types=["t"],
            ))
            store.start_jobs("w", [(job, StartPolicy(None))])
            store.record_outcomes("w", [Outcome(job=job, kind=OutcomeKind.RELEASE)])

        _, writes = watched(claim_and_finish)
        assert runner.run(queue.counts()) == {"ready": 1}
        if dialect_name == "postgresql":
            assert idle and busy and not any(idle + busy), (idle, busy)
            assert writes and all(writes), writes
    finally:
        runner.run(queue.close())
        runner.run(engine.dispose())
        runner.close()
