"""Resources from the shell: `readyq enqueue --uses`, the Resources table of `status`,
and what a job waits for in `show`."""

from __future__ import annotations

import threading

import readyq

from .support import Run, run_until_idle, wait_for


def test_enqueue_uses_is_checked_and_stored(migrated: Run, mq: readyq.Queue) -> None:
    cli = migrated
    before = mq.counts()
    for bad, says in (
        (["gpu=2"], "not defined"),  # no worker has recorded gpu yet
        (["gpu"], "NAME=UNITS"),
        (["gpu=two"], "must be an integer"),
    ):
        result = cli("enqueue", "train", "--uses", *bad)
        assert result.one_line_error and says in result.err, (bad, result.err)
    assert mq.counts() == before
    mq.resource("gpu", capacity=4)

    @mq.handler("train", uses={"gpu": 1})
    def train(job: readyq.Job) -> None:
        return None

    mq.enqueue("train")
    run_until_idle(mq)  # the worker's claim records gpu, with its capacity
    for bad, says in ((["gpu=0"], "from 1"), (["tpu=1"], "'tpu'")):
        result = cli("enqueue", "train", "--uses", *bad)
        assert result.one_line_error and says in result.err, (bad, result.err)
    result = cli("enqueue", "train", "--uses", "gpu=3", "--json")
    assert result.code == 0, result.err
    job = result.json()["id"]
    row = cli("show", str(job), "--json").json()
    assert row["uses"] == {"gpu": 3}
    assert cli("enqueue", "box", "--container", "--uses", "gpu=1").one_line_error


def test_status_and_show_say_what_waits_for_a_resource(migrated: Run, mq: readyq.Queue) -> None:
    cli = migrated
    release = threading.Event()
    mq.resource("gpu", capacity=2)

    @mq.handler("train", uses={"gpu": 2})
    def train(job: readyq.Job) -> None:
        release.wait(20)

    running = mq.enqueue("train", group="a")
    waiting = mq.enqueue("train", group="b")
    small = mq.enqueue("train", group="b", uses={"gpu": 1})
    worker = mq.worker(concurrency=4, poll_interval=0.02, lease_ttl=10, heartbeat_interval=0.2)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: mq.get(running).state is readyq.JobState.RUNNING)
        st = cli("status", "--json").json()
        (gpu,) = st["resources"]
        assert (gpu["name"], gpu["capacity"], gpu["in_use"]) == ("gpu", 2, 2)
        assert (gpu["waiting"], gpu["wanted"], gpu["largest"]) == (2, 3, 2)
        text = cli("status").out
        assert "Resources" in text and "2 runnable jobs wait for resource 'gpu'" in text
        shown = cli("show", str(waiting), "--json").json()
        assert shown["uses"] is None  # the handler's
        assert shown["waits_for"][0].startswith("gpu: needs 2, 2 of 2 in use")
        assert "waits for" in cli("show", str(small)).out
        release.set()
        wait_for(lambda: all(mq.get(j).state is readyq.JobState.DONE
                             for j in (running, waiting, small)))
    finally:
        release.set()
        worker.stop()
        thread.join(20)
