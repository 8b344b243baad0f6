"""The benchmark still runs on each database: the reference loops drain their jobs exactly
once, readyq's run passes the benchmark's own checks (every job done once, the peak
in flight within the cap, the groups' shares, the dependency order), and so does each
peer's run on each database it supports (every job finished once, read from the peer's
own tables). A few hundred jobs each; no speed is asserted (``python bench/run.py``
measures it). The peers come with the ``bench`` extra; without it their tests skip."""

from __future__ import annotations

import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

import readyq

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import memory as memory_bench  # noqa: E402
import peers  # noqa: E402
import run  # noqa: E402

JOBS = 280  # 40 per weight unit of the groups (3:2:1:1)


@pytest.fixture
def server(
    db: str, dialect_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, str, str]]:
    """(database kind, the server's URL, the name of a database of this test's own): the
    benchmark makes its databases itself, next to the one the URL names; this one is
    dropped after the test. Its temporary files (SQLite databases, timings) go to the
    test's own directory."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    kind = dialect_name
    name = "bench_t" + uuid.uuid4().hex[:10]
    url = sa.make_url(db)
    if kind == "postgresql":
        url = url.set(query={})  # not the test's own search path: another database
    server_url = url.render_as_string(hide_password=False)
    yield kind, server_url, name
    if kind == "sqlite":
        return
    admin = sa.create_engine(server_url, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
    with admin.connect() as conn:
        force = " WITH (FORCE)" if kind == "postgresql" else ""
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}{force}")
    admin.dispose()


@pytest.mark.parametrize("form", peers.FORMS)
def test_a_reference_loop_finishes_every_job_once(
    server: tuple[str, str, str], form: str
) -> None:
    kind, url, name = server
    if kind == "postgresql":
        url = peers.libpq_url(url)
    # Two processes claim at once: the loop raises unless each job was run and recorded
    # done exactly once.
    result = peers.run_minimal_loop(url, JOBS, 2, 25, form=form, db_name=name)
    assert result.system == f"{form} loop (batch 25)"
    assert result.jobs == JOBS
    assert result.jobs_per_s > 0
    assert result.commits_per_job is not None and result.commits_per_job >= 2 / 25


def test_the_loops_refuse_an_unknown_form() -> None:
    with pytest.raises(ValueError, match="form must be one of"):
        peers.run_minimal_loop("sqlite://", 10, 1, 5, form="each")


@pytest.mark.parametrize("form", peers.FORMS)
def test_the_sqlite_loops_claim_through_the_ready_index(tmp_path: Path, form: str) -> None:
    """The loop's table is analyzed while every job is ready; its claim must still read
    the ready index, not the table in id order past the jobs already done."""
    import sqlite3

    import peer_worker

    path = tmp_path / "loop.db"
    peers.sqlite_loop_table(path, 2_000, form)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("UPDATE bench_jobs SET state = 'done' WHERE id <= 1500")
        claim = peer_worker.SQLITE_CLAIM[form]
        params = (7, 60, 100) if form == "correct" else ("me", 100)
        plan = [r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {claim}", params)]
        assert any("INDEX bench_jobs_ready" in step for step in plan), plan
        assert not any(step in ("SCAN bench_jobs", "SCAN TABLE bench_jobs") for step in plan), plan
        rows = conn.execute(claim, params).fetchall()
    finally:
        conn.close()
    assert sorted(r[0] for r in rows) == list(range(1501, 1601))


@pytest.mark.parametrize("chains", [False, True], ids=["independent", "chains"])
def test_readyq_passes_the_benchmarks_checks(
    server: tuple[str, str, str], chains: bool
) -> None:
    kind, url, name = server
    row = run.run_readyq(kind, url, JOBS, 2, 10, chains=chains, db_name=name)
    assert row.jobs == JOBS
    assert row.cap == 20
    assert row.peak is not None and 0 < row.peak <= row.cap
    if chains:
        assert row.edges == JOBS - JOBS // run.CHAIN
        assert row.early == 0
    else:
        assert row.shares is not None and set(row.shares) == set(run.GROUPS)
        assert sum(row.shares.values()) == pytest.approx(1.0)


def test_readyq_with_a_resource_passes_the_benchmarks_checks(
    server: tuple[str, str, str]
) -> None:
    kind, url, name = server
    # A capacity below the global cap of 20, so that the claim has to hold it.
    row = run.run_readyq(kind, url, JOBS, 2, 10, db_name=name, resource=6)
    assert row.jobs == JOBS and row.resource_cap == 6
    assert row.resource_peak is not None and 0 < row.resource_peak <= 6
    assert row.peak is not None and row.peak <= 6


def test_the_resource_check_counts_overlapping_units(queue: readyq.Queue) -> None:
    queue.resource(run.RESOURCE, capacity=10)
    ids = [queue.enqueue("t", uses={run.RESOURCE: 1}) for _ in range(4)]
    t = queue.store.tables.jobs
    spans = {ids[0]: (0.0, 10.0), ids[1]: (1.0, 2.0), ids[2]: (1.5, 3.0), ids[3]: (2.0, 4.0)}
    with queue.engine.begin() as conn:
        for job_id, (start, end) in spans.items():
            conn.execute(sa.update(t).where(t.c.id == job_id)
                         .values(state="done", started_at=start, finished_at=end))
    # Three at once in [1.5, 2.0): the job ending at 2.0 and the one starting then do not
    # overlap.
    assert run.check_resource(queue) == 3
    queue.enqueue("t")  # a job without the unit is a failed check, not a smaller peak
    with queue.engine.begin() as conn:
        conn.execute(sa.update(t).where(t.c.uses.is_(None)).values(started_at=0.0,
                                                                   finished_at=1.0))
    with pytest.raises(RuntimeError, match="not one unit"):
        run.check_resource(queue)


def test_the_sqlite_replay_drains_every_layout(tmp_path: Path) -> None:
    import sqlite3

    import sqlite_replay

    base = tmp_path / "base.db"
    sqlite_replay.build_base(base, JOBS)
    for layout in sqlite_replay.LAYOUTS:
        work = tmp_path / f"{layout}.db"
        # replay() raises unless every job was claimed once and finished done.
        assert sqlite_replay.replay(base, work, layout, JOBS) > 0
        conn = sqlite3.connect(work)
        try:
            states = dict(conn.execute(
                "SELECT state, count(*) FROM readyq_jobs GROUP BY state"
            ).fetchall())
            results = conn.execute(
                "SELECT count(*) FROM readyq_jobs WHERE result = 'null'"
            ).fetchone()[0]
        finally:
            conn.close()
        assert states == {"done": JOBS}, layout
        assert results == JOBS, layout


def test_the_sqlite_replay_refuses_an_unknown_layout(capsys: pytest.CaptureFixture[str]) -> None:
    import sqlite_replay

    with pytest.raises(SystemExit):
        sqlite_replay.main(["--layouts", "current,sideways"])
    assert "unknown layout(s): sideways" in capsys.readouterr().err


def need(module: str, note: str = "") -> None:
    """Skip unless ``module`` imports: the peers are not among the test dependencies."""
    if peers.missing_module(module) is not None:
        pytest.skip(f"{module} is not installed: it comes with the bench extra "
                    f"(pip install -e '.[bench]'){note}")


def peer_url(kind: str, url: str) -> str:
    """The URL the peers' adapters take for a server of ``kind`` (SQLite: a file of their
    own, in the test's temporary directory)."""
    if kind == "sqlite":
        return "sqlite://"
    return peers.libpq_url(url) if kind == "postgresql" else url


def assert_peer_row(result: peers.PeerResult, database: str) -> None:
    assert result.jobs == JOBS
    assert result.processes == 2
    assert result.database == database
    assert result.jobs_per_s > 0
    assert result.cpu_us_per_job > 0


def test_huey_passes_the_benchmarks_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    need("huey")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    # Two consumer workers on one SQLite file: raises unless every task has its result
    # stored, none is left queued or scheduled, and the no-op ran once per task.
    result = peers.run_huey(JOBS, 2)
    assert result.system == "huey (SqliteHuey)"
    assert_peer_row(result, "SQLite")


def test_django_tasks_passes_the_benchmarks_checks(server: tuple[str, str, str]) -> None:
    need("django_tasks_db")
    kind, url, name = server
    # Two db_worker processes: raises unless every task's row is SUCCESSFUL, each was
    # claimed by one worker only, and the no-op ran once per task.
    result = peers.run_django_tasks(peer_url(kind, url), JOBS, 2, db_name=name)
    assert result.system == "django-tasks (db_worker)"
    assert_peer_row(result, {"sqlite": "SQLite", "postgresql": "PostgreSQL",
                             "mariadb": "MariaDB"}[kind])
    assert (result.commits_per_job is not None) == (kind == "postgresql")


@pytest.mark.parametrize("db", ["sqlite", "postgresql"], indirect=True)
def test_dbos_passes_the_benchmarks_checks(server: tuple[str, str, str]) -> None:
    need("dbos")
    kind, url, name = server
    # Two DBOS processes: raises unless every workflow succeeded after exactly one
    # dispatch (DBOS counts them in recovery_attempts) and the no-op ran once per job.
    result = peers.run_dbos(peer_url(kind, url), JOBS, 2, db_name=name)
    assert result.system == f"DBOS (worker concurrency {peers.DBOS_WORKER_CONCURRENCY})"
    assert_peer_row(result, {"sqlite": "SQLite", "postgresql": "PostgreSQL"}[kind])


def test_dbos_refuses_mariadb() -> None:
    with pytest.raises(ValueError, match="SQLite and PostgreSQL only"):
        peers.run_dbos("mysql+pymysql://root@127.0.0.1:3306/test", 10, 1)


@pytest.mark.parametrize("db", ["postgresql"], indirect=True)
def test_chancy_passes_the_benchmarks_checks(server: tuple[str, str, str]) -> None:
    need("chancy", "; Chancy needs Python 3.11 or later")
    _, url, name = server
    # Two workers, the queue declared at the start: raises unless every job succeeded
    # at its first attempt and the no-op ran once per job.
    result = peers.run_chancy(peers.libpq_url(url), JOBS, 2, db_name=name)
    assert result.system == f"Chancy (concurrency {peers.CHANCY_CONCURRENCY})"
    assert_peer_row(result, "PostgreSQL")
    assert result.commits_per_job is not None and result.commits_per_job > 0


def test_the_memory_benchmark_measures_every_call(queue: readyq.Queue) -> None:
    row = memory_bench.measure(queue, 5)
    assert set(row) == {"first state read", "save_state", "step (stored)",
                        "step (already stored)", "progress (throttled)"}
    assert all(v > 0 for v in row.values())
