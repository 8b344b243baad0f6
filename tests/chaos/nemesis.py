"""The nemesis: worker processes over thousands of short jobs (a DAG included) while
faults are injected, then the history checked.

Faults (each optional, see :class:`Config`):

``kill``       SIGKILL a random worker; a new one (new id) starts shortly after.
``freeze``     SIGSTOP a random worker for longer than its lease, then SIGCONT it.
``connkill``   kill the workers' connections from the server side: ``pg_terminate_backend``
               (PostgreSQL, found by the run's ``application_name``) or ``KILL`` (MariaDB,
               found in ``information_schema.processlist`` by the run's database).
``lockkill``   SQLite: a helper process takes the write lock (``BEGIN IMMEDIATE`` and a
               write) and is SIGKILLed while holding it.
``claimkill``  SIGKILL a worker while it is inside a claim transaction holding the gate
               lock (SQLite: the write lock); the workers linger there now and then.
``restart``    restart the database server (PostgreSQL, MariaDB), ``restarts`` times.
``poison``     enqueue a job whose handler raises text no database stores as it is (NUL,
               a lone surrogate), and one whose stored args are rewritten into text that
               is not JSON before it becomes runnable: each must fail, alone, with its
               error stored, and no worker may die of it.
``partition``  PostgreSQL, MariaDB: one worker runs in a network namespace of its own,
               reaching the database through a forwarder; its link is cut (every packet
               dropped) for longer than its lease, then healed.

Some workers run with their ``time.time()`` shifted by minutes. Workers are never
restarted except after a kill of ours: each must ride out every other fault itself.
At the end every job must be terminal and :func:`history.check` must pass.
"""

from __future__ import annotations

import contextlib
import os
import random
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import history
import sqlalchemy as sa
from chaos_procs import crashes

import readyq
from readyq import JobSpec

HERE = Path(__file__).resolve().parent
WORKER = HERE / "chaos_worker.py"
RESTART_ENV = "READYQ_TEST_DB_RESTART"
# The worker slot that runs behind a network that the partition fault cuts.
PARTITIONED_SLOT = 1
TERMINAL = history.TERMINAL


@dataclass
class Config:
    url: str
    dialect: str  # sqlite | postgresql | mariadb
    workdir: Path
    label: str  # names this run's schema / database (and its connections)
    fault_seconds: float = 25.0
    jobs: int = 1500  # plain jobs, on top of the DAG
    workers: int = 3
    cap: int = 6
    max_running: int | None = 3
    lease_ttl: float = 2.0
    heartbeat: float = 0.5
    poll: float = 0.1
    skews: tuple[float, ...] = (0.0, 300.0, -300.0)
    faults: tuple[str, ...] = ("kill", "freeze", "connkill", "claimkill")
    restarts: int = 0  # database server restarts, spread over the fault phase
    fault_gap: tuple[float, float] = (0.5, 1.5)
    upfront: float = 0.6  # share of the plain jobs enqueued before the workers start
    drain_timeout: float = 90.0
    seed: int = 0
    # Named resources every worker defines; a share of the plain jobs takes 1 or 2 units
    # of each, and the checker holds every instant's use to the capacity.
    resources: dict[str, int] = field(default_factory=lambda: {"gpu": 3})
    costed: float = 0.3
    log: Callable[[str], None] = print


@dataclass
class Proc:
    name: str
    slot: int
    popen: subprocess.Popen[bytes]
    log_path: Path
    stats_path: Path
    skew: float
    frozen_until: float | None = None

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""


@dataclass
class Result:
    config: Config
    report: history.Report
    counts: dict[str, int]
    faults: dict[str, int]
    outage: float
    freeze_max: float
    worst_ratio: float
    worst_job: tuple[int, float, float] | None
    reclaim_bound: float
    elapsed: float
    problems: list[str] = field(default_factory=list)
    skewed: tuple[int, int] = (0, 0)  # clock-skewed worker processes, attempts they started

    @property
    def ok(self) -> bool:
        return self.report.ok and not self.problems

    def lines(self) -> list[str]:
        f = self.report.figures
        fa = self.faults
        dup = f["duplicates_explained"]
        return [
            f"[{self.config.dialect}] {f['jobs']} jobs x {fa['kill'] + fa['claimkill']} kills "
            f"({fa['claimkill']} mid-claim) x {fa['freeze']} freezes x {fa['restart']} "
            f"restarts (+ {fa['connkill']} connection kills / {fa['sessions_killed']} "
            f"sessions, {fa['lockkill']} lock-holder kills, {fa['poison']} poison pairs, "
            f"{fa['partition']} network cuts) in {self.elapsed:.0f}s",
            f"  -> lost {f['lost']}, double-finalized {f['double_finalized']}, duplicate "
            f"starts {f['duplicate_starts']} (explained: "
            + (", ".join(f"{k} {v}" for k, v in sorted(dup.items())) or "none")
            + f"; unexplained {len(self.report.violations['duplicates'])}), stale starts "
            f"{f['stale_starts']}",
            f"  -> worst claim-to-terminal {f['worst_claim_to_terminal']:.2f}s, "
            f"{self.worst_ratio:.0%} of its bound"
            + (f" (job {self.worst_job[0]}: {self.worst_job[1]:.2f}s of "
               f"{self.worst_job[2]:.2f}s)" if self.worst_job else "")
            + f"; worst reclaim delay after expiry {f['worst_reclaim_delay']:.2f}s "
            f"(bound {self.reclaim_bound:.2f}s); db outage {self.outage:.1f}s",
            f"  -> fenced writes observed {f['fenced_observed']} vs stale writers injected "
            f"{f['stale_writers_injected']} ({f['stale_writers_must_report']} lived on and "
            f"had to report, {len(f['stale_writers_unreported'])} did not; "
            f"{f['orphans_reclaimed']} orphans of killed workers; "
            f"{len(f['leases_never_learned'])} leases their worker never learned of, from "
            f"a claim whose commit reply was lost); reclaims {f['reclaims']}",
            f"  -> clock-skewed workers ({', '.join(f'{x:+g}s' for x in self.config.skews if x)}"
            f"): {self.skewed[0]} processes started {self.skewed[1]} attempts",
            f"  -> steps: {f['steps_stored']} stored, {f['step_runs']} runs "
            f"({f['step_runs_unstored']} before the stored one, under a lease that lost it); "
            f"{f['steps_reused']} later leases got a stored result back",
            f"  -> peak leases {f['peak_leases']} / "
            f"running {f['peak_running']} (cap {self.config.cap}); end states {self.counts}",
            *(
                [f"  -> resources: peak units held {f.get('peak_uses')} / capacity "
                 f"{self.config.resources}"]
                if self.config.resources else []
            ),
            "  -> checker: " + self.report.summary().replace("\n", "\n     "),
            *(f"  !! {p}" for p in self.problems),
        ]


# -- helpers ------------------------------------------------------------------------------


def retrying(fn: Callable[[], Any], *, seconds: float = 120.0) -> Any:
    """Run ``fn`` through database outages (ours: restarts, killed sessions)."""
    deadline = time.monotonic() + seconds
    delay = 0.05
    while True:
        try:
            return fn()
        except sa.exc.DBAPIError:
            if time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 1.0)


def workload(
    rnd: random.Random, plain: int, upfront: float,
    resources: dict[str, int] | None = None, costed: float = 0.0,
) -> tuple[list[JobSpec], list[list[JobSpec]]]:
    """The DAG (chains, fan-ins, nested containers) and plain jobs in waves.

    Returns the specs to enqueue before the workers start, and the later waves."""
    def job(**extra: Any) -> dict[str, Any]:
        args: dict[str, Any] = {"ms": rnd.randint(1, 25)}
        if rnd.random() < 0.03:
            args["fail_first"] = True
        else:
            # A job run again after its lease was taken runs long enough for the stale
            # worker, once resumed, to report while its successor still holds the job.
            args["retry_ms"] = 600
        if rnd.random() < 0.5:
            args["step"] = True  # a job.step whose runs the checker follows
        args.update(extra)
        return args

    groups = [("g0", 1), ("g1", 2), ("g2", 3), ("g3", 1)]
    dag: list[JobSpec] = []
    for c in range(8):  # chains
        for k in range(10):
            dag.append(JobSpec("chaos", job(), key=f"c{c}.{k}", group=groups[c % 4][0],
                               weight=groups[c % 4][1], max_attempts=20,
                               depends_on=[f"c{c}.{k - 1}"] if k else []))
    for f in range(4):  # fan-ins
        for i in range(25):
            dag.append(JobSpec("chaos", job(), key=f"f{f}.{i}", group="g1", weight=2,
                               max_attempts=20))
        dag.append(JobSpec("chaos", job(), key=f"f{f}", group="g1", weight=2, max_attempts=20,
                           depends_on=[f"f{f}.{i}" for i in range(25)]))
    dag.append(JobSpec("box", key="box", container=True, depends_on=["c0.3"]))
    dag.append(JobSpec("box", key="inner", container=True, parent="box"))
    for i in range(40):
        dag.append(JobSpec("chaos", job(), key=f"b{i}", parent="inner" if i % 4 == 0 else "box",
                           group="g2", weight=3, max_attempts=20,
                           depends_on=["f0"] if i % 10 == 0 else []))
    dag.append(JobSpec("chaos", job(), key="after-box", depends_on=["box", "c7.9"],
                       max_attempts=20))
    for i in range(4):  # attempts that overrun their timeout (1 s), swept and fenced out
        # The late result of attempt 1 (at 2.5 s) arrives while attempt 2 runs.
        dag.append(JobSpec("slow", {"first_ms": 2500, "ms": 800}, key=f"s{i}", max_attempts=20))
    def uses() -> dict[str, int] | None:
        if not resources or rnd.random() >= costed:
            return None
        return {name: rnd.randint(1, min(2, cap)) for name, cap in resources.items()}

    specs = [
        JobSpec("chaos", job(), group=g, weight=w, max_attempts=20, uses=uses())
        for g, w in (groups[rnd.randrange(4)] for _ in range(plain))
    ]
    first = int(len(specs) * upfront)
    later = specs[first:]
    waves = [later[i:i + 50] for i in range(0, len(later), 50)]
    return dag + specs[:first], waves


# -- the run ------------------------------------------------------------------------------


class Nemesis:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.rnd = random.Random(cfg.seed)
        self.procs: dict[int, Proc] = {}
        self.generation: dict[int, int] = {}
        self.killed: dict[str, float] = {}  # worker -> when (time.time(), the db's clock)
        self.faults = dict.fromkeys(
            ("kill", "claimkill", "freeze", "connkill", "sessions_killed", "lockkill",
             "restart", "poison", "partition"), 0)
        # Jobs the poison fault made, with what their error must say.
        self.poisoned: dict[int, str] = {}
        self.netns: Any = None
        self.proxy: Any = None
        self.healed_at = 0.0
        self.problems: list[str] = []
        self.outage = 0.0
        self.freeze_max = 0.0
        self.restart_due: dict[int, float] = {}
        self.own_sessions: set[int] = set()
        self.lock = threading.Lock()
        self.skew_of: dict[str, float] = {}
        self.producer_error: list[BaseException] = []
        self.markers = cfg.workdir / "markers"
        self.markers.mkdir(parents=True, exist_ok=True)
        self.engine = self._own_engine()
        self.queue = readyq.Queue(self.engine)

    # -- connections

    def _own_engine(self) -> sa.Engine:
        url = sa.make_url(self.cfg.url)
        if self.cfg.dialect == "sqlite":
            return sa.create_engine(url, connect_args={"timeout": 30.0})
        if self.cfg.dialect == "postgresql":
            url = url.update_query_dict({"application_name": f"{self.cfg.label}-nemesis"})
            return sa.create_engine(url, pool_pre_ping=True)
        engine = sa.create_engine(url, pool_pre_ping=True, isolation_level="READ COMMITTED")

        @sa.event.listens_for(engine, "connect")
        def _remember(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("SELECT CONNECTION_ID()")
            self.own_sessions.add(int(cur.fetchone()[0]))
            cur.close()

        return engine

    def worker_url(self, name: str, slot: int = -1) -> str:
        url = sa.make_url(self.cfg.url)
        if slot == PARTITIONED_SLOT and self.proxy is not None:
            url = url.set(host=self.proxy.host, port=self.proxy.port)
        if self.cfg.dialect == "postgresql":
            url = url.update_query_dict({"application_name": f"{self.cfg.label}-{name}"})
        return url.render_as_string(hide_password=False)

    def admin(self) -> sa.Engine:
        url = sa.make_url(self.cfg.url)
        if self.cfg.dialect == "postgresql":
            url = url.update_query_dict({"application_name": f"{self.cfg.label}-admin"})
        else:
            url = url.set(database=None)
        return sa.create_engine(url, poolclass=sa.NullPool, isolation_level="AUTOCOMMIT")

    # -- workers

    def spawn(self, slot: int) -> Proc:
        gen = self.generation.get(slot, 0) + 1
        self.generation[slot] = gen
        name = f"w{slot}.{gen}"
        skew = self.cfg.skews[slot % len(self.cfg.skews)]
        log_path = self.cfg.workdir / f"{name}.log"
        stats_path = self.cfg.workdir / f"{name}.json"
        cmd = [
            sys.executable, str(WORKER), "--url", self.worker_url(name, slot),
            "--worker-id", name,
            "--concurrency", str(self.cfg.cap), "--lease-ttl", str(self.cfg.lease_ttl),
            "--heartbeat", str(self.cfg.heartbeat), "--poll", str(self.cfg.poll),
            "--stats-file", str(stats_path), "--clock-skew", str(skew),
        ]
        if self.cfg.max_running:
            cmd += ["--max-running", str(self.cfg.max_running)]
        for resource, capacity in self.cfg.resources.items():
            cmd += ["--resource", f"{resource}={capacity}"]
        if "claimkill" in self.cfg.faults and slot == 0:
            cmd += ["--slow-claim", "0.02", "--slow-claim-hold", "0.4",
                    "--marker-dir", str(self.markers)]
        if slot == PARTITIONED_SLOT and self.netns is not None:
            cmd = [*self.netns.inside(*cmd)]
        with open(log_path, "wb") as out:
            popen = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=HERE)
        proc = Proc(name, slot, popen, log_path, stats_path, skew)
        self.procs[slot] = proc
        self.skew_of[name] = skew
        return proc

    def live(self) -> list[Proc]:
        return [p for p in self.procs.values() if p.alive() and p.frozen_until is None]

    def sigkill(self, proc: Proc, fault: str) -> None:
        os.kill(proc.popen.pid, signal.SIGKILL)
        proc.popen.wait()
        self.killed[proc.name] = time.time()
        self.faults[fault] += 1
        self.restart_due[proc.slot] = time.monotonic() + self.rnd.uniform(0.1, 1.0)

    # -- faults

    def fault_kill(self) -> None:
        live = self.live()
        if live:
            self.sigkill(self.rnd.choice(live), "kill")

    def fault_freeze(self) -> None:
        live = self.live()
        if len(live) > 1:
            proc = self.rnd.choice(live)
            seconds = self.cfg.lease_ttl * 1.5 + self.rnd.uniform(0.0, 1.0)
            os.kill(proc.popen.pid, signal.SIGSTOP)
            proc.frozen_until = time.monotonic() + seconds
            self.freeze_max = max(self.freeze_max, seconds)
            self.faults["freeze"] += 1
            # Resumed by a timer of its own: whatever this loop waits for (a database
            # the frozen worker holds a lock in, say) cannot keep it frozen.
            timer = threading.Timer(seconds, self.resume, (proc,))
            timer.daemon = True
            timer.start()

    def resume(self, proc: Proc) -> None:
        with self.lock:
            if proc.frozen_until is not None:
                if proc.alive():
                    os.kill(proc.popen.pid, signal.SIGCONT)
                proc.frozen_until = None

    def fault_claimkill(self) -> None:
        slot0 = self.procs.get(0)
        if slot0 is None or not slot0.alive() or slot0.frozen_until is not None:
            return
        marker = self.markers / f"inclaim-{slot0.name}"
        (self.markers / f"want-{slot0.name}").touch()  # linger in the next claim
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            self.housekeeping()
            if not slot0.alive() or slot0.frozen_until is not None:
                return
            if marker.exists():
                self.sigkill(slot0, "claimkill")
                marker.unlink(missing_ok=True)
                return
            time.sleep(0.01)

    def fault_connkill(self) -> None:
        engine = self.admin()
        try:
            with engine.connect() as conn:
                if self.cfg.dialect == "postgresql":
                    pids = conn.execute(sa.text(
                        "SELECT pid FROM pg_stat_activity WHERE application_name LIKE :p "
                        "AND pid <> pg_backend_pid()"
                    ), {"p": f"{self.cfg.label}-w%"}).scalars().all()
                    victims = [p for p in pids if self.rnd.random() < 0.6]
                    for pid in victims:
                        conn.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pid})
                else:
                    ids = conn.execute(sa.text(
                        "SELECT id FROM information_schema.processlist WHERE db = :db "
                        "AND id <> CONNECTION_ID()"
                    ), {"db": self.cfg.label}).scalars().all()
                    victims = [i for i in ids if i not in self.own_sessions
                               and self.rnd.random() < 0.6]
                    for cid in victims:
                        with contextlib.suppress(sa.exc.DBAPIError):  # gone meanwhile
                            conn.exec_driver_sql(f"KILL CONNECTION {int(cid)}")
            self.faults["connkill"] += 1
            self.faults["sessions_killed"] += len(victims)
        except sa.exc.DBAPIError:
            pass  # the server is restarting
        finally:
            engine.dispose()

    def fault_lockkill(self) -> None:
        # A frozen worker may hold the write lock: the helper would wait for it.
        deadline = time.monotonic() + 8.0
        while any(p.frozen_until is not None for p in self.procs.values()):
            if time.monotonic() > deadline:
                return
            self.housekeeping()
            time.sleep(0.05)
        path = sa.make_url(self.cfg.url).database
        gate = self.queue.store.tables.gate.name
        code = (
            "import sqlite3, sys, time\n"
            f"c = sqlite3.connect({path!r}, timeout=30, isolation_level=None)\n"
            "c.execute('BEGIN IMMEDIATE')\n"
            f"c.execute('UPDATE {gate} SET seq = seq')\n"
            "print('locked', flush=True)\n"
            "time.sleep(60)\n"
        )
        helper = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
        assert helper.stdout is not None
        ready, _, _ = select.select([helper.stdout], [], [], 5.0)
        if ready and helper.stdout.readline().strip() == b"locked":
            time.sleep(self.rnd.uniform(0.3, 1.5))
            self.faults["lockkill"] += 1
        helper.kill()
        helper.wait()
        helper.stdout.close()

    def fault_poison(self) -> None:
        try:
            raiser = self.queue.enqueue("chaos", {"ms": 1, "bad_text": True}, max_attempts=2)
            # Runnable in a moment: its args are rewritten before a worker can claim it.
            unreadable = self.queue.enqueue("chaos", {"ms": 1}, max_attempts=2, run_after=2.0)
            j = self.queue.store.tables.jobs
            with self.engine.begin() as conn:
                conn.execute(sa.update(j).where(j.c.id == unreadable).values(args="{oops"))
        except sa.exc.DBAPIError:
            return  # the server is restarting
        self.poisoned[raiser] = "\\x00"
        self.poisoned[unreadable] = "its stored args are not JSON"
        self.faults["poison"] += 1

    def setup_partition(self) -> None:
        """Put the partitioned slot's worker in a network namespace of its own."""
        from netns import Netns
        from tcp_proxy import TcpProxy

        ns = Netns()
        reason = ns.create()
        if reason is not None:
            self.problems.append(f"no network namespace for the partition fault: {reason}")
            return
        url = sa.make_url(self.cfg.url)
        self.netns = ns
        self.proxy = TcpProxy((url.host or "127.0.0.1", url.port or 0), host=ns.outer)
        self.proxy.up()

    def fault_partition(self) -> None:
        proc = self.procs.get(PARTITIONED_SLOT)
        if self.netns is None or proc is None or not proc.alive() or proc.frozen_until:
            return
        if self.faults["partition"] and time.monotonic() < self.healed_at + 2.0:
            return  # one cut at a time, with a moment of working link between
        seconds = self.cfg.lease_ttl * 2 + self.rnd.uniform(0.0, 1.0)
        self.netns.cut()
        self.faults["partition"] += 1
        # Like a freeze, it may hold up the end of the jobs the worker held.
        self.freeze_max = max(self.freeze_max, seconds)
        self.healed_at = time.monotonic() + seconds
        timer = threading.Timer(seconds, self.netns.heal)
        timer.daemon = True
        timer.start()

    def fault_restart(self) -> None:
        began = time.monotonic()
        if self.cfg.dialect == "postgresql":
            version = sorted(os.listdir("/etc/postgresql"))[-1]
            subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", version, "main",
                            "restart"], check=True, timeout=120, capture_output=True)
        else:
            subprocess.run(["mariadb-admin", "-uroot", "shutdown"], check=True, timeout=120,
                           capture_output=True)
            subprocess.run(["start-stop-daemon", "--start", "--oknodo", "--background",
                            "--exec", "/usr/sbin/mariadbd"], check=True, timeout=60,
                           capture_output=True)
        engine = self.admin()
        try:
            retrying(lambda: engine.connect().close(), seconds=120)
        finally:
            engine.dispose()
        self.outage += time.monotonic() - began
        self.faults["restart"] += 1

    # -- the run

    def unfinished(self) -> int:
        j = self.queue.store.tables.jobs
        stmt = sa.select(sa.func.count()).where(j.c.state.not_in(TERMINAL))
        return int(retrying(lambda: self.queue.store.read(
            lambda conn: conn.execute(stmt).scalar_one())))

    def housekeeping(self) -> None:
        now = time.monotonic()
        for proc in list(self.procs.values()):
            if proc.frozen_until is not None and now >= proc.frozen_until:
                self.resume(proc)
            if not proc.alive() and proc.name not in self.killed:
                self.problems.append(
                    f"worker {proc.name} exited by itself ({proc.popen.returncode}):\n"
                    + proc.log_text()[-3000:]
                )
                self.killed[proc.name] = time.time()  # reported once; its leases are orphans
                self.restart_due[proc.slot] = now
        for slot, due in list(self.restart_due.items()):
            if now >= due:
                del self.restart_due[slot]
                self.spawn(slot)

    def run(self) -> Result:
        cfg = self.cfg
        began = time.monotonic()
        self.queue.create_schema()
        history.install(self.queue)
        for name, capacity in cfg.resources.items():
            self.queue.resource(name, capacity=capacity)
        upfront, waves = workload(self.rnd, cfg.jobs, cfg.upfront, cfg.resources, cfg.costed)
        self.queue.enqueue_many(upfront)
        if "partition" in cfg.faults:
            self.setup_partition()
        for slot in range(cfg.workers):
            self.spawn(slot)
        faults = [f for f in cfg.faults if f != "restart"]
        plan: list[str] = []
        restart_at = [
            time.monotonic() + cfg.fault_seconds * (i + 1) / (cfg.restarts + 1)
            for i in range(cfg.restarts)
        ]
        end = time.monotonic() + cfg.fault_seconds
        next_fault = time.monotonic() + self.rnd.uniform(*cfg.fault_gap)
        wave_gap = cfg.fault_seconds * 0.7 / max(len(waves), 1)

        def produce() -> None:
            # In a thread of its own: an enqueue may wait for a lock a frozen worker holds.
            try:
                for wave in waves:
                    time.sleep(wave_gap)
                    try:
                        retrying(lambda w=wave: self.queue.enqueue_many(w))
                    except sa.exc.DBAPIError as exc:  # e.g. a COMMIT cut by a restart
                        cfg.log(f"a wave of {len(wave)} jobs may be lost: {exc!r}")
            except BaseException as exc:
                self.producer_error.append(exc)

        producer = threading.Thread(target=produce, name="producer", daemon=True)
        producer.start()
        try:
            while time.monotonic() < end:
                self.housekeeping()
                now = time.monotonic()
                if restart_at and now >= restart_at[0]:
                    restart_at.pop(0)
                    self.fault_restart()
                elif faults and now >= next_fault:
                    # Every kind of fault in turn, in a shuffled order each round.
                    if not plan:
                        plan = self.rnd.sample(faults, len(faults))
                    getattr(self, f"fault_{plan.pop()}")()
                    next_fault = time.monotonic() + self.rnd.uniform(*cfg.fault_gap)
                time.sleep(0.02)
            while producer.is_alive():
                self.housekeeping()
                producer.join(0.05)
            if self.producer_error:
                raise self.producer_error[0]
            cfg.log(f"faults over after {time.monotonic() - began:.1f}s: {self.faults}")
            # Calm: everyone resumed and running, until every job is terminal.
            for proc in list(self.procs.values()):
                self.resume(proc)
            deadline = time.monotonic() + cfg.drain_timeout
            while True:
                self.housekeeping()
                left = self.unfinished()
                if left == 0:
                    break
                if time.monotonic() > deadline:
                    self.problems.append(f"{left} job(s) not terminal {cfg.drain_timeout:g}s "
                                         "after the faults stopped")
                    break
                time.sleep(0.2)
            cfg.log(f"all jobs terminal after {time.monotonic() - began:.1f}s")
            # Let stale writers still running report their fenced outcomes.
            deadline = time.monotonic() + 10.0
            while time.monotonic() < deadline:
                rep = history.check(self.read_events(), None, killed=self.killed,
                                    settle=self.settle())
                if not rep.figures["stale_writers_unreported"]:
                    break
                time.sleep(0.3)
        finally:
            if self.netns is not None:
                self.netns.heal()
            self.stop_all()
            if self.proxy is not None:
                self.proxy.close()
            if self.netns is not None:
                self.netns.close()
        cfg.log(f"workers stopped after {time.monotonic() - began:.1f}s")
        events = self.read_events()
        jobs = history.read_jobs(self.queue)
        tolerance = 0.002 if cfg.dialect == "sqlite" else 0.0
        report = history.check(events, jobs, cap=cfg.cap, killed=self.killed,
                               settle=self.settle(), tolerance=tolerance,
                               resources=cfg.resources or None)
        if report.figures["stale_writers_unreported"]:
            self.problems.append("stale writers never told they were fenced out: "
                                 f"{report.figures['stale_writers_unreported'][:10]}")
        counts: dict[str, int] = {}
        for f in jobs.values():
            counts[f.state] = counts.get(f.state, 0) + 1
        for job_id, says in self.poisoned.items():
            info = self.queue.get(job_id)
            # Its last attempt may have been on a worker the nemesis killed.
            swept = (info.error or "").startswith("lease expired")
            if info.state != "failed" or not (says in (info.error or "") or swept):
                self.problems.append(f"poisoned job {job_id} ended {info.state}, error "
                                     f"{(info.error or '')[-200:]!r}; expected {says!r}")
        ratio, worst = self.bounds(report)
        # Two freezes may overlap, each holding up sweeps (SQLite: the write lock).
        reclaim_bound = cfg.poll + cfg.heartbeat + 2 * self.freeze_max + self.outage + 2.0
        delay = report.figures["worst_reclaim_delay"]
        if delay > reclaim_bound:
            self.problems.append(f"a lease was reclaimed {delay:.2f}s after it expired "
                                 f"(bound {reclaim_bound:.2f}s)")
        if worst is not None and ratio > 1.0:
            self.problems.append(f"job {worst[0]} took {worst[1]:.2f}s from its first claim "
                                 f"to its end, over its bound of {worst[2]:.2f}s")
        skewed = [e for e in events if e.event == "start" and self.skew_of.get(e.worker or "")]
        skew = (len({e.worker for e in skewed}), len(skewed))
        return Result(cfg, report, counts, dict(self.faults), self.outage, self.freeze_max,
                      ratio, worst, reclaim_bound, time.monotonic() - began, self.problems,
                      skew)

    def bounds(self, report: history.Report) -> tuple[float, tuple[int, float, float] | None]:
        """Worst (time from first claim to terminal) / bound over the jobs.

        The bound of a job that took n claims: each attempt may run its longest
        handler (2.5 s), then wait out a lease, a heartbeat and a poll before a sweep;
        between attempts the reclaim backoff (1 s doubling, +10%); plus the stalls the
        nemesis caused (two of the longest freeze, which can stall claims when it hits a
        worker inside a transaction, and the database's downtime) and 3 s of
        scheduling slack on this loaded machine.
        """
        cfg = self.cfg
        per_attempt = 2.5 + cfg.lease_ttl + cfg.heartbeat + 2 * cfg.poll
        worst_ratio, worst = 0.0, None
        for job, (took, n) in report.latencies.items():
            backoff = sum(1.1 * 2 ** (k - 1) for k in range(1, n))
            bound = n * per_attempt + backoff + 2 * self.freeze_max + self.outage + 3.0
            if took / bound > worst_ratio:
                worst_ratio, worst = took / bound, (job, took, bound)
        return worst_ratio, worst

    def settle(self) -> float:
        """How long a stale writer may take to report: a freeze, its slowest handler
        (2.5 s), a heartbeat and a tick."""
        return self.freeze_max + 2.5 + self.cfg.heartbeat + 1.0

    def read_events(self) -> list[history.Event]:
        return retrying(lambda: history.read_history(self.engine))  # type: ignore[no-any-return]

    def stop_all(self) -> None:
        for proc in list(self.procs.values()):
            self.resume(proc)
        for proc in self.procs.values():
            if proc.alive():
                proc.popen.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                code = proc.popen.wait(30)
            except subprocess.TimeoutExpired:
                proc.popen.kill()
                proc.popen.wait()
                self.problems.append(f"worker {proc.name} did not stop on SIGTERM")
                continue
            if proc.name not in self.killed:
                found = crashes(proc.log_text())
                if code != 0 or found:
                    self.problems.append(f"worker {proc.name} exited {code}:\n"
                                         + "\n".join(found)[-3000:])

    def close(self) -> None:
        self.queue.close()
        self.engine.dispose()


def run_chaos(cfg: Config) -> Result:
    nemesis = Nemesis(cfg)
    try:
        return nemesis.run()
    finally:
        nemesis.close()
