"""Servers that speak PostgreSQL's or MySQL's protocol without their locking are refused
when readyq first connects, by the version string they report (readyq.dialects.lookalikes).

The strings below are what those servers answer to ``SELECT version()`` (or, for
CockroachDB through SQLAlchemy's PostgreSQL dialect, the AssertionError SQLAlchemy raises
when it cannot parse that answer). The servers themselves are not part of the suite:
on PostgreSQL a function that shadows ``version()`` stands in for one of them.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

import readyq
from readyq.dialects import connect, dialect_class
from readyq.dialects.lookalikes import lookalike_problem

LOOKALIKES = [
    ("8.0.11-TiDB-v7.5.0", "TiDB"),
    ("5.7.25-TiDB-v6.1.0", "TiDB"),
    ("8.0.11-TiDB-v7.1.3-serverless", "TiDB"),
    ("8.0.30-Vitess", "Vitess"),
    ("5.7.9-vitess-10.0.0-SNAPSHOT", "Vitess"),
    ("8.0.23-PlanetScale", "Vitess"),
    (
        "CockroachDB CCL v23.1.11 (x86_64-pc-linux-gnu, built 2023/09/27 01:53:43, "
        "go1.19.13)",
        "CockroachDB",
    ),
    ("CockroachDB OSS v20.1.15 (x86_64-unknown-linux-gnu, built 2021/04/26)", "CockroachDB"),
    (
        "PostgreSQL 11.2-YB-2.20.1.0-b0 on x86_64-pc-linux-gnu, compiled by clang version "
        "16.0.6, 64-bit",
        "YugabyteDB",
    ),
    ("PostgreSQL 15.2-YB-2.25.0.0-b0 on x86_64-pc-linux-gnu, compiled by clang", "YugabyteDB"),
]

GENUINE = [
    "PostgreSQL 16.4 (Debian 16.4-1.pgdg120+1) on x86_64-pc-linux-gnu, compiled by gcc "
    "(Debian 12.2.0-14) 12.2.0, 64-bit",
    "PostgreSQL 15.20 (Debian 15.20-0+deb12u1) on x86_64-pc-linux-gnu, compiled by gcc "
    "(Debian 12.2.0-14+deb12u1) 12.2.0, 64-bit",
    "PostgreSQL 15.4 on aarch64-unknown-linux-gnu, compiled by aarch64-unknown-linux-gnu-gcc "
    "(GCC) 9.5.0, 64-bit",
    "8.0.36",
    "8.0.36-28",  # Percona Server
    "8.0.35-0ubuntu0.22.04.1",
    "8.4.3",
    "10.11.19-MariaDB-0+deb12u1",
    "11.4.2-MariaDB-ubu2404",
    "SQLite 3.45.1",
]


@pytest.mark.parametrize(("version", "name"), LOOKALIKES)
def test_lookalikes_are_named_with_their_reason(version: str, name: str) -> None:
    problem = lookalike_problem(version)
    assert problem is not None
    assert f"readyq cannot run on {name}" in problem
    assert version.split()[0] in problem  # the server's own words
    assert "readyq runs on PostgreSQL" in problem


@pytest.mark.parametrize("version", GENUINE)
def test_the_databases_readyq_runs_on_are_not_taken_for_lookalikes(version: str) -> None:
    assert lookalike_problem(version) is None


def test_a_lookalikes_own_sqlalchemy_dialect_is_refused_by_name() -> None:
    for name, server in (("cockroachdb", "CockroachDB"), ("tidb", "TiDB"),
                         ("yugabytedb", "YugabyteDB")):
        with pytest.raises(readyq.UnsupportedDatabase, match=f"cannot run on {server}"):
            dialect_class(name)


def test_sqlalchemys_failure_to_parse_cockroachdbs_version_is_refused_by_name() -> None:
    """SQLAlchemy's PostgreSQL dialect raises an AssertionError naming the version string
    at the first connection: ``connect`` turns it into UnsupportedDatabase."""

    class Refusing:
        def connect(self) -> None:
            raise AssertionError(
                "Could not determine version from string 'CockroachDB CCL v23.1.11 "
                "(x86_64-pc-linux-gnu, built 2023/09/27 01:53:43, go1.19.13)'"
            )

    with pytest.raises(readyq.UnsupportedDatabase, match="cannot run on CockroachDB"):
        connect(Refusing())  # type: ignore[arg-type]

    class Other:
        def connect(self) -> None:
            raise AssertionError("something else")

    with pytest.raises(AssertionError, match="something else"):
        connect(Other())  # type: ignore[arg-type]


def test_every_test_server_reports_a_version_that_is_not_a_lookalike(
    queue: readyq.Queue,
) -> None:
    with queue.engine.connect() as conn:
        text = queue.store.dialect.server_text(conn)
    assert text
    assert lookalike_problem(text) is None


def test_a_queue_on_a_lookalike_is_refused_before_anything_is_written(
    db: str, dialect_name: str
) -> None:
    if dialect_name != "postgresql":
        pytest.skip("only PostgreSQL lets a function stand in for version(): by search_path")
    schema = sa.make_url(db).query["options"].split("=", 1)[1]
    admin = sa.create_engine(db, poolclass=sa.NullPool)
    with admin.begin() as conn:
        conn.exec_driver_sql(
            f"CREATE FUNCTION {schema}.version() RETURNS text LANGUAGE sql AS "
            "$$ SELECT 'PostgreSQL 15.2-YB-2.25.0.0-b0 on x86_64-pc-linux-gnu, compiled by "
            "clang version 17.0.6, 64-bit' $$"
        )
    admin.dispose()
    # The schema before pg_catalog: an unqualified version() is the stand-in.
    url = sa.make_url(db).update_query_dict({"options": f"-csearch_path={schema},pg_catalog"})
    q = readyq.Queue(url)
    try:
        with pytest.raises(readyq.UnsupportedDatabase, match="cannot run on YugabyteDB"):
            q.create_schema()
        with pytest.raises(readyq.UnsupportedDatabase, match="READ COMMITTED"):
            q.enqueue("t")
    finally:
        q.close()
    check = sa.create_engine(db, poolclass=sa.NullPool)
    try:
        assert not sa.inspect(check).get_table_names()
    finally:
        check.dispose()
