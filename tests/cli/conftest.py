"""Fixtures of the CLI tests: run ``readyq.cli.main`` in-process and capture its output.

tests/cli is a package, so this conftest is imported as ``cli.conftest`` and never
shadows the root ``conftest`` module.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import readyq
from readyq.cli import main

from .support import Result, Run


@pytest.fixture
def cli(db: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Run:
    """``cli("status", "--json")`` runs ``readyq --db <db> status --json``."""
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("READYQ_DATABASE_URL", raising=False)

    def run(*argv: str, url: str | None = db) -> Result:
        capsys.readouterr()
        args = ["--db", url, *argv] if url is not None else list(argv)
        code = main(args)
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


@pytest.fixture
def migrated(cli: Run) -> Run:
    """The CLI on a database migrated with ``readyq migrate``."""
    result = cli("migrate")
    assert result.code == 0, result.err
    return cli


@pytest.fixture
def mq(db: str, migrated: Run) -> Iterator[readyq.Queue]:
    """A Queue on the database migrated by ``readyq migrate``."""
    q = readyq.Queue(db)
    try:
        yield q
    finally:
        q.close()
