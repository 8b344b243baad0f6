from __future__ import annotations

import io
import json
import shlex
import subprocess
import sys

import pytest
import sqlalchemy as sa
from rich.console import Console

import readyq
from readyq.cli import main
from readyq.demo import run_demo


def test_demo_pipeline_passes_its_own_checks_on_each_database(db: str) -> None:
    console = Console(file=io.StringIO(), width=120)
    report = run_demo(db, workers=2, cap=4, chunks=16, work_seconds=0.02, console=console)
    assert report.ok, console.file.getvalue()  # type: ignore[attr-defined]
    assert report.states == {"done": 16 + 4}
    assert report.edges_violated == 0 and report.edges_checked > 16
    assert report.max_in_flight <= 4


def test_demo_command_exits_zero_on_the_embedded_default(tmp_path: object) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "readyq.cli", "demo", "--chunks", "8"],
        cwd=str(tmp_path), capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "all checks passed" in out.stdout
    # Its styles are applied, not shown as markup.
    assert "[/]" not in out.stdout and "[bold" not in out.stdout and "\\[" not in out.stdout


def test_demo_honours_the_prefix_and_prints_the_status_command_that_finds_it(
    db: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("READYQ_DATABASE_URL", raising=False)
    assert main(["demo", "--db", db, "--prefix", "rqdemo_", "--chunks", "4",
                 "--workers", "2"]) == 0
    out = capsys.readouterr().out
    assert "all checks passed" in out
    assert f"at {sa.make_url(db).render_as_string(hide_password=True)}, table prefix rqdemo_:" in (
        out
    )
    [line] = [x for x in out.splitlines() if "see them with: " in x]
    command = shlex.split(line.split("see them with: ", 1)[1])
    assert command[0] == "readyq" and command[-1] == "status"
    assert main([*command[1:], "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["prefix"] == "rqdemo_" and status["states"]["done"] == status["total"] == 8
    # The demo's default prefix was left alone: nothing was made there.
    other = readyq.Queue(db, prefix="readyq_demo_")
    try:
        with pytest.raises(readyq.SchemaNotFound):
            other.counts()
    finally:
        other.close()


def test_demo_refuses_a_prefix_whose_tables_hold_other_jobs(
    db: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("READYQ_DATABASE_URL", raising=False)
    with readyq.Queue(db, prefix="app_") as app:
        app.create_schema()
        kept = app.enqueue("send-invoice", {"n": 1})
        capsys.readouterr()
        assert main(["--db", db, "--prefix", "app_", "demo", "--chunks", "4"]) == 1
        err = capsys.readouterr().err
        assert err.startswith("readyq: the tables with prefix app_ hold 1 job(s) that the demo")
        assert err.count("\n") == 1
        assert app.counts() == {"ready": 1} and app.get(kept).type == "send-invoice"


def test_demo_defaults_match_the_cli_defaults() -> None:
    from readyq import cli, demo

    assert (cli.DEMO_DB, cli.DEMO_PREFIX) == (demo.DEFAULT_DB, demo.DEFAULT_PREFIX)
