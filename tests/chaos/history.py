"""A Jepsen-style history of a readyq run, recorded in the database, and its checker.

Two sources write one table, ``chaos_history``, every row stamped with the DATABASE's
clock (the same expression readyq judges leases with), never a process's clock:

* Triggers on the jobs table record every state transition in the transaction that
  makes it, so the history holds exactly what committed: claims (``ready > leased``),
  starts of attempts (``leased > running``), finalizations, reclaims, releases, cancels,
  readiness and container roll-ups, with the lease token, the attempt and the owner.
  A transition rolled back leaves no row; one committed twice would leave two.
* The worker processes record what their handlers and loops saw, each in a short
  transaction of its own (retried, and idempotent through a unique event key):
  ``start`` and ``end`` of a handler, ``lease_lost`` when the handler learned that its
  lease was gone, ``fenced`` when the worker was told that an outcome it reported
  changed nothing, and ``step`` when the function of a ``job.step`` ran (its side
  effect, kind: the step's name), before its result is stored.

:func:`read_history` turns the rows into :class:`Event` objects (transitions classified
as ``claim``, ``run``, ``finalize``, ``reclaim``, ...), and :func:`check` proves or
refutes the invariants over them, offline:

``overlap``
    no two handler starts of one job under overlapping live leases; a lease (token) is
    live from its claim to the transition that ends it (finalize, reclaim, release);
    claims of one job never overlap either.
``finalize``
    every finalization carries the job's latest lease token and its owner, and comes
    after that attempt's handler ended; each lease ends once; each job reaches a
    terminal state at most once and never leaves it; an outcome is only refused
    (``fenced``) when its lease was taken away.
``terminal``
    every job is terminal at the end (from the jobs table).
``duplicates``
    every start after a job's first is explained by the end of the previous lease:
    a reclaim (lease expired or timed out), a retry the handler asked for, or a
    release by a stopping worker; tokens grow at each claim and attempts by one (none
    for a release), never past ``max_attempts``.
``deps``
    no job is claimed or started before each of its dependencies ended ``done``
    (a container's ``done`` roll-up included).
``cap``
    at no instant more than ``cap`` leases are live, nor more than ``cap`` handlers run
    under a live lease.
``resources``
    no claim takes a named resource's units held by live leases (each job holding its
    stored ``uses``, from the jobs table) past its capacity at that instant, nor does any
    handler start take the units held by handlers running under live leases past it. A
    capacity is fixed, or steps over time; a lowered capacity stops nothing that runs,
    so only what starts is judged.
``progress``
    every job eventually ends or is runnable (from the jobs table, at whatever point the
    run stopped): a ``ready`` job is runnable, or held by a future ``run_after`` (or a
    pause); a ``leased`` or ``running`` one ends through its handler or its lease; a
    ``waiting`` job must have no dependency that ended badly and unfinished dependencies
    that each progress; an ``active`` container likewise, with unfinished dependencies or
    children that each progress. A waiting job whose dependencies are all done, or that
    waits for a failed one, and a container with nothing left to wait for, never move.
``steps``
    a step whose result was stored is never run again by a later attempt: no ``step``
    event of a job's step carries a lease token above the one whose run was stored (the
    stored result names it, ``{"token": T}``, from the steps table), and that run is in
    the history. Runs under earlier leases (killed, fenced out) are allowed.

This module is imported by the worker processes too, so it does not import pytest.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import sqlalchemy as sa

import readyq
from readyq.resources import decode as decode_uses

TABLE = "chaos_history"
WORKER_EVENTS = ("start", "end", "lease_lost", "fenced", "step")
IN_FLIGHT = ("leased", "running")
TERMINAL = ("done", "failed", "cancelled", "upstream_failed")
BAD = TERMINAL[1:]
RECLAIM_NOTES = ("lease expired", "timed out")

metadata = sa.MetaData()
history = sa.Table(
    TABLE,
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True,
              autoincrement=True),
    sa.Column("job_id", sa.BigInteger, nullable=False),
    sa.Column("event", sa.String(16), nullable=False),
    sa.Column("token", sa.BigInteger, nullable=True),
    sa.Column("attempt", sa.Integer, nullable=True),
    sa.Column("old_attempt", sa.Integer, nullable=True),
    sa.Column("worker", sa.String(120), nullable=True),
    sa.Column("kind", sa.String(16), nullable=True),
    sa.Column("old_state", sa.String(16), nullable=True),
    sa.Column("new_state", sa.String(16), nullable=True),
    sa.Column("note", sa.String(80), nullable=True),
    sa.Column("expires", sa.Double, nullable=True),
    sa.Column("at", sa.Double, nullable=False),
    # The recording process's own time.time() (skewed in some workers on purpose).
    sa.Column("wall", sa.Double, nullable=True),
    # Idempotency key of a worker-recorded event, so that a retried insert is harmless.
    sa.Column("eid", sa.String(200), nullable=True, unique=True),
)


# -- installing the recorder -----------------------------------------------------------


def _trigger_sql(dialect: str, jobs: str, prefix: str) -> list[str]:
    cols = ("job_id, event, token, attempt, old_attempt, worker, old_state, new_state, note, "
            "expires, at")
    if dialect == "postgresql":
        fn = f"{prefix}chaos_tx"
        return [
            f"""CREATE OR REPLACE FUNCTION {fn}() RETURNS trigger AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO {TABLE} ({cols}) VALUES (NEW.id, 'tx', NEW.lease_token, NEW.attempts,
      NULL, NEW.lease_owner, NULL, NEW.state, left(NEW.error, 80), NULL,
      extract(epoch from clock_timestamp())::double precision);
  ELSIF OLD.state IS DISTINCT FROM NEW.state THEN
    INSERT INTO {TABLE} ({cols}) VALUES (NEW.id, 'tx', NEW.lease_token, NEW.attempts,
      OLD.attempts, NEW.lease_owner, OLD.state, NEW.state, left(NEW.error, 80),
      OLD.lease_expires, extract(epoch from clock_timestamp())::double precision);
  END IF;
  RETURN NULL;
END $$ LANGUAGE plpgsql""",
            f"CREATE TRIGGER {fn}_ins AFTER INSERT ON {jobs} FOR EACH ROW "
            f"EXECUTE FUNCTION {fn}()",
            f"CREATE TRIGGER {fn}_upd AFTER UPDATE ON {jobs} FOR EACH ROW "
            f"WHEN (OLD.state IS DISTINCT FROM NEW.state) EXECUTE FUNCTION {fn}()",
        ]
    if dialect in ("mysql", "mariadb"):
        now = "UNIX_TIMESTAMP() + MICROSECOND(NOW(6)) / 1000000.0"
        return [
            f"""CREATE TRIGGER {prefix}chaos_tx_ins AFTER INSERT ON {jobs} FOR EACH ROW
INSERT INTO {TABLE} ({cols}) VALUES (NEW.id, 'tx', NEW.lease_token, NEW.attempts, NULL,
  NEW.lease_owner, NULL, NEW.state, LEFT(NEW.error, 80), NULL, {now})""",
            f"""CREATE TRIGGER {prefix}chaos_tx_upd AFTER UPDATE ON {jobs} FOR EACH ROW
BEGIN
  IF NOT (OLD.state <=> NEW.state) THEN
    INSERT INTO {TABLE} ({cols}) VALUES (NEW.id, 'tx', NEW.lease_token, NEW.attempts,
      OLD.attempts, NEW.lease_owner, OLD.state, NEW.state, LEFT(NEW.error, 80),
      OLD.lease_expires, {now});
  END IF;
END""",
        ]
    now = "(julianday('now') - 2440587.5) * 86400.0"
    return [
        f"""CREATE TRIGGER {prefix}chaos_tx_ins AFTER INSERT ON {jobs} FOR EACH ROW
BEGIN INSERT INTO {TABLE} ({cols}) VALUES (NEW.id, 'tx', NEW.lease_token, NEW.attempts,
  NULL, NEW.lease_owner, NULL, NEW.state, substr(NEW.error, 1, 80), NULL, {now}); END""",
        f"""CREATE TRIGGER {prefix}chaos_tx_upd AFTER UPDATE ON {jobs} FOR EACH ROW
WHEN OLD.state IS NOT NEW.state
BEGIN INSERT INTO {TABLE} ({cols}) VALUES (NEW.id, 'tx', NEW.lease_token, NEW.attempts,
  OLD.attempts, NEW.lease_owner, OLD.state, NEW.state, substr(NEW.error, 1, 80),
  OLD.lease_expires, {now}); END""",
    ]


def install(queue: readyq.Queue) -> None:
    """Create the history table and the transition triggers (after create_schema)."""
    engine = queue.engine
    metadata.create_all(engine, checkfirst=True)
    jobs = queue.store.tables.jobs.name
    with engine.begin() as conn:
        for stmt in _trigger_sql(engine.dialect.name, jobs, queue.prefix):
            conn.exec_driver_sql(stmt)


# -- recording from a worker process ----------------------------------------------------


def _history_engine(url: str) -> sa.Engine:
    parsed = sa.make_url(url)
    if parsed.get_backend_name() == "sqlite":
        engine = sa.create_engine(parsed, connect_args={"timeout": 30.0}, pool_size=4,
                                  max_overflow=8)

        @sa.event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA busy_timeout = 30000")
            cur.close()

        return engine
    options: dict[str, Any] = {"pool_size": 4, "max_overflow": 8, "pool_pre_ping": True}
    if parsed.get_backend_name() in ("mysql", "mariadb"):
        options["isolation_level"] = "READ COMMITTED"
    return sa.create_engine(parsed, **options)


class Recorder:
    """Records worker-side events of one process; safe to call from handler threads.

    Every insert is retried through lost connections, server restarts and lock errors
    until ``patience`` seconds pass; a unique key per (worker, event, job, lease) makes
    an insert whose COMMIT reply was lost harmless to repeat.
    """

    def __init__(self, url: str, worker: str, now: Callable[[], sa.ColumnElement[float]],
                 *, patience: float = 180.0) -> None:
        self.engine = _history_engine(url)
        self.worker = worker
        self.now = now
        self.patience = patience
        self._lock = threading.Lock()

    def note(self, event: str, *, job_id: int, attempt: int | None, token: int | None,
             kind: str | None = None) -> None:
        assert event in WORKER_EVENTS, event
        eid = f"{self.worker}|{event}|{job_id}|{token if token is not None else f'a{attempt}'}"
        row = {
            "job_id": job_id, "event": event, "token": token, "attempt": attempt,
            "worker": self.worker, "kind": kind, "wall": time.time(), "eid": eid,
        }
        deadline = time.monotonic() + self.patience
        delay = 0.01
        while True:
            try:
                with self.engine.connect() as conn:
                    if self.engine.dialect.name == "sqlite":
                        conn.exec_driver_sql("BEGIN IMMEDIATE")
                    # The database's clock, as readyq reads it (the store's expression).
                    conn.execute(sa.insert(history).values(**row, at=self.now()))
                    conn.commit()
                return
            except sa.exc.IntegrityError:
                return  # an earlier try committed it
            except sa.exc.DBAPIError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def job(self, event: str, job: readyq.Job, kind: str | None = None) -> None:
        self.note(event, job_id=job.id, attempt=job.attempt, token=job.lease_token, kind=kind)

    def close(self) -> None:
        self.engine.dispose()


# -- reading ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    """One event of the history, in the checker's vocabulary.

    ``event`` is one of: ``enqueued``, ``claim``, ``run``, ``finalize`` (kind done,
    fail, cancel, retry or release), ``reclaim`` (kind retry, failed or cancelled; note
    says lease expired or timed out), ``unblocked``, ``upstream_failed``, ``cancel``,
    ``rollup`` (kind: the container's end state), ``illegal`` (a transition readyq
    never makes), and the worker events ``start``, ``end``, ``lease_lost``, ``fenced``,
    ``step`` (kind: the step's name).
    """

    seq: int
    job: int
    event: str
    at: float
    token: int | None = None
    attempt: int | None = None
    worker: str | None = None
    kind: str | None = None
    note: str | None = None
    expires: float | None = None


def classify(old: str | None, new: str, note: str | None, attempt: int | None,
             old_attempt: int | None) -> tuple[str, str | None]:
    """Name a state transition recorded by the triggers."""
    reclaimed = bool(note) and note.startswith(RECLAIM_NOTES)  # type: ignore[union-attr]
    if old is None:
        return "enqueued", new
    if old == "ready" and new in IN_FLIGHT:
        # Claimed (leased), or claimed and started in one statement (running).
        return "claim", None if new == "leased" else "started"
    if old == "leased" and new == "running":
        return "run", None
    if old in IN_FLIGHT:
        if new == "done":
            return "finalize", "done"
        if new == "ready":
            if attempt is not None and old_attempt is not None and attempt == old_attempt - 1:
                return "finalize", "release"
            return ("reclaim", "retry") if reclaimed else ("finalize", "retry")
        if new == "failed":
            return ("reclaim", "failed") if reclaimed else ("finalize", "fail")
        if new == "cancelled":
            return ("reclaim", "cancelled") if reclaimed else ("finalize", "cancel")
    if old == "waiting" and new == "ready":
        return "unblocked", None
    if old in ("waiting", "active") and new == "upstream_failed":
        # A job, or a container ended by its own dependencies.
        return "upstream_failed", None
    if old in ("waiting", "ready") and new == "cancelled":
        return "cancel", None
    if old == "active" and new in ("done", "failed", "cancelled"):
        return "rollup", new
    return "illegal", f"{old}>{new}"


def read_history(engine: sa.Engine) -> list[Event]:
    h = history
    with engine.connect() as conn:
        rows = conn.execute(sa.select(h).order_by(h.c.at, h.c.id)).all()
    out: list[Event] = []
    for r in rows:
        if r.event == "tx":
            event, kind = classify(r.old_state, r.new_state, r.note, r.attempt, r.old_attempt)
        else:
            event, kind = r.event, r.kind
        out.append(Event(
            seq=int(r.id), job=int(r.job_id), event=event, at=float(r.at),
            token=None if r.token is None else int(r.token),
            attempt=None if r.attempt is None else int(r.attempt),
            worker=r.worker, kind=kind, note=r.note,
            expires=None if r.expires is None else float(r.expires),
        ))
    return out


@dataclass(frozen=True)
class JobFacts:
    """What the jobs table says about one job at the end of a run."""

    id: int
    state: str
    is_container: bool = False
    parent_id: int | None = None
    deps: tuple[int, ...] = ()
    max_attempts: int = 3
    attempts: int = 0
    lease_token: int = 0
    # The job's stored costs, as (resource, units) pairs: what its leases hold.
    uses: tuple[tuple[str, int], ...] = ()
    # Its stored steps, as (name, lease token) pairs: the token the stored result names
    # (None for a result that names none).
    steps: tuple[tuple[str, int | None], ...] = ()


def read_jobs(queue: readyq.Queue) -> dict[int, JobFacts]:
    t = queue.store.tables
    j = t.jobs
    with queue.engine.connect() as conn:
        deps: dict[int, list[int]] = defaultdict(list)
        for a, b in conn.execute(sa.select(t.deps.c.job_id, t.deps.c.depends_on_id)):
            deps[int(a)].append(int(b))
        rows = conn.execute(sa.select(
            j.c.id, j.c.state, j.c.is_container, j.c.parent_id, j.c.max_attempts,
            j.c.attempts, j.c.lease_token, j.c.uses,
        )).all()
        steps: dict[int, list[tuple[str, int | None]]] = defaultdict(list)
        for job_id, name, result in conn.execute(
                sa.select(t.steps.c.job_id, t.steps.c.name, t.steps.c.result)):
            value = readyq.payload.decode(result)
            token = value.get("token") if isinstance(value, dict) else None
            steps[int(job_id)].append((name, None if token is None else int(token)))
    return {
        int(r.id): JobFacts(
            id=int(r.id), state=r.state, is_container=bool(r.is_container),
            parent_id=None if r.parent_id is None else int(r.parent_id),
            deps=tuple(sorted(deps.get(int(r.id), ()))), max_attempts=int(r.max_attempts),
            attempts=int(r.attempts), lease_token=int(r.lease_token),
            uses=tuple(sorted(decode_uses(r.uses).items())),
            steps=tuple(sorted(steps.get(int(r.id), ()))),
        )
        for r in rows
    }


# -- the checker --------------------------------------------------------------------------


INVARIANTS = (
    "overlap", "finalize", "terminal", "duplicates", "deps", "cap", "resources", "progress",
    "steps",
)


@dataclass
class Report:
    violations: dict[str, list[str]] = field(default_factory=lambda: {k: [] for k in INVARIANTS})
    figures: dict[str, Any] = field(default_factory=dict)
    # job -> (seconds from its first claim to its terminal event, claims it took)
    latencies: dict[int, tuple[float, int]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not any(self.violations.values())

    def add(self, invariant: str, message: str) -> None:
        self.violations[invariant].append(message)

    def summary(self, limit: int = 8) -> str:
        lines = []
        for name in INVARIANTS:
            found = self.violations[name]
            if found:
                lines.append(f"{name}: {len(found)} violation(s)")
                lines.extend(f"  - {m}" for m in found[:limit])
        return "\n".join(lines) or "all invariants hold"


def _max_overlap(intervals: Iterable[tuple[float, float]]) -> tuple[int, float]:
    """Most half-open intervals [a, b) open at one instant, and when."""
    points: list[tuple[float, int]] = []
    for a, b in intervals:
        points.append((a, 1))
        points.append((b, -1))
    points.sort(key=lambda p: (p[0], p[1]))  # ends before starts at the same instant
    best, when, n = 0, math.nan, 0
    for t, d in points:
        n += d
        if n > best:
            best, when = n, t
    return best, when


# A resource's capacity: fixed, or (since, capacity) steps on the database's clock, in
# force from ``since`` on (the first one also before it).
Capacity = int | Sequence[tuple[float, int]]


def capacity_at(capacity: Capacity, at: float, lag: float = 0.0) -> int:
    """The capacity in force at ``at``; with ``lag``, the largest in force at any
    instant of [at - lag, at] (a claimer may have read it that long before it commits)."""
    if isinstance(capacity, int):
        return capacity
    steps = sorted(capacity)
    if not steps:
        raise ValueError("a capacity needs at least one (since, capacity) step")
    best = None
    for i, (since, value) in enumerate(steps):
        until = steps[i + 1][0] if i + 1 < len(steps) else math.inf
        if (i == 0 or since <= at) and until > at - lag:
            best = value if best is None else max(best, value)
    assert best is not None
    return best


def over_capacity(
    spans: Iterable[tuple[int, float, float]],
    uses: Mapping[int, Mapping[str, int]],
    name: str,
    capacity: Capacity,
    *,
    lag: float = 0.0,
    what: str = "leases",
) -> tuple[int, list[str]]:
    """The most units of ``name`` that the half-open spans (job, from, to) hold at one
    instant, and each start that took the units held past the capacity then."""
    points: list[tuple[float, int, int, int]] = []
    for job, a, b in spans:
        units = uses.get(job, {}).get(name, 0)
        if units:
            points.append((a, 1, units, job))
            points.append((b, 0, units, job))
    points.sort()  # at one instant, ends (0) before starts (1)
    held = peak = 0
    found: list[str] = []
    for at, kind, units, job in points:
        if not kind:
            held -= units
            continue
        held += units
        peak = max(peak, held)
        cap = capacity_at(capacity, at, lag)
        if held > cap:
            found.append(f"{name}: job {job} took {units} at {at:.6f}: {held} held by "
                         f"{what}, capacity {cap}")
    return peak, found


def never_progress(jobs: Mapping[int, JobFacts]) -> dict[int, str]:
    """The jobs of ``jobs`` that can neither end nor run on their own, each with why
    (the ``progress`` invariant). Walked without recursion: chains run long."""
    children: dict[int, list[int]] = defaultdict(list)
    for f in jobs.values():
        if f.parent_id is not None:
            children[f.parent_id].append(f.id)

    def waits_for(f: JobFacts) -> list[int]:
        out = [d for d in f.deps if d in jobs and jobs[d].state != "done"]
        if f.state == "active":
            out += [k for k in children[f.id] if jobs[k].state not in TERMINAL]
        return out

    def own_reason(f: JobFacts) -> str | None:
        """Why ``f`` is stuck whatever it waits for, or None."""
        bad = [d for d in f.deps if d in jobs and jobs[d].state in BAD]
        if bad:
            return f"it waits although its dependency {bad[0]} ended {jobs[bad[0]].state}"
        if f.state not in ("waiting", "active"):
            return f"its state {f.state!r} is not one readyq makes"
        if not waits_for(f):
            return ("it has no unfinished child and no unfinished dependency"
                    if f.state == "active" else "its dependencies are all done")
        return None

    verdict: dict[int, str | None] = {}  # None: it progresses
    for root in sorted(jobs):
        stack = [root]
        open_: set[int] = set()
        while stack:
            job = stack[-1]
            f = jobs[job]
            if job in verdict:
                stack.pop()
                continue
            if f.state in TERMINAL or f.state in ("ready", *IN_FLIGHT):
                verdict[job] = None
                stack.pop()
                continue
            reason = own_reason(f)
            if reason is not None:
                verdict[job] = reason
                stack.pop()
                continue
            pending = [w for w in waits_for(f) if w not in verdict]
            if pending and job not in open_:
                open_.add(job)
                for w in pending:
                    if w in open_:
                        verdict[w] = f"it waits for itself through job {job}"
                    else:
                        stack.append(w)
                continue
            stuck = [w for w in waits_for(f) if verdict.get(w) is not None]
            verdict[job] = (f"it waits for job {stuck[0]}, which can never progress"
                            if stuck else None)
            open_.discard(job)
            stack.pop()
    return {job: reason for job, reason in sorted(verdict.items()) if reason is not None}


LEASE_ENDS = ("finalize", "reclaim")
TERMINAL_EVENTS = ("upstream_failed", "cancel", "rollup")


def _is_terminal_event(e: Event) -> bool:
    if e.event == "finalize":
        return e.kind in ("done", "fail", "cancel")
    if e.event == "reclaim":
        return e.kind in ("failed", "cancelled")
    return e.event in TERMINAL_EVENTS


def check(
    events: Sequence[Event],
    jobs: dict[int, JobFacts] | None = None,
    *,
    cap: int | None = None,
    killed: Mapping[str, float] | Iterable[str] = (),
    settle: float = 5.0,
    tolerance: float = 0.0,
    resources: Mapping[str, Capacity] | None = None,
    capacity_lag: float = 0.0,
) -> Report:
    """Prove or refute the invariants (see the module docstring) over ``events``.

    ``jobs`` (the jobs table at the end) enables the ``terminal`` and ``deps`` checks
    and max_attempts; ``cap`` the ``cap`` check. ``killed`` names workers that were
    SIGKILLed during the run (with the time of the kill, on the database's clock, if
    known): a lease reclaimed from an owner that lived on for ``settle`` seconds is a
    stale writer whose outcome must come back ``fenced``; a killed one may not get to
    say. ``tolerance`` (seconds) absorbs the clock's resolution when comparing instants
    recorded by different statements. ``resources`` (each one's capacity, see
    :data:`Capacity`) enables the ``resources`` check, with the jobs' costs from ``jobs``;
    ``capacity_lag`` (seconds) judges a start against the largest capacity in force that
    long before it, for capacities that step down.
    """
    rep = Report()
    kill_at: dict[str, float] = (
        dict(killed) if isinstance(killed, Mapping) else dict.fromkeys(killed, -math.inf)
    )
    by_job: dict[int, list[Event]] = defaultdict(list)
    for e in sorted(events, key=lambda e: (e.at, e.seq)):
        by_job[e.job].append(e)
    eps = tolerance

    lease_intervals: list[tuple[float, float]] = []
    run_intervals: list[tuple[float, float]] = []
    # The same, with their job: (job, from, to).
    lease_spans: list[tuple[int, float, float]] = []
    run_spans: list[tuple[int, float, float]] = []
    done_at: dict[int, float] = {}
    first_claim: dict[int, float] = {}
    terminal_at: dict[int, float] = {}
    explained: Counter[str] = Counter()
    reclaims: Counter[str] = Counter()
    reclaim_delays: list[float] = []
    claims_per_job: dict[int, int] = {}
    stale_starts = 0
    # Leases reclaimed from owners still alive (stale writers; those that lived on for
    # ``settle`` seconds must report), and from owners already dead (orphans).
    stale_writers: set[tuple[int, int, str]] = set()
    must_report: set[tuple[int, int, str]] = set()
    orphans: set[tuple[int, int, str]] = set()
    fenced: list[Event] = []
    horizon = max((e.at for e in events), default=0.0)

    for job, evs in by_job.items():
        facts = jobs.get(job) if jobs is not None else None
        claims = [e for e in evs if e.event == "claim"]
        ends: dict[int, list[Event]] = defaultdict(list)
        for e in evs:
            if e.event in LEASE_ENDS and e.token is not None:
                ends[e.token].append(e)
        starts = [e for e in evs if e.event == "start"]
        # -- leases: from the claim (or, without claim events, the first start) to the end
        lease_from: dict[int, Event] = {}
        for c in claims:
            if c.token in lease_from:
                rep.add("overlap", f"job {job}: token {c.token} claimed twice")
            lease_from.setdefault(c.token, c)  # type: ignore[arg-type]
        for s in starts:
            lease_from.setdefault(s.token, s)  # type: ignore[arg-type]
        for token, ev in ends.items():
            if len(ev) > 1:
                rep.add("finalize", f"job {job}: the lease of token {token} ended "
                        f"{len(ev)} times ({', '.join(f'{e.event}/{e.kind}' for e in ev)})")
        def end_of(token: int | None, ends: dict[int, list[Event]] = ends) -> Event | None:
            ev = ends.get(token) if token is not None else None
            return ev[0] if ev else None

        # Claims of one job never overlap: each comes after the previous lease ended.
        tokens = sorted(lease_from, key=lambda t: (lease_from[t].at, t))
        for prev, nxt in pairwise(tokens):
            if nxt <= prev:
                rep.add("duplicates", f"job {job}: token {nxt} taken after token {prev}")
            end = end_of(prev)
            if end is None or end.at > lease_from[nxt].at + eps:
                rep.add("overlap", f"job {job}: lease {nxt} began at {lease_from[nxt].at:.6f} "
                        f"while lease {prev} was live (ended "
                        f"{'never' if end is None else f'{end.at:.6f}'})")
        for token, first in lease_from.items():
            end = end_of(token)
            lease_intervals.append((first.at, end.at if end is not None else horizon + 1e9))
            lease_spans.append((job, *lease_intervals[-1]))
        if claims:
            first_claim[job] = claims[0].at
            claims_per_job[job] = len(claims)

        # -- starts: live ones (the lease still held) never overlap another live one
        per_token = Counter(s.token for s in starts)
        for token, n in per_token.items():
            if n > 1:
                rep.add("overlap", f"job {job}: attempt with token {token} started {n} times")
        live: list[Event] = []
        for s in starts:
            end = end_of(s.token)
            owner = lease_from.get(s.token)  # type: ignore[arg-type]
            if owner is not None and owner.event == "claim" and owner.worker != s.worker:
                rep.add("overlap", f"job {job}: {s.worker} started token {s.token}, "
                        f"claimed by {owner.worker}")
            if end is not None and s.at > end.at + eps:
                stale_starts += 1  # the handler began after its lease was gone
                continue
            live.append(s)
            finished = [e for e in evs if e.event == "end" and e.token == s.token
                        and e.worker == s.worker]
            stop = min([x.at for x in finished] + ([end.at] if end else [horizon + 1e9]))
            run_intervals.append((s.at, max(stop, s.at)))
            run_spans.append((job, *run_intervals[-1]))
        live.sort(key=lambda s: (s.at, s.seq))
        for a, b in pairwise(live):
            end = end_of(a.token)
            if a.token == b.token:
                continue
            if end is None or b.at + eps < end.at:
                rep.add("overlap", f"job {job}: start of token {b.token} at {b.at:.6f} "
                        f"overlaps the live lease of token {a.token}")
            # -- duplicates must be explained by the end of the previous lease
            if end is None:
                rep.add("duplicates", f"job {job}: token {b.token} started with no end "
                        f"recorded for token {a.token}")
            elif end.event == "reclaim":
                reason = "timeout" if (end.note or "").startswith("timed out") else "expired"
                explained[f"reclaim ({reason})"] += 1
            elif end.event == "finalize" and end.kind in ("retry", "release"):
                explained[end.kind] += 1
            else:
                rep.add("duplicates", f"job {job}: started again (token {b.token}) after "
                        f"token {a.token} ended {end.event}/{end.kind}")

        # -- attempts and tokens along the claims
        max_attempts = facts.max_attempts if facts else None
        for prev, nxt in pairwise(claims):
            end = end_of(prev.token)
            step = 0 if end is not None and end.kind == "release" else 1
            if prev.attempt is not None and nxt.attempt is not None \
                    and nxt.attempt != prev.attempt + step:
                rep.add("duplicates", f"job {job}: attempt {nxt.attempt} claimed after "
                        f"attempt {prev.attempt} (expected {prev.attempt + step})")
        for c in claims:
            if max_attempts is not None and c.attempt is not None and c.attempt > max_attempts:
                rep.add("duplicates", f"job {job}: attempt {c.attempt} claimed, over "
                        f"max_attempts {max_attempts}")
        for s in starts:
            c = lease_from.get(s.token)  # type: ignore[arg-type]
            if c is not None and c.event == "claim" and c.attempt != s.attempt:
                rep.add("duplicates", f"job {job}: token {s.token} started as attempt "
                        f"{s.attempt}, claimed as {c.attempt}")

        # -- finalizations
        latest: int | None = None
        latest_owner: str | None = None
        ended = False
        terminal_events = []
        for e in evs:
            if e.event == "claim":
                latest, latest_owner = e.token, e.worker
            if ended and e.event in (
                "claim", "run", "finalize", "reclaim", "unblocked", "upstream_failed",
                "cancel", "rollup", "illegal",
            ):
                rep.add("finalize", f"job {job}: {e.event}/{e.kind} after it ended")
            if e.event == "illegal":
                rep.add("finalize", f"job {job}: transition {e.kind} at {e.at:.6f}")
            if e.event == "finalize":
                # An outcome is reported after its handler returned: a finalization of
                # a handler still running was written by someone else.
                ran = [s for s in starts if s.token == e.token]
                if ran and e.kind != "release":
                    ended_at = [x.at for x in evs if x.event == "end" and x.token == e.token
                                and x.worker == ran[0].worker]
                    if not ended_at or min(ended_at) > e.at + eps:
                        rep.add("finalize", f"job {job}: finalize {e.kind} of token "
                                f"{e.token} at {e.at:.6f} while its handler still ran")
                if claims and e.token != latest:
                    rep.add("finalize", f"job {job}: finalize {e.kind} by token {e.token}, "
                            f"the latest lease is {latest}")
                if claims and e.worker != latest_owner:
                    rep.add("finalize", f"job {job}: finalize {e.kind} by {e.worker}, the "
                            f"lease is {latest_owner}'s")
            if e.event == "reclaim":
                reclaims[(e.note or "?").split(":")[0].split(" after")[0]] += 1
                if e.expires is not None and (e.note or "").startswith("lease expired"):
                    reclaim_delays.append(e.at - e.expires)
                key = (job, e.attempt or 0, e.worker or "")
                died = kill_at.get(e.worker or "", math.inf)
                if died <= e.at:
                    orphans.add(key)
                else:
                    stale_writers.add(key)
                    if died > e.at + settle:
                        must_report.add(key)
            if _is_terminal_event(e):
                terminal_events.append(e)
                ended = True
                terminal_at.setdefault(job, e.at)
                if (e.event == "finalize" and e.kind == "done") or (
                    e.event == "rollup" and e.kind == "done"
                ):
                    done_at[job] = e.at
            if e.event == "fenced":
                fenced.append(e)
        if len(terminal_events) > 1:
            rep.add("finalize", f"job {job}: finalized {len(terminal_events)} times: "
                    + ", ".join(f"{e.event}/{e.kind}@{e.token}" for e in terminal_events))
        if facts is not None and terminal_events:
            last = terminal_events[0]
            expected = {"done": "done", "fail": "failed", "cancel": "cancelled",
                        "failed": "failed", "cancelled": "cancelled"}.get(last.kind or "",
                                                                         last.kind)
            if last.event == "upstream_failed":
                expected = "upstream_failed"
            if last.event == "cancel":
                expected = "cancelled"
            if facts.state != expected:
                rep.add("finalize", f"job {job}: ended {last.event}/{last.kind} but the table "
                        f"says {facts.state}")

    # -- every job terminal
    if jobs is not None:
        for job, facts in sorted(jobs.items()):
            if facts.state not in TERMINAL:
                rep.add("terminal", f"job {job} is still {facts.state}")

    # -- every job ends or is runnable
    stuck = never_progress(jobs) if jobs is not None else {}
    for job, reason in stuck.items():
        rep.add("progress", f"job {job} ({jobs[job].state}) can never progress: "  # type: ignore[index]
                f"{reason}")

    # -- dependencies
    if jobs is not None:
        for job, facts in sorted(jobs.items()):
            began = [e for e in by_job.get(job, ()) if e.event in ("claim", "start")]
            if not began:
                continue
            for dep in facts.deps:
                when = done_at.get(dep)
                if when is None:
                    rep.add("deps", f"job {job} began though its dependency {dep} never "
                            f"ended done")
                    continue
                early = [e for e in began if e.at + eps < when]
                if early:
                    rep.add("deps", f"job {job} {early[0].event} at {early[0].at:.6f}, before "
                            f"its dependency {dep} was done at {when:.6f}")

    # -- stored steps never run again by a later lease
    stored_steps = step_reruns = step_reused = 0
    if jobs is not None:
        for job, facts in sorted(jobs.items()):
            runs = [e for e in by_job.get(job, ()) if e.event == "step"]
            for name, token in facts.steps:
                if token is None:
                    continue
                stored_steps += 1
                mine = [e for e in runs if e.kind == name]
                if not any(e.token == token for e in mine):
                    rep.add("steps", f"job {job}: step {name!r} stored by token {token}, "
                            "whose run is not in the history")
                for e in mine:
                    if e.token is not None and e.token > token:
                        rep.add("steps", f"job {job}: step {name!r} stored by token {token} "
                                f"ran again under token {e.token} at {e.at:.6f}")
                    elif e.token is not None and e.token < token:
                        step_reruns += 1
                # Later leases that started: each got the stored result back.
                step_reused += sum(1 for e in by_job.get(job, ())
                                   if e.event == "start" and (e.token or 0) > token)

    # -- the cap
    peak_leases, when_leases = _max_overlap(lease_intervals)
    peak_runs, when_runs = _max_overlap(run_intervals)
    if cap is not None:
        if peak_leases > cap:
            rep.add("cap", f"{peak_leases} leases live at {when_leases:.6f}, cap {cap}")
        if peak_runs > cap:
            rep.add("cap", f"{peak_runs} handlers ran at {when_runs:.6f}, cap {cap}")

    # -- named resources
    peak_uses: dict[str, int] = {}
    peak_uses_running: dict[str, int] = {}
    if resources:
        costs = {j: dict(f.uses) for j, f in (jobs or {}).items() if f.uses}
        for name, capacity in sorted(resources.items()):
            peak_uses[name], found = over_capacity(
                lease_spans, costs, name, capacity, lag=capacity_lag
            )
            peak_uses_running[name], more = over_capacity(
                run_spans, costs, name, capacity, lag=capacity_lag, what="handlers"
            )
            for message in found + more:
                rep.add("resources", message)

    # -- fenced outcomes: each one belongs to a lease reclaimed from its worker
    fenced_keys = {(e.job, e.attempt or 0, e.worker or "") for e in fenced}
    wrongly = fenced_keys - stale_writers
    for job, attempt, worker in sorted(wrongly):
        rep.add("finalize", f"job {job}: {worker}'s outcome of attempt {attempt} was fenced "
                "out, though its lease was not reclaimed from it while it lived")
    # Only a worker that knew it held an attempt can be told it lost it. A claim whose
    # commit reply was lost (the claim committed; the worker saw the error and ran its
    # cycle again) leaves leases their worker never learned of: no handler of theirs
    # started, nothing of theirs can be fenced, and the reclaim sweeps them back.
    started = {(e.job, e.attempt or 0, e.worker or "") for e in events if e.event == "start"}
    never_learned = must_report - started
    must_report &= started
    unreported = must_report - fenced_keys

    starts_total = sum(1 for e in events if e.event == "start")
    jobs_started = len({e.job for e in events if e.event == "start"})
    rep.latencies = {
        j: (terminal_at[j] - first_claim[j], claims_per_job[j])
        for j in terminal_at if j in first_claim
    }
    latency = [x for x, _ in rep.latencies.values()]
    rep.figures.update(
        jobs=len(jobs) if jobs is not None else len(by_job),
        starts=starts_total,
        duplicate_starts=starts_total - jobs_started - stale_starts,
        duplicates_explained=dict(explained),
        stale_starts=stale_starts,
        reclaims=dict(reclaims),
        lease_lost=sum(1 for e in events if e.event == "lease_lost"),
        fenced_observed=len(fenced),
        stale_writers_injected=len(stale_writers),
        stale_writers_must_report=len(must_report),
        stale_writers_unreported=sorted(unreported),
        leases_never_learned=sorted(never_learned),
        orphans_reclaimed=len(orphans),
        peak_leases=peak_leases,
        peak_running=peak_runs,
        peak_uses=peak_uses,
        peak_uses_running=peak_uses_running,
        worst_claim_to_terminal=max(latency, default=0.0),
        worst_reclaim_delay=max(reclaim_delays, default=0.0),
        lost=sum(1 for f in (jobs or {}).values() if f.state not in TERMINAL),
        never_progress=len(stuck),
        step_runs=sum(1 for e in events if e.event == "step"),
        steps_stored=stored_steps,
        # Runs of a step before the one that was stored (their result never was).
        step_runs_unstored=step_reruns,
        steps_reused=step_reused,
        double_finalized=sum(
            1 for evs in by_job.values() if sum(1 for e in evs if _is_terminal_event(e)) > 1
        ),
    )
    return rep
