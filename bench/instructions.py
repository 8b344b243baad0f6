"""Instructions per job of a SQLite worker, counted by valgrind's callgrind.

    python bench/instructions.py [--jobs 2000] [--margin] [--by-object] [--src PATH]

Wall-clock figures drift between rounds on a shared machine; instruction counts do not.
The worker (``concurrency=100``, ``poll_interval=0.01``, ``until_idle=True``, no-op
handler, nothing else set) runs twice under ``valgrind --tool=callgrind``: once over
``--jobs`` queued jobs and once over an empty queue, with the same options. The
difference divided by the number of jobs is what one job costs, start-up and imports
excluded. ``--src`` runs another checkout's ``src`` (``git worktree add /tmp/old REF``)
for a comparison taken on the same machine; ``--by-object`` splits a job's instructions
between the binaries that spend them (the interpreter, SQLite, ...).

The figure at ``--jobs`` still carries what a run with jobs pays once and an idle run
does not (statements compiled at their first use, handler threads started), spread over
its jobs. ``--margin`` also runs twice as many jobs and prints what one more job costs,
the difference between the two runs divided by ``--jobs``, and what the run paid once.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"

# Run under valgrind: the worker only; the queue was filled beforehand.
CHILD = """
import sys
import readyq
queue = readyq.Queue(sys.argv[1])
queue.handler("noop")(lambda job: None)
queue.run_worker(until_idle=True, concurrency=100, poll_interval=0.01)
queue.close()
"""

FILL = """
import sys
import readyq
queue = readyq.Queue(sys.argv[1])
queue.create_schema()
n = int(sys.argv[2])
for start in range(0, n, 1000):
    queue.enqueue_many([readyq.JobSpec("noop", {}) for _ in range(min(1000, n - start))])
queue.close()
"""


def _python(src: Path, code: str, *args: str, valgrind: list[str] | None = None) -> None:
    env = {**os.environ, "PYTHONPATH": str(src), "PYTHONHASHSEED": "0"}
    cmd = [*(valgrind or []), sys.executable, "-c", code, *args]
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE if valgrind else None)


def count(src: Path, workdir: Path, jobs: int) -> tuple[int, Path]:
    """Instructions of one worker run over ``jobs`` queued jobs, and its callgrind file."""
    db = workdir / f"q{jobs}.db"
    out = workdir / f"callgrind.{jobs}.out"
    _python(src, FILL, f"sqlite:///{db}", str(jobs))
    _python(src, CHILD, f"sqlite:///{db}", valgrind=[
        "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--quiet",
    ])
    totals = re.search(r"^(?:totals|summary):\s*(\d+)", out.read_text(), re.MULTILINE)
    if totals is None:
        raise SystemExit(f"no total in {out}")
    return int(totals.group(1)), out


def by_object(full: Path, empty: Path, jobs: int) -> list[tuple[float, str]]:
    """Exclusive instructions per job, summed per binary (the interpreter, SQLite, the
    sqlite3 module, libc...): where a job's instructions go."""

    def exclusive(path: Path) -> dict[str, int]:
        text = subprocess.run(
            ["callgrind_annotate", "--inclusive=no", "--threshold=100", str(path)],
            check=True, capture_output=True, text=True,
        ).stdout
        rows: dict[str, int] = {}
        for line in text.splitlines():
            m = re.match(r"\s*([\d,]+)\s+\([^)]*\)\s+.*\[(.+)\]\s*$", line)
            if m:
                name = Path(m.group(2).strip()).name
                rows[name] = rows.get(name, 0) + int(m.group(1).replace(",", ""))
        return rows

    a, b = exclusive(full), exclusive(empty)
    grown = [((a[k] - b.get(k, 0)) / jobs, k) for k in a]
    return sorted(grown, reverse=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--margin", action="store_true")
    parser.add_argument("--by-object", action="store_true")
    parser.add_argument("--src", type=Path, default=SRC)
    args = parser.parse_args()
    began = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        full, full_out = count(args.src, workdir, args.jobs)
        empty, empty_out = count(args.src, workdir, 0)
        per_job = (full - empty) / args.jobs
        print(f"{'source':<40} {'jobs':>6} {'instructions':>15} {'per job':>10}")
        print(f"{args.src!s:<40} {args.jobs:>6} {full:>15,} {per_job:>10,.0f}")
        if args.margin:
            double, _ = count(args.src, workdir, 2 * args.jobs)
            per_double = (double - empty) / (2 * args.jobs)
            margin = (double - full) / args.jobs
            print(f"{args.src!s:<40} {2 * args.jobs:>6} {double:>15,} {per_double:>10,.0f}")
        print(f"{'(empty queue)':<40} {0:>6} {empty:>15,}")
        if args.margin:
            once = full - empty - margin * args.jobs
            print(f"\none more job: {margin:,.0f}; paid once by a run with jobs: {once:,.0f}")
        if args.by_object:
            print("\ninstructions per job, by binary:")
            for cost, name in by_object(full_out, empty_out, args.jobs):
                if abs(cost) >= 100:
                    print(f"{cost:>12,.0f}  {name}")
    print(f"\n({time.monotonic() - began:.0f} s)")


if __name__ == "__main__":
    main()
