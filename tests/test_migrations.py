"""readyq's Alembic migrations build exactly the schema that Queue.create_schema() builds."""

from __future__ import annotations

import importlib.util
import re
import textwrap
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import readyq
from readyq import admin
from readyq.claim_order import ClaimOrder
from readyq.migrations import HEAD_REVISION, include_name, version_location

TABLES = (
    "jobs", "job_deps", "groups", "gate", "rate_limits", "rate_slots", "resources", "reservations",
    "attempts",
    "pauses",
    "steps",
    "checkpoints",
    "schedules",
    "schedule_fires",
)


def _root_conftest() -> Any:
    """tests/conftest.py by path: ``from conftest import`` finds whichever conftest module
    pytest imported last when several directories have one."""
    spec = importlib.util.spec_from_file_location(
        "readyq_tests_root_conftest", Path(__file__).with_name("conftest.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_databases = _root_conftest()
make_db, drop_db = _databases.make_db, _databases.drop_db


def run_until_idle(queue: readyq.Queue) -> readyq.WorkerStats:
    return queue.run_worker(until_idle=True, concurrency=4, poll_interval=0.02,
                            lease_ttl=10.0, heartbeat_interval=2.0)


def _norm(sql: str | None) -> str:
    return re.sub(r"\s+", " ", sql or "").strip()


def reflect(url: str, prefix: str = "readyq_") -> dict[str, Any]:
    """Tables, columns, keys and indexes as the database reports them."""
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        with engine.connect() as conn:
            insp = sa.inspect(conn)
            names = sorted(n for n in insp.get_table_names() if n.startswith(prefix))
            out: dict[str, Any] = {"tables": names}
            for name in names:
                if name.endswith("alembic_version"):
                    continue
                out[name] = {
                    "columns": [
                        (c["name"], c["type"].compile(dialect=engine.dialect), c["nullable"],
                         c.get("autoincrement"))
                        for c in insp.get_columns(name)
                    ],
                    "pk": insp.get_pk_constraint(name),
                    "fks": sorted(
                        (f["name"], tuple(f["constrained_columns"]), f["referred_table"],
                         tuple(f["referred_columns"]), tuple(sorted(f["options"].items())))
                        for f in insp.get_foreign_keys(name)
                    ),
                    "indexes": sorted(
                        (i["name"], tuple(i["column_names"]), bool(i["unique"]),
                         tuple(sorted(i.get("column_sorting", {}).items())),
                         tuple(sorted((k, _norm(str(v)))
                                      for k, v in i.get("dialect_options", {}).items())))
                        for i in insp.get_indexes(name)
                    ),
                    "unique": insp.get_unique_constraints(name),
                    "checks": insp.get_check_constraints(name),
                }
            out["native"] = native_definitions(conn, names)
            out["gate"] = conn.execute(
                sa.text(f"SELECT id, vclock, seq FROM {prefix}gate")
            ).all() if f"{prefix}gate" in names else None
            return out
    finally:
        engine.dispose()


def native_definitions(conn: sa.Connection, names: list[str]) -> dict[str, str]:
    """The database's own text of each table and index (partial predicates included)."""
    name = conn.dialect.name
    names = [n for n in names if not n.endswith("alembic_version")]
    out: dict[str, str] = {}
    if name == "sqlite":
        for r in conn.exec_driver_sql("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL"):
            if r.name in names or any(r.name.startswith(n) for n in names):
                # A table rebuilt in batch mode is renamed into place, and SQLite then
                # writes its name quoted: CREATE TABLE "readyq_jobs" is the same table.
                out[r.name] = _norm(r.sql).replace(f'CREATE TABLE "{r.name}"',
                                                   f"CREATE TABLE {r.name}")
    elif name == "postgresql":
        for r in conn.execute(
            sa.text("SELECT indexname, indexdef FROM pg_indexes "
                    "WHERE schemaname = current_schema() AND tablename = ANY(:names)"),
            {"names": names},
        ):
            out[r.indexname] = r.indexdef.replace(conn.execute(
                sa.text("SELECT current_schema()")).scalar_one() + ".", "")
    else:
        for n in names:
            create = conn.exec_driver_sql(f"SHOW CREATE TABLE `{n}`").one()[1]
            lines = re.sub(r" AUTO_INCREMENT=\d+", "", create).splitlines()
            # Index lines follow creation order, which create_all() does not fix.
            keys = sorted(x.rstrip(",") for x in lines if x.lstrip().startswith("KEY "))
            out[n] = "\n".join([x for x in lines if not x.lstrip().startswith("KEY ")] + keys)
    return out


@pytest.fixture
def second_db(dialect_name: str, tmp_path: Path) -> Any:
    other = tmp_path / "second"
    other.mkdir()
    url, label = make_db(dialect_name, other)
    try:
        yield url
    finally:
        drop_db(dialect_name, label)


def test_migrate_builds_the_schema_create_schema_builds(
    db: str, second_db: str, dialect_name: str
) -> None:
    assert admin.migrate(db) == HEAD_REVISION
    with readyq.Queue(second_db) as queue:
        queue.create_schema()
    migrated, created = reflect(db), reflect(second_db)

    expected = sorted(f"readyq_{t}" for t in TABLES)
    assert migrated["tables"] == sorted([*expected, "readyq_alembic_version"])
    assert created["tables"] == expected
    for table in TABLES:
        name = f"readyq_{table}"
        assert migrated[name] == created[name], name
    assert migrated["native"] == created["native"]
    assert migrated["gate"] == created["gate"] == [(1, 0.0, 0)]

    jobs = migrated["readyq_jobs"]
    assert jobs["pk"]["constrained_columns"] == ["id"]
    assert ("readyq_jobs_parent_id_fk", ("parent_id",), "readyq_jobs", ("id",), ()) in jobs["fks"]
    index_names = {i[0] for i in jobs["indexes"]}
    assert {"readyq_jobs_ready_group_ix", "readyq_jobs_state_run_after_ix",
            "readyq_jobs_state_lease_expires_ix", "readyq_jobs_parent_id_ix"} <= index_names
    deps_fks = {f[0]: f for f in migrated["readyq_job_deps"]["fks"]}
    assert deps_fks["readyq_job_deps_job_id_fk"][4] == (("ondelete", "CASCADE"),)
    native = " ".join(migrated["native"].values())
    pk_names = {t: migrated[f"readyq_{t}"]["pk"]["name"] for t in TABLES}
    if dialect_name == "postgresql":
        assert pk_names == {t: f"readyq_{t}_pk" for t in TABLES}
    elif dialect_name == "sqlite":
        # AUTOINCREMENT goes on the id column, where SQLAlchemy writes no name.
        assert pk_names == {t: None if t == "jobs" else f"readyq_{t}_pk" for t in TABLES}
        assert "id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT" in native
    else:  # MySQL and MariaDB call every primary key PRIMARY; SQLAlchemy reports None
        assert pk_names == {t: None for t in TABLES}
        assert "PRIMARY KEY (`id`)" in migrated["native"]["readyq_jobs"]
    if dialect_name in ("sqlite", "postgresql"):
        assert native.count("WHERE") >= 2 and "'ready'" in native
    else:
        assert "utf8mb4_bin" in native and "WHERE" not in native


def test_migrate_is_idempotent_and_a_queue_runs_on_the_migrated_schema(db: str) -> None:
    assert admin.migrate(db) == HEAD_REVISION
    assert admin.migrate(db) == HEAD_REVISION
    with readyq.Queue(db) as queue:
        @queue.handler("add")
        def add(job: readyq.Job) -> int:
            return int(job.args["a"]) + int(job.args["b"])

        first = queue.enqueue("add", {"a": 1, "b": 2})
        second = queue.enqueue("add", {"a": 3, "b": 4}, depends_on=[first])
        run_until_idle(queue)
        assert queue.get(first).result == 3
        assert queue.get(second).state is readyq.JobState.DONE
        assert admin.migrate(queue) == HEAD_REVISION
        assert queue.counts() == {"done": 2}
    assert reflect(db)["gate"][0][0] == 1


def test_existing_tables_are_refused_until_stamped_and_a_prefix_migrates_and_drops(
    db: str,
) -> None:
    with readyq.Queue(db) as queue:
        queue.create_schema()
        job = queue.enqueue("noop", {})
    with pytest.raises(admin.SchemaNotVersioned, match="migrate --stamp"):
        admin.migrate(db)
    assert admin.current_revision(db) is None
    assert admin.stamp(db) == HEAD_REVISION
    assert admin.migrate(db) == HEAD_REVISION
    with readyq.Queue(db) as queue:
        assert queue.get(job).state is readyq.JobState.READY

    assert admin.migrate(db, prefix="app_") == HEAD_REVISION
    names = reflect(db, "app_")["tables"]
    assert names == sorted(f"app_{t}" for t in (*TABLES, "alembic_version"))
    with readyq.Queue(db, prefix="app_") as queue:
        assert queue.counts() == {}
    assert admin.downgrade(db, prefix="app_") is None
    assert reflect(db, "app_")["tables"] == ["app_alembic_version"]
    assert admin.current_revision(db) == HEAD_REVISION  # the other prefix is untouched
    with pytest.raises(readyq.InvalidTablePrefix):
        admin.migrate(db, prefix="bad-prefix")


@pytest.mark.parametrize(
    ("url", "partial"),
    [("sqlite:///x.db", True), ("postgresql+psycopg://u:secret@h/db", True),
     ("mysql+pymysql://u@h/db", False)],
)
def test_offline_sql_for_each_database(url: str, partial: bool) -> None:
    sql = admin.migration_sql(url, prefix="q_")
    assert "CREATE TABLE q_jobs" in sql and "CREATE TABLE q_alembic_version" in sql
    assert "INSERT INTO q_gate (id, vclock, seq) VALUES (1, 0.0, 0)" in sql
    ready = re.search(r"CREATE INDEX q_jobs_ready_group_ix ON q_jobs [^;]*;", sql)
    assert ready is not None
    assert ("WHERE state = 'ready'" in ready.group(0)) is partial
    assert "secret" not in sql


def test_revisions_embed_in_an_application_alembic_environment(tmp_path: Path) -> None:
    """version_locations + -x readyq_prefix: readyq's branch next to the app's own."""
    from alembic import command
    from alembic.config import Config

    url = f"sqlite:///{tmp_path / 'app.db'}"
    env_dir = tmp_path / "migrations"
    (env_dir / "versions").mkdir(parents=True)
    (env_dir / "env.py").write_text(textwrap.dedent("""
        from alembic import context
        import sqlalchemy as sa
        from readyq.migrations import include_name

        config = context.config
        engine = sa.create_engine(config.get_main_option("sqlalchemy.url"), poolclass=sa.NullPool)
        with engine.connect() as connection:
            context.configure(connection=connection, target_metadata=None,
                              include_name=include_name("app_q_"))
            with context.begin_transaction():
                context.run_migrations()
            connection.commit()
        engine.dispose()
    """))
    (env_dir / "versions" / "a1_users.py").write_text(textwrap.dedent("""
        import sqlalchemy as sa
        from alembic import op

        revision = "a1"
        down_revision = None
        branch_labels = None
        depends_on = None

        def upgrade():
            op.create_table("users", sa.Column("id", sa.Integer, primary_key=True))

        def downgrade():
            op.drop_table("users")
    """))
    cfg = Config(cmd_opts=_x_args("readyq_prefix=app_q_"))
    cfg.set_main_option("script_location", str(env_dir))
    cfg.set_main_option("sqlalchemy.url", url)
    cfg.set_main_option("path_separator", "space")
    cfg.set_main_option("version_locations",
                        f"{env_dir / 'versions'} readyq:migrations/versions")
    command.upgrade(cfg, "heads")

    engine = sa.create_engine(url, poolclass=sa.NullPool)
    with engine.connect() as conn:
        names = set(sa.inspect(conn).get_table_names())
        heads = set(conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalars())
    engine.dispose()
    assert {"users", "alembic_version", "app_q_jobs", "app_q_job_deps", "app_q_groups",
            "app_q_gate"} <= names
    assert "app_q_alembic_version" not in names and "readyq_jobs" not in names
    assert heads == {"a1", HEAD_REVISION}
    assert Path(version_location()).is_dir()
    hook = include_name("app_q_")
    assert hook("users", "table", {}) and not hook("app_q_jobs", "table", {})
    with readyq.Queue(url, prefix="app_q_") as queue:
        queue.enqueue("noop", {})
        assert queue.counts() == {"ready": 1}


def _x_args(*pairs: str) -> Any:
    import argparse

    return argparse.Namespace(x=list(pairs))


# -- readyq_0007: SQLite ids are never given twice -----------------------------------------


def _sqlite_db(tmp_path: Path, name: str) -> str:
    return f"sqlite:///{tmp_path / name}"


def _populate(queue: readyq.Queue) -> set[int]:
    """Jobs of every kind and state, the finished ones in the middle pruned; return the
    ids given."""
    @queue.handler("work")
    def work(job: readyq.Job) -> int:
        return int(job.args["n"])

    @queue.handler("fail", max_attempts=1)
    def fail(job: readyq.Job) -> None:
        raise RuntimeError("on purpose")

    first = queue.enqueue("work", {"n": 1})
    given = {first, queue.enqueue("work", {"n": 2}, depends_on=[first])}
    box = queue.enqueue_container("batch")
    given |= {box, *(queue.enqueue("work", {"n": n}, parent=box) for n in (3, 4))}
    doomed = queue.enqueue("fail", {})
    given |= {doomed, queue.enqueue("work", {"n": 5}, depends_on=[doomed])}
    prunable = [queue.enqueue("work", {"n": n}, group="tenant") for n in (6, 7, 8)]
    given |= set(prunable)
    run_until_idle(queue)
    # Not finished: a ready job, one waiting for it, a live unique key, a later start.
    ready = queue.enqueue("work", {"n": 9}, unique_key="key-1", priority=3)
    given |= {ready, queue.enqueue("work", {"n": 10}, depends_on=[ready, first]),
              queue.enqueue("work", {"n": 11}, run_after=3600.0)}
    j = queue.store.tables.jobs
    with queue.engine.begin() as conn:
        conn.execute(sa.update(j).where(j.c.id.in_(prunable))
                     .values(finished_at=j.c.finished_at - 60.0))
    assert admin.prune(queue, older_than=30.0).deleted == 3
    assert max(given) not in prunable  # the largest id given is still in the table
    return given


def _rows(url: str) -> dict[str, Any]:
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        with engine.connect() as conn:
            return {
                "jobs": conn.exec_driver_sql("SELECT * FROM readyq_jobs ORDER BY id").all(),
                "deps": conn.exec_driver_sql(
                    "SELECT * FROM readyq_job_deps ORDER BY job_id, depends_on_id").all(),
                "sequence": conn.exec_driver_sql(
                    "SELECT seq FROM sqlite_sequence WHERE name = 'readyq_jobs'"
                ).scalars().all() if sa.inspect(conn).has_table("sqlite_sequence") else [],
                "tables": sorted(sa.inspect(conn).get_table_names()),
            }
    finally:
        engine.dispose()


def _assert_ids_never_return(url: str, given: set[int]) -> None:
    with readyq.Queue(url) as queue:
        @queue.handler("noop")
        def noop(job: readyq.Job) -> None:
            return None

        new = queue.enqueue("noop", {})
        assert new > max(given)
        run_until_idle(queue)
        assert admin.prune(queue, older_than=0.0).deleted >= 1
        assert queue.enqueue("noop", {}) > new  # the newest id was pruned: not given again


def _engine_with_foreign_keys(url: str) -> sa.Engine:
    """A pooled engine whose connections enforce foreign keys, as readyq's own do."""
    engine = sa.create_engine(url)

    @sa.event.listens_for(engine, "connect")
    def on(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.execute("PRAGMA foreign_keys = ON")

    return engine


@pytest.mark.parametrize(("through", "start"),
                         [("url", "readyq_0006"), ("engine", "readyq_0005")])
def test_sqlite_jobs_table_rebuilt_with_every_row_and_ids_never_return(
    tmp_path: Path, through: str, start: str
) -> None:
    """From the revision before on a plain connection (foreign keys off), and from an
    older one on an engine that enforces foreign keys, where the earlier revision's
    version update has opened the transaction by the time readyq_0007 runs."""
    url = _sqlite_db(tmp_path, "old.db")
    # Populated by this readyq at the head, then taken down to the revision to start from
    # (the jobs of later revisions' features are left out).
    assert admin.migrate(url) == HEAD_REVISION
    with readyq.Queue(url) as queue:
        given = _populate(queue)
    assert admin.downgrade(url, revision=start) == start
    before = _rows(url)
    assert before["deps"] and any(r.parent_id is not None for r in before["jobs"])
    assert before["sequence"] == []  # no AUTOINCREMENT yet

    if through == "url":
        assert admin.migrate(url) == HEAD_REVISION
    else:
        engine = _engine_with_foreign_keys(url)
        try:
            with engine.connect() as conn:
                assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert admin.migrate(engine) == HEAD_REVISION
            # The connection switched off for the rebuild never returns to the pool.
            with engine.connect() as one, engine.connect() as two:
                for conn in (one, two):
                    assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        finally:
            engine.dispose()

    after = _rows(url)
    # Every column as it was; the columns of later revisions (jobs.uses) come last, NULL.
    width = len(before["jobs"][0])
    assert [tuple(r)[:width] for r in after["jobs"]] == [tuple(r) for r in before["jobs"]]
    assert all(v is None for r in after["jobs"] for v in tuple(r)[width:])
    assert after["deps"] == before["deps"]
    assert set(before["tables"]) <= set(after["tables"])
    assert after["sequence"] == [max(r.id for r in before["jobs"])]
    created = _sqlite_db(tmp_path, "created.db")
    with readyq.Queue(created) as queue:
        queue.create_schema()
    migrated, fresh = reflect(url), reflect(created)
    for table in TABLES:
        assert migrated[f"readyq_{table}"] == fresh[f"readyq_{table}"], table
    assert migrated["native"] == fresh["native"]
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA foreign_key_check").all() == []
    engine.dispose()
    _assert_ids_never_return(url, given)


def test_sqlite_rebuild_refuses_to_run_with_foreign_keys_on_in_a_transaction(
    tmp_path: Path,
) -> None:
    """Dropping the old jobs table with foreign keys on would cascade every dependency
    edge away: where they cannot be switched off, readyq_0007 changes nothing."""
    from alembic import command
    from alembic.config import Config

    from readyq.migrations import PREFIX_ATTRIBUTE, script_location

    url = _sqlite_db(tmp_path, "old.db")
    admin.migrate(url)
    with readyq.Queue(url) as queue:
        _populate(queue)
    admin.downgrade(url, revision="readyq_0006")
    before = _rows(url)
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA foreign_keys = ON")
            conn.exec_driver_sql("UPDATE readyq_gate SET seq = seq")  # opens a transaction
            cfg = Config()
            cfg.set_main_option("script_location", script_location())
            cfg.attributes[PREFIX_ATTRIBUTE] = "readyq_"
            cfg.attributes["connection"] = conn
            with pytest.raises(admin.AdminError, match="foreign key enforcement off"):
                command.upgrade(cfg, "head")
            conn.rollback()
    finally:
        engine.dispose()
    assert _rows(url) == before
    assert admin.current_revision(url) == "readyq_0006"


def test_sqlite_downgrade_of_the_rebuild_keeps_every_row(tmp_path: Path) -> None:
    url = _sqlite_db(tmp_path, "old.db")
    admin.migrate(url)
    with readyq.Queue(url) as queue:
        given = _populate(queue)
    before = _rows(url)
    assert admin.downgrade(url, revision="readyq_0006") == "readyq_0006"
    down = _rows(url)
    width = len(down["jobs"][0])  # without the columns of later revisions (jobs.uses)
    assert [tuple(r) for r in down["jobs"]] == [tuple(r)[:width] for r in before["jobs"]]
    assert down["deps"] == before["deps"]
    reference = _sqlite_db(tmp_path, "reference.db")
    admin.migrate(reference, revision="readyq_0006")
    assert reflect(url)["native"] == reflect(reference)["native"]  # no AUTOINCREMENT
    assert admin.migrate(url) == HEAD_REVISION
    assert _rows(url) == before
    _assert_ids_never_return(url, given)


def test_sqlite_rebuild_that_finds_broken_references_changes_nothing(tmp_path: Path) -> None:
    """An edge to a job that does not exist (written with foreign keys off) stops the
    rebuild, and the whole rebuild is rolled back: no half-built table is left."""
    url = _sqlite_db(tmp_path, "old.db")
    admin.migrate(url)
    with readyq.Queue(url) as queue:
        _populate(queue)
    admin.downgrade(url, revision="readyq_0006")
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    with engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO readyq_job_deps VALUES (1, 999)")
    engine.dispose()
    before = _rows(url)
    with pytest.raises(admin.AdminError, match="refer to jobs that do not exist"):
        admin.migrate(url)
    assert _rows(url) == before
    assert admin.current_revision(url) == "readyq_0006"
    assert "AUTOINCREMENT" not in reflect(url)["native"]["readyq_jobs"]


def test_0018_keeps_only_delayed_jobs_in_the_run_after_index_and_goes_back(db: str) -> None:
    def run_after_index() -> str:
        engine = sa.create_engine(db, poolclass=sa.NullPool)
        try:
            with engine.connect() as conn:
                native = native_definitions(conn, ["readyq_jobs"])
        finally:
            engine.dispose()
        name = "readyq_jobs_state_run_after_ix"
        if name in native:
            return native[name]
        # MySQL and MariaDB: one table text, the index among its KEY lines.
        (line,) = [x for x in native["readyq_jobs"].splitlines() if name in x]
        return line

    assert admin.migrate(db, revision="readyq_0017") == "readyq_0017"
    before = run_after_index()
    with readyq.Queue(db) as queue:
        later = queue.enqueue("x", {}, run_after=timedelta(hours=1))
        now = queue.enqueue("x", {})
    assert admin.migrate(db) == HEAD_REVISION
    after = run_after_index()
    partial = sa.make_url(db).get_backend_name() in ("postgresql", "sqlite")
    assert ("IS NOT NULL" in after.upper()) == partial
    assert ("IS NOT NULL" in before.upper()) is False
    with readyq.Queue(db) as queue:
        (claimed,) = queue.store.claim_jobs(
            ClaimOrder(owner="t", cap=5, limit=5, lease_ttl=30.0, types=["x"])
        )
        assert claimed.id == now
        assert queue.counts() == {"ready": 1, "leased": 1}
        assert queue.get(later).state == "ready"
    assert admin.downgrade(db, revision="readyq_0017") == "readyq_0017"
    assert run_after_index() == before


def test_0016_adds_the_job_memory_to_a_database_of_0015_and_goes_back(db: str) -> None:
    assert admin.migrate(db, revision="readyq_0015") == "readyq_0015"
    with readyq.Queue(db) as queue:
        old = queue.enqueue("x", {})
    assert admin.migrate(db) == HEAD_REVISION
    with readyq.Queue(db) as queue:
        assert queue.get(old).key is None and queue.get(old).progress is None
        (new,) = queue.enqueue_many([readyq.JobSpec("x", {}, key="k")])
        assert queue.get(new).key == "k"
    assert admin.downgrade(db, revision="readyq_0015") == "readyq_0015"
    engine = sa.create_engine(db)
    try:
        names = set(sa.inspect(engine).get_table_names())
        columns = {c["name"] for c in sa.inspect(engine).get_columns("readyq_jobs")}
    finally:
        engine.dispose()
    assert not {"readyq_steps", "readyq_checkpoints"} & names and "batch_key" not in columns


def test_0015_adds_spawned_by_to_a_database_of_0014_and_goes_back(db: str) -> None:
    assert admin.migrate(db, revision="readyq_0014") == "readyq_0014"
    with readyq.Queue(db) as queue:
        old = queue.enqueue("x", {})
    assert admin.migrate(db) == HEAD_REVISION
    with readyq.Queue(db) as queue:
        assert queue.get(old).spawned_by is None
    assert admin.downgrade(db, revision="readyq_0014") == "readyq_0014"
    engine = sa.create_engine(db)
    try:
        columns = {c["name"] for c in sa.inspect(engine).get_columns("readyq_jobs")}
    finally:
        engine.dispose()
    assert "spawned_by" not in columns


def test_0014_adds_pauses_to_a_database_of_0013_and_goes_back(db: str) -> None:
    assert admin.migrate(db, revision="readyq_0013") == "readyq_0013"
    with readyq.Queue(db) as queue:
        job = queue.enqueue("x", {}, group="a")
    assert admin.migrate(db) == HEAD_REVISION
    with readyq.Queue(db) as queue:
        queue.pause(group="a")
        assert queue.store.claim_jobs(ClaimOrder(
            owner="t", cap=5, limit=5, lease_ttl=30.0, types=["x"],
        )) == []
        assert queue.resume(group="a")
        claimed = queue.store.claim_jobs(ClaimOrder(
            owner="t", cap=5, limit=5, lease_ttl=30.0, types=["x"],
        ))
        assert [c.id for c in claimed] == [job]
    assert admin.downgrade(db, revision="readyq_0013") == "readyq_0013"
    engine = sa.create_engine(db)
    try:
        names = set(sa.inspect(engine).get_table_names())
        columns = {c["name"] for c in sa.inspect(engine).get_columns("readyq_gate")}
    finally:
        engine.dispose()
    assert "readyq_pauses" not in names and "pauses" not in columns


def test_0013_adds_the_attempt_history_to_a_database_of_0012_and_goes_back(db: str) -> None:
    assert admin.migrate(db, revision="readyq_0012") == "readyq_0012"
    with readyq.Queue(db) as queue:
        job = queue.enqueue("x", {}, max_attempts=2)
    assert admin.migrate(db, revision="readyq_0013") == "readyq_0013"
    engine = sa.create_engine(db)
    try:
        inspector = sa.inspect(engine)
        assert "readyq_attempts" in set(inspector.get_table_names())
        assert "cancelled_by" in {c["name"] for c in inspector.get_columns("readyq_jobs")}
    finally:
        engine.dispose()
    assert admin.migrate(db) == HEAD_REVISION
    with readyq.Queue(db) as queue:
        admin.cancel(queue, job, by="cli")
        assert queue.get(job).cancelled_by == "cli"
    assert admin.downgrade(db, revision="readyq_0012") == "readyq_0012"
    engine = sa.create_engine(db)
    try:
        inspector = sa.inspect(engine)
        assert "readyq_attempts" not in set(inspector.get_table_names())
        assert "cancelled_by" not in {c["name"] for c in inspector.get_columns("readyq_jobs")}
    finally:
        engine.dispose()
