"""`readyq retry` and `readyq cancel`."""

from __future__ import annotations

import readyq
from readyq import JobState

from .support import Run, run_until_idle, set_rows


def test_retry_revives_a_failed_job_and_what_failed_because_of_it_then_it_runs(
    migrated: Run, mq: readyq.Queue
) -> None:
    cli = migrated
    broken = {"flaky": True}

    @mq.handler("flaky", max_attempts=1)
    def flaky(job: readyq.Job) -> str:
        if broken["flaky"]:
            raise RuntimeError("upstream API down")
        return f"ok on attempt {job.attempt}"

    @mq.handler("doomed", max_attempts=1)
    def doomed(job: readyq.Job) -> None:
        raise RuntimeError("always fails")

    @mq.handler("step")
    def step(job: readyq.Job) -> str:
        return "done"

    # flaky -> d1 -> d2; both -> mixed, which also depends on doomed (stays failed).
    f = mq.enqueue("flaky", {})
    d1 = mq.enqueue("step", {}, depends_on=[f])
    d2 = mq.enqueue("step", {}, depends_on=[d1])
    g = mq.enqueue("doomed", {})
    mixed = mq.enqueue("step", {}, depends_on=[d2, g])
    # A container with a flaky child and a good one; report depends on the container.
    box = mq.enqueue_container("batch")
    child = mq.enqueue("flaky", {}, parent=box)
    good = mq.enqueue("step", {}, parent=box)
    report = mq.enqueue("step", {}, depends_on=[box])
    ok = mq.enqueue("step", {})
    run_until_idle(mq)
    state = lambda i: mq.get(i).state  # noqa: E731
    assert [state(i) for i in (f, d1, d2, g, mixed)] == [
        JobState.FAILED, JobState.UPSTREAM_FAILED, JobState.UPSTREAM_FAILED, JobState.FAILED,
        JobState.UPSTREAM_FAILED]
    assert [state(i) for i in (box, child, good, report)] == [
        JobState.FAILED, JobState.FAILED, JobState.DONE, JobState.UPSTREAM_FAILED]

    refused = cli("retry", str(d2))
    assert refused.one_line_error and refused.code == 1
    assert f"depends on job {d1}, which ended upstream_failed" in refused.err
    assert f"retry job {f} instead" in refused.err
    done = cli("retry", str(ok))
    assert done.one_line_error and f"job {ok} is done" in done.err

    result = cli("retry", str(f), "--json")
    assert result.code == 0, result.err
    assert result.json() == {"job_id": f, "reopened": [], "revived": [
        {"id": f, "state": "ready"}, {"id": d1, "state": "waiting"},
        {"id": d2, "state": "waiting"}]}
    info = mq.get(f)
    assert info.state is JobState.READY and info.error is None and info.attempts == 1
    assert info.max_attempts == 2 and info.finished_at is None
    assert state(mixed) is JobState.UPSTREAM_FAILED  # doomed still failed

    text = cli("retry", str(box))
    assert text.code == 0, text.err
    assert f"job {child} -> ready" in text.out and f"job {report} -> waiting" in text.out
    assert f"containers reopened: {box}" in text.out
    container = cli("show", str(box), "--json").json()
    assert container["state"] == "active" and container["open_children"] == 1
    assert container["failed_children"] == 0

    broken["flaky"] = False
    run_until_idle(mq)
    assert [state(i) for i in (f, d1, d2, box, child, good, report)] == [JobState.DONE] * 7
    assert mq.get(f).result == "ok on attempt 2"  # attempts kept: a new (id, attempt)
    assert state(mixed) is JobState.UPSTREAM_FAILED and state(g) is JobState.FAILED
    again = cli("retry", str(f))
    assert again.one_line_error and "is done" in again.err


def test_cancel_and_retry_of_a_cancelled_job(migrated: Run, mq: readyq.Queue) -> None:
    cli = migrated
    a = mq.enqueue("step", {})
    b = mq.enqueue("step", {}, depends_on=[a])

    unfinished = cli("retry", str(a))
    assert unfinished.one_line_error and unfinished.code == 1
    assert f"job {a} is ready, not finished" in unfinished.err

    cancelled = cli("cancel", str(a))
    assert cancelled.code == 0 and f"job {a} cancelled (ready -> cancelled)" in cancelled.out
    assert mq.get(b).state is JobState.UPSTREAM_FAILED
    twice = cli("cancel", str(a), "--json")
    assert twice.one_line_error and "already ended (cancelled)" in twice.err and twice.out == ""
    missing = cli("cancel", "999")
    assert missing.one_line_error and missing.err == "readyq: no job with id 999\n"

    revived = cli("retry", str(a), "--json").json()
    assert revived["revived"] == [{"id": a, "state": "ready"}, {"id": b, "state": "waiting"}]
    c = mq.enqueue("step", {})
    as_json = cli("cancel", str(c), "--json")
    assert as_json.json() == {"job_id": c, "before": "ready", "after": "cancelled",
                              "requested": False, "ended": 1, "stopping": 0}


def test_retry_inside_nested_containers_reopens_each_level(migrated: Run, mq: readyq.Queue) -> None:
    cli = migrated
    broken = {"on": True}

    @mq.handler("flaky", max_attempts=1)
    def flaky(job: readyq.Job) -> None:
        if broken["on"]:
            raise RuntimeError("flaky")

    @mq.handler("step")
    def step(job: readyq.Job) -> None:
        return None

    outer = mq.enqueue_container("outer")
    inner = mq.enqueue_container("inner", parent=outer)
    bad = mq.enqueue("flaky", {}, parent=inner)
    mq.enqueue("step", {}, parent=inner)
    mq.enqueue("step", {}, parent=outer)
    after = mq.enqueue("step", {}, depends_on=[outer])
    run_until_idle(mq)
    assert [mq.get(i).state for i in (bad, inner, outer, after)] == [
        JobState.FAILED, JobState.FAILED, JobState.FAILED, JobState.UPSTREAM_FAILED]

    result = cli("retry", str(bad), "--json").json()
    assert result["revived"] == [{"id": bad, "state": "ready"}, {"id": after, "state": "waiting"}]
    assert result["reopened"] == [inner, outer]
    for box in (inner, outer):
        shown = cli("show", str(box), "--json").json()
        assert (shown["state"], shown["open_children"], shown["failed_children"]) == (
            "active", 1, 0)
    broken["on"] = False
    run_until_idle(mq)
    assert [mq.get(i).state for i in (bad, inner, outer, after)] == [JobState.DONE] * 4


def test_close_ends_an_empty_container_and_refuses_the_rest(
    migrated: Run, mq: readyq.Queue
) -> None:
    cli = migrated
    box = mq.enqueue_container("batch")
    after = mq.enqueue("step", {}, depends_on=[box])
    full = mq.enqueue_container("batch")
    mq.enqueue("step", {}, parent=full)

    refused = cli("close", str(full))
    assert refused.code == 1 and refused.one_line_error
    assert f"container {full} has 1 child job(s) that have not ended" in refused.err
    missing = cli("close", "99999")
    assert missing.code == 1 and "no job with id 99999" in missing.err
    assert mq.get(full).state is JobState.ACTIVE

    done = cli("close", str(box))
    assert done.code == 0, done.err
    assert done.out == f"container {box} closed: done\n"
    assert mq.get(after).state is JobState.READY
    again = cli("close", str(box), "--json")
    assert again.code == 1 and "has already ended (done)" in again.err
    other = mq.enqueue_container("batch")
    assert cli("close", str(other), "--json").json() == {"id": other, "state": "done"}


def test_cancel_of_a_container_says_what_it_did(migrated: Run, mq: readyq.Queue) -> None:
    box = mq.enqueue_container("pipeline")
    running = mq.enqueue("t", parent=box)
    mq.enqueue("t", parent=box)
    mq.enqueue("t", parent=box, depends_on=[running])
    set_rows(mq, [running], state="running", lease_owner="w", lease_token=1,
             attempts=1, lease_expires=10**10)
    result = migrated("cancel", str(box))
    assert result.code == 0, result.err
    assert result.out.strip() == (
        f"container {box}: 2 waiting or ready job(s) cancelled, cancel requested for 1 "
        "running job(s); it ends cancelled once they have stopped"
    )
    assert migrated("cancel", str(box), "--json").json()["stopping"] == 1
