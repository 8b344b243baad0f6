"""The three claim branches, checked as compiled SQL and on the live servers."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql, sqlite

import readyq
from readyq.claim_order import ClaimOrder
from readyq.dialects import ClaimRequest, MySQLDialect, PostgresDialect, SQLiteDialect
from readyq.dialects.mysql import check_version
from readyq.model import IN_FLIGHT_STATES
from readyq.schema import build_tables
from readyq.sql.ready import in_flight_by_group

T = build_tables("readyq_")
ORDER = ClaimOrder(owner="w", cap=7, limit=7, lease_ttl=30.0, types=None)
REQ = ClaimRequest(order=ORDER, group="g", limit=7, types=["a", "b"])


def compiled(stmt: sa.ClauseElement, dialect: sa.Dialect) -> str:
    return " ".join(str(stmt.compile(dialect=dialect)).upper().split()).replace("( ", "(")


@pytest.mark.parametrize(
    ("is_mariadb", "version"),
    [(False, (8, 0, 1)), (False, (8, 4, 3)), (True, (10, 6, 0)), (True, (10, 11, 19))],
)
@pytest.mark.parametrize("types", [["a"], ["a", "b"], [f"t{i}" for i in range(12)]])
def test_mysql_claim_renders_an_exclusive_skip_locked_lock(
    is_mariadb: bool, version: tuple[int, ...], types: list[str]
) -> None:
    """Every read of the claim locks its rows, exclusively, skipping locked ones: the one
    read of a worker of one type or of many, each type's read of a worker of a few (one
    per type, in a UNION ALL of parenthesized reads)."""
    d = MySQLDialect(version, is_mariadb=is_mariadb)
    sa_dialect = mysql.dialect()
    sa_dialect.server_version_info = version
    sa_dialect.is_mariadb = is_mariadb
    req = ClaimRequest(order=ORDER, group="g", limit=7, types=types)
    sql = compiled(d.claim_select(T, req, d.now()), sa_dialect)
    reads = 2 if len(types) == 2 else 1
    assert sql.count("SELECT ") == reads
    assert sql.count("FOR UPDATE SKIP LOCKED") == reads
    assert sql.rstrip(" )").endswith("FOR UPDATE SKIP LOCKED")
    assert "LOCK IN SHARE MODE" not in sql
    assert "FOR SHARE" not in sql


def test_postgresql_claim_is_one_statement_over_a_materialized_locked_cte() -> None:
    d = PostgresDialect((16,))
    sql = compiled(d.claim_statement(T, REQ, d.now()), postgresql.dialect())
    assert sql.startswith("WITH CLAIMABLE AS MATERIALIZED (SELECT")
    assert "FOR UPDATE SKIP LOCKED)" in sql
    assert "UPDATE READYQ_JOBS SET" in sql
    assert "RETURNING" in sql
    assert "LOCK IN SHARE MODE" not in sql


def test_sqlite_claim_is_one_update_returning_without_lock_clauses() -> None:
    d = SQLiteDialect((3, 40))
    sql = compiled(d.claim_statement(T, REQ, d.now()), sqlite.dialect())
    assert sql.startswith("UPDATE READYQ_JOBS SET")
    assert "RETURNING" in sql
    assert "FOR UPDATE" not in sql


@pytest.mark.parametrize(
    ("is_mariadb", "version", "ok"),
    [
        (False, (5, 7, 44), False),
        (False, (8, 0, 0), False),
        (False, (8, 0, 1), True),
        (False, (9, 1, 0), True),
        (True, (10, 5, 27), False),
        (True, (10, 4, 0), False),
        (True, (10, 6, 0), True),
        (True, (11, 4, 2), True),
    ],
)
def test_server_versions_without_skip_locked_are_refused(
    is_mariadb: bool, version: tuple[int, ...], ok: bool
) -> None:
    if ok:
        check_version(is_mariadb, version)
        return
    with pytest.raises(readyq.UnsupportedDatabase) as err:
        check_version(is_mariadb, version)
    assert ("MariaDB 10.6" if is_mariadb else "MySQL 8.0.1") in str(err.value)
    assert ".".join(map(str, version)) in str(err.value)


def test_unknown_databases_are_refused() -> None:
    with pytest.raises(readyq.UnsupportedDatabase, match="oracle"):
        readyq.Queue("oracle://scott:tiger@localhost/db")


# -- live servers ------------------------------------------------------------------------


def test_a_faked_old_mariadb_is_refused_before_anything_is_written(
    db: str, dialect_name: str
) -> None:
    if dialect_name != "mariadb":
        pytest.skip("the MariaDB version gate needs a MariaDB server")
    engine = sa.create_engine(db)
    try:
        with engine.connect():
            pass
        engine.dialect.server_version_info = (10, 5, 8)
        queue = readyq.Queue(engine)
        with pytest.raises(readyq.UnsupportedDatabase, match=r"MariaDB 10\.6 or newer"):
            queue.create_schema()
        assert sa.inspect(engine).get_table_names() == []
    finally:
        engine.dispose()


@pytest.mark.parametrize("scheme", ["mysql+pymysql", "mariadb+pymysql"])
def test_mariadb_is_recognised_whatever_the_url_scheme(db: str, dialect_name: str,
                                                       scheme: str) -> None:
    if dialect_name != "mariadb":
        pytest.skip("needs a MariaDB server")
    url = sa.make_url(db).set(drivername=scheme)
    queue = readyq.Queue(url)
    try:
        queue.create_schema()
        assert queue.database == "mariadb"
        assert queue.store.dialect.server_version >= (10, 6)
    finally:
        queue.close()


def _claim_one(queue: readyq.Queue, limit: int = 10) -> list[readyq.model.ClaimedJob]:
    return queue.store.claim_jobs(ClaimOrder(
        owner="tester", cap=100, limit=limit, lease_ttl=30.0, types=None,
    ))


@pytest.mark.parametrize("own_engine", [True, False])
def test_mariadb_claim_transaction_runs_at_read_committed(
    db: str, dialect_name: str, own_engine: bool
) -> None:
    if dialect_name != "mariadb":
        pytest.skip("isolation of the MySQL-family claim branch")
    engine = None if own_engine else sa.create_engine(db)  # server default: REPEATABLE READ
    queue = readyq.Queue(db if engine is None else engine)
    seen: list[tuple[str, int, str]] = []

    def probe(conn: sa.Connection) -> None:
        cur = conn.connection.dbapi_connection.cursor()
        cur.execute("SELECT @@tx_isolation, @@autocommit")
        level, autocommit = cur.fetchone()
        cur.close()
        seen.append((level, autocommit, conn.get_isolation_level()))

    try:
        queue.create_schema()
        queue.enqueue("a", {})
        queue.store.on_claim_transaction = probe
        assert len(_claim_one(queue)) == 1
        assert seen == [("READ-COMMITTED", 0, "READ COMMITTED")]
        if engine is not None:
            with engine.connect() as conn:  # the user's own connections keep their level
                assert conn.get_isolation_level() == "REPEATABLE READ"
    finally:
        queue.close()
        if engine is not None:
            engine.dispose()


def test_sqlite_claim_transaction_begins_with_begin_immediate(
    queue: readyq.Queue, dialect_name: str
) -> None:
    if dialect_name != "sqlite":
        pytest.skip("BEGIN IMMEDIATE is the SQLite claim branch")
    queue.enqueue("a", {})
    queue.enqueue("a", {})
    # sqlite3's trace callback reports what SQLite itself executed, including the
    # transaction control that the Python driver might add on its own.
    executed: list[str] = []
    sa.event.listen(
        queue.engine,
        "connect",
        lambda dbapi_conn, _record: dbapi_conn.set_trace_callback(executed.append),
    )
    queue.engine.dispose()
    claimed = _claim_one(queue)
    assert len(claimed) == 2
    statements = [
        " ".join(s.split()).upper() for s in executed if not s.upper().startswith("PRAGMA")
    ]
    begin = statements.index("BEGIN IMMEDIATE")
    claim = next(
        i for i, s in enumerate(statements) if s.startswith("UPDATE READYQ_JOBS SET STATE")
    )
    commit = statements.index("COMMIT", begin)
    assert begin < claim < commit
    between = statements[:claim]
    assert [s for s in between if s.startswith("BEGIN")] == ["BEGIN IMMEDIATE"]
    assert statements[begin + 1].startswith("SELECT READYQ_GATE.VCLOCK")


def test_sqlite_claims_from_two_threads_serialize_without_errors(
    queue: readyq.Queue, dialect_name: str
) -> None:
    if dialect_name != "sqlite":
        pytest.skip("write-lock contention is the SQLite branch")
    for _ in range(200):
        queue.enqueue("a", {})
    got: list[int] = []
    errors: list[BaseException] = []

    def claimer() -> None:
        try:
            while True:
                batch = queue.store.claim_jobs(ClaimOrder(
                    owner=threading.current_thread().name, cap=1000, limit=3, lease_ttl=30.0,
                    types=None,
                ))
                if not batch:
                    return
                got.extend(c.id for c in batch)
        except BaseException as exc:  # pragma: no cover - the assertion reports it
            errors.append(exc)

    threads = [threading.Thread(target=claimer, name=f"c{i}") for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(got) == sorted(set(got)) and len(got) == 200


def test_claim_takes_several_jobs_in_one_transaction(queue: readyq.Queue) -> None:
    ids = [queue.enqueue("a", {"i": i}) for i in range(10)]
    transactions: list[int] = []
    queue.store.on_claim_transaction = lambda conn: transactions.append(1)
    claimed = _claim_one(queue, limit=10)
    assert sorted(c.id for c in claimed) == ids
    assert len(transactions) == 1
    assert all(c.attempt == 1 and c.lease_token == 1 for c in claimed)
    assert {queue.get(i).state for i in ids} == {readyq.JobState.LEASED}


def test_claim_skips_rows_locked_by_another_transaction(
    queue: readyq.Queue, dialect_name: str
) -> None:
    if dialect_name == "sqlite":
        pytest.skip("SQLite has no row locks; BEGIN IMMEDIATE serializes whole transactions")
    first = queue.enqueue("a", {})
    second = queue.enqueue("a", {})
    jobs = queue.store.tables.jobs
    with queue.engine.connect() as other:
        other.execute(sa.select(jobs.c.id).where(jobs.c.id == first).with_for_update())
        claimed = _claim_one(queue)  # must neither block nor take the locked row
        other.rollback()
    assert [c.id for c in claimed] == [second]


def test_mysql_in_flight_count_is_held_to_the_in_flight_index() -> None:
    d = MySQLDialect((10, 11, 19), is_mariadb=True)
    sql = compiled(d.in_flight_read(in_flight_by_group(T, *IN_FLIGHT_STATES), T),
                   mysql.dialect())
    assert "FROM READYQ_JOBS FORCE INDEX (READYQ_JOBS_STATE_LEASE_EXPIRES_IX)" in sql
    assert "STATE IN ('LEASED', 'RUNNING')" in sql
    pg = PostgresDialect((16,)).in_flight_read(in_flight_by_group(T, *IN_FLIGHT_STATES), T)
    assert "FORCE INDEX" not in compiled(pg, postgresql.dialect())


@pytest.mark.parametrize("groups", [1, 2])
def test_a_group_alone_is_claimed_without_counting_its_jobs(
    queue: readyq.Queue, dialect_name: str, groups: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the counts are read under the gate lock (SQLite), a claim that finds one
    group alone takes what the cap leaves free without counting that group's jobs; two
    groups are counted, to share the cap. Where they are read before the lock, once."""
    dialect = queue.store.dialect
    counted: list[int] = []
    real = dialect.runnable_counts

    def runnable_counts(*args: object, **kwargs: object) -> object:
        counted.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(dialect, "runnable_counts", runnable_counts)
    for i in range(6):
        queue.enqueue("t", {"i": i}, group=f"g{i % groups}")
    claimed = queue.store.claim_jobs(
        ClaimOrder(owner="w", cap=4, limit=4, lease_ttl=30.0, types=["t"])
    )
    assert len(claimed) == 4
    shares = ["g0"] * 4 if groups == 1 else ["g0", "g0", "g1", "g1"]
    assert sorted(c.group for c in claimed) == shares
    before_gate = dialect.capabilities.skip_locked
    assert len(counted) == (1 if before_gate or groups == 2 else 0), dialect_name
