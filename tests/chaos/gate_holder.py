"""A process that holds the claim lock the way a worker's claim transaction does.

    python gate_holder.py URL IDLE_TIMEOUT     (seconds, or "none")

It opens a write transaction on the engine readyq builds for ``URL`` (so with readyq's
session settings), locks the gate row with the claim's own statement, prints ``LOCKED``
and waits for a line on stdin. The test freezes it (SIGSTOP) meanwhile; once resumed and
told to go on, it tries to COMMIT and prints ``COMMITTED``, or ``LOST <error>`` when the
server ended its session in the meantime.
"""

from __future__ import annotations

import sys

import sqlalchemy as sa

import readyq
from readyq.schema import GATE_ID
from readyq.transient import describe


def main(url: str, timeout: str) -> int:
    queue = readyq.Queue(url, idle_transaction_timeout=None if timeout == "none" else
                         float(timeout))
    store = queue.store
    gate = store.tables.gate
    with store.engine.connect() as conn:
        store.dialect.begin_write(conn)
        conn.execute(
            sa.select(gate.c.vclock, gate.c.seq).where(gate.c.id == GATE_ID).with_for_update()
        ).first()
        print("LOCKED", flush=True)
        sys.stdin.readline()
        try:
            conn.commit()
            print("COMMITTED", flush=True)
        except Exception as exc:
            print(f"LOST {describe(exc)}", flush=True)
    queue.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
