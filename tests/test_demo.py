from __future__ import annotations

import io
import subprocess
import sys

from rich.console import Console

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
