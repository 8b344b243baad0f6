"""A closed queue holds no connection to its database, without help from the garbage
collector: a connection left in a pool nobody reaches again stays open on the server
until a collection happens to find it, and the driver then warns of an unclosed socket.
"""

from __future__ import annotations

import gc
import os
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

import readyq
from readyq_test_support import run_until_idle


@pytest.fixture
def no_collection() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def tagged(db: str, dialect_name: str, tag: str) -> str:
    """The URL, with a name the server shows for each connection made through it."""
    if dialect_name != "postgresql":
        return db
    url = sa.make_url(db).update_query_dict({"application_name": tag})
    return url.render_as_string(hide_password=False)


def open_connections(db: str, dialect_name: str, tag: str) -> int:
    """How many connections to the test's database are open, other than the one asking."""
    url = sa.make_url(db)
    if dialect_name == "sqlite":
        path = os.path.realpath(str(url.database))
        fds = "/proc/self/fd"
        targets = []
        for fd in os.listdir(fds):
            try:
                targets.append(os.readlink(os.path.join(fds, fd)))
            except OSError:  # closed between the listing and the read
                continue
        return sum(1 for target in targets if target == path)
    observer = sa.create_engine(db, poolclass=sa.NullPool)
    try:
        with observer.connect() as conn:
            if dialect_name == "postgresql":
                query = sa.text(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = :tag"
                ).bindparams(tag=tag)
            else:
                query = sa.text(
                    "SELECT count(*) FROM information_schema.PROCESSLIST "
                    "WHERE DB = :db AND ID <> CONNECTION_ID()"
                ).bindparams(db=url.database)
            return int(conn.execute(query).scalar_one())
    finally:
        observer.dispose()


def new_queue(db: str, dialect_name: str) -> tuple[readyq.Queue, str]:
    """A queue with its schema, and the tag its connections carry."""
    tag = "rq_" + uuid.uuid4().hex[:12]
    queue = readyq.Queue(tagged(db, dialect_name, tag))
    queue.create_schema()
    return queue, tag


def test_a_closed_queue_leaves_no_connection_open(
    db: str, dialect_name: str, no_collection: None
) -> None:
    queue, tag = new_queue(db, dialect_name)

    @queue.handler("step")
    def step(job: readyq.Job) -> None:
        pass

    queue.enqueue_many([readyq.JobSpec("step") for _ in range(20)])
    run_until_idle(queue)
    assert open_connections(db, dialect_name, tag) > 0  # the check sees the queue's own
    queue.close()
    assert open_connections(db, dialect_name, tag) == 0


def test_a_queue_closed_right_after_its_first_connection_leaves_none_open(
    db: str, dialect_name: str, no_collection: None
) -> None:
    queue, tag = new_queue(db, dialect_name)
    queue.close()
    assert open_connections(db, dialect_name, tag) == 0
