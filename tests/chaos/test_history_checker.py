"""The history checker on hand-made histories: a correct one passes, and each invariant's
violation is caught (and only where it should be)."""

from __future__ import annotations

from typing import Any

import pytest
from history import Event, JobFacts, check, classify


class H:
    """Builds a history; every event one second after the previous one by default."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.t = 100.0

    def ev(self, job: int, event: str, *, at: float | None = None, **kw: Any) -> H:
        self.t = self.t + 1.0 if at is None else at
        self.events.append(Event(seq=len(self.events) + 1, job=job, event=event, at=self.t, **kw))
        return self

    def claim(self, job: int, token: int, worker: str, attempt: int | None = None) -> H:
        return self.ev(job, "claim", token=token, attempt=attempt or token, worker=worker)

    def start(self, job: int, token: int, worker: str, attempt: int | None = None) -> H:
        return self.ev(job, "start", token=token, attempt=attempt or token, worker=worker)

    def end(self, job: int, token: int, worker: str, attempt: int | None = None) -> H:
        return self.ev(job, "end", token=token, attempt=attempt or token, worker=worker)

    def fin(self, job: int, token: int, worker: str, kind: str = "done",
            attempt: int | None = None) -> H:
        return self.ev(job, "finalize", token=token, attempt=attempt or token, worker=worker,
                       kind=kind)

    def reclaim(self, job: int, token: int, worker: str, kind: str = "retry",
                note: str = "lease expired: worker lost during attempt 1") -> H:
        return self.ev(job, "reclaim", token=token, attempt=token, worker=worker, kind=kind,
                       note=note)

    def run(self, job: int, token: int, worker: str, kind: str = "done") -> H:
        return (self.claim(job, token, worker).start(job, token, worker)
                .end(job, token, worker).fin(job, token, worker, kind))


def facts(*items: tuple[int, str], deps: dict[int, tuple[int, ...]] | None = None,
          **kw: Any) -> dict[int, JobFacts]:
    deps = deps or {}
    return {j: JobFacts(id=j, state=s, deps=deps.get(j, ()), **kw) for j, s in items}


def flagged(rep: Any) -> set[str]:
    return {k for k, v in rep.violations.items() if v}


def good_history() -> tuple[H, dict[int, JobFacts]]:
    """Three jobs, job 3 depending on 1 and 2; job 1 lost its first worker (reclaim),
    job 2 failed once (retry) and was handed back once (release); a stale worker's
    outcome came back fenced; cap 2 respected throughout."""
    h = H()
    h.claim(1, 1, "A").start(1, 1, "A")
    h.claim(2, 1, "B").start(2, 1, "B").end(2, 1, "B").fin(2, 1, "B", "retry")
    h.reclaim(1, 1, "A")                       # A froze past its lease
    h.claim(1, 2, "B").start(1, 2, "B")
    h.end(1, 1, "A").ev(1, "fenced", attempt=1, worker="A")  # A wakes up: fenced out
    h.end(1, 2, "B").fin(1, 2, "B")
    h.claim(2, 2, "A", attempt=2).start(2, 2, "A", attempt=2)
    h.fin(2, 2, "A", "release", attempt=2)       # A stops: handed back, uncharged
    h.claim(2, 3, "B", attempt=2).start(2, 3, "B", attempt=2).end(2, 3, "B", attempt=2)
    h.fin(2, 3, "B", attempt=2)
    h.run(3, 1, "A")
    return h, facts((1, "done"), (2, "done"), (3, "done"), deps={3: (1, 2)})


def test_a_correct_history_passes_with_its_figures() -> None:
    h, jobs = good_history()
    rep = check(h.events, jobs, cap=2)
    assert rep.ok, rep.summary()
    f = rep.figures
    assert f["starts"] == 6 and f["duplicate_starts"] == 3
    assert f["duplicates_explained"] == {"reclaim (expired)": 1, "retry": 1, "release": 1}
    assert f["fenced_observed"] == 1 and f["stale_writers_injected"] == 1
    assert f["stale_writers_must_report"] == 1
    assert f["stale_writers_unreported"] == []
    assert f["peak_leases"] == 2 and f["lost"] == 0 and f["double_finalized"] == 0


def test_overlapping_live_leases_are_caught() -> None:
    h = H()
    h.claim(1, 1, "A").start(1, 1, "A")
    h.claim(1, 2, "B").start(1, 2, "B")  # taken while A's lease was live
    h.end(1, 2, "B").fin(1, 2, "B")
    rep = check(h.events, facts((1, "done")))
    assert "overlap" in flagged(rep), rep.summary()


def test_overlapping_starts_are_caught_without_claim_events() -> None:
    h = H()
    h.start(1, 1, "A").start(1, 2, "B").end(1, 1, "A").fin(1, 1, "A", "retry")
    h.end(1, 2, "B").fin(1, 2, "B")
    rep = check(h.events)
    assert "overlap" in flagged(rep), rep.summary()


def test_one_attempt_started_twice_is_caught() -> None:
    h = H()
    h.claim(1, 1, "A").start(1, 1, "A").start(1, 1, "A").end(1, 1, "A").fin(1, 1, "A")
    assert "overlap" in flagged(check(h.events, facts((1, "done"))))


def test_a_start_by_a_worker_that_does_not_hold_the_lease_is_caught() -> None:
    h = H()
    h.claim(1, 1, "A").start(1, 1, "B").end(1, 1, "B").fin(1, 1, "A")
    assert "overlap" in flagged(check(h.events, facts((1, "done"))))


def test_a_stale_finalize_after_a_reclaim_is_caught() -> None:
    h = H()
    h.claim(1, 1, "A").start(1, 1, "A").reclaim(1, 1, "A")
    h.claim(1, 2, "B").start(1, 2, "B")
    h.fin(1, 1, "A")  # A's done applied though its lease was reclaimed
    h.end(1, 2, "B").fin(1, 2, "B")
    rep = check(h.events, facts((1, "done")))
    assert "finalize" in flagged(rep), rep.summary()
    assert rep.figures["double_finalized"] == 1
    text = "\n".join(rep.violations["finalize"])
    assert "token 1, the latest lease is 2" in text and "finalized 2 times" in text


def test_a_finalize_by_another_worker_is_caught() -> None:
    h = H()
    h.claim(1, 1, "A").start(1, 1, "A").end(1, 1, "A").fin(1, 1, "B")
    assert "finalize" in flagged(check(h.events, facts((1, "done"))))


def test_a_finalize_while_the_attempt_still_runs_is_caught() -> None:
    """A stale worker's write that lands on its successor's running attempt carries the
    successor's token and owner: only its timing gives it away."""
    h = H()
    h.claim(1, 1, "A").start(1, 1, "A").reclaim(1, 1, "A")
    h.claim(1, 2, "B").start(1, 2, "B")
    h.fin(1, 2, "B")  # written while B's handler was still running
    h.end(1, 2, "B")
    rep = check(h.events, facts((1, "done")))
    assert any("while its handler still ran" in m for m in rep.violations["finalize"])


def test_a_lease_ended_twice_is_caught() -> None:
    h = H()
    h.claim(1, 1, "A").start(1, 1, "A").fin(1, 1, "A", "retry").reclaim(1, 1, "A")
    h.run(1, 2, "A")
    rep = check(h.events, facts((1, "done")))
    assert any("ended 2 times" in m for m in rep.violations["finalize"]), rep.summary()


def test_leaving_a_terminal_state_is_caught() -> None:
    h = H()
    h.run(1, 1, "A")
    h.ev(1, "illegal", kind="done>ready")
    assert "finalize" in flagged(check(h.events, facts((1, "ready"))))
    assert classify("done", "ready", None, 1, 1) == ("illegal", "done>ready")


def test_the_table_disagreeing_with_the_finalize_is_caught() -> None:
    h = H()
    h.run(1, 1, "A")
    assert "finalize" in flagged(check(h.events, facts((1, "failed"))))


def test_a_fenced_outcome_of_a_lease_that_was_never_reclaimed_is_caught() -> None:
    """A correct outcome refused: the job would run again for nothing."""
    h = H()
    h.claim(1, 1, "A").start(1, 1, "A").end(1, 1, "A").fin(1, 1, "A")
    h.ev(1, "fenced", attempt=1, worker="A")
    rep = check(h.events, facts((1, "done")))
    assert "finalize" in flagged(rep), rep.summary()


def test_a_stale_writer_that_was_never_told_is_reported() -> None:
    h = H()
    h.claim(1, 1, "A").start(1, 1, "A").reclaim(1, 1, "A").run(1, 2, "B")
    rep = check(h.events, facts((1, "done")))
    assert rep.ok
    assert rep.figures["stale_writers_injected"] == 1
    assert rep.figures["stale_writers_unreported"] == [(1, 1, "A")]
    # A worker killed before the reclaim left an orphan, not a stale writer...
    rep = check(h.events, facts((1, "done")), killed={"A"})
    assert rep.figures["stale_writers_injected"] == 0
    assert rep.figures["orphans_reclaimed"] == 1
    # ...one killed right after it may not get to report; one that lived on must.
    reclaim_at = next(e.at for e in h.events if e.event == "reclaim")
    rep = check(h.events, facts((1, "done")), killed={"A": reclaim_at + 1.0}, settle=5.0)
    assert rep.figures["stale_writers_injected"] == 1
    assert rep.figures["stale_writers_unreported"] == []
    rep = check(h.events, facts((1, "done")), killed={"A": reclaim_at + 9.0}, settle=5.0)
    assert rep.figures["stale_writers_unreported"] == [(1, 1, "A")]


def test_a_lease_its_worker_never_learned_of_needs_no_report() -> None:
    """A claim whose commit reply was lost: the claim committed, its worker saw an error
    and claimed again, so no handler of its started and it has nothing to be told; the
    reclaim sweeps the job back. A worker whose handler did start must still report."""
    h = H()
    h.claim(1, 1, "A").reclaim(1, 1, "A").run(1, 2, "B")
    rep = check(h.events, facts((1, "done")))
    assert rep.ok, rep.summary()
    assert rep.figures["stale_writers_unreported"] == []
    assert rep.figures["stale_writers_must_report"] == 0
    assert rep.figures["leases_never_learned"] == [(1, 1, "A")]


def test_a_job_left_unfinished_is_caught() -> None:
    h = H()
    h.claim(1, 1, "A").start(1, 1, "A")
    rep = check(h.events, facts((1, "running"), (2, "ready")))
    assert flagged(rep) == {"terminal"}
    assert rep.figures["lost"] == 2


def test_a_duplicate_start_without_a_reclaim_is_caught() -> None:
    h = H()
    h.claim(1, 1, "A").start(1, 1, "A").end(1, 1, "A").fin(1, 1, "A", "fail")
    h.claim(1, 2, "B").start(1, 2, "B").end(1, 2, "B").fin(1, 2, "B")
    rep = check(h.events, facts((1, "done")))
    assert "duplicates" in flagged(rep), rep.summary()


def test_a_skipped_or_repeated_attempt_number_is_caught() -> None:
    h = H()
    h.claim(1, 1, "A", attempt=1).start(1, 1, "A", attempt=1).reclaim(1, 1, "A")
    h.claim(1, 2, "B", attempt=1).start(1, 2, "B", attempt=1)  # a reclaim charges one
    h.end(1, 2, "B", attempt=1).fin(1, 2, "B", attempt=1)
    assert "duplicates" in flagged(check(h.events, facts((1, "done"))))


def test_an_attempt_past_max_attempts_is_caught() -> None:
    h = H()
    h.claim(1, 1, "A").start(1, 1, "A").reclaim(1, 1, "A")
    h.claim(1, 2, "A").start(1, 2, "A").reclaim(1, 2, "A")
    h.run(1, 3, "B")
    rep = check(h.events, facts((1, "done"), max_attempts=2))
    assert "duplicates" in flagged(rep), rep.summary()
    assert check(h.events, facts((1, "done"), max_attempts=3)).ok


def test_a_start_before_a_dependency_is_done_is_caught() -> None:
    h = H()
    h.claim(1, 1, "A").start(1, 1, "A")
    h.claim(2, 1, "B").start(2, 1, "B")  # 2 depends on 1, which is still running
    h.end(1, 1, "A").fin(1, 1, "A").end(2, 1, "B").fin(2, 1, "B")
    rep = check(h.events, facts((1, "done"), (2, "done"), deps={2: (1,)}), cap=2)
    assert flagged(rep) == {"deps"}, rep.summary()


def test_a_start_after_a_failed_dependency_is_caught() -> None:
    h = H()
    h.run(1, 1, "A", "fail").run(2, 1, "B")
    rep = check(h.events, facts((1, "failed"), (2, "done"), deps={2: (1,)}))
    assert flagged(rep) == {"deps"}, rep.summary()


def test_a_dependency_on_a_container_waits_for_its_roll_up() -> None:
    h = H()
    h.run(2, 1, "A")                       # the container's only child
    h.claim(3, 1, "B").start(3, 1, "B")    # 3 depends on container 1: too early
    h.ev(1, "rollup", kind="done")
    h.end(3, 1, "B").fin(3, 1, "B")
    jobs = facts((1, "done"), (2, "done"), (3, "done"), deps={3: (1,)})
    assert flagged(check(h.events, jobs)) == {"deps"}
    ok = H()
    ok.run(2, 1, "A").ev(1, "rollup", kind="done").run(3, 1, "B")
    assert check(ok.events, jobs).ok


def test_more_leases_than_the_cap_are_caught() -> None:
    h = H()
    for job in (1, 2, 3):
        h.claim(job, 1, "A")
    for job in (1, 2, 3):
        h.start(job, 1, "A").end(job, 1, "A").fin(job, 1, "A")
    jobs = facts((1, "done"), (2, "done"), (3, "done"))
    rep = check(h.events, jobs, cap=2)
    assert flagged(rep) == {"cap"}, rep.summary()
    assert rep.figures["peak_leases"] == 3
    assert check(h.events, jobs, cap=3).ok


def test_running_handlers_over_the_cap_are_caught_without_claim_events() -> None:
    h = H()
    h.start(1, 1, "A").start(2, 1, "B").end(1, 1, "A").fin(1, 1, "A")
    h.end(2, 1, "B").fin(2, 1, "B")
    assert flagged(check(h.events, cap=1)) == {"cap"}


def test_a_start_after_its_lease_ended_is_stale_not_a_duplicate() -> None:
    """A worker frozen between its claim and its handler's first step starts late: its
    lease was reclaimed meanwhile. It is counted, and its outcome must be fenced."""
    h = H()
    h.claim(1, 1, "A").reclaim(1, 1, "A").run(1, 2, "B")
    h.start(1, 1, "A").end(1, 1, "A").ev(1, "fenced", attempt=1, worker="A")
    rep = check(h.events, facts((1, "done")), cap=1)
    assert rep.ok, rep.summary()
    assert rep.figures["stale_starts"] == 1 and rep.figures["duplicate_starts"] == 0


@pytest.mark.parametrize(
    ("old", "new", "note", "attempt", "old_attempt", "expected"),
    [
        (None, "ready", None, 0, None, ("enqueued", "ready")),
        ("ready", "leased", None, 1, 0, ("claim", None)),
        ("ready", "running", None, 1, 0, ("claim", "started")),
        ("leased", "running", None, 1, 1, ("run", None)),
        ("running", "done", None, 1, 1, ("finalize", "done")),
        ("running", "ready", "Traceback (most recent call last):", 1, 1, ("finalize", "retry")),
        ("running", "ready", "lease expired: worker lost during attempt 1", 0, 1,
         ("finalize", "release")),
        ("running", "ready", "lease expired: worker lost during attempt 1", 1, 1,
         ("reclaim", "retry")),
        ("leased", "failed", "lease expired: worker lost during attempt 3", 3, 3,
         ("reclaim", "failed")),
        ("running", "ready", "timed out after 1s (attempt 1)", 1, 1, ("reclaim", "retry")),
        ("running", "cancelled", "cancelled", 1, 1, ("finalize", "cancel")),
        ("running", "failed", "Traceback", 3, 3, ("finalize", "fail")),
        ("waiting", "ready", None, 0, 0, ("unblocked", None)),
        ("waiting", "upstream_failed", "dependency 1 ended failed", 0, 0,
         ("upstream_failed", None)),
        ("ready", "cancelled", "cancelled", 0, 0, ("cancel", None)),
        ("active", "done", None, 0, 0, ("rollup", "done")),
        ("active", "upstream_failed", "dependency 1 ended failed", 0, 0,
         ("upstream_failed", None)),
        ("failed", "running", None, 1, 1, ("illegal", "failed>running")),
    ],
)
def test_transitions_are_classified(
    old: str | None, new: str, note: str | None, attempt: int, old_attempt: int | None,
    expected: tuple[str, str | None],
) -> None:
    assert classify(old, new, note, attempt, old_attempt) == expected


def fact(job: int, state: str, *, deps: tuple[int, ...] = (), parent: int | None = None,
         container: bool = False) -> tuple[int, JobFacts]:
    return job, JobFacts(id=job, state=state, deps=deps, parent_id=parent,
                         is_container=container)


def test_a_job_that_can_never_progress_is_caught() -> None:
    """The graph of issue 44's item 16 as an earlier readyq left it (a container left
    active after its dependency failed, and a job waiting on it), with the other ways to
    be stuck: a waiting job whose dependencies are all done, an empty container nobody
    closes, and a job waiting only on stuck ones."""
    jobs = dict([
        fact(1, "failed"),
        fact(100, "active", deps=(1,), container=True),  # the container left active
        fact(3, "waiting", deps=(100,)),                 # waits on it
        fact(4, "done"),
        fact(5, "waiting", deps=(4,)),                   # its release never came
        fact(101, "active", container=True),             # empty, nobody closes it
        fact(6, "waiting", deps=(5, 7)),                 # one of its dependencies is stuck
        fact(7, "running"),
    ])
    rep = check([], jobs)
    assert flagged(rep) == {"terminal", "progress"}, rep.summary()
    found = {m.split(" ")[1]: m for m in rep.violations["progress"]}
    assert set(found) == {"100", "3", "5", "101", "6"}
    assert "its dependency 1 ended failed" in found["100"]
    assert "it waits for job 100, which can never progress" in found["3"]
    assert "its dependencies are all done" in found["5"]
    assert "no unfinished child and no unfinished dependency" in found["101"]
    assert "it waits for job 5" in found["6"]
    assert rep.figures["never_progress"] == 5


def test_what_will_end_or_run_passes_the_progress_check() -> None:
    """A run stopped midway: jobs ready (one deferred by run_after, or paused: ready all
    the same), running, waiting on those, a container with a waiting child, a container
    waiting for its dependency; and issue 44's graph as readyq now leaves it."""
    jobs = dict([
        fact(1, "ready"),
        fact(2, "running"),
        fact(3, "waiting", deps=(1, 2)),
        fact(100, "active", container=True),
        fact(4, "waiting", deps=(3,), parent=100),
        fact(101, "active", deps=(2,), container=True),  # empty: ends done with job 2
        fact(5, "waiting", deps=(101,)),
        fact(6, "failed"),
        fact(102, "upstream_failed", deps=(6,), container=True),
        fact(7, "upstream_failed", deps=(102,)),
    ])
    rep = check([], jobs)
    assert rep.violations["progress"] == [], rep.summary()
    assert flagged(rep) == {"terminal"}
    # A chain longer than Python's recursion limit is walked all the same.
    chain = dict([fact(1, "done"), fact(2, "waiting", deps=(1,))]
                 + [fact(i, "waiting", deps=(i - 1,)) for i in range(3, 5000)])
    rep = check([], chain)
    assert len(rep.violations["progress"]) == 4998
    assert "its dependencies are all done" in rep.violations["progress"][0]


def _stepped(h: H, job: int, token: int, worker: str) -> H:
    return (h.claim(job, token, worker).start(job, token, worker)
            .ev(job, "step", token=token, attempt=token, worker=worker, kind="side"))


def test_a_step_run_again_only_before_its_result_was_stored_passes() -> None:
    h = H()
    _stepped(h, 1, 1, "A").reclaim(1, 1, "A")  # A killed after running the step
    _stepped(h, 1, 2, "B").end(1, 2, "B").fin(1, 2, "B")
    rep = check(h.events, facts((1, "done"), steps=(("side", 2),)), killed={"A"})
    assert rep.ok, rep.summary()
    assert (rep.figures["steps_stored"], rep.figures["step_runs"],
            rep.figures["step_runs_unstored"], rep.figures["steps_reused"]) == (1, 2, 1, 0)


def test_a_stored_step_run_again_by_a_later_lease_is_caught() -> None:
    h = H()
    _stepped(h, 1, 1, "A").reclaim(1, 1, "A")
    _stepped(h, 1, 2, "B").end(1, 2, "B").fin(1, 2, "B")
    rep = check(h.events, facts((1, "done"), steps=(("side", 1),)), killed={"A"})
    assert flagged(rep) == {"steps"}
    assert "ran again under token 2" in rep.violations["steps"][0]


def test_a_stored_step_whose_run_is_not_in_the_history_is_caught() -> None:
    h = H()
    h.run(1, 1, "A")
    rep = check(h.events, facts((1, "done"), steps=(("side", 1),)))
    assert flagged(rep) == {"steps"}


def test_a_later_lease_that_got_the_stored_step_back_is_counted() -> None:
    h = H()
    _stepped(h, 1, 1, "A").end(1, 1, "A").fin(1, 1, "A", "retry")
    h.claim(1, 2, "B").start(1, 2, "B").end(1, 2, "B").fin(1, 2, "B")
    rep = check(h.events, facts((1, "done"), steps=(("side", 1),)))
    assert rep.ok, rep.summary()
    assert rep.figures["steps_reused"] == 1
