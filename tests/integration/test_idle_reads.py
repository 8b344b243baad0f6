"""The one-statement reads of an idle worker's tick: whether a job of its types is
runnable, whether a lease is due for reclaim, and (run with ``until_idle``) whether its
types have unfinished jobs. On PostgreSQL they run in autocommit, without the BEGIN and
COMMIT round trips a transaction adds; the connection then goes back to the pool as it
came, and the next claim runs in its own transaction as before."""

from __future__ import annotations

from typing import Any

import readyq
from readyq.claim_order import ClaimOrder, StartPolicy
from readyq.store import Outcome, OutcomeKind
from readyq_test_support import observed


def in_transaction(queue: readyq.Queue, run: Any) -> list[bool]:
    """Whether each statement ``run`` sends is inside a transaction (PostgreSQL only)."""
    return [inside for _, inside in observed(queue, run) if inside is not None]


def test_an_idle_ticks_reads_answer_without_a_transaction_of_their_own(
    queue: readyq.Queue, dialect_name: str
) -> None:
    store = queue.store
    answers: list[bool] = []

    def idle_tick() -> None:
        answers.append(store.runnable_exists(["t"]))
        answers.append(store.has_unfinished(["t"]))
        answers.append(store.reclaim_expired().total > 0)

    idle = in_transaction(queue, idle_tick)
    assert answers == [False, False, False]
    queue.enqueue("t")
    answers.clear()
    busy = in_transaction(queue, idle_tick)
    assert answers == [True, True, False]

    # The pooled connection comes back transactional: a claim and its finish still run
    # in one transaction each.
    def claim_and_finish() -> None:
        (job,) = store.claim_jobs(ClaimOrder(owner="w", cap=1, limit=1, lease_ttl=30, types=["t"]))
        store.start_jobs("w", [(job, StartPolicy(None))])
        store.record_outcomes("w", [Outcome(job=job, kind=OutcomeKind.RELEASE)])

    writes = in_transaction(queue, claim_and_finish)
    assert queue.counts() == {"ready": 1}
    if dialect_name == "postgresql":
        assert idle and busy and not any(idle + busy), (idle, busy)
        assert writes and all(writes), writes


def statements_of(queue: readyq.Queue, run: Any) -> list[str]:
    """The SQL of each statement ``run`` sends, whitespace folded."""
    return [statement for statement, _ in observed(queue, run)]


def test_a_notified_tick_skips_the_probe_only_where_its_claim_reads_counts_before_the_gate(
    queue: readyq.Queue, dialect_name: str
) -> None:
    """After a notification of new work, a claim that reads the runnable counts before
    it locks the gate (and ends there when nothing is runnable) is the probe itself: the
    probe's statement is not sent. Where the claim locks first (SQLite's BEGIN
    IMMEDIATE, rate limits), the probe still keeps an idle tick off the lock."""
    store = queue.store
    order = ClaimOrder(owner="w", cap=4, limit=4, lease_ttl=30, types=["t"])
    probe = statements_of(queue, lambda: store.runnable_exists(["t"]))
    assert len(probe) == 1
    skips = dialect_name != "sqlite"

    # Nothing runnable: no job claimed either way, and no gate lock where the probe goes.
    notified_idle = statements_of(queue, lambda: store.finish_and_claim([], order, notified=True))
    assert (probe[0] in notified_idle) is not skips
    if skips:
        assert not any("readyq_gate" in s for s in notified_idle), notified_idle
    else:
        assert notified_idle == probe
    assert statements_of(queue, lambda: store.finish_and_claim([], order)) == probe

    # New work: the notified tick claims it, with or without the probe.
    job = queue.enqueue("t")
    claimed: list[Any] = []
    sent = statements_of(
        queue, lambda: claimed.extend(store.finish_and_claim([], order, notified=True)[1])
    )
    assert [c.id for c in claimed] == [job]
    assert (probe[0] in sent) is not skips

    # With a rate limit, the claim narrows the types under the gate: the probe stays.
    queue.enqueue("t")
    limited = ClaimOrder(owner="w", cap=4, limit=4, lease_ttl=30, types=["t"],
                         rate_limits={"t": readyq.RateLimit("lim", 100, per=1.0)})
    sent = statements_of(queue, lambda: store.finish_and_claim([], limited, notified=True))
    assert probe[0] in sent
