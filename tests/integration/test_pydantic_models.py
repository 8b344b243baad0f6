"""Handlers with pydantic models: args validated on enqueue, models in, models out."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

import readyq
from readyq import JobSpec, JobState
from readyq_test_support import run_until_idle


class ResizeArgs(pydantic.BaseModel):
    path: str
    width: int
    height: int = 100


class ResizeResult(pydantic.BaseModel):
    pixels: int


def test_args_are_validated_before_anything_is_written(queue: readyq.Queue) -> None:
    seen: list[Any] = []

    @queue.handler("resize", args_model=ResizeArgs, result_model=ResizeResult)
    def resize(job: readyq.Job) -> ResizeResult:
        seen.append(job.args)
        return ResizeResult(pixels=job.args.width * job.args.height)

    for bad in ({"path": "a.png", "width": "wide"}, {"width": 3}, None, [1, 2]):
        with pytest.raises(readyq.InvalidJobArgs) as caught:
            queue.enqueue("resize", bad)
        assert isinstance(caught.value, readyq.InvalidJob) and isinstance(caught.value, ValueError)
        assert "do not match ResizeArgs" in str(caught.value) and caught.value.errors
    with pytest.raises(readyq.InvalidJobArgs, match=r"width: Input should be a valid integer"):
        queue.enqueue_many([
            JobSpec("resize", {"path": "ok.png", "width": 1}, key="first"),
            JobSpec("resize", {"path": "b.png", "width": "x"}, depends_on=["first"]),
        ])
    assert queue.counts() == {}

    a = queue.enqueue("resize", {"path": "a.png", "width": "3"})  # coerced, then dumped
    b = queue.enqueue("resize", ResizeArgs(path="b.png", width=2, height=5))
    (c,) = queue.enqueue_many([JobSpec("resize", {"path": "c.png", "width": 4})])
    assert queue.get(a).args == {"path": "a.png", "width": 3, "height": 100}
    assert queue.get(b).args == {"path": "b.png", "width": 2, "height": 5}
    assert queue.get(c).args == {"path": "c.png", "width": 4, "height": 100}

    run_until_idle(queue)
    assert all(isinstance(args, ResizeArgs) for args in seen) and len(seen) == 3
    assert [queue.get(i).result for i in (a, b, c)] == [
        {"pixels": 300}, {"pixels": 10}, {"pixels": 400}
    ]


def test_a_result_or_stored_args_that_fail_their_model_fail_the_attempt(
    queue: readyq.Queue,
) -> None:
    # Enqueued before any handler exists: nothing validates these args.
    stale = queue.enqueue("resize", {"path": "old.png"}, max_attempts=1)
    wrong = queue.enqueue("resize", {"path": "x.png", "width": 1}, max_attempts=1)
    loose = queue.enqueue("plain", {})

    @queue.handler("resize", args_model=ResizeArgs, result_model=ResizeResult)
    def resize(job: readyq.Job) -> dict[str, Any]:
        return {"pixels": "many"}

    @queue.handler("plain")
    def plain(job: readyq.Job) -> ResizeResult:
        return ResizeResult(pixels=7)  # any model is stored as its JSON dump

    stats = run_until_idle(queue)
    assert (stats.failed, stats.done) == (2, 1)
    old, bad = queue.get(stale), queue.get(wrong)
    assert old.state is JobState.FAILED and bad.state is JobState.FAILED
    assert "InvalidJobArgs" in (old.error or "") and "width: Field required" in (old.error or "")
    assert "InvalidJobResult" in (bad.error or "") and bad.result is None
    assert "does not match ResizeResult: pixels:" in (bad.error or "")
    assert queue.get(loose).result == {"pixels": 7}


def test_a_model_that_is_not_a_pydantic_model_is_refused(tmp_path: Any) -> None:
    with readyq.Queue(f"sqlite:///{tmp_path}/q.db") as queue:
        with pytest.raises(readyq.ConfigurationError, match="args_model must be a pydantic"):
            queue.handler("x", args_model=dict)
        with pytest.raises(readyq.ConfigurationError, match="result_model must be a pydantic"):
            queue.handler("x", result_model=ResizeArgs(path="p", width=1))
