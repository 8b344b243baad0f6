"""Replay a SQLite worker cycle's writes through sqlite3 alone, on other table layouts.

    python bench/sqlite_replay.py [--jobs 30000] [--rounds 2] [--layouts current,...]

What a readyq worker's cycle writes on SQLite, without readyq around it: the finish of
the last 100 jobs (one ``UPDATE ... FROM json_each``, fenced by lease token and owner),
the claim of the next 100 from four groups (one ``UPDATE ... RETURNING`` over the heads
of each group, read through the ready-by-type index), the fair-share progress (the
groups' rows and the gate row) and the commit, in WAL mode with ``synchronous=FULL``.
The SET clauses are slightly simpler than readyq's, and the cycle reads no counts: the
figure is what SQLite's own work costs, not what readyq costs. The tables and jobs are
readyq's own (``create_schema``, and the benchmark's 4 groups weighted 3:2:1:1), copied
for each layout:

* ``current``: the tables as readyq creates them.
* ``no-group-run-after``: without the ready index by group and the run_after index.
* ``run-after-delayed``: the run_after index holds delayed jobs only.
* ``ready-table``: the ready set in a narrow table of its own, with the ready indexes;
  a claim deletes from it, then updates the jobs' rows by id.
* ``ready-and-lease-tables``: as ``ready-table``, and the lease in a narrow table too,
  so that a job's wide row is written once (at its finish) instead of twice.

The layouts run in alternation, ``--rounds`` times each; the benchmark's correct loop
(``bench/peers.py``) runs once per round too, for a yardstick from the same minutes.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import peers  # bench/, on the path when this file runs as a script
import run

import readyq

NOW = "((julianday('now') - 2440587.5) * 86400.0)"
CLAIM = 100


def _split(weights: dict[str, int], n: int) -> tuple[tuple[str, int], ...]:
    """``n`` claims shared between the groups in proportion to their weights, as the
    fair-share plan takes them (largest remainders get the rounding)."""
    total = sum(weights.values())
    exact = {g: n * w / total for g, w in weights.items()}
    share = {g: int(x) for g, x in exact.items()}
    for g in sorted(exact, key=lambda g: share[g] - exact[g])[: n - sum(share.values())]:
        share[g] += 1
    return tuple(share.items())


# Jobs claimed per group in one cycle, for the benchmark's groups and weights.
SPLIT = _split(run.GROUPS, CLAIM)
CLAIM_SET = (
    f"state = 'running', attempts = attempts + 1, lease_owner = 'w', "
    f"lease_token = lease_token + 1, lease_expires = {NOW} + 60, heartbeat_at = {NOW}, "
    f"deadline = {NOW} + 3600, updated_at = {NOW}, started_at = {NOW}"
)
CLAIMED = "id, type, args, attempts, max_attempts, lease_token, group_key, parent_id, timeout"
BATCH = (
    "(SELECT json_extract(value, '$[0]') AS i, json_extract(value, '$[1]') AS t,"
    " json_extract(value, '$[2]') AS r FROM json_each(?)) AS b"
)
FINISH_SET = (
    f"state = 'done', result = b.r, error = NULL, finished_at = {NOW}, lease_expires = NULL,"
    f" deadline = NULL, updated_at = {NOW}"
)
# Fenced by token and owner; ``+state`` keeps the state test off the indexes (as readyq).
FINISH = (
    f"UPDATE readyq_jobs SET {FINISH_SET} FROM {BATCH} WHERE readyq_jobs.id = b.i"
    " AND readyq_jobs.lease_token = b.t AND readyq_jobs.lease_owner = 'w'"
    " AND +readyq_jobs.state = 'running'"
)
# With the lease in its own table the wide row keeps its state until the finish.
FINISH_UNLEASED = (
    f"UPDATE readyq_jobs SET {FINISH_SET} FROM {BATCH} WHERE readyq_jobs.id = b.i"
    " AND +readyq_jobs.state = 'ready'"
)
LAYOUTS = (
    "current", "no-group-run-after", "run-after-delayed", "ready-table",
    "ready-and-lease-tables",
)


def _heads(table: str, ready: str) -> str:
    return " UNION ALL ".join(
        f"SELECT id FROM (SELECT id FROM {table} WHERE {ready} AND type = 'noop'"
        f" AND group_key = '{group}' ORDER BY priority DESC, id LIMIT {n})"
        for group, n in SPLIT
    )


JOBS_HEADS = _heads("readyq_jobs", f"state = 'ready' AND (run_after IS NULL OR run_after <= {NOW})")
TABLE_HEADS = _heads("rq_ready", "1")


def prepare(conn: sqlite3.Connection, layout: str) -> None:
    conn.executemany(
        "INSERT OR IGNORE INTO readyq_groups VALUES (?, 0, 0)", [(g,) for g, _ in SPLIT]
    )
    if layout != "current":
        conn.execute("DROP INDEX readyq_jobs_state_run_after_ix")
    if layout == "run-after-delayed":
        conn.execute(
            "CREATE INDEX readyq_jobs_state_run_after_ix ON readyq_jobs (run_after)"
            " WHERE state = 'ready' AND run_after IS NOT NULL"
        )
    if layout in ("no-group-run-after", "ready-table", "ready-and-lease-tables"):
        conn.execute("DROP INDEX readyq_jobs_ready_group_ix")
    if layout in ("ready-table", "ready-and-lease-tables"):
        conn.execute("DROP INDEX readyq_jobs_ready_type_ix")
        conn.execute(
            "CREATE TABLE rq_ready (id INTEGER PRIMARY KEY, type TEXT NOT NULL,"
            " group_key TEXT NOT NULL, priority INTEGER NOT NULL)"
        )
        conn.execute(
            "CREATE INDEX rq_ready_type_ix ON rq_ready (type, group_key, priority DESC, id)"
        )
        conn.execute("CREATE INDEX rq_ready_group_ix ON rq_ready (group_key, priority DESC, id)")
        conn.execute(
            "INSERT INTO rq_ready SELECT id, type, group_key, priority FROM readyq_jobs"
            " WHERE state = 'ready'"
        )
    if layout == "ready-and-lease-tables":
        conn.execute(
            "CREATE TABLE rq_leases (id INTEGER PRIMARY KEY, owner TEXT NOT NULL,"
            " token INTEGER NOT NULL, expires REAL NOT NULL, deadline REAL)"
        )
        conn.execute("CREATE INDEX rq_leases_expires_ix ON rq_leases (expires)")
    conn.execute("ANALYZE")


def cycle(conn: sqlite3.Connection, layout: str, last: list[tuple]) -> list[tuple]:
    """One transaction: finish ``last``, claim the next jobs, record the progress."""
    conn.execute("BEGIN IMMEDIATE")
    if last:
        batch = json.dumps([[row[0], row[5], "null"] for row in last])
        if layout == "ready-and-lease-tables":
            ids = json.dumps([row[0] for row in last])
            conn.execute(
                "DELETE FROM rq_leases WHERE id IN (SELECT value FROM json_each(?))"
                " AND owner = 'w'", (ids,),
            )
            conn.execute(FINISH_UNLEASED, (batch,))
        else:
            conn.execute(FINISH, (batch,))
    if layout in ("ready-table", "ready-and-lease-tables"):
        ids = json.dumps([
            r[0] for r in conn.execute(
                f"DELETE FROM rq_ready WHERE id IN ({TABLE_HEADS}) RETURNING id"
            ).fetchall()
        ])
        if layout == "ready-table":
            rows = conn.execute(
                f"UPDATE readyq_jobs SET {CLAIM_SET} WHERE id IN"
                f" (SELECT value FROM json_each(?)) RETURNING {CLAIMED}", (ids,),
            ).fetchall()
        else:
            conn.execute(
                f"INSERT INTO rq_leases SELECT value, 'w', 1, {NOW} + 60, {NOW} + 3600"
                " FROM json_each(?)", (ids,),
            )
            rows = conn.execute(
                f"SELECT {CLAIMED} FROM readyq_jobs WHERE id IN"
                " (SELECT value FROM json_each(?))", (ids,),
            ).fetchall()
    else:
        rows = conn.execute(
            f"UPDATE readyq_jobs SET {CLAIM_SET} WHERE id IN ({JOBS_HEADS}) RETURNING {CLAIMED}"
        ).fetchall()
    conn.executemany(
        "UPDATE readyq_groups SET vfinish = vfinish + 1, served_seq = served_seq + 1"
        " WHERE group_key = ?", [(g,) for g, _ in SPLIT],
    )
    conn.execute("UPDATE readyq_gate SET vclock = vclock + 1, seq = seq + 1 WHERE id = 1")
    conn.execute("COMMIT")
    return rows


def build_base(path: Path, jobs: int) -> None:
    """readyq's tables at ``path`` holding ``jobs`` ready no-op jobs of the benchmark's
    four groups."""
    queue = readyq.Queue(f"sqlite:///{path}")
    try:
        queue.create_schema()
        run.fill_noop(queue, jobs)
    finally:
        queue.close()


def replay(base: Path, work: Path, layout: str, jobs: int) -> float:
    """µs per job to drain ``jobs`` on a copy of ``base`` laid out as ``layout``."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{work}{suffix}").unlink(missing_ok=True)
    shutil.copy(base, work)
    conn = sqlite3.connect(work, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        prepare(conn, layout)
        last: list[tuple] = []
        done = 0
        started = time.perf_counter()
        while True:
            last = cycle(conn, layout, last)
            if not last:
                break
            done += len(last)
        elapsed = time.perf_counter() - started
        finished = conn.execute(
            "SELECT count(*) FROM readyq_jobs WHERE state = 'done'"
        ).fetchone()[0]
    finally:
        conn.close()
    if done != jobs or finished != jobs:
        raise RuntimeError(f"{layout}: claimed {done}, finished {finished} of {jobs}")
    return elapsed / jobs * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=30_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--layouts", default=",".join(LAYOUTS))
    args = ap.parse_args(argv)
    layouts = args.layouts.split(",")
    unknown = sorted(set(layouts) - set(LAYOUTS))
    if unknown:
        ap.error(f"unknown layout(s): {', '.join(unknown)}; known: {', '.join(LAYOUTS)}")
    with tempfile.TemporaryDirectory(prefix="readyq-replay-") as tmp:
        base = Path(tmp, "base.db")
        build_base(base, args.jobs)
        times: dict[str, list[float]] = {name: [] for name in (*layouts, "correct loop")}
        for r in range(args.rounds):
            for layout in layouts:
                times[layout].append(replay(base, Path(tmp, "replay.db"), layout, args.jobs))
                print(f"round {r + 1} {layout}: {times[layout][-1]:.2f} µs/job",
                      file=sys.stderr, flush=True)
            loop = peers.run_minimal_loop(
                f"sqlite:///{Path(tmp, 'loop.db')}", args.jobs, 1, CLAIM, form="correct"
            )
            times["correct loop"].append(1e6 / loop.jobs_per_s)
    print(f"SQLite {sqlite3.sqlite_version}, {args.jobs:,} jobs, claims of {CLAIM},"
          f" {args.rounds} round(s) in alternation; µs per job")
    print(f"{'layout':28} {'median':>8} {'min':>8} {'max':>8}")
    for name, values in times.items():
        print(f"{name:28} {statistics.median(values):8.2f} {min(values):8.2f} {max(values):8.2f}")
    print("(the replays are SQLite's own work for a cycle's writes; the correct loop is a"
          " whole worker, its Python included)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
