"""``Queue.jobs``: every filter, both orders, keyset pages that neither skip nor repeat a
job while jobs are added, and bad input refused with a specific error before anything
is read; on every database."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

import readyq
from readyq import InvalidCursor, InvalidFilter, JobFilter, JobState

OPTIONS = {"concurrency": 4, "poll_interval": 0.02, "lease_ttl": 10.0, "heartbeat_interval": 2.0}


def ids(page: readyq.JobPage) -> list[int]:
    return [j.id for j in page.jobs]


def set_rows(queue: readyq.Queue, job_ids: list[int], **values: object) -> None:
    j = queue.store.tables.jobs
    with queue.engine.begin() as conn:
        conn.execute(sa.update(j).where(j.c.id.in_(job_ids)).values(**values))


def db_now(queue: readyq.Queue) -> float:
    with queue.engine.connect() as conn:
        return float(conn.execute(sa.select(queue.store.now())).scalar_one())


@pytest.fixture
def mixed(queue: readyq.Queue) -> dict[str, list[int]]:
    """Jobs of every kind: done, failed, upstream_failed, waiting, ready, a container."""

    @queue.handler("good")
    def good(job: readyq.Job) -> str:
        return "ok"

    @queue.handler("bad", max_attempts=1)
    def bad(job: readyq.Job) -> None:
        raise RuntimeError("broken")

    done = [queue.enqueue("good", {"i": i}, group="a") for i in range(3)]
    failed = [queue.enqueue("bad", {"i": i}, group="b") for i in range(2)]
    blocked = queue.enqueue("good", {}, group="b", depends_on=[failed[0]])
    queue.run_worker(until_idle=True, **OPTIONS)
    queue.handler("later")(lambda job: None)
    box = queue.enqueue_container("batch", group="c")
    kids = [queue.enqueue("later", {"k": k}, group="c", parent=box) for k in range(3)]
    gate = queue.enqueue("later", {}, group="a", run_after=timedelta(hours=1))
    waiting = queue.enqueue("later", {}, group="a", depends_on=[gate], unique_key="w-1")
    return {
        "done": done, "failed": failed, "upstream_failed": [blocked], "box": [box],
        "kids": kids, "ready": [*kids, gate], "waiting": [waiting],
    }


def test_each_filter_selects_exactly_its_jobs_newest_first(
    queue: readyq.Queue, mixed: dict[str, list[int]]
) -> None:
    everything = sorted(i for v in mixed.values() for i in v)
    assert ids(queue.jobs()) == sorted(set(everything), reverse=True)
    assert ids(queue.jobs(state="failed")) == sorted(mixed["failed"], reverse=True)
    assert ids(queue.jobs(state=JobState.UPSTREAM_FAILED)) == mixed["upstream_failed"]
    bad_ends = queue.jobs(state=["failed", "upstream_failed"])
    assert ids(bad_ends) == sorted(mixed["failed"] + mixed["upstream_failed"], reverse=True)
    assert ids(queue.jobs(state="ready", type="later")) == sorted(mixed["ready"], reverse=True)
    assert ids(queue.jobs(state="waiting", type="later")) == mixed["waiting"]
    assert ids(queue.jobs(state="waiting", type="good")) == []
    assert ids(queue.jobs(state="active")) == mixed["box"]
    assert ids(queue.jobs(type="bad")) == sorted(mixed["failed"], reverse=True)
    assert ids(queue.jobs(group="c")) == sorted(mixed["kids"] + mixed["box"], reverse=True)
    assert ids(queue.jobs(parent=mixed["box"][0])) == sorted(mixed["kids"], reverse=True)
    assert ids(queue.jobs(unique_key="w-1")) == mixed["waiting"]
    assert ids(queue.jobs(id=[mixed["done"][1], mixed["box"][0], 10**9])) == sorted(
        [mixed["done"][1], mixed["box"][0]], reverse=True)
    assert ids(queue.jobs(state="done", group="a", order="oldest")) == mixed["done"]
    # Several criteria at once must all hold.
    assert ids(queue.jobs(state="ready", group="a")) == [mixed["ready"][-1]]
    assert ids(queue.jobs(state="failed", group="a")) == []
    # A JobFilter does the same as the keywords.
    assert ids(queue.jobs(JobFilter(state="failed", type="bad"))) == ids(
        queue.jobs(state="failed", type="bad"))


def test_a_listed_job_is_the_job_that_get_returns(
    queue: readyq.Queue, mixed: dict[str, list[int]]
) -> None:
    for job in queue.jobs(limit=1000):
        assert job == queue.get(job.id)
    failed = queue.jobs(state="failed").jobs[0]
    assert failed.error is not None and "broken" in failed.error
    waiting = queue.jobs(state="waiting").jobs[0]
    assert waiting.depends_on == (mixed["ready"][-1],)


def test_time_ranges_by_instant_and_by_duration_ago(
    queue: readyq.Queue, mixed: dict[str, list[int]]
) -> None:
    now = db_now(queue)
    # The done jobs finished two hours ago, the failed ones ten minutes ago.
    set_rows(queue, mixed["done"], finished_at=now - 7200, started_at=now - 7300,
             created_at=now - 7400)
    set_rows(queue, mixed["failed"], finished_at=now - 600)
    hour = timedelta(hours=1)
    assert sorted(ids(queue.jobs(finished_after=hour))) == sorted(
        mixed["failed"] + mixed["upstream_failed"])
    assert sorted(ids(queue.jobs(finished_before=hour))) == mixed["done"]
    assert sorted(ids(queue.jobs(started_before=hour))) == mixed["done"]
    assert ids(queue.jobs(created_before=hour, order="oldest")) == mixed["done"]
    # Half a second before the done jobs finished: a datetime holds microseconds, and
    # the stored instant is a double.
    at = datetime.fromtimestamp(now - 7200.5, tz=timezone.utc)
    # *_after is inclusive, *_before exclusive.
    assert ids(queue.jobs(finished_after=at, finished_before=hour)) == mixed["done"][::-1]
    assert ids(queue.jobs(finished_after=at + timedelta(seconds=1), finished_before=hour)) == []
    assert ids(queue.jobs(finished_before=at)) == []
    naive = datetime.fromtimestamp(now - 3600, tz=timezone.utc).replace(tzinfo=None)
    assert sorted(ids(queue.jobs(finished_after=naive))) == sorted(
        mixed["failed"] + mixed["upstream_failed"])  # naive means UTC


def test_pages_follow_the_cursor_without_skipping_or_repeating(queue: readyq.Queue) -> None:
    made = [queue.enqueue("t", {"i": i}) for i in range(23)]
    for order, expected in (("newest", made[::-1]), ("oldest", made)):
        seen: list[int] = []
        cursor = None
        pages = 0
        while True:
            page = queue.jobs(type="t", order=order, limit=5, cursor=cursor)
            seen += ids(page)
            pages += 1
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
            if pages == 2:
                # Jobs added meanwhile: newer than the listing's first page, so a newest
                # first listing never reaches them, and an oldest first one ends on them.
                made.append(queue.enqueue("t", {"late": True}))
        if order == "newest":
            assert seen == expected
        else:
            assert seen == made
    # Exactly a page's worth: the last page says so.
    full = queue.jobs(type="t", limit=len(made))
    assert len(full) == len(made) and full.next_cursor is None


def test_bad_input_raises_a_specific_error(queue: readyq.Queue) -> None:
    queue.enqueue("t")
    queue.enqueue("t")
    page = queue.jobs(limit=1)
    assert page.next_cursor is not None
    bad: list[dict[str, object]] = [
        {"state": "finished"}, {"state": ["ready", 3]}, {"type": ""}, {"group": " x"},
        {"parent": 0}, {"parent": "7"}, {"id": -1}, {"id": [True]}, {"unique_key": "a\x00"},
        {"created_after": "1h"}, {"started_after": timedelta(seconds=-1)},
        {"finished_after": timedelta(minutes=5), "finished_before": timedelta(hours=1)},
        {"created_after": datetime(2030, 1, 2, tzinfo=timezone.utc),
         "created_before": datetime(2030, 1, 1, tzinfo=timezone.utc)},
        {"order": "random"}, {"limit": 0}, {"limit": 1001}, {"limit": True},
        {"cursor": "abc"}, {"cursor": "c1.!!!"}, {"cursor": page.next_cursor, "type": "u"},
        {"cursor": page.next_cursor, "order": "oldest"},
    ]
    for kwargs in bad:
        with pytest.raises(InvalidFilter):
            queue.jobs(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(InvalidCursor):
        queue.jobs(cursor=page.next_cursor, state="ready")
    with pytest.raises(InvalidFilter, match="not both"):
        queue.jobs(JobFilter(type="t"), state="ready")
    # Good input still works afterwards.
    assert len(queue.jobs(type="t")) == 2


def test_the_async_twin_lists_the_same_pages(db: str, queue: readyq.Queue) -> None:
    from async_support import Runner, async_engine

    made = [queue.enqueue("t", {"i": i}, group="g") for i in range(7)]
    runner = Runner()
    engine = async_engine(db)
    aq = readyq.AsyncQueue(engine)
    try:
        first = runner.run(aq.jobs(type="t", limit=4))
        second = runner.run(aq.jobs(type="t", limit=4, cursor=first.next_cursor))
        assert ids(first) + ids(second) == made[::-1] and second.next_cursor is None
        assert ids(runner.run(aq.jobs(JobFilter(group="g"), order="oldest", limit=2))) == made[:2]
        with pytest.raises(InvalidFilter):
            runner.run(aq.jobs(state="nope"))
    finally:
        runner.run(aq.close())
        runner.run(engine.dispose())
        runner.close()
