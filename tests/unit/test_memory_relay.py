"""A child's memory requests are untrusted data: the worker takes only the ops and fields
readyq's child sends, and the child raises the worker's errors as the same types."""

from __future__ import annotations

import json
from typing import Any

import pytest

import readyq
from readyq.isolation import BadMessage, parse_answer
from readyq.memory_relay import raise_answer


def _msg(**fields: Any) -> bytes:
    return json.dumps({"token": "t", "kind": "memory", **fields}).encode()


@pytest.mark.parametrize("fields", [
    {"op": "load"},
    {"op": "save_state", "state": '{"i":1}'},
    {"op": "store_step", "name": "fetch", "result": "[1,2]"},
    {"op": "save_progress", "current": 1, "total": None, "message": None},
    {"op": "save_progress", "current": 1.5, "total": 3, "message": "half"},
    {"op": "upstream", "include_children": True},
])
def test_the_requests_of_readyqs_child_are_taken(fields: dict[str, Any]) -> None:
    assert parse_answer(_msg(**fields), 100)["op"] == fields["op"]


@pytest.mark.parametrize("fields", [
    {"op": "drop_tables"},
    {"op": None},
    {"op": "load", "extra": 1},
    {"op": "save_state"},
    {"op": "save_state", "state": 1},
    {"op": "save_state", "state": "{not json"},
    {"op": "save_state", "state": json.dumps("x" * 200)},
    {"op": "store_step", "name": "", "result": "1"},
    {"op": "store_step", "name": 5, "result": "1"},
    {"op": "save_progress", "current": "1", "total": None, "message": None},
    {"op": "save_progress", "current": 1, "total": -1, "message": None},
    {"op": "save_progress", "current": True, "total": None, "message": None},
    {"op": "save_progress", "current": 1, "total": None, "message": "a\u0000b"},
    {"op": "save_progress", "current": 1, "total": None, "message": "x" * 600},
    {"op": "upstream", "include_children": "yes"},
])
def test_any_other_request_is_refused(fields: dict[str, Any]) -> None:
    with pytest.raises(BadMessage):
        parse_answer(_msg(**fields), 100)


def test_the_child_raises_the_workers_error_as_its_own_type() -> None:
    assert raise_answer(([1], None, None)) == [1]
    with pytest.raises(readyq.LeaseLost, match="gone"):
        raise_answer((None, "LeaseLost", "gone"))
    with pytest.raises(readyq.InvalidStep):
        raise_answer((None, "InvalidStep", "bad"))
    # Anything else is a ReadyqError naming what the worker met, never an arbitrary class.
    with pytest.raises(readyq.ReadyqError, match="OperationalError: down") as info:
        raise_answer((None, "OperationalError", "down"))
    assert type(info.value) is readyq.ReadyqError
    with pytest.raises(readyq.ReadyqError, match="SystemExit"):
        raise_answer((None, "SystemExit", "x"))


def test_a_spawn_request_round_trips_its_specs() -> None:
    from datetime import datetime, timedelta, timezone

    from readyq.memory_relay import spec_to_wire

    specs = [
        readyq.JobSpec("part", {"i": 1}, key="p", timeout=timedelta(seconds=90),
                       uses={"gpu": 1}),
        readyq.JobSpec("merge", depends_on=["p", 7], parent=3,
                       run_after=datetime(2030, 1, 1, tzinfo=timezone.utc)),
    ]
    wire = [spec_to_wire(s) for s in specs]
    msg = parse_answer(_msg(op="spawn", specs=wire, join=True, parent=None), 10_000)
    assert msg["specs"] == specs
    with pytest.raises(readyq.InvalidJobOption):
        spec_to_wire(readyq.JobSpec("x", run_after=datetime(2030, 1, 1)))  # naive


@pytest.mark.parametrize("fields", [
    {"op": "spawn", "specs": [{"type": "x"}], "join": "yes", "parent": None},
    {"op": "spawn", "specs": [{"type": "x"}], "join": True, "parent": True},
    {"op": "spawn", "specs": [{"type": "x", "evil": 1}], "join": True, "parent": None},
    {"op": "spawn", "specs": [{"args": {}}], "join": True, "parent": None},
    {"op": "spawn", "specs": {"type": "x"}, "join": True, "parent": None},
    {"op": "spawn", "specs": [{"type": "x", "run_after": {"datetime": "soon"}}],
     "join": True, "parent": None},
    {"op": "spawn", "specs": [{"type": "x", "timeout": {"code": "1"}}],
     "join": True, "parent": None},
])
def test_a_spawn_request_that_readyqs_child_never_sends_is_refused(
    fields: dict[str, Any]
) -> None:
    with pytest.raises(BadMessage):
        parse_answer(_msg(**fields), 10_000)
