"""Table prefixes are lower case: one with upper-case letters is refused, everywhere.

MariaDB compares constraint names without case, so ``NewComer_`` next to the tables of
``newcomer_`` failed deep in ``create_schema()`` with errno 121 "Duplicate key on write or
update"; SQLite compares table names without case, so it silently shared them; PostgreSQL
kept them apart (issue 27, item 6). Now the Queue, the migrations (readyq's own and an
Alembic command line's ``-x prefix=``) and the CLI refuse it with one message naming the
lower-case prefix, before anything touches the database.
"""

from __future__ import annotations

import argparse

import pytest
import sqlalchemy as sa

import readyq
from readyq import admin
from readyq.cli import main
from readyq.migrations import script_location

EXISTING, VARIANT = "newcomer_", "NewComer_"
MESSAGE = "table prefix 'NewComer_' has upper-case letters: use 'newcomer_'"


def _tables(db: str) -> set[str]:
    engine = sa.create_engine(db, poolclass=sa.NullPool)
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_a_case_variant_of_an_existing_prefix_is_refused_everywhere_and_changes_nothing(
    db: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with readyq.Queue(db, prefix=EXISTING) as queue:
        queue.create_schema()
        job = queue.enqueue("noop", {})
    before = _tables(db)

    with pytest.raises(readyq.InvalidTablePrefix) as refused:
        readyq.Queue(db, prefix=VARIANT)
    message = str(refused.value)
    assert message.startswith(MESSAGE)

    for call in (
        lambda: admin.migrate(db, prefix=VARIANT),
        lambda: admin.stamp(db, prefix=VARIANT),
        lambda: admin.current_revision(db, prefix=VARIANT),
        lambda: admin.migration_sql(db, prefix=VARIANT),
    ):
        with pytest.raises(readyq.InvalidTablePrefix) as again:
            call()
        assert str(again.value) == message

    # An Alembic command line of its own, with the prefix as -x prefix=...
    from alembic import command
    from alembic.config import Config

    cfg = Config(cmd_opts=argparse.Namespace(x=[f"prefix={VARIANT}"]))
    cfg.set_main_option("script_location", script_location())
    cfg.set_main_option("sqlalchemy.url", db.replace("%", "%%"))
    with pytest.raises(readyq.InvalidTablePrefix) as alembic_refused:
        command.upgrade(cfg, "head")
    assert str(alembic_refused.value) == message

    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.delenv("READYQ_DATABASE_URL", raising=False)
    for argv in (
        ["--db", db, "--prefix", VARIANT, "migrate"],
        ["--db", db, "migrate", "--prefix", VARIANT],
        ["--db", db, "--prefix", VARIANT, "status"],
        ["--db", db, "enqueue", "noop", "--prefix", VARIANT],
    ):
        capsys.readouterr()
        assert main(argv) == 2, argv
        out, err = capsys.readouterr()
        assert (out, err) == ("", f"readyq: {message}\n"), argv

    assert _tables(db) == before
    with readyq.Queue(db, prefix=EXISTING) as queue:
        assert queue.get(job).state is readyq.JobState.READY
        assert queue.counts() == {"ready": 1}


@pytest.mark.parametrize(("prefix", "fix"), [("App_", "app_"), ("A" * 31, "a" * 31),
                                             ("READYQ_", "readyq_")])
def test_upper_case_prefix_message_names_the_lower_case_one(prefix: str, fix: str) -> None:
    with pytest.raises(readyq.InvalidTablePrefix, match=f"use '{fix}'"):
        readyq.Queue("sqlite://", prefix=prefix)


def test_prefix_that_is_wrong_in_other_ways_too_gets_the_pattern(db: str) -> None:
    with pytest.raises(readyq.InvalidTablePrefix, match=r"must match \^\[a-z_\]"):
        readyq.Queue(db, prefix="New-Comer_")
