"""The hot path builds an attempt's records positionally (readyq.worker's ``_entry``,
readyq.attempt_outcomes.done_outcome): a keyword call into a generated constructor cost
each job thousands of instructions. These tests pin the field orders those calls rely
on, so that a field moved or added in the middle fails here instead of landing a value
in the wrong field."""

from __future__ import annotations

import dataclasses

from readyq.attempt_outcomes import done_outcome
from readyq.model import ClaimedJob, Job
from readyq.store.records import Outcome, OutcomeKind
from readyq.worker_state import RunningAttempt


def test_job_fields_are_in_the_order_the_worker_passes_them() -> None:
    assert [f.name for f in dataclasses.fields(Job)] == [
        "id", "type", "args", "attempt", "max_attempts", "group", "parent_id",
        "lease_token", "worker_id", "_heartbeat", "_lost", "_cancelled", "_stage",
        "_spawns", "_spawn_keys", "_remember", "_memory", "_stopping",
    ]


def test_running_attempt_fields_are_in_the_order_the_worker_passes_them() -> None:
    assert [f.name for f in dataclasses.fields(RunningAttempt)] == [
        "claimed", "job", "spec", "lost", "cancelled", "cancel_seen", "traced",
        "isolated", "unreadable",
    ]


def test_claimed_job_unpacks_in_the_order_the_worker_reads_it() -> None:
    assert ClaimedJob._fields == (
        "id", "type", "args_json", "attempt", "max_attempts", "lease_token", "group",
        "parent_id", "timeout",
    )


def test_a_done_outcome_fills_each_field_by_name() -> None:
    c = ClaimedJob(7, "t", "{}", 1, 3, 9, "g", None, None)
    o = done_outcome(c, {"n": 1}, 1000, None, 0.25, ())
    assert o == Outcome(job=c, kind=OutcomeKind.DONE, result_json='{"n":1}', duration=0.25)
    assert isinstance(o, Outcome)
    assert (o.error, o.delay, o.error_type, o.spawns) == (None, 0.0, None, ())
