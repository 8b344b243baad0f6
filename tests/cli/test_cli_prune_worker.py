"""`readyq prune` and `readyq worker`."""

from __future__ import annotations

import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

import readyq
from readyq import JobState

from .support import Run, db_now, set_rows

DAY = 86400.0


def remaining(queue: readyq.Queue) -> tuple[set[int], set[tuple[int, int]]]:
    t = queue.store.tables
    with queue.engine.connect() as conn:
        jobs = {int(x) for x in conn.execute(sa.select(t.jobs.c.id)).scalars()}
        edges = {(int(r.job_id), int(r.depends_on_id))
                 for r in conn.execute(sa.select(t.deps.c.job_id, t.deps.c.depends_on_id))}
    return jobs, edges


def test_prune_never_deletes_what_a_remaining_job_needs(migrated: Run, mq: readyq.Queue) -> None:
    cli = migrated
    q = mq
    # Old and finished: a chain a -> b, a container k with two children.
    a = q.enqueue("x", {})
    b = q.enqueue("x", {}, depends_on=[a])
    k = q.enqueue_container("box")
    k1 = q.enqueue("x", {}, parent=k)
    k2 = q.enqueue("x", {}, parent=k)
    # Old and finished, but an unfinished job depends on it.
    c = q.enqueue("x", {})
    waiting = q.enqueue("x", {}, depends_on=[c])
    # Old and finished, but a recently finished job depends on it.
    e = q.enqueue("x", {})
    recent = q.enqueue("x", {}, depends_on=[e])
    # An old container whose child finished recently, and an old unfinished-looking row.
    box = q.enqueue_container("box")
    fresh_child = q.enqueue("x", {}, parent=box)
    # More old, independent rows to make several batches.
    extra = [q.enqueue("x", {}) for _ in range(5)]

    now = db_now(q)
    old_done = [a, b, k, k1, k2, c, e, box, *extra]
    set_rows(q, old_done, state="done", finished_at=now - 10 * DAY)
    set_rows(q, [recent], state="failed", finished_at=now - 1 * DAY)
    set_rows(q, [fresh_child], state="done", finished_at=now - 1 * DAY)
    set_rows(q, [waiting], state="waiting", pending_deps=1)

    bad = cli("prune", "--older-than", "a week")
    assert bad.one_line_error and bad.code == 2 and "--older-than" in bad.err

    result = cli("prune", "--older-than", "7d", "--batch-size", "2", "--json")
    assert result.code == 0, result.err
    report = result.json()
    assert report["deleted"] == 10 and report["candidates"] == 13 and report["kept"] == 3
    assert report["edges_deleted"] == 1  # b -> a
    jobs, edges = remaining(q)
    assert jobs == {c, waiting, e, recent, box, fresh_child}
    assert edges == {(waiting, c), (recent, e)}
    assert q.get(waiting).depends_on == (c,)

    # Twelve hours: recent and fresh_child now qualify, so e and box follow them.
    text = cli("prune", "--older-than", "12h")
    assert text.code == 0
    assert "pruned 4 job(s) and 1 dependency row(s)" in text.out and "kept 1" in text.out
    assert remaining(q) == ({c, waiting}, {(waiting, c)})
    again = cli("prune", "--older-than", "0")
    assert again.code == 0 and "pruned 0 job(s)" in again.out and "kept 1" in again.out
    assert remaining(q) == ({c, waiting}, {(waiting, c)})
    assert q.get(c).state is JobState.DONE


@pytest.fixture
def app_module(db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A module defining the application's Queue, importable from the working directory.

    Once the test is over, the queues the module made are closed and the module
    forgotten: the module stays imported otherwise, and its pooled connections with it.
    """
    name = f"readyq_app_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(f"""
        import readyq

        queue = readyq.Queue({db!r})
        not_a_queue = 42

        @queue.handler("square")
        def square(job):
            return job.args["n"] ** 2

        import os

        @queue.handler("whose")
        def whose(job):
            return os.getpid()

        import gc, threading, time
        _lock = threading.Lock()
        _running = [0]

        @queue.handler("overlap")
        def overlap(job):
            # How many of these ran at once, and whether the heap was frozen meanwhile.
            with _lock:
                _running[0] += 1
                seen = _running[0]
            time.sleep(0.2)
            with _lock:
                _running[0] -= 1
            return {{"at_once": seen, "frozen": gc.get_freeze_count() > 0}}

        def make_queue():
            return queue

        unmigrated = readyq.Queue({db!r}, prefix="nothere_")
        unmigrated.handler("square")(square)

        scheduled = readyq.Queue({db!r})
        scheduled.handler("square")(square)
        scheduled.schedule("nightly", cron="0 3 * * *",
                           job=lambda at: readyq.JobSpec("square", {{"n": 1}}))
    """))
    monkeypatch.chdir(tmp_path)
    yield name
    module = sys.modules.pop(name, None)
    if module is not None:
        for value in vars(module).values():
            if isinstance(value, readyq.Queue):
                value.close()


def test_worker_runs_the_apps_handlers(migrated: Run, mq: readyq.Queue, app_module: str) -> None:
    cli = migrated
    ids = [int(cli("enqueue", "square", "--args", f'{{"n": {n}}}').out) for n in range(4)]
    result = cli("worker", "--app", f"{app_module}:queue", "--until-idle", "--concurrency", "2",
                 "--poll-interval", "0.02", "--heartbeat-interval", "1", "--lease-ttl", "5",
                 "--json")
    assert result.code == 0, result.err
    stats = result.json()
    assert stats["done"] == 4 and stats["failed"] == 0
    assert f"readyq worker {stats['worker_id']}" in result.err
    assert [mq.get(i).result for i in ids] == [0, 1, 4, 9]
    factory = cli("worker", "--app", f"{app_module}:make_queue", "--until-idle")
    assert factory.code == 0 and "stopped: claimed 0" in factory.out
    assert "--db is ignored" in factory.err

    cases = {
        ("--app", f"{app_module}:queue", "--max-running", "0"): "max_running must be",
        ("--app", f"{app_module}:queue", "--shutdown-grace", "-1"): "shutdown_grace must be",
        ("--app", "nomodule_here_xyz:queue"): "no module named 'nomodule_here_xyz'",
        ("--app", f"{app_module}:missing"): "has no attribute 'missing'",
        ("--app", f"{app_module}:not_a_queue"): "is a int, not a readyq.Queue",
        ("--app", app_module): "must look like module:attribute",
        ("--app", f"{app_module}:queue", "--heartbeat-interval", "10", "--lease-ttl", "5"):
            "at most half",
        ("--app", f"{app_module}:queue", "--type", "cube"): "no handler registered",
    }
    for argv, message in cases.items():
        failed = cli("worker", *argv, url=None)
        assert failed.one_line_error and failed.code == 2, (argv, failed)
        assert message in failed.err, (argv, failed.err)
    missing = cli("worker", "--app", f"{app_module}:unmigrated", "--until-idle", url=None)
    assert missing.one_line_error and missing.code == 1
    assert "prefix 'nothere_' are missing: run `readyq migrate`" in missing.err


def test_worker_options_reach_the_worker(migrated: Run, mq: readyq.Queue, app_module: str) -> None:
    """--max-running bounds what the process runs of the cap; --no-freeze-gc leaves the
    garbage collector alone (the default freezes the heap while the worker runs)."""
    cli = migrated
    app = f"{app_module}:queue"
    common = ("--until-idle", "--concurrency", "3", "--poll-interval", "0.02",
              "--heartbeat-interval", "1", "--lease-ttl", "5", "--type", "overlap")

    def results(*options: str) -> list[dict[str, object]]:
        ids = [int(cli("enqueue", "overlap").out) for _ in range(3)]
        result = cli("worker", "--app", app, *common, *options)
        assert result.code == 0, result.err
        return [mq.get(i).result for i in ids]

    free = results()
    assert max(r["at_once"] for r in free) > 1 and all(r["frozen"] for r in free)
    bounded = results("--max-running", "1", "--shutdown-grace", "5", "--no-freeze-gc")
    assert all(r["at_once"] == 1 and not r["frozen"] for r in bounded)


def test_worker_no_schedules_leaves_the_apps_schedules_alone(
    migrated: Run, mq: readyq.Queue, app_module: str
) -> None:
    cli = migrated
    quiet = cli("worker", "--app", f"{app_module}:scheduled", "--until-idle", "--no-schedules")
    assert quiet.code == 0, quiet.err
    assert mq.schedules() == []  # no worker looked at it: not even its row is stored
    firing = cli("worker", "--app", f"{app_module}:scheduled", "--until-idle")
    assert firing.code == 0, firing.err
    assert [s.name for s in mq.schedules()] == ["nightly"]


def test_worker_isolation_options_run_handlers_in_child_processes(
    migrated: Run, mq: readyq.Queue, app_module: str
) -> None:
    cli = migrated
    ids = [int(cli("enqueue", "whose").out) for _ in range(3)]
    result = cli("worker", "--app", f"{app_module}:queue", "--until-idle", "--type", "whose",
                 "--poll-interval", "0.02", "--isolation", "process", "--kill-grace", "1",
                 "--max-jobs-per-child", "1", "--max-memory-per-child", "2048", "--json")
    assert result.code == 0, result.err
    pids = {mq.get(i).result for i in ids}
    assert len(pids) == 3  # a child per job (max 1 job each), none the worker itself
    bad = cli("worker", "--app", f"{app_module}:queue", "--isolation", "process",
              "--kill-grace", "0")
    assert bad.code == 2 and "kill_grace must be" in bad.err


def test_worker_prepares_before_its_first_claim(
    migrated: Run, mq: readyq.Queue, app_module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`readyq worker` rehearses its claim (``Worker.prepare``) before it runs, so that
    the first claim does not also build and compile the loop's SQL."""
    cli = migrated
    seen: list[tuple[str, int]] = []
    prepare, run = readyq.Worker.prepare, readyq.Worker.run

    def recording_prepare(self: readyq.Worker) -> None:
        prepare(self)
        seen.append(("prepare", self.stats.claimed))

    def recording_run(self: readyq.Worker, **kwargs: object) -> readyq.WorkerStats:
        seen.append(("run", self.stats.claimed))
        return run(self, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(readyq.Worker, "prepare", recording_prepare)
    monkeypatch.setattr(readyq.Worker, "run", recording_run)
    ids = [int(cli("enqueue", "square", "--args", f'{{"n": {n}}}').out) for n in range(3)]
    result = cli("worker", "--app", f"{app_module}:queue", "--until-idle",
                 "--poll-interval", "0.02", "--json")
    assert result.code == 0, result.err
    assert seen == [("prepare", 0), ("run", 0)]
    # The rehearsal kept nothing: the jobs ran once each, as if it had not been.
    assert result.json()["claimed"] == 3
    assert [mq.get(i).result for i in ids] == [0, 1, 4]
    assert all(mq.get(i).attempts == 1 for i in ids)
