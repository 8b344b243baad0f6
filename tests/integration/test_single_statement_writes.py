"""Writes of one statement: on PostgreSQL the statement is its own transaction.

An enqueue with no container, no dependency and no unique key is one INSERT (the wake-up
rides on it). Where autocommit costs no round trip (psycopg), it runs without the BEGIN
and COMMIT around it. Its end is then its commit, so a failure under it (here a lost
connection) leaves the job's fate unknown: the enqueue is raised, never sent twice.
Everywhere else it runs in a transaction, retried after a lost connection as before.
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event

import readyq
from readyq.store.transactions import Transactions
from readyq_test_support import cut_connection, observed


def count_jobs(db: str) -> int:
    engine = sa.create_engine(db, poolclass=sa.NullPool)
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.text("SELECT count(*) FROM readyq_jobs")).scalar_one())
    finally:
        engine.dispose()


def test_a_plain_enqueue_sends_one_statement_outside_a_transaction_on_postgresql(
    queue: readyq.Queue, dialect_name: str
) -> None:
    ids: list[int] = []
    seen = observed(queue, lambda: ids.append(queue.enqueue("t", {"n": 1})))
    sent = [(s, inside) for s, inside in seen if not s.startswith("BEGIN")]  # SQLite's
    assert [s.split(" ")[0] for s, _ in sent] == ["INSERT"]
    # psycopg tells whether the INSERT ran in a transaction; the other drivers do not.
    assert [inside for _, inside in sent] == ([False] if dialect_name == "postgresql"
                                             else [None])
    assert queue.get(ids[0]).state == "ready"
    assert queue.store.runnable_exists(["t"])


def test_enqueues_of_more_than_one_statement_keep_their_transaction(
    queue: readyq.Queue, dialect_name: str
) -> None:
    first = queue.enqueue("t")
    parent = queue.enqueue_container("c")
    for run in (
        lambda: queue.enqueue("t", depends_on=[first]),
        lambda: queue.enqueue("t", parent=parent),
        lambda: queue.enqueue("t", unique_key="k"),
    ):
        seen = observed(queue, run)
        assert len(seen) > 1
        if dialect_name == "postgresql":
            assert all(inside for _, inside in seen)
    assert {j.state for j in queue.jobs(type="t")} == {"ready", "waiting"}


def create_schema(db: str) -> None:
    q = readyq.Queue(db)
    q.create_schema()
    q.close()


def cut_before_insert(engine: sa.Engine, times: int) -> dict[str, int]:
    """Cut the connection under the next ``times`` INSERTs (see ``cut_connection``)."""
    seen = {"inserts": 0}

    @event.listens_for(engine, "before_cursor_execute")
    def cut(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if not statement.lstrip().startswith("INSERT"):
            return
        seen["inserts"] += 1
        if seen["inserts"] <= times:
            cut_connection(conn, "driver")

    return seen


def test_an_enqueue_that_lost_its_connection_mid_statement_is_not_sent_twice(
    db: str, dialect_name: str
) -> None:
    create_schema(db)
    engine = sa.create_engine(db, poolclass=sa.NullPool)
    seen = cut_before_insert(engine, 1)
    q = readyq.Queue(engine)
    try:
        if dialect_name == "postgresql":
            # The statement was its own commit: it may have landed, so it is not resent.
            with pytest.raises(sa.exc.DBAPIError):
                q.enqueue("t")
            assert seen["inserts"] == 1
            assert count_jobs(db) == 0
        else:
            # Lost before COMMIT: the transaction is known not to have landed.
            q.enqueue("t")
            assert seen["inserts"] == 2
            assert count_jobs(db) == 1
    finally:
        q.close()
        engine.dispose()


def test_an_idempotent_single_statement_write_is_run_again_after_a_lost_connection(
    db: str,
) -> None:
    create_schema(db)
    engine = sa.create_engine(db, poolclass=sa.NullPool)
    seen = cut_before_insert(engine, 1)
    q = readyq.Queue(engine)
    insert = sa.text(
        "INSERT INTO readyq_pauses (group_key, type, until, created_at) "
        "VALUES ('g', 't', NULL, 0)"
    )
    try:
        q.store.write(lambda conn: conn.execute(insert).rowcount, single=True)
        assert seen["inserts"] == 2
        assert [p.group for p in q.pauses()] == ["g"]
    finally:
        q.close()
        engine.dispose()


def test_a_single_statement_unit_cannot_ask_for_lost_commit(db: str) -> None:
    engine = sa.create_engine(db, poolclass=sa.NullPool)
    q = readyq.Queue(engine)
    transactions: Transactions = q.store.transactions
    ran: list[int] = []
    try:
        with pytest.raises(TypeError, match="lost_commit"):
            transactions.write(lambda conn: ran.append(1), single=True,
                               lost_commit=lambda out: None)
        assert ran == []
    finally:
        q.close()
        engine.dispose()
