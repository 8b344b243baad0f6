"""readyq's Alembic migrations build exactly the schema that Queue.create_schema() builds."""

from __future__ import annotations

import importlib.util
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import readyq
from readyq import admin
from readyq.migrations import HEAD_REVISION, include_name, version_location

TABLES = ("jobs", "job_deps", "groups", "gate", "rate_limits", "rate_slots")


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
                out[r.name] = _norm(r.sql)
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
    if dialect_name in ("sqlite", "postgresql"):
        assert pk_names == {t: f"readyq_{t}_pk" for t in TABLES}
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
