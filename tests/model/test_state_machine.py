"""A model-based test: Hypothesis drives the Store directly and a plain-Python model of
the specification predicts every row; after every step the database equals the model and
the invariants hold.

Rules: enqueue (dependencies, containers, nested containers, timeouts), claim
(``store.claim_jobs``, which leases, and ``store.finish_and_claim`` with ``start``, which claims and
starts in one statement), ``store.mark_running``, heartbeats, outcomes (``done``,
``retry``, ``fail``, ``cancel``, ``release``; through ``store.finish`` or
``store.finish_and_claim``, which records them and claims in one transaction), ``store.cancel``,
advancing the database clock (``store.clock_offset``), ``store.reclaim`` (expired leases
and passed deadlines), and stale writers: an old lease finishing or heartbeating after it
was reclaimed, re-claimed or finished, which must change nothing; steps and states
written under a lease (``store.store_step``, ``store.save_state``), live or stale: they
land (a step keeping its first result) only while the lease holds.

Time: every instant readyq writes is ``db_now + duration``. Each write is bracketed by two
reads of the database clock, the row's instant must fall inside the bracket, and the
model then adopts the exact value. The durations and clock moves are thousands of seconds,
so the real time an example takes (seconds) decides nothing. Before a claim or a sweep,
the clock is moved past every instant the decision depends on that lies near now; "near"
is judged on the instant's nominal time (the clock offset at the write plus the
duration), never on real time, so the same draws move the clock the same way in every
run. Were it judged on real time, a replayed example could take another path. Choices
among what exists (a lease, a job, an owner) come from a generator seeded by one draw per
step (``Pick``), so Hypothesis's record of an example keeps its shape even if one does.

Invariants after every step: the model's rows; terminal rows write-once (state, result,
error, attempts, lease, finished_at; ``pending_deps`` is bookkeeping and may move);
attempts never above max_attempts nor above the lease token, tokens never going back;
in-flight states carry a lease (running: started_at too), other states none; waiting
means pending dependencies, ready means every dependency done; an active container
has unfinished children or none at all; fenced writes report lost and change nothing.

Containers' dependencies propagate as jobs' do: one that ends badly ends the container
``upstream_failed``, and the last one ending done ends a container without children
``done`` (one enqueued with none unfinished stays ``active``).
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, Phase, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

import readyq
from readyq.claim_order import ClaimOrder, StartPolicy
from readyq.errors import DependencyCycle, LeaseLost
from readyq.planning.drf import GLOBAL, Candidate, GroupState, Reserved, plan_starts
from readyq.resources import decode, encode
from readyq.store import Lease, NewJob, Outcome, Recorded, ResourceView
from readyq.store.memory import Holder

CAP = 3
TTL = 10_000.0
# settle(): an instant judged within (-SETTLE_BEHIND, SETTLE_AHEAD] of now, nominally,
# moves the clock on by SETTLE_STEP. Every nominal instant is a multiple of 10 s plus at
# most a reclaim's jittered backoff (0.9-4.4 s), so both edges stay 2 s or more from any
# of them; an instant just outside the window is 30 s away or more, far beyond the real
# time between a write and a decision on it.
SETTLE_BEHIND = 3.0
SETTLE_AHEAD = 26.5
SETTLE_STEP = 30.0
EPS = 2e-3
OWNERS = ("A", "B")
START = {"t": StartPolicy(None, True), "u": StartPolicy(6_000.0, False)}
# The resource of the claims that weigh costs, and the costs of type "u"'s handler
# (jobs of "u" enqueued without their own take them).
HANDLER_USES = {"u": {"gpu": 1}}
IN_FLIGHT = ("leased", "running")
UNFINISHED = ("waiting", "ready", "leased", "running")
BAD = ("failed", "cancelled", "upstream_failed")
TERMINAL = ("done", *BAD)
EXAMPLES = int(os.environ.get("READYQ_MODEL_EXAMPLES", "40"))
STEPS = int(os.environ.get("READYQ_MODEL_STEPS", "30"))
PHASES = tuple(Phase) if os.environ.get("READYQ_MODEL_SHRINK") == "1" else (
    Phase.explicit, Phase.reuse, Phase.generate)
UPSTREAM = re.compile(r"dependency (\d+) ended (failed|cancelled|upstream_failed)")


@dataclass(frozen=True)
class Span:
    """An instant known to lie in [lo, hi] until it is read back; ``real`` is the
    database's clock without the offset at the write, so that the instant read back less
    ``real`` is its nominal time."""

    lo: float
    hi: float
    real: float


def retry_window(attempt: int) -> tuple[float, float]:
    delay = min(300.0, 1.0 * 2.0 ** max(attempt - 1, 0))
    return 0.9 * delay, 1.1 * delay


@dataclass
class MJob:
    id: int
    type: str
    is_container: bool
    parent: int | None
    deps: set[int]
    priority: int
    max_attempts: int
    timeout: float | None
    state: str
    pending: int
    attempts: int = 0
    token: int = 0
    owner: str | None = None
    cancel_requested: bool = False
    open_children: int = 0
    failed_children: int = 0
    result: str | None = None
    # None, an exact string, or a predicate over (error, the database's rows).
    error: Any = None
    retry_on_timeout: bool = True
    run_after: Any = None
    lease_expires: Any = None
    deadline: Any = None
    started_at: Any = None
    heartbeat_at: Any = None
    finished_at: Any = None
    # Stored resource costs (None: the handler's, written when a weighing claim takes it).
    uses: dict[str, int] | None = None
    # Column -> the instant's nominal time: the clock offset at the write plus the duration.
    nominal: dict[str, float] = field(default_factory=dict)


TIME_COLUMNS = ("run_after", "lease_expires", "deadline", "started_at", "heartbeat_at",
                "finished_at")
WRITE_ONCE = ("state", "result", "error", "attempts", "lease_token", "lease_owner",
              "finished_at", "started_at", "run_after", "lease_expires", "deadline")


@dataclass
class Counters:
    examples: int = 0
    steps: int = 0
    rules: dict[str, int] = field(default_factory=dict)
    fenced: int = 0


class Pick:
    """A step's choices, made by a generator seeded from the step's one Hypothesis draw.

    What can be chosen depends on the rows (which leases are stale, which jobs run), and
    Hypothesis refuses an example whose draws take another shape than an earlier one with
    the same prefix. One integer per step keeps that shape fixed whatever the database
    did, and the same seed makes the same choices from the same state. Each choice is
    noted, so a failing example prints them."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def record(self, label: str, value: Any) -> Any:
        note(f"{label}: {value!r}")
        return value

    def one(self, items: Sequence[Any], label: str) -> Any:
        return self.record(label, items[self.rng.randrange(len(items))])

    def boolean(self, label: str) -> bool:
        return bool(self.record(label, self.rng.random() < 0.5))

    def integer(self, lo: int, hi: int, label: str) -> int:
        return int(self.record(label, self.rng.randint(lo, hi)))

    def some(self, items: Sequence[Any], lo: int, hi: int, label: str) -> list[Any]:
        """Between ``lo`` and ``hi`` of ``items``, repeats allowed."""
        n = self.rng.randint(lo, hi)
        return list(self.record(label, [items[self.rng.randrange(len(items))]
                                        for _ in range(n)]))

    def distinct(self, items: Sequence[Any], lo: int, hi: int, label: str) -> list[Any]:
        """Between ``lo`` and ``hi`` different ones of ``items`` (fewer if there are fewer)."""
        n = min(self.rng.randint(lo, hi), len(items))
        return list(self.record(label, self.rng.sample(list(items), n)))


def reset(queue: readyq.Queue) -> None:
    t = queue.store.tables
    with queue.engine.begin() as conn:
        conn.execute(sa.delete(t.steps))
        conn.execute(sa.delete(t.checkpoints))
        conn.execute(sa.delete(t.deps))
        conn.execute(sa.delete(t.groups))
        conn.execute(sa.delete(t.reservations))
        conn.execute(sa.update(t.jobs).values(parent_id=None))
        conn.execute(sa.delete(t.jobs))
        conn.execute(sa.update(t.gate).values(vclock=0.0, seq=0))
    queue.store.clock_offset = 0.0


class QueueModel(RuleBasedStateMachine):
    queue: readyq.Queue
    counters: Counters

    def __init__(self) -> None:
        super().__init__()
        reset(self.queue)
        self.store = self.queue.store
        self.jobs: dict[int, MJob] = {}
        # (job id, costs held for it) of the standing reservations, oldest first.
        self.reserved: list[tuple[int, dict[str, int]]] = []
        self.leases: list[tuple[str, Any]] = []  # (owner, ClaimedJob) ever handed out
        # Outcomes recorded, with what the job looked like right after.
        self.recorded: list[tuple[str, Outcome, tuple[Any, ...]]] = []
        self.rows: dict[int, Any] = {}
        # What attempts kept: job -> (state JSON, attempt); job -> step -> (JSON, attempt).
        self.saved: dict[int, tuple[str, int]] = {}
        self.stored: dict[int, dict[str, tuple[str, int]]] = {}
        self.n = 0
        self.bracket = (0.0, 0.0)
        self.offset_in_step = 0.0
        self.counters.examples += 1

    # -- plumbing ---------------------------------------------------------------------

    def now(self) -> float:
        store = self.store
        return float(store.read(lambda c: c.execute(sa.select(store.now())).scalar_one()))

    def step(self, name: str, op: Callable[[], Any]) -> Any:
        """Run ``op`` bracketed by two reads of the database clock."""
        self.counters.steps += 1
        self.counters.rules[name] = self.counters.rules.get(name, 0) + 1
        self.offset_in_step = self.store.clock_offset
        before = self.now()
        out = op()
        self.bracket = (before, self.now())
        return out

    def at(self, plus: float = 0.0, spread: float = 0.0) -> Span:
        lo, hi = self.bracket
        real = (lo + hi) / 2 - self.offset_in_step
        return Span(lo + plus, hi + plus + spread, real)

    def read_rows(self) -> dict[int, Any]:
        j = self.store.tables.jobs
        with self.queue.engine.connect() as conn:
            return {int(r.id): r for r in conn.execute(sa.select(j).order_by(j.c.id))}

    def judged(self) -> list[float]:
        """The nominal times of the instants a claim or a sweep judges."""
        out = []
        for m in self.jobs.values():
            if m.state == "ready" and m.run_after is not None:
                out.append(m.nominal["run_after"])
            if m.state in IN_FLIGHT and m.lease_expires is not None:
                out.append(m.nominal["lease_expires"])
            if m.state == "running" and m.deadline is not None:
                out.append(m.nominal["deadline"])
        return out

    def settle(self) -> None:
        """Move the clock past any instant a claim or a sweep is about to judge."""
        judged = self.judged()
        for _ in range(len(judged) + 1):
            offset = self.store.clock_offset
            if not any(-SETTLE_BEHIND < x - offset <= SETTLE_AHEAD for x in judged):
                return
            self.store.clock_offset += SETTLE_STEP
        raise AssertionError("could not settle the clock")

    def sync(self) -> None:
        """Compare every row with the model; adopt instants known only as a bracket."""
        rows = self.read_rows()
        assert sorted(rows) == sorted(self.jobs), (sorted(rows), sorted(self.jobs))
        for jid, m in self.jobs.items():
            r = rows[jid]
            where = f"job {jid} ({m.state})"
            expect = {
                "state": m.state, "attempts": m.attempts, "lease_token": m.token,
                "lease_owner": m.owner, "cancel_requested": m.cancel_requested,
                "pending_deps": m.pending, "open_children": m.open_children,
                "failed_children": m.failed_children, "result": m.result,
                "is_container": m.is_container, "parent_id": m.parent,
                "max_attempts": m.max_attempts, "priority": m.priority, "type": m.type,
                "uses": encode(m.uses),
            }
            got = {k: (bool(getattr(r, k)) if isinstance(v, bool) else getattr(r, k))
                   for k, v in expect.items()}
            assert got == expect, f"{where}: database {got} != model {expect}"
            if m.state == "running":
                assert bool(r.retry_on_timeout) == m.retry_on_timeout, where
            if callable(m.error):
                assert m.error(r.error, rows), f"{where}: error {r.error!r}"
                m.error = r.error
            else:
                assert r.error == m.error, f"{where}: error {r.error!r} != {m.error!r}"
            for col in TIME_COLUMNS:
                want, have = getattr(m, col), getattr(r, col)
                if isinstance(want, Span):
                    assert have is not None and want.lo - EPS <= have <= want.hi + EPS, (
                        f"{where}: {col} {have} outside [{want.lo}, {want.hi}]")
                    setattr(m, col, float(have))
                    m.nominal[col] = float(have) - want.real
                elif want is None:
                    assert have is None, f"{where}: {col} is {have}, expected none"
                else:
                    assert have is not None and abs(have - want) < 1e-6, (
                        f"{where}: {col} {have} != {want}")
        self.check_rows(rows)
        self.check_memory()
        self.rows = rows

    def check_memory(self) -> None:
        """The steps and checkpoint rows are the model's: only writes under a live lease
        landed, and a step keeps its first result."""
        t = self.store.tables
        with self.queue.engine.connect() as conn:
            saved = {int(r.job_id): (r.state, int(r.state_attempt)) for r in conn.execute(
                sa.select(t.checkpoints.c.job_id, t.checkpoints.c.state,
                          t.checkpoints.c.state_attempt))}
            stored: dict[int, dict[str, tuple[str, int]]] = {}
            for r in conn.execute(sa.select(t.steps.c.job_id, t.steps.c.name,
                                            t.steps.c.result, t.steps.c.attempt)):
                stored.setdefault(int(r.job_id), {})[r.name] = (r.result, int(r.attempt))
        assert saved == self.saved, (saved, self.saved)
        assert stored == self.stored, (stored, self.stored)

    def check_rows(self, rows: dict[int, Any]) -> None:
        deps: dict[int, set[int]] = {}
        t = self.store.tables
        with self.queue.engine.connect() as conn:
            for a, b in conn.execute(sa.select(t.deps.c.job_id, t.deps.c.depends_on_id)):
                deps.setdefault(int(a), set()).add(int(b))
        for jid, r in rows.items():
            old = self.rows.get(jid)
            if old is not None and old.state in TERMINAL:
                for col in WRITE_ONCE:
                    assert getattr(r, col) == getattr(old, col), f"terminal {jid}: {col} changed"
            if old is not None:
                assert r.lease_token >= old.lease_token, f"job {jid}: token went back"
            assert r.attempts <= r.max_attempts, f"job {jid}: attempts over max"
            assert r.attempts <= r.lease_token, f"job {jid}: more attempts than claims"
            if r.state in IN_FLIGHT:
                assert r.lease_owner is not None and r.lease_expires is not None, jid
                assert r.heartbeat_at is not None, jid
                if r.state == "running":
                    assert r.started_at is not None, jid
            else:
                assert r.lease_expires is None and r.deadline is None, jid
            if r.state == "waiting":
                assert r.pending_deps > 0, jid
            if r.state == "ready":
                assert all(rows[d].state == "done" for d in deps.get(jid, ())), jid
                assert not r.is_container
            if r.state == "active":
                kids = [k for k in rows.values() if k.parent_id == jid]
                assert r.is_container
                assert not kids or any(k.state not in TERMINAL for k in kids), jid
                assert r.open_children == sum(1 for k in kids if k.state not in TERMINAL)
            assert set(deps.get(jid, ())) == self.jobs[jid].deps, jid

    # -- the model's propagation (Store._propagate) -------------------------------------

    def ancestors(self, parent: int | None) -> list[int]:
        out = []
        while parent is not None:
            out.append(parent)
            parent = self.jobs[parent].parent
        return out

    def end(self, m: MJob, state: str, error: Any, *, finished: bool = True) -> None:
        m.state, m.error = state, error
        if finished:
            m.finished_at = self.at()

    def propagate(self, ended: list[tuple[int, str]]) -> None:
        work = list(ended)
        while work:
            wave, work = work, []
            done = {i for i, s in wave if s == "done"}
            bad = {i: s for i, s in wave if s != "done"}
            emptied = []
            for m in self.jobs.values():
                n = len(m.deps & done)
                if n:
                    if m.state == "waiting" and m.pending <= n:
                        m.state = "ready"
                    m.pending -= n
                    # A container without children ends done with its last dependency.
                    if m.state == "active" and m.pending <= 0 and m.open_children == 0:
                        emptied.append(m)
            for m in sorted(emptied, key=lambda m: m.id):
                self.end(m, "done", None)
                work.append((m.id, "done"))
            # A dependency that ended badly ends jobs and containers alike.
            hit = [m for m in self.jobs.values()
                   if m.state in ("waiting", "active") and m.deps & set(bad)]
            for m in sorted(hit, key=lambda m: m.id):
                names = m.deps & set(bad)

                def why(err: Any, rows: dict[int, Any], names: set[int] = names) -> bool:
                    hit = UPSTREAM.fullmatch(err or "")
                    return bool(hit) and int(hit.group(1)) in names and \
                        rows[int(hit.group(1))].state == hit.group(2)

                self.end(m, "upstream_failed", why)
                work.append((m.id, "upstream_failed"))
            parents: dict[int, list[int]] = {}
            for i, s in wave:
                p = self.jobs[i].parent
                if p is not None:
                    parents.setdefault(p, [0, 0])
                    parents[p][0] += 1
                    parents[p][1] += s != "done"
            for p, (n, n_bad) in sorted(parents.items()):
                c = self.jobs[p]
                c.open_children -= n
                c.failed_children += n_bad
            for p in sorted(parents):
                c = self.jobs[p]
                if c.state == "active" and c.open_children <= 0:
                    # A container being cancelled ends cancelled, not failed.
                    final = "done" if c.failed_children == 0 else (
                        "cancelled" if c.cancel_requested else "failed")
                    err = None if final == "done" else \
                        f"{c.failed_children} child job(s) did not end done"
                    self.end(c, final, err)
                    work.append((c.id, final))

    def current(self, owner: str) -> list[Any]:
        """Leases ``owner`` still holds, as the model sees them."""
        out = {}
        for o, c in self.leases:
            m = self.jobs[c.id]
            if o == owner and m.owner == owner and m.token == c.lease_token and \
                    m.state in IN_FLIGHT:
                out[c.id] = c
        return list(out.values())

    def stale(self) -> list[tuple[str, Any]]:
        """Leases taken away from their holder: re-claimed since, or swept."""
        out = []
        for o, c in self.leases:
            m = self.jobs[c.id]
            swept = isinstance(m.error, str) and m.error.startswith(("lease expired", "timed"))
            if m.token != c.lease_token or (m.state not in IN_FLIGHT and swept):
                out.append((o, c))
        return out

    # -- rules ---------------------------------------------------------------------------

    def enqueue(self, pick: Pick) -> None:
        ids = sorted(self.jobs)
        containers = [j for j in ids if self.jobs[j].state == "active"]
        is_container = pick.boolean("box") and len(containers) < 4
        # Mostly unfinished jobs, so that waiting on several of them is common.
        open_ids = [j for j in ids if self.jobs[j].state in UNFINISHED][-6:] or ids[-6:]
        deps = set(pick.some(open_ids, 0, 3, "deps")) \
            if ids and pick.boolean("with deps") else set()
        parent = pick.one([None, *containers], "parent") \
            if containers else None
        kind = pick.one(("t", "u"), "type")
        priority = pick.one((0, 0, 1), "priority")
        max_attempts = pick.integer(1, 3, "max_attempts")
        timeout = pick.one((None, None, 5_000.0, 15_000.0), "timeout")
        uses = None if is_container else pick.one(
            (None, None, {"gpu": 1}, {"gpu": 2}), "uses")
        new = NewJob(
            type="box" if is_container else kind, args_json="{}", priority=0 if is_container
            else priority, max_attempts=1 if is_container else max_attempts,
            timeout=None if is_container else timeout, depends_on=tuple(sorted(deps)),
            parent=parent, is_container=is_container, uses=encode(uses),
        )
        chain = self.ancestors(parent)
        effective = set(deps)
        for a in chain:
            effective |= self.jobs[a].deps
        states = {d: self.jobs[d].state for d in effective}
        bad = sorted(d for d, s in states.items() if s in BAD)
        refused = bool(deps & set(chain)) or (
            parent is not None and bool(effective) and not bad
            and bool(self.waits_for(effective) & set(chain))
        )
        if refused:
            with pytest.raises(DependencyCycle):
                self.step("enqueue refused", lambda: self.store.enqueue(new))
            self.sync()
            return
        jid = self.step("enqueue", lambda: self.store.enqueue(new))
        pending = sum(1 for s in states.values() if s != "done")
        if bad:
            state = "upstream_failed"
        elif is_container:
            state = "active"
        elif pending:
            state = "waiting"
        else:
            state = "ready"
        m = MJob(id=jid, type=new.type, is_container=is_container, parent=parent,
                 deps=effective, priority=new.priority, max_attempts=new.max_attempts,
                 timeout=new.timeout, state=state, pending=pending, uses=uses)
        if state == "upstream_failed":
            m.error = f"dependency {bad[0]} ended {states[bad[0]]}"
            m.finished_at = self.at()
        self.jobs[jid] = m
        if parent is not None:
            self.jobs[parent].open_children += 1
            if state == "upstream_failed":
                self.propagate([(jid, state)])
        self.sync()

    def waits_for(self, start: set[int]) -> set[int]:
        """Jobs reachable from ``start`` through unfinished jobs' dependencies and
        active containers' unfinished children."""
        seen: set[int] = set()
        frontier = set(start)
        while frontier:
            seen |= frontier
            nxt: set[int] = set()
            for jid in frontier:
                m = self.jobs[jid]
                if m.state in TERMINAL:
                    continue
                nxt |= m.deps
                if m.is_container:
                    nxt |= {k.id for k in self.jobs.values()
                            if k.parent == jid and k.state not in TERMINAL}
            frontier = nxt - seen
        return seen

    def model_claim(self, owner: str, limit: int, types: list[str] | None,
                    start: bool, claimed: list[Any], gpus: int | None = None) -> None:
        now_lo, _ = self.bracket
        in_flight = sum(1 for m in self.jobs.values() if m.state in IN_FLIGHT)
        n = max(0, min(limit, CAP - in_flight))
        def due(at: Any) -> bool:
            # A Span was written earlier in this same transaction (a retry's delay).
            return at is None or (at.lo if isinstance(at, Span) else at) <= now_lo

        ready = sorted(
            (m for m in self.jobs.values()
             if m.state == "ready" and due(m.run_after)
             and (types is None or m.type in types)
             # A claim that weighs no resources leaves jobs with costs of their own.
             and (gpus is not None or m.uses is None)),
            key=lambda m: (-m.priority, m.id),
        )
        if gpus is None:
            expected = [m.id for m in ready[:n]]
        else:
            expected = self.model_weighed(limit, types, ready, gpus, in_flight, due)
        assert sorted(c.id for c in claimed) == sorted(expected), (claimed, expected)
        self.counters.rules["jobs claimed"] = self.counters.rules.get("jobs claimed", 0) + len(
            claimed)
        for c in claimed:
            m = self.jobs[c.id]
            m.token += 1
            m.attempts += 1
            assert (c.lease_token, c.attempt) == (m.token, m.attempts)
            m.state, m.owner, m.cancel_requested = "leased", owner, False
            m.lease_expires, m.heartbeat_at = self.at(TTL), self.at()
            if start:
                timeout, retry = START[m.type].timeout, START[m.type].retry_on_timeout
                seconds = m.timeout if m.timeout is not None else timeout
                m.state, m.started_at, m.retry_on_timeout = "running", self.at(), retry
                m.deadline = None if seconds is None else self.at(seconds)
            self.leases.append((owner, c))

    def model_weighed(self, limit: int, types: list[str] | None, ready: list[MJob],
                      gpus: int, in_flight: int, due: Callable[[Any], bool]) -> list[int]:
        """The ids a claim that weighs ``gpus`` GPUs takes, by the DRF plan over what the
        model holds; the model's reservations and stored costs follow the claim."""
        if CAP - in_flight <= 0:
            return []
        held: dict[str, int] = {GLOBAL: in_flight}
        for m in self.jobs.values():
            if m.state in IN_FLIGHT:
                for k, v in (m.uses or {}).items():
                    held[k] = held.get(k, 0) + v
        standing = []
        for jid, cost in list(self.reserved):
            m = self.jobs[jid]
            if m.state != "ready" or not due(m.run_after):
                self.reserved.remove((jid, cost))
                continue
            standing.append(Reserved(Candidate(jid, "default", {GLOBAL: 1, **cost}, m.type),
                                     claimable=types is None or m.type in types))
        # The window of heads counts the group's jobs that are not reserved (the
        # reserved ones are planned as reservations).
        standing_ids = {r.job.id for r in standing}
        heads = []
        for m in ready:
            if m.id in standing_ids:
                continue
            cost = m.uses if m.uses is not None else HANDLER_USES.get(m.type, {})
            heads.append(Candidate(m.id, "default", {GLOBAL: 1, **cost}, m.type))
        heads = heads[:CAP]
        if not heads and not standing:
            return []
        group = GroupState("default", 1, held, len(heads), heads)
        capacity = {GLOBAL: CAP, "gpu": gpus}
        plan = plan_starts(capacity, [group], 0.0, reservations=standing, max_claims=limit)
        picked = [c.id for c in plan.picks]
        self.reserved = [(jid, cost) for jid, cost in self.reserved
                         if jid not in plan.served_reservations]
        self.reserved += [(c.id, {k: v for k, v in c.cost.items() if k != GLOBAL})
                          for c in plan.reserve]
        for jid in picked:
            m = self.jobs[jid]
            if m.uses is None and HANDLER_USES.get(m.type):
                m.uses = dict(HANDLER_USES[m.type])
        return picked

    def claim(self, pick: Pick) -> None:
        owner = pick.one(OWNERS, "owner")
        limit = pick.integer(1, 3, "limit")
        types = pick.one((None, ["t"]), "types")
        start = pick.boolean("start")
        # A claim that weighs a GPU resource (its capacity now), or none.
        gpus = pick.one((None, None, 0, 1, 2, 3), "gpus")
        view = None if gpus is None else ResourceView({"gpu": gpus}, HANDLER_USES)
        self.settle()
        store = self.store
        if start:
            order = ClaimOrder(owner=owner, cap=CAP, limit=limit, lease_ttl=TTL, types=types,
                               start=START, resources=view)
            _, claimed = self.step("claim+start (cycle)",
                                   lambda: store.finish_and_claim([], order))
        else:
            claimed = self.step("claim", lambda: store.claim_jobs(ClaimOrder(
                owner=owner, cap=CAP, limit=limit, lease_ttl=TTL, types=types, resources=view,
            )))
        self.model_claim(owner, limit, types, start, claimed, gpus)
        self.sync()
        self.check_reservations()

    def check_reservations(self) -> None:
        """The reservation rows are the model's, with the costs it holds for them."""
        r = self.store.tables.reservations
        with self.queue.engine.connect() as conn:
            rows = conn.execute(sa.select(r.c.job_id, r.c.uses).order_by(r.c.seq)).all()
        # A weighing claim drops the rows of jobs no longer ready; until one runs they
        # stay, so only the live ones are compared.
        live = [(int(jid), decode(u)) for jid, u in rows if self.jobs[int(jid)].state == "ready"]
        model = [(jid, cost) for jid, cost in self.reserved if self.jobs[jid].state == "ready"]
        assert live == model, (live, model)

    def mark_running(self, pick: Pick) -> None:
        pool = [(o, c) for o, c in self.leases if self.jobs[c.id].state == "leased"]
        owner, c = pick.one(pool, "lease")
        m = self.jobs[c.id]
        timeout, retry = START[m.type].timeout, START[m.type].retry_on_timeout
        seconds = m.timeout if m.timeout is not None else timeout
        moved = self.step("mark_running", lambda: self.store.start_jobs(
            owner, [(c, StartPolicy(seconds, retry))]))
        ok = m.owner == owner and m.token == c.lease_token
        assert moved == ({c.id} if ok else set())
        if ok:
            m.state, m.started_at, m.retry_on_timeout = "running", self.at(), retry
            m.deadline = None if seconds is None else self.at(seconds)
        else:
            self.counters.fenced += 1
        self.sync()

    def heartbeat(self, pick: Pick) -> None:
        owner = pick.one(sorted({o for o, _ in self.leases}), "owner")
        held = [(o, c) for o, c in self.leases if o == owner][-4:]
        latest = {c.id: c for _, c in held}  # one lease per job, the newest
        leases = [Lease(c.id, c.lease_token) for c in latest.values()]
        status = self.step("heartbeat", lambda: self.store.heartbeat(owner, leases, TTL))
        for c in latest.values():
            m = self.jobs[c.id]
            held_now = m.owner == owner and m.token == c.lease_token and m.state in IN_FLIGHT
            assert status[c.id].lost == (not held_now), (c, m.state)
            assert status[c.id].cancel_requested == m.cancel_requested
            if held_now:
                m.lease_expires, m.heartbeat_at = self.at(TTL), self.at()
            else:
                self.counters.fenced += 1
        self.sync()

    def model_finish(self, owner: str, o: Outcome) -> bool:
        m = self.jobs[o.job.id]
        if not (m.owner == owner and m.token == o.job.lease_token and m.state == "running"):
            return False
        m.lease_expires = m.deadline = None
        if o.kind == "done":
            m.state, m.result, m.error, m.finished_at = "done", o.result_json, None, self.at()
            self.propagate([(m.id, "done")])
        elif o.kind in ("retry", "release") and m.cancel_requested:
            self.end(m, "cancelled", o.error or "cancelled")
            self.propagate([(m.id, "cancelled")])
        elif o.kind == "retry":
            m.state, m.error, m.run_after = "ready", o.error, self.at(o.delay)
        elif o.kind == "release":
            m.state, m.attempts, m.run_after = "ready", m.attempts - 1, None
        else:
            final = "failed" if o.kind == "fail" else "cancelled"
            self.end(m, final, o.error)
            self.propagate([(m.id, final)])
        return True

    def outcome(self, pick: Pick, c: Any) -> Outcome:
        kind = pick.one(("done", "done", "retry", "fail", "cancel", "release"),
                        "kind")
        if kind == "retry" and c.attempt >= c.max_attempts:
            kind = "fail"  # as a worker decides: no retry past max_attempts
        self.n += 1
        return Outcome(
            job=c, kind=kind,
            result_json=f'{{"n": {self.n}}}' if kind == "done" else None,
            error=None if kind in ("done", "release") else f"boom {self.n}",
            delay=pick.one((0.0, 3_000.0), "delay") if kind == "retry" else 0.0,
        )

    def holders(self) -> list[str]:
        return [o for o in OWNERS
                if any(self.jobs[c.id].state == "running" for c in self.current(o))]

    def finish(self, pick: Pick) -> None:
        via_cycle = pick.boolean("via cycle")
        owner = pick.one(self.holders(), "owner")
        held = [c for c in self.current(owner) if self.jobs[c.id].state == "running"]
        chosen = pick.distinct(held, 1, 2, "jobs")
        outcomes = [self.outcome(pick, c) for c in chosen]
        if via_cycle:
            # Outcomes and a claim in one transaction; freed slots count for the claim.
            self.settle()
            limit = pick.integer(1, 2, "limit")
            applied, claimed = self.step("finish+claim (cycle)", lambda: (
                self.store.finish_and_claim(outcomes, ClaimOrder(
                    owner=owner, cap=CAP, limit=limit, lease_ttl=TTL, types=None, start=START,
                ))))
        else:
            applied = self.step("finish", lambda: self.store.record_outcomes(owner, outcomes))
        for o in sorted(outcomes, key=lambda o: (o.kind != "done", o.job.id)):
            ok = self.model_finish(owner, o)
            assert applied[o.job.id, o.job.lease_token] == ok, o
            key = f"outcome {o.kind}" + ("" if ok else " fenced")
            self.counters.rules[key] = self.counters.rules.get(key, 0) + 1
            if ok:
                self.recorded.append((owner, o, self.after(o)))
        if via_cycle:
            self.model_claim(owner, limit, None, True, claimed)
        self.sync()

    def after(self, o: Outcome) -> tuple[Any, ...]:
        m = self.jobs[o.job.id]
        return (m.state, m.error if isinstance(m.error, str) else None, m.token, m.owner,
                m.run_after is None)

    def replayable(self) -> list[tuple[str, Outcome]]:
        return [(w, o) for w, o, seen in self.recorded if self.after(o) == seen]

    def replay_outcome(self, pick: Pick) -> None:
        """The same outcome sent again, as after a COMMIT whose reply was lost: it is
        recognised as recorded (True) and changes nothing, not even propagation."""
        owner, o = pick.one(self.replayable(), "recorded outcome")
        before = self.read_rows()
        applied = self.step("replayed finish", lambda: self.store.record_outcomes(owner, [o]))
        assert applied == {(o.job.id, o.job.lease_token): True}, (o.kind, applied)
        after = self.read_rows()
        assert {k: tuple(v) for k, v in after.items()} == \
            {k: tuple(v) for k, v in before.items()}, "a replayed outcome changed rows"
        self.sync()

    def stale_writer(self, pick: Pick) -> None:
        """An old lease (reclaimed, re-claimed or finished since) writes: nothing changes."""
        owner, c = pick.one(self.stale(), "stale lease")
        before = self.read_rows()
        if pick.boolean("heartbeat"):
            status = self.step("stale heartbeat", lambda: self.store.heartbeat(
                owner, [Lease(c.id, c.lease_token)], TTL))
            assert status[c.id].lost
        else:
            o = self.outcome(pick, c)
            applied = self.step("stale finish", lambda: self.store.record_outcomes(owner, [o]))
            m = self.jobs[c.id]
            # A hand-back of an attempt that a sweep ended as timed out (the row still
            # names this lease) is told as swept: the sweep recorded that one end.
            swept = (o.kind == "release" and m.owner == owner and m.token == c.lease_token
                     and isinstance(m.error, str) and m.error.startswith("timed out"))
            assert applied == {(c.id, c.lease_token): Recorded.SWEPT if swept else False}
        self.counters.fenced += 1
        after = self.read_rows()
        assert {k: tuple(v) for k, v in after.items()} == \
            {k: tuple(v) for k, v in before.items()}, "a fenced write changed rows"
        self.sync()

    def remember(self, pick: Pick) -> None:
        """A step or a state written under a lease, live or not (``Job.step``,
        ``Job.save_state``): it lands, and extends the lease, only while the lease holds;
        otherwise LeaseLost and nothing changes."""
        owner, c = pick.one(self.leases, "lease")
        kind = pick.one(("state", "step"), "memory")
        name = pick.one(("a", "b", "c"), "step name")
        self.n += 1
        value = str(self.n)
        holder = Holder(c.id, c.attempt, owner, c.lease_token, TTL)
        m = self.jobs[c.id]
        held = m.owner == owner and m.token == c.lease_token and m.state in IN_FLIGHT
        before = self.read_rows()
        try:
            if kind == "state":
                self.step("save_state", lambda: self.store.save_state(holder, value))
            else:
                self.step("store_step", lambda: self.store.store_step(holder, name, value))
            lost = False
        except LeaseLost:
            lost = True
        assert lost == (not held), (kind, c, m.state)
        if held:
            m.lease_expires, m.heartbeat_at = self.at(TTL), self.at()
            if kind == "state":
                self.saved[c.id] = (value, c.attempt)
            else:
                self.stored.setdefault(c.id, {}).setdefault(name, (value, c.attempt))
        else:
            self.counters.fenced += 1
            after = self.read_rows()
            assert {k: tuple(v) for k, v in after.items()} == \
                {k: tuple(v) for k, v in before.items()}, "a fenced memory write changed rows"
        self.sync()

    def cancel(self, pick: Pick) -> None:
        jid = pick.one(sorted(self.jobs), "job")
        # Children are cancelled one by one in id order, as model_cancel does: a child
        # whose sibling it depends on went first ends upstream_failed, not cancelled.
        did = self.step("cancel", lambda: self.store.cancel(jid))
        assert (None if did is None else (did.ended, did.requested)) == self.model_cancel(jid)
        self.sync()

    def model_cancel(self, jid: int) -> tuple[int, int] | None:
        """What cancelling ``jid`` does to the model: (jobs ended, jobs asked to stop),
        or None when it had already ended."""
        m = self.jobs[jid]
        if m.state in ("waiting", "ready"):
            self.end(m, "cancelled", "cancelled")
            self.propagate([(jid, "cancelled")])
            return (1, 0)
        if m.state in IN_FLIGHT:
            m.cancel_requested = True
            return (0, 1)
        if m.state == "active":
            m.cancel_requested = True
            kids = [k.id for k in sorted(self.jobs.values(), key=lambda k: k.id)
                    if k.parent == jid and k.state in (*UNFINISHED, "active")]
            ended = requested = 0
            for k in kids:
                part = self.model_cancel(k)
                if part is not None:
                    ended, requested = ended + part[0], requested + part[1]
            if m.state == "active" and not kids:
                self.end(m, "cancelled", "cancelled")
                self.propagate([(jid, "cancelled")])
                ended += 1
            return (ended, requested)
        return None

    def advance_clock(self, pick: Pick) -> None:
        seconds = pick.one((500.0, 4_000.0, 12_000.0), "seconds")
        self.counters.rules["advance clock"] = self.counters.rules.get("advance clock", 0) + 1
        self.store.clock_offset += seconds

    def reclaim(self, pick: Pick) -> None:
        self.settle()
        now = self.now()
        result = self.step("reclaim", lambda: self.store.reclaim_expired())
        retried = failed = timed_out = cancelled = 0
        ended = []
        for m in sorted(self.jobs.values(), key=lambda m: m.id):
            if m.state not in IN_FLIGHT:
                continue
            timeout = m.state == "running" and m.deadline is not None and m.deadline < now
            if not (timeout or (m.lease_expires is not None and m.lease_expires < now)):
                continue
            if timeout:
                timed_out += 1
                seconds = m.timeout if m.timeout is not None else START[m.type].timeout
                why = f"timed out after {seconds:g}s (attempt {m.attempts})"
                retry = m.retry_on_timeout and m.attempts < m.max_attempts
            else:
                why = f"lease expired: worker lost during attempt {m.attempts}"
                retry = m.attempts < m.max_attempts
            m.lease_expires = m.deadline = None
            if m.cancel_requested:
                self.end(m, "cancelled", why)
                cancelled += 1
                ended.append((m.id, "cancelled"))
            elif retry:
                lo, hi = retry_window(m.attempts)
                m.state, m.error = "ready", why
                m.run_after = self.at(lo, spread=hi - lo)
                retried += 1
            else:
                self.end(m, "failed", why)
                failed += 1
                ended.append((m.id, "failed"))
        self.propagate(ended)
        got = (result.retried, result.failed, result.timed_out, result.cancelled)
        assert got == (retried, failed, timed_out, cancelled), got
        self.sync()

    # -- one rule, weighted over the actions that can act now ---------------------------

    ACTIONS: ClassVar[tuple[tuple[str, int], ...]] = (
        ("enqueue", 3), ("claim", 3), ("finish", 8), ("mark_running", 2), ("heartbeat", 2),
        ("stale_writer", 2), ("replay_outcome", 1), ("cancel", 1), ("advance_clock", 1),
        ("reclaim", 2), ("remember", 2),
    )

    def possible(self, action: str) -> bool:
        return {
            "mark_running": lambda: any(m.state == "leased" for m in self.jobs.values()),
            "heartbeat": lambda: bool(self.leases),
            "finish": lambda: bool(self.holders()),
            "replay_outcome": lambda: bool(self.replayable()),
            "stale_writer": lambda: bool(self.stale()),
            "cancel": lambda: bool(self.jobs),
            "remember": lambda: bool(self.leases),
        }.get(action, lambda: True)()

    @rule(seed=st.integers(0, 2**32 - 1))
    def act(self, seed: int) -> None:
        pick = Pick(seed)
        choices = [name for name, weight in self.ACTIONS for _ in range(weight)
                   if self.possible(name)]
        getattr(self, pick.one(choices, "action"))(pick)

    @invariant()
    def rows_match(self) -> None:
        # sync() ran after every rule that writes; this catches a rule that forgot.
        if self.jobs:
            assert set(self.rows) == set(self.jobs)


@pytest.mark.slow
def test_the_store_matches_the_model(queue: readyq.Queue, dialect_name: str,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    counters = Counters()

    class Machine(QueueModel):
        pass

    Machine.queue = queue
    Machine.counters = counters
    run_state_machine_as_test(
        Machine,
        settings=settings(
            max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None, database=None,
            # Every step is a few round trips to a database: shrinking a failure can take
            # many minutes. Off by default so that a failing run stays bounded (the
            # failing steps are printed all the same); READYQ_MODEL_SHRINK=1 turns it on.
            phases=PHASES,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                   HealthCheck.data_too_large],
        ),
    )
    with capsys.disabled():
        rules = ", ".join(f"{k} {v}" for k, v in sorted(counters.rules.items()))
        print(f"\n[{dialect_name}] {counters.examples} examples, {counters.steps} steps, "
              f"{counters.fenced} fenced writes checked; rules: {rules}")
    assert counters.examples >= min(EXAMPLES, 10)
