"""SQLite's instructions per job, statement by statement, counted by valgrind's callgrind.

    python bench/sqlite_statements.py [--jobs 2000] [--src PATH]

``bench/instructions.py`` tells how many instructions a job costs in SQLite as a whole;
this tells which statements spend them. A worker (``concurrency=100``,
``poll_interval=0.01``, ``until_idle=True``, no-op handler) runs over ``--jobs`` queued
jobs while SQLite's trace callback records every statement it runs, with its parameters
written in. The statements are then run again through ``sqlite3`` alone, in order, on a
copy of the database as it was before the worker, under callgrind, which starts a new
count before each one (at a call to ``zlib.crc32`` made between them). Each statement is
compiled again from its expanded text, which the worker does not do: a few thousand
instructions per job of compiling are counted here and not there, and the Python work
of readyq is not counted at all.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"

RECORD = """
import json, sys
import sqlalchemy as sa
import readyq
url, n, log_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
queue = readyq.Queue(url)
queue.create_schema()
for start in range(0, n, 1000):
    queue.enqueue_many([readyq.JobSpec("noop", {}) for _ in range(min(1000, n - start))])
queue.close()
import shutil
shutil.copy(url.removeprefix("sqlite:///"), sys.argv[4])
log = []

@sa.event.listens_for(sa.engine.Engine, "connect")
def trace(dbapi_connection, record):
    dbapi_connection.set_trace_callback(log.append)

queue = readyq.Queue(url)
queue.handler("noop")(lambda job: None)
queue.run_worker(until_idle=True, concurrency=100, poll_interval=0.01)
queue.close()
with open(log_path, "w") as f:
    json.dump(log, f)
"""

# Run under callgrind: a new count starts at each zlib.crc32 call.
REPLAY = """
import json, sqlite3, sys, zlib
statements = json.load(open(sys.argv[2]))
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
for statement in statements:
    zlib.crc32(b"")
    try:
        conn.execute(statement).fetchall()
    except sqlite3.Error:
        pass
zlib.crc32(b"")
"""


def totals(prefix: Path) -> list[int]:
    """The instruction count of each dump callgrind wrote, in order."""
    parts = sorted(prefix.parent.glob(prefix.name + ".*"),
                   key=lambda p: int(p.name.rsplit(".", 1)[1]))
    found = []
    for part in parts:
        m = re.search(r"^(?:totals|summary):\s*(\d+)", part.read_text(), re.MULTILINE)
        found.append(int(m.group(1)) if m else 0)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--src", type=Path, default=SRC)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        db, before, log = work / "q.db", work / "before.db", work / "log.json"
        env = {**os.environ, "PYTHONPATH": str(args.src), "PYTHONHASHSEED": "0"}
        subprocess.run([sys.executable, "-c", RECORD, f"sqlite:///{db}", str(args.jobs),
                        str(log), str(before)], env=env, check=True)
        replayed = work / "replay.db"
        shutil.copy(before, replayed)
        out = work / "cg"
        subprocess.run(["valgrind", "--tool=callgrind", "--dump-before=zlib_crc32*",
                        f"--callgrind-out-file={out}", "--quiet", sys.executable, "-c",
                        REPLAY, str(replayed), str(log)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        counts = totals(out)
        statements = json.loads(log.read_text())
    # Dumps come in threes per marker call (its wrappers match the pattern too); the
    # count after a marker's dumps is the statement that follows it.
    step = len(counts) // (len(statements) + 1) if statements else 1
    by_kind: collections.Counter[str] = collections.Counter()
    runs: collections.Counter[str] = collections.Counter()
    for i, statement in enumerate(statements):
        at = step * (i + 1)
        if at >= len(counts):
            break
        kind = " ".join(statement.split())[:72]
        by_kind[kind] += counts[at]
        runs[kind] += 1
    total = sum(by_kind.values())
    print(f"SQLite's work per job, {args.jobs} jobs, replayed: {total / args.jobs:,.0f}")
    print(f"{'per job':>10} {'runs':>5}  statement")
    for kind, n in by_kind.most_common(12):
        print(f"{n / args.jobs:>10,.0f} {runs[kind]:>5}  {kind}")


if __name__ == "__main__":
    main()
