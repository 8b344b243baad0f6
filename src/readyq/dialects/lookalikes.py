"""Servers that speak PostgreSQL's or MySQL's protocol but cannot run readyq.

readyq's claim needs ``FOR UPDATE SKIP LOCKED`` to lock the rows it takes and to pass
over exactly the rows other transactions hold, and its gate row to order the claims of
every worker. Some distributed databases accept the same SQL without those guarantees,
so that two workers could run one job or a claim could miss runnable jobs. They are
told apart by the version string the server reports (``SELECT version()``, or the
SQLAlchemy dialect's name) and refused when the store first connects.
"""

from __future__ import annotations

import re
from typing import NamedTuple


class Lookalike(NamedTuple):
    """A server that is refused: its name, how its version string shows it, and why."""

    name: str
    pattern: re.Pattern[str]
    reason: str


LOOKALIKES: tuple[Lookalike, ...] = (
    Lookalike(
        "CockroachDB",
        re.compile(r"cockroach", re.IGNORECASE),
        "its SKIP LOCKED also passes over rows that no transaction has locked, so a "
        "claim can miss runnable jobs, and its transactions are serializable with "
        "restarts rather than the READ COMMITTED locking reads readyq's claim relies on",
    ),
    Lookalike(
        "YugabyteDB",
        re.compile(r"-YB-|yugabyte", re.IGNORECASE),
        "READ COMMITTED is off by default there and runs as snapshot isolation, so a "
        "claim does not see rows committed after its transaction began, and LISTEN/"
        "NOTIFY is not supported",
    ),
    Lookalike(
        "TiDB",
        re.compile(r"\btidb\b", re.IGNORECASE),
        "it parses FOR UPDATE SKIP LOCKED but takes no row locks with it, so two "
        "workers can claim the same job",
    ),
    Lookalike(
        "Vitess",
        re.compile(r"vitess|planetscale", re.IGNORECASE),
        "it routes statements to shards: row locks and SKIP LOCKED hold within one "
        "shard only, and a transaction across shards is not atomic by default, so the "
        "gate row cannot order every worker's claims",
    ),
)

SUPPORTED = "readyq runs on PostgreSQL 12+, MySQL 8.0.1+, MariaDB 10.6+ and SQLite 3.35+"


def lookalike_problem(version: str) -> str | None:
    """Why a server that reports ``version`` cannot run readyq, or None if it is not a
    known look-alike."""
    for known in LOOKALIKES:
        if known.pattern.search(version):
            shown = " ".join(version.split())
            if len(shown) > 120:
                shown = shown[:117] + "..."
            return (
                f"readyq cannot run on {known.name} (server version {shown!r}): "
                f"{known.reason}. {SUPPORTED}"
            )
    return None
