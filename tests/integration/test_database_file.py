"""A SQLite file that is not a database, or a corrupt one, is named and reported, once:
no worker waits it out as if the database were down, and nothing writes to it."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

import readyq
from readyq.cli import main

TEXT = b"name,size\nreport.pdf,1024\n" * 200


def _worker_result(queue: readyq.Queue) -> tuple[list[BaseException], readyq.Worker]:
    worker = queue.worker(poll_interval=0.01)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            worker.run(until_idle=True, handle_signals=False)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(20)
    if thread.is_alive():  # still waiting it out as if the database were down
        worker.stop()
        thread.join(20)
        pytest.fail(f"the worker kept retrying: {worker.stats}")
    return errors, worker


def test_a_file_that_is_not_a_database_is_named_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    path.write_bytes(TEXT)
    queue = readyq.Queue(f"sqlite:///{path}")
    with pytest.raises(readyq.DatabaseFileUnusable, match="is not a SQLite database") as e:
        queue.enqueue("t")
    assert repr(str(path)) in str(e.value)
    with pytest.raises(readyq.DatabaseFileUnusable):
        queue.create_schema()

    @queue.handler("t")
    def t(job: readyq.Job) -> None:
        raise AssertionError("nothing can be claimed")

    errors, worker = _worker_result(queue)
    assert [type(x) for x in errors] == [readyq.DatabaseFileUnusable]
    assert worker.stats.db_errors == 0
    queue.close()
    assert path.read_bytes() == TEXT


def test_the_cli_says_what_the_file_is_and_exits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "jobs.db"
    path.write_bytes(TEXT)
    assert main(["--db", f"sqlite:///{path}", "status"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a SQLite database" in err and str(path) in err
    assert path.read_bytes() == TEXT


def _corrupt(path: Path) -> None:
    """Overwrite every third page after the first two: the tables' b-trees break, the
    header and the schema still read."""
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(path.read_bytes())
    page = 4096
    for offset in range(2 * page, len(data), 3 * page):
        data[offset : offset + page] = b"\x13" * page
    path.write_bytes(bytes(data))


def test_a_worker_stops_on_a_corrupt_database(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    queue = readyq.Queue(f"sqlite:///{path}")
    queue.create_schema()
    queue.enqueue_many([readyq.JobSpec("t", {"pad": "x" * 200}) for _ in range(2000)])
    queue.close()
    _corrupt(path)

    queue = readyq.Queue(f"sqlite:///{path}")

    @queue.handler("t")
    def t(job: readyq.Job) -> None:
        return None

    errors, worker = _worker_result(queue)
    assert len(errors) == 1 and "malformed" in str(errors[0]), errors
    assert worker.stats.db_errors == 0
    queue.close()
