"""How a worker records the ends of its attempts: it hands each outcome to the loop,
writes a batch of them (one transaction each when the database refused a value one
carries), counts them, logs them and tells the observers.

The outcomes themselves are built by :mod:`readyq.attempt_outcomes`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from readyq.attempt_outcomes import (
    CANCEL,
    CHILD_ENDS,
    DONE,
    FAIL,
    RETRY,
    UNREADABLE_ARGS,
    VALUE_REFUSED,
    failed_outcome,
    refused_outcome,
    unreadable_outcome,
)
from readyq.errors import InvalidJobResult
from readyq.heartbeats import Heartbeats
from readyq.metrics import FINISHED_STATES, Observers
from readyq.model import ClaimedJob, Job
from readyq.store import Applied, Outcome, OutcomeKind, Recorded, Store
from readyq.store.records import TIMED_OUT, TIMEOUT
from readyq.tracing import mark_failed
from readyq.transient import describe
from readyq.untrusted import one_line
from readyq.worker_state import Inbox, RunningAttempt, WorkerStats, claimed_fields

log = logging.getLogger("readyq.worker")


class Recorder:
    """Records the outcomes of one worker's attempts.

    It works with what the worker gives it: the store, the worker's id, its counters,
    its observers, its heartbeats, its running attempts by job id and its inbox (both
    shared with the loop), and ``job_of``, which builds a Job for the hooks when an
    attempt's own object is gone.
    """

    def __init__(
        self,
        store: Store,
        worker_id: str,
        *,
        stats: WorkerStats,
        observers: Observers,
        heartbeats: Heartbeats,
        running: dict[int, RunningAttempt],
        inbox: Inbox,
        job_of: Callable[[ClaimedJob], Job],
    ) -> None:
        self.store = store
        self.worker_id = worker_id
        self.stats = stats
        self.observers = observers
        self.heartbeats = heartbeats
        self.running = running
        self.inbox = inbox
        self.job_of = job_of

    def report(self, outcome: Outcome) -> None:
        """Hand an outcome to the loop. The loop waits for the first outcome, then lingers
        until every running job has reported (see ``Worker._sleep``): only those two
        moments wake it, not every job of a batch."""
        inbox = self.inbox
        inbox.outcomes.append(outcome)
        n = len(inbox.outcomes)
        if n == 1 or n >= len(self.running):
            inbox.wake.set()

    def failed(
        self, entry: RunningAttempt, began: float, span: Any, exc: BaseException
    ) -> Outcome:
        """The outcome of an attempt whose handler (or its args or result) raised
        ``exc``, called from its ``except`` block. An exit that is not an Exception
        (SystemExit, KeyboardInterrupt) is reported at once, then raised again."""
        mark_failed(span, exc)
        outcome = failed_outcome(entry.claimed, entry.job, entry.spec, exc,
                                 duration=time.monotonic() - began)
        if not isinstance(exc, Exception):
            self.report(outcome)
            raise exc
        return outcome

    def cannot_start(self, entry: RunningAttempt) -> bool:
        """True (and the attempt ended here) when its handler must not start.

        * The lease may have expired before the handler could start: this process was
          held up (paused, starved) between the claim and now, long enough that the job
          may be claimed elsewhere. The job is handed back, fenced, and uncharged while
          the lease is still ours.
        * The job cannot run as stored: its args are not JSON. Running it again cannot
          help, so the job fails at once.

        Both are rare; the thread and the asyncio worker ask here before every start.
        """
        if entry.lost.is_set():
            self._hand_back_unstarted(entry)
            return True
        if entry.unreadable is not None:
            self.report(unreadable_outcome(entry.claimed, entry.job, entry.spec,
                                           entry.unreadable))
            return True
        return False

    def _hand_back_unstarted(self, entry: RunningAttempt) -> None:
        c = entry.claimed
        # No handler runs, so nothing is at risk: the heartbeats keep the lease (if the
        # database still has it) until the hand-back is recorded, so that no sweep
        # charges an attempt for a job that never ran.
        entry.lost.until = float("inf")
        self.heartbeats.ask(entry)
        log.warning("job %d attempt %d: not started, its lease may have expired before the "
                    "handler could start; handed back", c.id, c.attempt,
                    extra={**claimed_fields(c), "event": "start_skipped",
                           "worker_id": self.worker_id})
        self.report(Outcome(job=c, kind=OutcomeKind.RELEASE))

    def is_refusal(self, exc: BaseException) -> bool:
        """Whether the database refused a value a statement carried (see
        ``Dialect.is_refusal``): never an outage, whatever wrapped it."""
        dialect = self.store.connected_dialect
        return dialect is not None and dialect.is_refusal(exc)

    def record_apart(self, outcomes: list[Outcome]) -> tuple[list[Outcome], Applied]:
        """Record ``outcomes`` one transaction each, after the database refused a value
        that one of them carries; return them as recorded, and whether each was.

        The refused outcome is replaced by the attempt's failure, with an error that
        says what the database refused (in readyq's own words, which every database
        stores). Running it again would be refused again, so the job fails rather than
        retries. An outage meanwhile leaves the outcomes not yet recorded for the next
        tick.
        """
        recorded: list[Outcome] = []
        applied: Applied = {}
        for n, o in enumerate(outcomes):
            try:
                try:
                    applied.update(self.store.record_outcomes(self.worker_id, [o]))
                except Exception as exc:
                    if not self.is_refusal(exc):
                        raise
                    o = refused_outcome(o, exc)
                    log.warning(
                        "job %d attempt %d: the database refused a value of its outcome "
                        "(%s); the job fails", o.job.id, o.job.attempt,
                        one_line(describe(exc)),
                        extra={**claimed_fields(o.job), "event": "outcome_refused",
                               "worker_id": self.worker_id},
                    )
                    applied.update(self.store.record_outcomes(self.worker_id, [o]))
            except Exception as exc:
                if self.is_refusal(exc):
                    # Even readyq's own failure is refused: the row itself is at fault.
                    # Its lease runs out and a sweep ends the attempt.
                    log.error("job %d attempt %d: its failure cannot be recorded either "
                              "(%s); its lease will expire", o.job.id, o.job.attempt,
                              one_line(describe(exc)),
                              extra={**claimed_fields(o.job), "event": "outcome_refused",
                                     "worker_id": self.worker_id})
                    continue
                self.inbox.outcomes.extendleft(reversed(outcomes[n:]))
                break
            recorded.append(o)
        return recorded, applied

    def record(self, outcomes: list[Outcome], applied: Applied) -> None:
        """Account for ``outcomes`` once written (``applied``: whether each was): forget
        their attempts, count, log and tell the observers."""
        fenced = 0
        # Only forget the attempt an outcome belongs to: a timed-out attempt may report
        # after the same job was claimed again by this worker.
        running = self.running
        mine: list[RunningAttempt | None] = []
        # (id, token) of each outcome's attempt, read once: a NamedTuple's field read by
        # name is a descriptor call that Python 3.11 does not specialize.
        leases = [(c.id, c.lease_token) for c in [o.job for o in outcomes]]
        for lease in leases:
            id_, token = lease
            entry = running.get(id_)
            if entry is not None and entry.claimed.lease_token == token:
                del running[id_]
                mine.append(entry)
            else:
                mine.append(None)
        self.heartbeats.release([e for e in mine if e is not None])
        # Asked once per tick, not once per outcome.
        log_info = log.isEnabledFor(logging.INFO)
        log_warning = log.isEnabledFor(logging.WARNING)
        observing = bool(self.observers)
        stats = self.stats
        # Read once: on Python 3.11 an enum member read from its class goes through
        # EnumType.__getattr__'s slow attribute path.
        fenced_out, swept = Recorded.FENCED, Recorded.SWEPT
        for o, entry, lease in zip(outcomes, mine, leases, strict=True):
            recorded = applied.get(lease, fenced_out)
            if recorded is swept:
                continue  # the sweep that recorded this timeout first told of it
            if not recorded:
                stats.fenced_out += 1
                fenced += 1
                # The chaos tests read (job id, attempt, kind) from these arguments.
                log.warning(
                    "job %d attempt %d: outcome %r fenced out (lease lost)",
                    o.job.id,
                    o.job.attempt,
                    str(o.kind),
                    extra={**claimed_fields(o.job), "worker_id": self.worker_id,
                           "event": "write_fenced", "outcome": str(o.kind)},
                )
                continue
            kind = o.kind
            if kind == DONE:
                stats.done += 1
            elif kind == RETRY:
                stats.retried += 1
            elif kind == FAIL:
                stats.failed += 1
            elif kind == CANCEL:
                stats.cancelled += 1
            if o.error_type == TIMEOUT:
                stats.timed_out += 1
            state = FINISHED_STATES.get(kind)  # a str enum: its value is the key
            if state is None:
                continue
            if log_warning if kind == FAIL else log_info:
                self._log_end(o, state)
            if observing:
                job = entry.job if entry is not None else self.job_of(o.job)
                self.observers.emit("on_finished", job, state, o.duration)
        if fenced:
            self.observers.emit("on_fenced", fenced)

    def _log_end(self, o: Outcome, state: str) -> None:
        c = o.job
        extra = {**claimed_fields(c), "worker_id": self.worker_id, "event": "job_finished",
                 "state": state, "duration": round(o.duration, 6)}
        if o.error_type is not None:
            extra["error_type"] = o.error_type
        # The handler returned, but its result could not be stored: say so, not "raised";
        # an attempt whose child process was killed or died: say what happened to it.
        after = f" after {o.duration:.3f}s"
        if o.error_type == InvalidJobResult.__name__:
            how = "returned a result that could not be stored" + after
        elif o.error_type == VALUE_REFUSED:
            how = f"ended{after}, but the database refused its outcome"
        elif o.error_type == UNREADABLE_ARGS:
            how = "could not start (its stored args are not JSON)"
        elif o.error_type == TIMEOUT:
            how = f"{TIMED_OUT} after {c.timeout:g}s" if c.timeout else TIMED_OUT + after
        elif o.error_type in CHILD_ENDS and o.error:
            how = o.error.split(": its child")[0].split("\n")[0] + after
        elif o.kind == DONE:
            how = str(state) + after
        else:
            how = f"raised {o.error_type}{after}"
        shown = one_line(c.type)  # a type may hold a newline: one log line all the same
        if o.kind == OutcomeKind.RETRY:
            extra.update(event="job_retry_scheduled", retry_in=round(o.delay, 3))
            log.info("job %d (%s) attempt %d %s; retry in %.1fs",
                     c.id, shown, c.attempt, how, o.delay, extra=extra)
        elif o.kind == OutcomeKind.FAIL:
            log.warning("job %d (%s) attempt %d %s; the job failed",
                        c.id, shown, c.attempt, how, extra=extra)
        else:
            log.info("job %d (%s) attempt %d %s", c.id, shown, c.attempt, how, extra=extra)
