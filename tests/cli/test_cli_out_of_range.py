"""Ids and values past what the columns hold are one-line errors from the command line,
the same on every database (PostgreSQL's and SQLite's own errors reached the user as
database errors, MariaDB looked 2**63 up as a missing job), and change nothing."""

from __future__ import annotations

import readyq

from .support import Run

BIG_ID = str(2**63)


def test_ids_and_values_past_the_columns_are_refused(migrated: Run, mq: readyq.Queue) -> None:
    cli = migrated
    existing = mq.enqueue("t")
    for argv in (
        ("show", BIG_ID), ("dag", BIG_ID), ("retry", BIG_ID), ("cancel", BIG_ID),
        ("show", str(2**64)), ("retry", "--", "-1"),
        ("enqueue", "t", "--parent", BIG_ID), ("enqueue", "t", "--after", str(existing), BIG_ID),
        ("enqueue", "t", "--max-attempts", str(2**31)),
        ("enqueue", "t", "--priority", str(2**31)),
        ("enqueue", "t", "--timeout", "1e300"), ("enqueue", "t", "--run-after", "1e300"),
        ("enqueue", "t", "--run-after", "9999-12-31T23:00:00-12:00"),
        ("jobs", "--id", BIG_ID), ("jobs", "--parent", BIG_ID),
        ("jobs", "--since", "20000w"), ("cancel", "--since", "20000w"),
        ("prune", "--older-than", "20000w"), ("retry", "--state", "failed",
                                              "--extra-attempts", str(2**31)),
    ):
        result = cli(*argv)
        assert result.one_line_error and result.code == 2, (argv, result)
        assert "database error" not in result.err, (argv, result.err)
    assert mq.counts() == {"ready": 1}
