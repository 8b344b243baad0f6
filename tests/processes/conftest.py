"""Fixtures of the multi-process tests: worker processes that are always cleaned up, and
the history table the worker processes write their handlers' events to."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from harness import Workers, create_history

import readyq


@pytest.fixture
def workers(db: str, tmp_path: Path) -> Iterator[Workers]:
    """Starts ``app.py`` worker processes on the test's database; kills leftovers."""
    spawner = Workers(db, tmp_path)
    try:
        yield spawner
    finally:
        spawner.close()


@pytest.fixture
def history_engine(queue: readyq.Queue) -> sa.Engine:
    """The queue's engine, with the history table created next to readyq's tables."""
    create_history(queue.engine)
    return queue.engine
