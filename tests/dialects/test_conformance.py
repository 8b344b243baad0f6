"""The dialect seam's conformance suite: every operation of :class:`readyq.dialects.Dialect`
called directly on each live database, with the same assertions for all three.

Each test opens its own transaction on a fresh schema, runs one operation (or the few it
needs to set the stage) and checks what it did to the rows. A new database's dialect
passes when this module does; a new seam operation gets its test here.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import readyq
from readyq.claim_order import ClaimOrder, StartPolicy
from readyq.dialects import (
    ClaimRequest,
    Dependents,
    Dialect,
    Notifies,
    Progress,
    RecordsProgressInClaim,
    SQLiteDialect,
    dialect_class,
)
from readyq.model import IN_FLIGHT_STATES, JobState
from readyq.schema import GATE_ID, Tables
from readyq.sql.ready import in_flight_by_group, ready_of_type
from readyq.store import NewJob, StoreContext
from readyq.store.enqueue import row_values

OWNER = "conformance"
TTL = 30.0
# The claim the requests below are shares of: leased only, or started at once.
ORDER = ClaimOrder(owner=OWNER, cap=100, limit=100, lease_ttl=TTL, types=["t"])
ORDER_STARTING = replace(ORDER, start={"t": StartPolicy(None)})

# Every public method of the seam; the last test checks that each one has a test here.
COVERED = {
    "engine_options", "session_statements", "database_file", "prepare_engine",
    "prepare_connection", "check_server", "cached", "execute", "begin_write",
    "pin_index_order", "now", "insert_job_rows", "insert_edges", "dependents_of",
    "release_dependents", "any_runnable", "any_unfinished", "ready_groups",
    "runnable_counts", "in_flight", "in_flight_and_history", "claim_jobs",
    "record_progress", "start_leased", "extend_leases", "hand_back", "lease_rows",
    "mark_done", "error_code", "is_retryable", "is_disconnect", "is_missing_table",
    "is_permanent", "is_refusal", "database", "driver_hint", "in_flight_uses",
    "resource_heads", "claim_ids", "resource_state", "resource_flight", "server_text",
    "match_ids", "same_database", "octets",
    # The forms of statements the operations share, each overridable by a database.
    "ids_in", "ready_ids", "pairs_match", "first_ready_type", "ready_by_type_read",
    "in_flight_read", "costed_probe", "state_groups_shape", "state_groups",
    "state_groups_params", "groups_per_state_read", "done_update",
}


class Seam:
    """A fresh schema, its dialect and a connection with a write transaction open."""

    def __init__(self, queue: readyq.Queue, conn: sa.Connection) -> None:
        self.ctx: StoreContext = queue.store.context
        self.d: Dialect = self.ctx.dialect
        self.t: Tables = self.ctx.tables
        self.now = self.ctx.now
        self.conn = conn

    def add(self, n: int = 1, *, group: str = "g", type: str = "t", weight: int = 1,
            state: JobState = JobState.READY, pending: int = 0, priority: int = 0,
            uses: str | None = None, container: bool = False) -> list[int]:
        job = NewJob(type, "{}", group, weight, priority, uses=uses, is_container=container)
        rows = [row_values(job, state, pending, None, None, 0) for _ in range(n)]
        return self.d.insert_job_rows(self.conn, self.t, rows, self.now)

    def row(self, job_id: int) -> Any:
        j = self.t.jobs
        return self.conn.execute(sa.select(j).where(j.c.id == job_id)).one()

    def claim(self, limit: int = 10, *, group: str = "g", start: bool = True) -> list[Any]:
        order = ORDER_STARTING if start else ORDER
        req = ClaimRequest(order, group, limit, ["t"])
        return self.d.claim_jobs(self.conn, self.t, [req], self.now)


@pytest.fixture
def seam(queue: readyq.Queue) -> Iterator[Seam]:
    with queue.engine.connect() as conn:
        s = Seam(queue, conn)
        s.d.begin_write(conn)
        try:
            yield s
        finally:
            conn.rollback()


# -- engine, statements, time ------------------------------------------------------------


def test_engine_facts(queue: readyq.Queue, db: str) -> None:
    url = sa.make_url(db)
    cls = dialect_class(url.get_backend_name())
    assert isinstance(cls.engine_options(), dict)
    assert all(isinstance(s, str) for s in cls.session_statements(queue.engine.dialect, 5.0))
    d = queue.store.dialect
    assert d.database in ("sqlite", "postgresql", "mysql", "mariadb")
    assert d.database == queue.database
    assert "://" in cls.driver_hint  # names the URL to use
    path = cls.database_file(url)
    assert (path is not None) == (d.database == "sqlite")
    d.check_server()  # the test servers are supported: no error
    with queue.engine.connect() as conn:
        assert d.server_text(conn)  # the version string look-alikes are told apart by
    assert d.prepare_engine(queue.engine, owned=False) is not None
    with queue.engine.connect() as conn:
        d.prepare_connection(conn.connection.dbapi_connection)  # idempotent set-up
        assert conn.execute(sa.select(sa.literal(1))).scalar_one() == 1


def test_cached_builds_once_and_execute_runs_it(seam: Seam) -> None:
    built: list[int] = []

    def build() -> sa.Select[Any]:
        built.append(1)
        return sa.select(sa.bindparam("x", type_=sa.Integer) + 1)

    first = seam.d.cached(("conformance", 1), build)
    assert seam.d.cached(("conformance", 1), build) is first
    assert built == [1]
    assert seam.d.execute(seam.conn, first, {"x": 41}).scalar() == 42


def test_now_is_the_servers_clock_in_epoch_seconds(seam: Seam) -> None:
    import time

    now = float(seam.conn.execute(sa.select(seam.d.now())).scalar_one())
    assert abs(now - time.time()) < 5  # the servers run on this host


def test_pin_index_order_keeps_the_transaction_usable(seam: Seam) -> None:
    seam.d.pin_index_order(seam.conn)
    assert seam.conn.execute(sa.select(sa.literal(1))).scalar_one() == 1


# -- enqueue and the graph ---------------------------------------------------------------


def test_insert_job_rows_returns_ids_in_order(seam: Seam) -> None:
    for n in (1, 3, 60):  # PostgreSQL loads 50 rows or more its own way
        ids = seam.add(n)
        assert len(ids) == n and ids == sorted(ids) and len(set(ids)) == n
        assert seam.row(ids[-1]).state == "ready"


def test_match_ids_takes_more_ids_than_a_statement_has_parameters(seam: Seam) -> None:
    ids = seam.add(3)
    wanted = [ids[0], ids[2], *range(10**9, 10**9 + 70_000)]  # unknown ids match nothing
    j = seam.t.jobs
    found = seam.conn.execute(
        sa.select(j.c.id).where(seam.d.match_ids(j.c.id, wanted)).order_by(j.c.id)
    ).scalars().all()
    assert found == [ids[0], ids[2]]
    assert seam.conn.execute(
        sa.select(sa.func.count()).where(seam.d.match_ids(j.c.id, []))
    ).scalar_one() == 0


def test_octets_counts_bytes_not_characters(seam: Seam) -> None:
    [job] = seam.add(1)
    s = seam.t.steps
    for name, text in (("ascii", '"abc"'), ("accents", '"é€😀"'), ("empty", "")):
        seam.conn.execute(sa.insert(s).values(job_id=job, name=name, result=text, attempt=1,
                                              stored_at=0.0))
    sizes = dict(seam.conn.execute(
        sa.select(s.c.name, seam.d.octets(s.c.result)).where(s.c.job_id == job)).all())
    assert sizes == {"ascii": 5, "accents": 2 + 2 + 3 + 4, "empty": 0}


def test_insert_edges_and_dependents_of(seam: Seam) -> None:
    a, b = seam.add(2)
    c = seam.add(1, state=JobState.WAITING, pending=1)[0]
    many = seam.add(30, state=JobState.WAITING, pending=2)
    seam.d.insert_edges(seam.conn, seam.t, [{"job_id": c, "depends_on_id": a}])
    # 60 edges: PostgreSQL inserts 50 or more its own way.
    box = seam.add(1, state=JobState.ACTIVE, pending=1, container=True)[0]
    seam.d.insert_edges(seam.conn, seam.t, [{"job_id": x, "depends_on_id": y}
                                            for x in many for y in (a, b)])
    seam.d.insert_edges(seam.conn, seam.t, [{"job_id": box, "depends_on_id": b}])
    assert seam.d.dependents_of(seam.conn, seam.t, [a, b]) == Dependents(
        Counter({c: 1, box: 1, **{x: 2 for x in many}}), frozenset({box}))
    assert seam.d.dependents_of(seam.conn, seam.t, [c]) == Dependents(Counter(), frozenset())
    # An id given twice counts its edges once.
    assert seam.d.dependents_of(seam.conn, seam.t, [b, a, b]) == seam.d.dependents_of(
        seam.conn, seam.t, [a, b])


def test_release_dependents_counts_down_and_readies_at_zero(seam: Seam) -> None:
    one, two = seam.add(2, state=JobState.WAITING, pending=2)
    seam.d.release_dependents(seam.conn, seam.t, {1: [one], 2: [two]}, seam.now, None)
    assert (seam.row(one).state, seam.row(one).pending_deps) == ("waiting", 1)
    assert (seam.row(two).state, seam.row(two).pending_deps) == ("ready", 0)


# -- reads of the ready set --------------------------------------------------------------


def test_any_runnable_and_any_unfinished(seam: Seam) -> None:
    for types in (None, ["t"], ["t", "u"], ["u"]):
        assert not seam.d.any_runnable(seam.conn, seam.t, seam.now, types)
        assert not seam.d.any_unfinished(seam.conn, seam.t, types)
    seam.add(1, state=JobState.WAITING, pending=1)
    assert seam.d.any_unfinished(seam.conn, seam.t, ["t"])
    assert not seam.d.any_runnable(seam.conn, seam.t, seam.now, ["t"])
    seam.add(1)
    for types in (None, ["t"], ["t", "u"]):
        assert seam.d.any_runnable(seam.conn, seam.t, seam.now, types)
    assert not seam.d.any_runnable(seam.conn, seam.t, seam.now, ["u"])
    assert not seam.d.any_unfinished(seam.conn, seam.t, ["u"])


def test_ready_groups_and_runnable_counts(seam: Seam) -> None:
    seam.add(5, group="a", weight=2)
    seam.add(1, group="b", weight=7)
    seam.add(1, group="c", state=JobState.WAITING, pending=1)
    assert sorted(seam.d.ready_groups(seam.conn, seam.t, ["t"])) == ["a", "b"]
    for with_history in (False, True):
        counts, history = seam.d.runnable_counts(
            seam.conn, seam.t, seam.now, ["t"], 3, with_history=with_history
        )
        assert counts == {"a": (3, 2), "b": (1, 7)}  # counted up to the cap of 3
        assert history == {}
    g = seam.t.groups
    seam.conn.execute(sa.insert(g).values(group_key="a", vfinish=1.5, served_seq=4))
    _, history = seam.d.runnable_counts(seam.conn, seam.t, seam.now, ["t"], 3,
                                        with_history=True)
    assert history == {"a": (1.5, 4)}


def test_in_flight_and_history(seam: Seam) -> None:
    seam.add(2, group="a", weight=3)
    seam.add(1, group="b")
    seam.claim(group="a")
    seam.conn.execute(sa.insert(seam.t.groups).values(group_key="b", vfinish=2.0, served_seq=1))
    assert seam.d.in_flight(seam.conn, seam.t) == {"a": (2, 3)}
    flight, history = seam.d.in_flight_and_history(seam.conn, seam.t, ["a", "b"])
    assert flight == {"a": (2, 3)} and history == {"b": (2.0, 1)}
    many = [f"k{i}" for i in range(40)]  # beyond the per-group parameters
    assert seam.d.in_flight_and_history(seam.conn, seam.t, many)[1] == {}


# -- claims that weigh resources -----------------------------------------------------------


def test_jobs_with_costs_are_only_seen_by_claims_that_weigh_them(seam: Seam) -> None:
    seam.add(1, uses='{"gpu":1}')
    for types in (None, ["t"], ["t", "u"]):
        assert not seam.d.any_runnable(seam.conn, seam.t, seam.now, types)
        assert seam.d.any_runnable(seam.conn, seam.t, seam.now, types, costed=True)
    assert seam.d.runnable_counts(seam.conn, seam.t, seam.now, ["t"], 3)[0] == {}
    assert seam.claim(3) == []


def test_in_flight_uses_and_costed_counts(seam: Seam) -> None:
    a = seam.add(2, group="a", weight=3, uses='{"gpu":2}')
    b = seam.add(1, group="a")
    seam.add(1, group="b", uses='{"gpu":1}')
    req = ClaimRequest(ORDER, "", 3, ["t"])
    assert len(seam.d.claim_ids(seam.conn, seam.t, req, [*a, *b], seam.now)) == 3
    rows = sorted(seam.d.in_flight_uses(seam.conn, seam.t), key=lambda r: str(r[1]))
    assert rows == [("a", None, 1, 1), ("a", '{"gpu":2}', 2, 3)]
    seam.conn.execute(sa.insert(seam.t.groups).values(group_key="b", vfinish=2.0, served_seq=1))
    for types in (["t"], ["t", "u"], None):
        counts, history = seam.d.runnable_counts(
            seam.conn, seam.t, seam.now, types, 3, with_history=True, costed=True
        )
        assert counts == {"b": (1, 1)} and history == {"b": (2.0, 1)}
        assert seam.d.runnable_counts(seam.conn, seam.t, seam.now, types, 3)[0] == {}


def test_resource_heads_read_each_groups_first_jobs_with_their_costs(seam: Seam) -> None:
    low = seam.add(2, group="a", uses='{"gpu":1}')
    high = seam.add(1, group="a", priority=5)
    seam.add(1, group="b", type="u")
    other = seam.add(3, group="c")
    for types in (["t"], ["t", "u"], None):
        rows = seam.d.resource_heads(seam.conn, seam.t, seam.now, {"a": 2, "c": 2}, types)
        by_group: dict[str, list[Any]] = {}
        for r in rows:
            by_group.setdefault(r.group_key, []).append(r)
        # Up to 2 per group; the caller orders them by (priority, id).
        got = {k: sorted((-r.priority, r.id) for r in v) for k, v in by_group.items()}
        assert got == {"a": [(-5, high[0]), (0, low[0])], "c": [(0, other[0]), (0, other[1])]}
        uses = {r.id: r.uses for r in rows}
        assert uses[low[0]] == '{"gpu":1}' and uses[high[0]] is None
    one = seam.d.resource_heads(seam.conn, seam.t, seam.now, {"a": 1, "c": 3}, ["t"])
    assert sorted(r.id for r in one) == sorted([high[0], *other])


def test_resource_state_reads_flight_reservations_history_and_heads(seam: Seam) -> None:
    a = seam.add(3, group="a", uses='{"gpu":1}')
    b = seam.add(2, group="b", weight=4)
    req = ClaimRequest(ORDER, "", 1, ["t"])
    seam.d.claim_ids(seam.conn, seam.t, req, [a[0]], seam.now)
    r = seam.t.reservations
    seam.conn.execute(sa.insert(r), [{"job_id": b[1], "seq": 5, "uses": '{"gpu":2}'},
                                     {"job_id": 999_999, "seq": 2, "uses": None}])
    seam.conn.execute(sa.insert(seam.t.groups).values(group_key="b", vfinish=1.5, served_seq=9))
    for types in (["t"], ["t", "u"], None):
        st = seam.d.resource_state(seam.conn, seam.t, seam.now, {"a": 5, "b": 1}, types)
        assert st.flight == [("a", '{"gpu":1}', 1, 1)]
        assert [x[:4] for x in st.reservations] == [
            (999_999, 2, None, None), (b[1], 5, '{"gpu":2}', "ready")]
        assert st.reservations[1][4:] == ("t", "b", 4, True)
        assert st.history == {"b": (1.5, 9)}
        heads = sorted(st.heads)
        assert [h[0] for h in heads] == [a[1], a[2], b[0]]  # b: its first job only
        assert heads[0][1:] == ("a", "t", '{"gpu":1}', 1, 0)


def test_resource_flight_reads_flight_history_and_whether_costs_or_reservations_exist(
    seam: Seam,
) -> None:
    a = seam.add(2, group="a", weight=2)
    req = ClaimRequest(ORDER, "", 2, ["t"], uses={"t": '{"gpu":1}'})
    seam.d.claim_ids(seam.conn, seam.t, req, a, seam.now)
    seam.add(1, group="b")  # ready, its handler's costs not yet written
    seam.add(1, group="c", type="u", uses='{"gpu":2}')  # costs of its own, type u only
    seam.conn.execute(sa.insert(seam.t.groups).values(group_key="b", vfinish=1.5, served_seq=9))
    many = [f"k{i}" for i in range(40)]  # beyond the per-group parameters
    for groups in (["a", "b"], [*many, "b"], []):
        st = seam.d.resource_flight(seam.conn, seam.t, groups, ["t"])
        assert st.flight == [("a", '{"gpu":1}', 2, 2)]
        assert st.history == ({} if not groups else {"b": (1.5, 9)})
        assert (st.reserved, st.costed) == (False, False)
    for types in (["u"], ["t", "u"], None):
        assert seam.d.resource_flight(seam.conn, seam.t, ["b"], types).costed
    # A job that is not ready (waiting, or in flight with its costs written) is no
    # ready job with costs.
    seam.add(1, group="d", uses='{"gpu":1}', state=JobState.WAITING, pending=1)
    assert not seam.d.resource_flight(seam.conn, seam.t, [], ["t"]).costed
    seam.add(1, group="e", uses='{"gpu":1}')
    assert seam.d.resource_flight(seam.conn, seam.t, [], ["t"]).costed
    seam.conn.execute(sa.insert(seam.t.reservations).values(job_id=a[0], seq=1, uses=None))
    assert seam.d.resource_flight(seam.conn, seam.t, [], ["t"]).reserved


def test_claim_ids_leases_only_the_ids_still_runnable(seam: Seam) -> None:
    ids = seam.add(3)
    seam.conn.execute(
        sa.update(seam.t.jobs).where(seam.t.jobs.c.id == ids[1]).values(state="cancelled")
    )
    order = replace(ORDER, start={"t": StartPolicy(30.0, retry_on_timeout=False)})
    req = ClaimRequest(order, "", 3, ["t"])
    claimed = seam.d.claim_ids(seam.conn, seam.t, req, ids, seam.now)
    assert sorted(c.id for c in claimed) == [ids[0], ids[2]]
    assert all(c.attempt == 1 and c.lease_token == 1 for c in claimed)
    row = seam.row(ids[0])
    assert (row.state, row.lease_owner, row.retry_on_timeout) == ("running", OWNER, False)
    assert row.deadline is not None
    assert seam.d.claim_ids(seam.conn, seam.t, req, ids, seam.now) == []


# -- the claim ---------------------------------------------------------------------------


def test_claim_jobs_leases_in_claim_order_with_a_new_token(seam: Seam) -> None:
    ids = seam.add(3)
    claimed = seam.claim(2, start=False)
    assert [c.id for c in claimed] == ids[:2]
    assert all(c.attempt == 1 and c.lease_token == 1 for c in claimed)
    row = seam.row(ids[0])
    assert (row.state, row.lease_owner, row.lease_token, row.attempts) == (
        "leased", OWNER, 1, 1)
    started = seam.claim(5)
    assert [c.id for c in started] == ids[2:] and seam.row(ids[2]).state == "running"


def test_claim_jobs_for_several_groups_in_one_call(seam: Seam) -> None:
    seam.add(3, group="a")
    seam.add(3, group="b")
    reqs = [ClaimRequest(ORDER, "a", 2, ["t"]), ClaimRequest(ORDER, "b", 1, ["t"])]
    claimed = seam.d.claim_jobs(seam.conn, seam.t, reqs, seam.now)
    assert Counter(c.group for c in claimed) == {"a": 2, "b": 1}


def test_record_progress_inserts_and_updates(seam: Seam) -> None:
    g, gate = seam.t.groups, seam.t.gate
    seam.d.record_progress(seam.conn, seam.t, Progress([("a", 1.0, 1)], set(), 5.0, 9))
    seam.d.record_progress(
        seam.conn, seam.t, Progress([("a", 2.0, 2), ("b", 3.0, 3)], {"a"}, 6.0, 10)
    )
    rows = dict(seam.conn.execute(sa.select(g.c.group_key, g.c.vfinish)).all())
    assert rows == {"a": 2.0, "b": 3.0}
    assert seam.conn.execute(
        sa.select(gate.c.vclock, gate.c.seq).where(gate.c.id == GATE_ID)
    ).one() == (6.0, 10)


def test_claim_jobs_recording_where_the_database_can(seam: Seam) -> None:
    if not isinstance(seam.d, RecordsProgressInClaim):
        pytest.skip(f"{seam.d.database} records the progress with a statement of its own")
    seam.add(2, group="a")
    receipt = seam.d.claim_jobs_recording(
        seam.conn, seam.t, [ClaimRequest(ORDER, "a", 2, ["t"])], seam.now,
        Progress([("a", 4.0, 2)], set(), 7.0, 3),
    )
    assert receipt.claimed == 2 and len(receipt.read()) == 2
    g = seam.t.groups
    assert seam.conn.execute(sa.select(g.c.vfinish)).scalar_one() == 4.0


def test_claim_ids_recording_where_the_database_can(seam: Seam) -> None:
    if not isinstance(seam.d, RecordsProgressInClaim):
        pytest.skip(f"{seam.d.database} records the progress with a statement of its own")
    ids = seam.add(2, group="a")
    req = ClaimRequest(ORDER, "", 2, ["t"], uses={"t": '{"gpu":1}'})
    receipt = seam.d.claim_ids_recording(
        seam.conn, seam.t, req, ids, seam.now, Progress([("a", 4.0, 2)], set(), 7.0, 3)
    )
    assert receipt.claimed == 2 and len(receipt.read()) == 2
    g, gate = seam.t.groups, seam.t.gate
    assert seam.conn.execute(sa.select(g.c.vfinish)).scalar_one() == 4.0
    assert seam.conn.execute(sa.select(gate.c.vclock, gate.c.seq)).one() == (7.0, 3)
    assert seam.row(ids[0]).uses == '{"gpu":1}'  # the handler's costs, written


# -- leases ------------------------------------------------------------------------------


def test_start_extend_and_read_leases_are_fenced(seam: Seam) -> None:
    seam.add(2)
    a, b = seam.claim(2, start=False)
    moved = seam.d.start_leased(seam.conn, seam.t, OWNER, [(a.id, a.lease_token),
                                (b.id, b.lease_token + 1)], seam.now,
                                timeout=5.0, retry_on_timeout=False)
    assert moved == 1  # b's token is wrong: fenced out
    ra = seam.row(a.id)
    assert ra.state == "running" and ra.deadline is not None and not ra.retry_on_timeout
    before = ra.lease_expires
    seam.d.extend_leases(seam.conn, seam.t, OWNER, [(a.id, a.lease_token)], 600.0, seam.now)
    seam.d.extend_leases(seam.conn, seam.t, "someone else", [(b.id, b.lease_token)], 600.0,
                         seam.now)
    assert seam.row(a.id).lease_expires > before + 500
    assert seam.row(b.id).lease_expires < before + 500
    rows = {r.id: r for r in seam.d.lease_rows(seam.conn, seam.t, [a.id, b.id])}
    assert (rows[a.id].state, rows[a.id].lease_owner, rows[a.id].lease_token) == (
        "running", OWNER, a.lease_token)
    assert rows[b.id].state == "leased" and not rows[b.id].cancel_requested


def test_hand_back_puts_jobs_back_uncharged(seam: Seam) -> None:
    a, b = seam.add(2)
    claimed = seam.claim(2)
    j = seam.t.jobs
    seam.conn.execute(sa.update(j).where(j.c.id == b).values(cancel_requested=True))
    pairs = [(c.id, c.lease_token) for c in claimed]
    assert seam.d.hand_back(seam.conn, seam.t, OWNER, pairs, seam.now) == 1
    assert (seam.row(a).state, seam.row(a).attempts) == ("ready", 0)
    assert seam.row(b).state == "running"  # a cancel was asked: left to the sweep


def test_mark_done_fences_each_row_and_reads_the_dependents(seam: Seam) -> None:
    a, b = seam.add(2)
    dependent = seam.add(1, state=JobState.WAITING, pending=2)[0]
    box = seam.add(1, state=JobState.ACTIVE, pending=1, container=True)[0]
    seam.d.insert_edges(seam.conn, seam.t, [{"job_id": dependent, "depends_on_id": x}
                                            for x in (a, b)])
    seam.d.insert_edges(seam.conn, seam.t, [{"job_id": box, "depends_on_id": a}])
    ca, cb = seam.claim(2)
    marked = seam.d.mark_done(seam.conn, seam.t, OWNER,
                              [(ca.id, ca.lease_token, json.dumps({"r": 1})),
                               (cb.id, cb.lease_token, "null")], seam.now)
    assert marked.marked == 2
    assert marked.dependents == Dependents(Counter({dependent: 2, box: 1}), frozenset({box}))
    assert seam.row(a).state == "done" and json.loads(seam.row(a).result) == {"r": 1}
    again = seam.d.mark_done(seam.conn, seam.t, OWNER, [(ca.id, ca.lease_token, "1")],
                             seam.now)
    assert again.marked == 0 and again.dependents is None  # no longer running: fenced


# -- the forms of statements the operations share -------------------------------------------


def test_ids_in_binds_a_list_of_any_length_at_execution(seam: Seam) -> None:
    ids = seam.add(3)
    j = seam.t.jobs
    stmt = seam.d.cached(
        ("conformance_ids_in", j.name),
        lambda: sa.select(j.c.id).where(seam.d.ids_in(j.c.id, "x")).order_by(j.c.id),
    )
    for wanted, found in (([ids[0], ids[2]], [ids[0], ids[2]]), ([ids[1]], [ids[1]]),
                          ([*ids, *range(10**9, 10**9 + 1000)], ids), ([], [])):
        assert list(seam.d.execute(seam.conn, stmt, {"x": wanted}).scalars()) == found


def test_ready_ids_selects_the_ready_jobs_among_the_ids(seam: Seam) -> None:
    ready = seam.add(2)
    waiting = seam.add(1, state=JobState.WAITING, pending=1)
    j = seam.t.jobs
    stmt = sa.select(j.c.id).where(seam.d.ready_ids(seam.t, "x")).order_by(j.c.id)
    found = seam.d.execute(seam.conn, stmt, {"x": [ready[1], *waiting, 10**9]}).scalars()
    assert list(found) == [ready[1]]


def test_pairs_match_fences_each_row_by_its_own_token(seam: Seam) -> None:
    seam.add(3)
    a, b, c = seam.claim(3)
    j = seam.t.jobs
    pairs = [(a.id, a.lease_token), (b.id, b.lease_token + 1), (c.id, c.lease_token)]
    stmt = sa.select(j.c.id).where(seam.d.pairs_match(j.c.id, j.c.lease_token, pairs))
    assert sorted(seam.conn.execute(stmt).scalars()) == sorted([a.id, c.id])
    one = sa.select(j.c.id).where(
        seam.d.pairs_match(j.c.id, j.c.lease_token, [(b.id, b.lease_token)])
    )
    assert list(seam.conn.execute(one).scalars()) == [b.id]


def test_first_ready_type_is_null_exactly_when_no_ready_job_of_the_types_qualifies(
    seam: Seam,
) -> None:
    seam.add(1, type="t", priority=1)
    seam.add(1, type="w", state=JobState.WAITING, pending=1)
    j = seam.t.jobs

    def probe(types: list[str], *conds: sa.ColumnElement[bool]) -> Any:
        return seam.conn.execute(
            sa.select(seam.d.first_ready_type(seam.t, types, *conds))
        ).scalar()

    assert probe(["t"]) == "t" and probe(["t", "u"]) == "t"
    assert probe(["u", "w"]) is None  # w has a job, but not a ready one
    assert probe(["t"], j.c.priority > 1) is None
    assert probe(["t", "u"], j.c.priority >= 1) == "t"


def test_ready_by_type_read_reads_the_same_rows(seam: Seam) -> None:
    ids = seam.add(2, type="t", group="a")
    seam.add(1, type="u", group="a")
    seam.add(1, type="t", state=JobState.WAITING, pending=1)
    j = seam.t.jobs
    read = sa.select(j.c.id, j.c.type).where(ready_of_type(seam.t, "t")).order_by(j.c.id)
    for types in (["t"], ["t", "u"], None):
        rows = seam.conn.execute(seam.d.ready_by_type_read(read, seam.t, types)).all()
        assert [tuple(r) for r in rows] == [(i, "t") for i in ids]


def test_in_flight_read_reads_the_same_rows(seam: Seam) -> None:
    seam.add(2, group="a", weight=2)
    seam.add(1, group="b")
    seam.claim(2, group="a")
    read = seam.d.in_flight_read(in_flight_by_group(seam.t, *IN_FLIGHT_STATES), seam.t)
    assert [tuple(r) for r in seam.conn.execute(read)] == [("a", 2, 2)]


def test_costed_probe_finds_one_ready_job_with_costs_of_its_own(seam: Seam) -> None:
    seam.add(1, type="t")
    seam.add(1, type="t", uses='{"gpu":1}', state=JobState.WAITING, pending=1)

    def probe(types: list[str] | None) -> list[Any]:
        return list(seam.conn.execute(seam.d.costed_probe(seam.t, types)).scalars())

    assert probe(["t"]) == [] and probe(None) == []
    costed = seam.add(2, type="u", uses='{"gpu":1}')
    assert probe(["t"]) == []
    for types in (["u"], ["t", "u"], None):
        found = probe(types)
        assert len(found) == 1 and found[0] in costed


def test_state_groups_read_the_history_and_first_jobs_of_the_groups_bound(
    seam: Seam,
) -> None:
    d = seam.d
    assert d.groups_per_state_read >= 1
    assert d.state_groups_shape(0) == 0
    assert d.state_groups(seam.t, seam.now, ["t"], 0) == []
    a = seam.add(3, group="a", uses='{"gpu":1}')
    b = seam.add(1, group="b", weight=4, priority=2)
    seam.add(1, group="c")  # not asked for
    seam.conn.execute(sa.insert(seam.t.groups).values(group_key="b", vfinish=1.5, served_seq=9))
    heads = {"a": 2, "b": 5}
    for types in (["t"], ["t", "u"], None):
        parts = d.state_groups(seam.t, seam.now, types, d.state_groups_shape(len(heads)))
        stmt = parts[0] if len(parts) == 1 else sa.union_all(*parts)
        rows = seam.conn.execute(stmt, d.state_groups_params(heads)).all()
        history = {r.group_key: (float(r.vf), int(r.n)) for r in rows if r.kind == 2}
        got = sorted((r.job_id, r.group_key, r.type, r.uses, r.w, r.priority)
                     for r in rows if r.kind == 3)
        assert history == {"b": (1.5, 9)}
        assert got == [(a[0], "a", "t", '{"gpu":1}', 1, 0), (a[1], "a", "t", '{"gpu":1}', 1, 0),
                       (b[0], "b", "t", None, 4, 2)]


def test_done_update_marks_the_rows_whose_lease_still_holds(seam: Seam) -> None:
    seam.add(3)
    a, b, c = seam.claim(3)
    rows = [(a.id, a.lease_token, json.dumps({"r": 1})), (b.id, b.lease_token + 1, "2"),
            (c.id, c.lease_token, "null")]
    stmt, params = seam.d.done_update(seam.t, OWNER, rows, seam.now)
    assert seam.d.done_update(seam.t, OWNER, rows[:1], seam.now)[0] is stmt  # built once
    assert seam.d.execute(seam.conn, stmt, params).rowcount == 2
    assert (seam.row(a.id).state, json.loads(seam.row(a.id).result)) == ("done", {"r": 1})
    assert seam.row(c.id).state == "done" and seam.row(c.id).lease_expires is None
    assert seam.row(b.id).state == "running"  # its token did not match: fenced out
    stmt, params = seam.d.done_update(seam.t, "someone else", [(b.id, b.lease_token, "1")],
                                      seam.now)
    assert seam.d.execute(seam.conn, stmt, params).rowcount == 0


# -- errors ------------------------------------------------------------------------------


def test_error_classification(queue: readyq.Queue) -> None:
    d = queue.store.dialect
    with queue.engine.connect() as conn:
        with pytest.raises(sa.exc.DBAPIError) as missing:
            conn.execute(sa.text("SELECT * FROM readyq_no_such_table"))
        conn.rollback()
        with pytest.raises(sa.exc.DBAPIError) as column:
            conn.execute(sa.text("SELECT no_such_column FROM readyq_jobs"))
        conn.rollback()
    assert d.is_missing_table(missing.value)
    assert d.is_permanent(column.value)
    assert d.error_code(column.value) is not None
    assert not d.is_retryable(column.value) and not d.is_disconnect(column.value)
    assert not d.is_refusal(column.value) and not d.is_refusal(missing.value)


def test_refusals_of_a_value_are_told_apart(queue: readyq.Queue) -> None:
    """A value the database or its driver refuses: NULL where a constraint forbids it,
    and text no driver can encode (a lone surrogate). Never retryable, never a lost
    connection."""
    d = queue.store.dialect
    job_id = queue.enqueue("t")
    jobs = queue.store.tables.jobs
    refused = []
    with queue.engine.connect() as conn:
        with pytest.raises(sa.exc.DBAPIError) as null:
            conn.execute(sa.update(jobs).where(jobs.c.id == job_id).values(type=None))
        conn.rollback()
        refused.append(null.value)
        with pytest.raises(UnicodeError) as surrogate:
            conn.execute(sa.update(jobs).where(jobs.c.id == job_id).values(error="a\ud800"))
        conn.rollback()
        refused.append(surrogate.value)
    for exc in refused:
        assert d.is_refusal(exc), exc
        assert not d.is_retryable(exc) and not d.is_disconnect(exc), exc


# -- optional abilities ------------------------------------------------------------------


def test_notifications_where_the_database_has_them(queue: readyq.Queue) -> None:
    d = queue.store.dialect
    assert isinstance(d, Notifies) == d.capabilities.listen_notify
    if not isinstance(d, Notifies):
        pytest.skip(f"{d.database} has no notifications")
    notifier = d.ready_notifier(queue.prefix)
    with queue.engine.connect() as conn:
        channel = d.listen_channel(conn, queue.prefix)
        assert channel.startswith(f"{queue.prefix}wake_")
        notifier.send(conn)  # delivered at commit, dropped on this rollback
        conn.rollback()


def test_same_database_compares_where_connections_land(
    queue: readyq.Queue, dialect_name: str, tmp_path: Any
) -> None:
    d, url = queue.store.dialect, queue.store.engine.url
    assert d.same_database(url, url)
    other = sa.make_url(f"sqlite:///{tmp_path / 'other.db'}")
    assert not d.same_database(url, other)
    if dialect_name == "sqlite":
        assert url.database is not None
        # The same file under another spelling of its path is the same database.
        dotted = url.set(database=str(Path(url.database).parent / "." / Path(url.database).name))
        assert d.same_database(url, dotted)
        assert not d.same_database(sa.make_url("sqlite://"), sa.make_url("sqlite://"))
    else:
        assert d.same_database(url, url.set(drivername=f"{url.get_backend_name()}+other"))
        assert not d.same_database(url, url.set(database="elsewhere"))
        assert not d.same_database(url, url.set(port=(url.port or 1) + 1))


def test_every_seam_operation_has_a_test_here() -> None:
    public = {
        name for name in dir(Dialect)
        if not name.startswith("_") and name not in ("name", "capabilities", "table_traits",
                                                     "retryable_codes", "missing_table_codes",
                                                     "permanent_codes", "refusal_codes")
    }
    assert public == COVERED


@pytest.mark.parametrize("version", [(3, 35, 0), (3, 37, 2), (3, 38, 0)])
def test_sqlite_done_update_reads_each_rows_token_and_result_at_its_position(
    seam: Seam, version: tuple[int, ...]
) -> None:
    """SQLite's done update reads the batch's tokens and results by each id's position:
    with ``->>`` from 3.38, with ``json_extract`` before. Both forms run on the live
    library, as a dialect built for that version writes them."""
    if seam.d.database != "sqlite":
        pytest.skip("the positional JSON arrays are SQLite's")
    d = SQLiteDialect(version)
    seam.add(4)
    a, b, c, e = seam.claim(4)
    rows = [(e.id, e.lease_token, None), (a.id, a.lease_token, json.dumps({"r": [1, "x"]})),
            (b.id, b.lease_token + 1, "2"), (c.id, c.lease_token, '"\\u0000 tab\\t"')]
    stmt, params = d.done_update(seam.t, OWNER, rows, seam.now)
    assert ("->>" in str(stmt)) == (version >= (3, 38))
    assert d.execute(seam.conn, stmt, params).rowcount == 3
    assert json.loads(seam.row(a.id).result) == {"r": [1, "x"]}
    assert json.loads(seam.row(c.id).result) == "\x00 tab\t"
    assert seam.row(e.id).state == "done" and seam.row(e.id).result is None
    assert seam.row(b.id).state == "running"  # its token did not match: fenced out
