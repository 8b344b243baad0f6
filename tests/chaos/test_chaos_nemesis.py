"""Bounded chaos runs: worker processes over thousands of short jobs and a DAG while a
nemesis kills, freezes and disconnects them; the recorded history must pass the checker.

About a minute per database. Longer runs: ``python bench/chaos.py --minutes N``.
The server-restart run is gated: it restarts the shared PostgreSQL / MariaDB server, so
it only runs with READYQ_TEST_DB_RESTART=1.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import sqlalchemy as sa
from nemesis import RESTART_ENV, Config, run_chaos
from netns import Netns

pytestmark = pytest.mark.slow

FAULTS = {
    # SQLite has no server: kill processes holding its write lock instead; nor a network
    # to cut.
    "sqlite": ("kill", "freeze", "lockkill", "claimkill", "poison"),
    "postgresql": ("kill", "freeze", "connkill", "claimkill", "poison", "partition"),
    "mariadb": ("kill", "freeze", "connkill", "claimkill", "poison", "partition"),
}
JOBS = {"sqlite": 1000, "postgresql": 1500, "mariadb": 1500}


def label_of(url: str, dialect: str) -> str:
    """The schema (PostgreSQL) or database (MariaDB) the ``db`` fixture made for us."""
    parsed = sa.make_url(url)
    if dialect == "postgresql":
        return str(parsed.query["options"]).split("search_path=")[1]
    if dialect == "mariadb":
        return str(parsed.database)
    return "sqlite"


def report(result: object, capsys: pytest.CaptureFixture[str]) -> None:
    with capsys.disabled():
        print()
        print("\n".join(result.lines()))  # type: ignore[attr-defined]


def namespaces_available() -> bool:
    ns = Netns()
    try:
        return ns.create() is None
    finally:
        ns.close()


def test_no_job_is_lost_or_run_twice_under_kills_freezes_and_lost_connections(
    db: str, dialect_name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    faults = FAULTS[dialect_name]
    if "partition" in faults and not namespaces_available():
        faults = tuple(f for f in faults if f != "partition")  # a machine without netns
    cfg = Config(
        url=db, dialect=dialect_name, workdir=tmp_path, label=label_of(db, dialect_name),
        fault_seconds=18.0, jobs=JOBS[dialect_name], faults=faults, seed=7,
        log=lambda line: None,
    )
    result = run_chaos(cfg)
    report(result, capsys)
    f = result.report.figures
    assert result.report.ok, result.report.summary()
    assert not result.problems, "\n".join(result.problems)
    assert f["lost"] == 0 and f["double_finalized"] == 0
    # Every fault actually happened, and was survived.
    for fault in faults:
        assert result.faults[fault] >= 1, (fault, result.faults)
    assert f["duplicate_starts"] == sum(f["duplicates_explained"].values())
    assert f["fenced_observed"] >= f["stale_writers_must_report"]
    assert f["peak_leases"] <= cfg.cap
    # Steps were stored, and none ran again under a later lease (the 'steps' invariant).
    assert f["steps_stored"] > 0 and f["step_runs"] >= f["steps_stored"]
    # The resource was used, and never held past its capacity at any instant.
    for name, capacity in cfg.resources.items():
        assert 0 < f["peak_uses"][name] <= capacity, (name, f["peak_uses"])


@pytest.mark.parametrize("db", ["postgresql", "mariadb"], indirect=True)
def test_workers_ride_out_a_database_server_restart(
    db: str, dialect_name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if os.environ.get(RESTART_ENV) != "1":
        pytest.skip(f"restarts the shared {dialect_name} server: set {RESTART_ENV}=1 to run it")
    cfg = Config(
        url=db, dialect=dialect_name, workdir=tmp_path, label=label_of(db, dialect_name),
        fault_seconds=14.0, jobs=600, faults=("kill", "freeze", "connkill"), restarts=1,
        seed=11, log=lambda line: None,
    )
    result = run_chaos(cfg)
    report(result, capsys)
    assert result.faults["restart"] == 1
    assert result.report.ok, result.report.summary()
    assert not result.problems, "\n".join(result.problems)
    assert result.report.figures["lost"] == 0
