"""`readyq jobs`, `readyq retry|cancel <filter>` and `readyq prune --dry-run`."""

from __future__ import annotations

import io
import sys

import pytest

import readyq
from readyq import JobState

from .support import Run, db_now, run_until_idle, set_rows


class Terminal(io.StringIO):
    """A stdin that is a terminal, answering ``answer``."""

    def isatty(self) -> bool:
        return True


def failing(mq: readyq.Queue) -> tuple[list[int], list[int]]:
    @mq.handler("bad", max_attempts=1)
    def bad(job: readyq.Job) -> None:
        raise RuntimeError("boom")

    @mq.handler("good")
    def good(job: readyq.Job) -> str:
        return "ok"

    bads = [mq.enqueue("bad", {"i": i}, group="g") for i in range(3)]
    goods = [mq.enqueue("good", {"i": i}) for i in range(2)]
    run_until_idle(mq)
    return bads, goods


def test_jobs_lists_filters_and_pages(migrated: Run, mq: readyq.Queue) -> None:
    bads, goods = failing(mq)
    table = migrated("jobs", "--state", "failed")
    assert table.code == 0, table.err
    assert "3 job(s) matching state=failed" in table.out and "boom" in table.out
    for i in bads:
        assert f"│ {i} │ bad" in table.out or f"{i} │ bad" in table.out
    assert "next page" not in table.out

    first = migrated("jobs", "--limit", "2", "--json").json()
    assert [j["id"] for j in first["jobs"]] == [goods[1], goods[0]]
    cursor = first["next_cursor"]
    second = migrated("jobs", "--limit", "2", "--cursor", cursor, "--json").json()
    assert [j["id"] for j in second["jobs"]] == [bads[2], bads[1]]
    text = migrated("jobs", "--limit", "2")
    assert f"next page: --cursor {cursor}" in text.out

    both = migrated("jobs", "--state", "done", "failed", "--type", "bad", "--group", "g",
                    "--order", "oldest", "--json").json()
    assert [j["id"] for j in both["jobs"]] == bads
    assert both["jobs"][0]["error"].strip().endswith("RuntimeError: boom")
    recent = migrated("jobs", "--since", "1h", "--time", "finished", "--json").json()
    assert len(recent["jobs"]) == 5
    set_rows(mq, goods, finished_at=db_now(mq) - 7200)
    older = migrated("jobs", "--until", "1h", "--time", "finished", "--json").json()
    assert sorted(j["id"] for j in older["jobs"]) == goods
    assert migrated("jobs", "--id", str(bads[0]), "--json").json()["jobs"][0]["id"] == bads[0]


BAD_ARGV = [
    ("jobs", "--state", "finished"),
    ("jobs", "--limit", "0"),
    ("jobs", "--cursor", "nope"),
    ("jobs", "--since", "yesterday"),
    ("jobs", "--type", " padded"),
    ("retry", "--state", "done"),
    ("retry", "1", "--state", "failed"),
    ("retry",),
    ("cancel",),
    ("cancel", "--state", "failed", "--yes"),
]


def test_bad_filters_are_one_line_usage_errors(migrated: Run) -> None:
    for argv in BAD_ARGV:
        result = migrated(*argv)
        assert result.one_line_error and result.code == 2, (argv, result.code, result.err)


def test_retry_on_a_filter_asks_first_and_dry_run_changes_nothing(
    migrated: Run, mq: readyq.Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    bads, _ = failing(mq)
    dry = migrated("retry", "--state", "failed", "--type", "bad", "--dry-run")
    assert dry.code == 0, dry.err
    assert "dry run: would retry 3 job(s) of 3 matching" in dry.out
    assert "nothing was changed" in dry.out
    assert [mq.get(i).state for i in bads] == [JobState.FAILED] * 3

    # Not a terminal (the test's stdin): refused, with how to go ahead.
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    refused = migrated("retry", "--state", "failed", "--type", "bad")
    assert refused.one_line_error and refused.code == 2
    assert "--yes" in refused.err and "3 jobs" in refused.err
    assert [mq.get(i).state for i in bads] == [JobState.FAILED] * 3

    # A terminal that answers no: nothing changes either.
    monkeypatch.setattr(sys, "stdin", Terminal("n\n"))
    declined = migrated("retry", "--type", "bad")
    assert declined.code == 1 and "nothing was changed" in declined.err
    assert "retry 3 job(s) matching state=failed type=bad, changing 3 job(s)?" in declined.err
    assert [mq.get(i).state for i in bads] == [JobState.FAILED] * 3

    monkeypatch.setattr(sys, "stdin", Terminal("y\n"))
    done = migrated("retry", "--type", "bad", "--json")
    assert done.code == 0, done.err
    report = done.json()
    assert (report["matched"], report["changed"], report["dry_run"]) == (3, 3, False)
    assert [mq.get(i).state for i in bads] == [JobState.READY] * 3


def test_one_job_needs_no_confirmation_and_yes_skips_it(
    migrated: Run, mq: readyq.Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    bads, _ = failing(mq)
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    one = migrated("retry", "--id", str(bads[0]))
    assert one.code == 0, one.err
    assert "retried 1 job(s) of 1 matching" in one.out
    rest = migrated("retry", "--state", "failed", "--yes")
    assert rest.code == 0 and "retried 2 job(s)" in rest.out
    assert all(mq.get(i).state is JobState.READY for i in bads)
    # `retry ID --dry-run` previews that one job.
    preview = migrated("retry", str(bads[0]), "--dry-run", "--json").json()
    assert (preview["matched"], preview["changed"]) == (0, 0)  # it is ready now


def test_cancel_on_a_filter(migrated: Run, mq: readyq.Queue) -> None:
    waiting = [mq.enqueue("slow", {"i": i}, group="w") for i in range(3)]
    other = mq.enqueue("slow", group="x")
    dry = migrated("cancel", "--group", "w", "--dry-run", "--json").json()
    assert (dry["matched"], dry["changed"], dry["dry_run"]) == (3, 3, True)
    assert mq.get(waiting[0]).state is JobState.READY
    done = migrated("cancel", "--group", "w", "--yes")
    assert done.code == 0, done.err
    assert "cancelled 3 job(s) of 3 matching" in done.out
    assert [mq.get(i).state for i in waiting] == [JobState.CANCELLED] * 3
    assert mq.get(other).state is JobState.READY


def test_prune_dry_run_counts_and_deletes_nothing(migrated: Run, mq: readyq.Queue) -> None:
    _, goods = failing(mq)
    set_rows(mq, goods, finished_at=db_now(mq) - 3 * 86400)
    dry = migrated("prune", "--older-than", "1d", "--dry-run")
    assert dry.code == 0, dry.err
    assert "dry run: would prune 2 job(s)" in dry.out and "nothing was deleted" in dry.out
    assert len(mq.jobs()) == 5
    report = migrated("prune", "--older-than", "1d", "--dry-run", "--json").json()
    assert (report["deleted"], report["dry_run"]) == (2, True)
    real = migrated("prune", "--older-than", "1d", "--json").json()
    assert (real["deleted"], real["dry_run"]) == (2, False)
    assert len(mq.jobs()) == 3


def test_the_attempts_column_says_what_it_knows(migrated: Run, mq: readyq.Queue) -> None:
    box = mq.enqueue_container("box")
    free = readyq.Queue(mq.engine).enqueue("other")  # no handler here: its own decides
    fixed = mq.enqueue("bad", max_attempts=4)
    out = migrated("jobs").out
    cells = [line.split("│") for line in out.splitlines() if line.count("│") > 6]
    rows = {int(c[1]): c[5].strip() for c in cells if c[1].strip().isdigit()}
    assert rows == {box: "-", free: "0 (handler's)", fixed: "0/4"}, out
