"""The one-statement reads of an idle worker's tick: whether a job of its types is
runnable, whether a lease is due for reclaim, and (run with ``until_idle``) whether its
types have unfinished jobs. On PostgreSQL they run in autocommit, without the BEGIN and
COMMIT round trips a transaction adds; the connection then goes back to the pool as it
came, and the next claim runs in its own transaction as before."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

import readyq
from readyq.claim_order import ClaimOrder
from readyq.store import Outcome, OutcomeKind


def in_transaction(queue: readyq.Queue, run: Any) -> list[bool]:
    """Whether each statement ``run`` sends is inside a transaction, as the driver
    tells once the statement is done (PostgreSQL; None elsewhere)."""
    seen: list[bool] = []

    def record(conn: Any, cursor: Any, statement: str, params: Any, context: Any,
               executemany: bool) -> None:
        info = getattr(conn.connection.driver_connection, "info", None)
        status = getattr(info, "transaction_status", None)
        if status is not None:
            seen.append(status.name != "IDLE")

    sa.event.listen(queue.engine, "after_cursor_execute", record)
    try:
        run()
    finally:
        sa.event.remove(queue.engine, "after_cursor_execute", record)
    return seen


def test_an_idle_ticks_reads_answer_without_a_transaction_of_their_own(
    queue: readyq.Queue, dialect_name: str
) -> None:
    store = queue.store
    answers: list[bool] = []

    def idle_tick() -> None:
        answers.append(store.runnable_exists(["t"]))
        answers.append(store.has_unfinished(["t"]))
        answers.append(store.reclaim_expired().total > 0)

    idle = in_transaction(queue, idle_tick)
    assert answers == [False, False, False]
    queue.enqueue("t")
    answers.clear()
    busy = in_transaction(queue, idle_tick)
    assert answers == [True, True, False]

    # The pooled connection comes back transactional: a claim and its finish still run
    # in one transaction each.
    def claim_and_finish() -> None:
        (job,) = store.claim_jobs(ClaimOrder(owner="w", cap=1, limit=1, lease_ttl=30, types=["t"]))
        store.start_jobs("w", [(job, None, True)])
        store.record_outcomes("w", [Outcome(job=job, kind=OutcomeKind.RELEASE)])

    writes = in_transaction(queue, claim_and_finish)
    assert queue.counts() == {"ready": 1}
    if dialect_name == "postgresql":
        assert idle and busy and not any(idle + busy), (idle, busy)
        assert writes and all(writes), writes
