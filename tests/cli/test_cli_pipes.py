"""The CLI on a closed pipe (`readyq show 4 --json | head -3`): no traceback, no message,
exit status 141 (what a shell reports for a command killed by SIGPIPE).

These run the CLI as a process with its stdout on a real pipe, because the failure only
exists there: the write that meets a reader that has gone away.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import readyq

# 128 + SIGPIPE, as a shell reports a process that SIGPIPE ended.
EXIT_BROKEN_PIPE = 141


def _env(buffered: bool = True) -> dict[str, str]:
    env = dict(os.environ, NO_COLOR="1", COLUMNS="120")
    env.pop("FORCE_COLOR", None)
    env.pop("READYQ_DATABASE_URL", None)
    # A shell's stdout on a pipe is block-buffered unless PYTHONUNBUFFERED says otherwise:
    # then the failing write is the flush at the end, not the print itself.
    if buffered:
        env.pop("PYTHONUNBUFFERED", None)
    else:
        env["PYTHONUNBUFFERED"] = "1"
    return env


def _start(argv: list[str], write_end: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "readyq.cli", *argv],
        stdout=write_end,
        stderr=subprocess.PIPE,
        env=env,
    )


def run_with_reader_gone(argv: list[str], *, buffered: bool = True) -> tuple[int, str]:
    """Run readyq with stdout on a pipe whose reader has closed before the first byte."""
    read_end, write_end = os.pipe()
    try:
        proc = _start(argv, write_end, _env(buffered))
    finally:
        os.close(write_end)
        os.close(read_end)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err.decode()


def run_into_head(argv: list[str], lines: int, *, buffered: bool = True) -> tuple[int, str, bytes]:
    """Run readyq into a reader that takes ``lines`` lines and closes, as `head` does."""
    read_end, write_end = os.pipe()
    try:
        proc = _start(argv, write_end, _env(buffered))
    finally:
        os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        head = b"".join(reader.readline() for _ in range(lines))
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err.decode(), head


@pytest.fixture
def graph(db: str, mq: readyq.Queue) -> tuple[int, int]:
    """A job with 400 kB of args (more than a pipe holds) and a job that depends on it."""
    big = mq.enqueue("load", {"blob": "x" * 400_000})
    return big, mq.enqueue("report", {}, depends_on=[big])


def test_output_into_a_closed_pipe_ends_quietly_with_status_141(
    db: str, graph: tuple[int, int]
) -> None:
    big, report = graph
    for argv in (
        ["show", str(big), "--json"],
        ["show", str(report)],
        ["dag", str(report), "--json"],
        ["dag", str(report), "--format", "mermaid"],
        ["status"],
    ):
        code, err = run_with_reader_gone(["--db", db, *argv])
        assert (code, err) == (EXIT_BROKEN_PIPE, ""), (argv, code, err)
    # Unbuffered, the print itself meets the closed pipe.
    code, err = run_with_reader_gone(["--db", db, "dag", str(report), "--json"], buffered=False)
    assert (code, err) == (EXIT_BROKEN_PIPE, ""), (code, err)


def test_a_reader_that_stops_early_gets_its_lines_and_no_traceback(
    db: str, graph: tuple[int, int]
) -> None:
    big, _ = graph
    for buffered in (True, False):
        code, err, head = run_into_head(["--db", db, "show", str(big), "--json"], 3,
                                        buffered=buffered)
        assert head.decode().splitlines() == ["{", f'  "id": {big},', '  "type": "load",']
        assert (code, err) == (EXIT_BROKEN_PIPE, ""), (buffered, code, err)


def test_a_reader_that_reads_everything_still_gets_status_0(
    db: str, graph: tuple[int, int]
) -> None:
    _, report = graph
    out = subprocess.run(
        [sys.executable, "-m", "readyq.cli", "--db", db, "show", str(report), "--json"],
        capture_output=True, env=_env(), timeout=120,
    )
    assert out.returncode == 0 and out.stderr == b"", out.stderr
    assert b'"type": "report"' in out.stdout
