"""`readyq status`, `top --once` and `show`."""

from __future__ import annotations

import threading

import readyq
from readyq import admin

from .support import Run, run_until_idle, wait_for


def test_status_counts_groups_in_flight_oldest_ready_and_workers(
    migrated: Run, mq: readyq.Queue
) -> None:
    cli = migrated
    release = threading.Event()

    @mq.handler("block")
    def block(job: readyq.Job) -> None:
        release.wait(20)

    ids = [mq.enqueue("block", {"n": i}, group="tenant-a", weight=2) for i in range(3)]
    later = mq.enqueue("block", {}, group="tenant-b", run_after=3600)
    waiting = mq.enqueue("block", {}, group="tenant-b", depends_on=[ids[0]])
    empty = cli("status", "--json").json()
    assert empty["in_flight"] == 0 and empty["workers"] == []
    assert empty["oldest_ready"]["id"] == ids[0]

    worker = mq.worker(concurrency=1, poll_interval=0.02, lease_ttl=10, heartbeat_interval=0.2)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: admin.status(mq).states.get("running", 0) == 1)
        result = cli("status", "--json")
        assert result.code == 0
        st = result.json()
        assert st["total"] == 5 and st["in_flight"] == 1
        assert st["states"]["running"] == 1 and st["states"]["ready"] == 3
        assert st["states"]["waiting"] == 1 and st["states"]["done"] == 0
        assert st["groups"] == {"tenant-a": {"ready": 2, "running": 1},
                                "tenant-b": {"waiting": 1, "ready": 1}}
        assert st["runnable"] == 2 and st["deferred"] == 1
        assert st["oldest_ready"]["id"] == ids[1] and st["oldest_ready"]["group"] == "tenant-a"
        assert st["oldest_ready"]["age_seconds"] >= 0
        [seen] = st["workers"]
        assert seen["owner"] == worker.worker_id and seen["running"] == 1
        assert seen["expired"] is False and seen["heartbeat_age_seconds"] < 5

        text = cli("status").out
        for expected in ("Jobs per group and state", "all", "tenant-a", "tenant-b",
                         "1 in flight", f"oldest runnable job: #{ids[1]} block",
                         "Workers holding leases", worker.worker_id, "live"):
            assert expected in text, expected
        frame = cli("top", "--once")
        assert frame.code == 0 and worker.worker_id in frame.out and "Jobs per group" in frame.out
        running = cli("cancel", str(ids[0]), "--json").json()
        assert running == {"job_id": ids[0], "before": "running", "after": "running",
                           "requested": True, "ended": 0, "stopping": 1}
    finally:
        release.set()
        worker.stop()
        thread.join(20)
    assert mq.get(later).state is readyq.JobState.READY
    # Cancelled while running: it ends cancelled unless the handler returned first.
    assert (mq.get(ids[0]).state, mq.get(waiting).state) in (
        (readyq.JobState.CANCELLED, readyq.JobState.UPSTREAM_FAILED),
        (readyq.JobState.DONE, readyq.JobState.READY),
    )


def test_show_fields_dependencies_dependents_and_the_error(migrated: Run, mq: readyq.Queue) -> None:
    cli = migrated

    @mq.handler("ok")
    def ok(job: readyq.Job) -> dict[str, int]:
        return {"rows": 10}

    @mq.handler("boom", max_attempts=1)
    def boom(job: readyq.Job) -> None:
        raise RuntimeError("the parser choked on row 7")

    first = mq.enqueue("ok", {"path": "a.csv"}, group="etl")
    box = mq.enqueue_container("batch", depends_on=[first])
    bad = mq.enqueue("boom", {"row": 7}, parent=box)
    after = mq.enqueue("ok", {}, depends_on=[bad])
    run_until_idle(mq)

    detail = cli("show", str(first), "--json").json()
    assert detail["state"] == "done" and detail["result"] == {"rows": 10}
    assert detail["args"] == {"path": "a.csv"} and detail["group"] == "etl"
    assert detail["attempts"] == 1 and detail["dependencies"] == []
    assert [d["id"] for d in detail["dependents"]] == [box, bad]  # bad inherits box's deps
    assert detail["finished_at"].endswith("+00:00")

    failed = cli("show", str(bad), "--json").json()
    assert failed["state"] == "failed" and failed["attempts"] == 1
    assert "RuntimeError: the parser choked on row 7" in failed["error"]
    assert failed["parent"] == {"id": box, "type": "batch", "state": "failed",
                                "is_container": True}
    assert failed["dependents"] == [{"id": after, "type": "ok", "state": "upstream_failed",
                                     "is_container": False}]
    container = cli("show", str(box), "--json").json()
    assert container["children"] == {"failed": 1} and container["failed_children"] == 1

    text = cli("show", str(bad))
    assert text.code == 0
    for expected in ("Job", "boom", "failed", "1 of 1", f"#{box} batch [failed]",
                     "Depends on", "Needed by", "upstream_failed", "Error:",
                     "RuntimeError: the parser choked on row 7", '{"row": 7}'):
        assert expected in text.out, expected
    missing = cli("show", "424242")
    assert missing.one_line_error and missing.code == 1
    assert missing.err == "readyq: no job with id 424242\n"


def test_status_shows_what_is_stuck_with_what_to_do(migrated: Run, mq: readyq.Queue) -> None:
    cli = migrated
    box = mq.enqueue_container("open")
    mq.enqueue("later", {}, depends_on=[box])

    calm = cli("status", "--json").json()
    assert calm["stuck"] == []  # empty for less than the default minute
    assert "stuck" not in cli("status").out.lower()

    st = cli("status", "--empty-after", "0", "--json").json()
    [found] = st["stuck"]
    assert found["id"] == box and found["reason"] == "empty_container"
    assert found["state"] == "active" and found["blocks"] == 1
    text = cli("status", "--empty-after", "0")
    assert text.code == 0
    for expected in ("0 runnable now, 1 stuck", "Stuck: these cannot progress on their own",
                     "no child and nothing to wait for", f"readyq close {box}"):
        assert expected in text.out, expected
