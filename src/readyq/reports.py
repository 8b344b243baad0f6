"""What the inspection and control operations return: plain dataclasses, each with a
``to_json()`` that the CLI, the dashboard and scripts share. Instants are epoch seconds
of the database's clock; ``to_json()`` writes them as ISO 8601 UTC.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from readyq.model import (
    IN_FLIGHT_STATES,
    JobInfo,
    JobProgress,
    JobState,
    Pause,
    ResourceStats,
    ScheduleInfo,
)

STATE_ORDER = tuple(s.value for s in JobState)


def iso(epoch: float | None) -> str | None:
    """An epoch instant as ISO 8601 UTC with milliseconds, or None."""
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, tz=timezone.utc).isoformat(timespec="milliseconds")


def round3(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def duration_text(seconds: float) -> str:
    """A duration as a short text: 45s, 12m, 5.5h, 3d."""
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172_800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86_400:.0f}d"


def ago(seconds: float | None) -> str:
    """How long ``seconds`` is, to the tenth of a second or in its two largest units:
    the CLI and the dashboard show ages alike."""
    if seconds is None:
        return "-"
    s = max(0.0, seconds)
    if s < 60:
        return f"{s:.1f}s"
    if s < 3600:
        return f"{int(s // 60)}m {int(s % 60):02d}s"
    if s < 86400:
        return f"{int(s // 3600)}h {int(s % 3600 // 60):02d}m"
    return f"{int(s // 86400)}d {int(s % 86400 // 3600):02d}h"


def ordered_states(counts: dict[str, int]) -> dict[str, int]:
    known = [s for s in STATE_ORDER if s in counts]
    other = sorted(s for s in counts if s not in STATE_ORDER)
    return {s: counts[s] for s in known + other}


@dataclass(frozen=True)
class WorkerSeen:
    """A worker that holds leases now, as its jobs' rows show it.

    ``expired``: every lease it holds has expired, so it has most likely stopped; the
    next sweep of any worker reclaims its jobs.
    """

    owner: str
    leased: int
    running: int
    last_heartbeat: float | None
    heartbeat_age: float | None
    lease_expires: float | None
    expired: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "owner": self.owner,
            "leased": self.leased,
            "running": self.running,
            "last_heartbeat": iso(self.last_heartbeat),
            "heartbeat_age_seconds": round3(self.heartbeat_age),
            "lease_expires": iso(self.lease_expires),
            "expired": self.expired,
        }


@dataclass(frozen=True)
class OldestReady:
    """The runnable job that has waited longest to be claimed."""

    id: int
    type: str
    group: str
    since: float
    age: float

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": self.type,
            "group": self.group,
            "since": iso(self.since),
            "age_seconds": round3(self.age),
        }


@dataclass(frozen=True)
class UnclaimedType:
    """A job type with runnable jobs that have waited longer than the status threshold
    while none of its jobs is in flight: most likely no running worker handles it."""

    type: str
    runnable: int
    oldest_age: float

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "runnable": self.runnable,
                "oldest_age_seconds": round3(self.oldest_age)}


@dataclass(frozen=True)
class StuckJob:
    """A job or container that cannot progress on its own, as ``Queue.stuck()`` finds it.

    ``reason``:

    * ``"upstream_ended"``: it waits although a job it depends on (``cause``, which
      ended ``cause_state``) ended badly, which should have ended it
      ``upstream_failed``: a database written by an earlier readyq, or edited by hand;
    * ``"pending_mismatch"``: its count of unfinished dependencies (``pending_deps``)
      disagrees with its dependencies (``unfinished`` of them are not done), so it is
      released never, or too early;
    * ``"empty_container"``: a container with no child and no dependency to wait for,
      unchanged for ``age`` seconds: it waits for children nobody may add.

    ``detail`` says it in a sentence, and ``hint`` what to do. ``since`` is the row's
    last change (epoch seconds, database clock). ``blocks`` counts the jobs and
    containers that have not ended and depend on it directly: they wait for it, and are
    not listed themselves.
    """

    id: int
    type: str
    state: str
    is_container: bool
    group: str
    reason: str
    detail: str
    hint: str
    since: float
    age: float
    pending_deps: int
    unfinished: int
    blocks: int = 0
    cause: int | None = None
    cause_state: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "type": self.type, "state": self.state,
            "is_container": self.is_container, "group": self.group, "reason": self.reason,
            "detail": self.detail, "hint": self.hint, "since": iso(self.since),
            "age_seconds": round3(self.age), "pending_deps": self.pending_deps,
            "unfinished": self.unfinished, "blocks": self.blocks, "cause": self.cause,
            "cause_state": self.cause_state,
        }


@dataclass(frozen=True)
class Status:
    """A snapshot of the queue, read in one pass with the database's clock."""

    now: float
    states: dict[str, int]
    groups: dict[str, dict[str, int]]
    in_flight: int
    runnable: int
    deferred: int
    oldest_ready: OldestReady | None
    workers: list[WorkerSeen]
    unclaimed_types: list[UnclaimedType] = field(default_factory=list)
    resources: list[ResourceStats] = field(default_factory=list)
    stuck: list[StuckJob] = field(default_factory=list)
    pauses: list[Pause] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.states.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "now": iso(self.now),
            "total": self.total,
            # Every known state, then any other a row holds (written by hand).
            "states": {**{s: 0 for s in STATE_ORDER}, **ordered_states(self.states)},
            "groups": self.groups,
            "in_flight": self.in_flight,
            "runnable": self.runnable,
            "deferred": self.deferred,
            "oldest_ready": None if self.oldest_ready is None else self.oldest_ready.to_json(),
            "workers": [w.to_json() for w in self.workers],
            "unclaimed_types": [u.to_json() for u in self.unclaimed_types],
            "resources": [resource_json(r) for r in self.resources],
            "stuck": [s.to_json() for s in self.stuck],
            "pauses": [pause_json(p) for p in self.pauses],
        }


def pause_json(p: Pause) -> dict[str, Any]:
    """One pause as JSON (instants in ISO 8601 UTC)."""
    return {
        "group": p.group, "type": p.type,
        "until": None if p.until is None else p.until.isoformat(timespec="milliseconds"),
        "since": p.since.isoformat(timespec="milliseconds"),
    }


def _iso_dt(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat(timespec="seconds")


def schedule_json(s: ScheduleInfo) -> dict[str, Any]:
    """One stored schedule as JSON (instants in ISO 8601 UTC)."""
    return {
        "name": s.name, "definition": s.definition,
        "last_fire": _iso_dt(s.last_fire), "next_fire": _iso_dt(s.next_fire),
        "paused": s.paused, "conflict": s.conflict, "conflict_at": _iso_dt(s.conflict_at),
        "updated_at": _iso_dt(s.updated_at),
    }


def pause_line(p: Pause) -> str:
    """What a pause holds and until when, in words (keys as given: escape to show)."""
    if p.group is not None and p.type is not None:
        what = f"type {p.type} in group {p.group}"
    elif p.group is not None:
        what = f"group {p.group}"
    else:
        what = f"type {p.type}"
    until = (
        "until resumed" if p.until is None
        else f"until {p.until.isoformat(timespec='seconds')}"
    )
    return f"{what} paused {until}"


def pauses_of(pauses: Sequence[Pause], group: str, type_: str) -> list[Pause]:
    """The pauses that hold back a ready job of ``type_`` in ``group``."""
    return [
        p for p in pauses
        if (p.group is None or p.group == group) and (p.type is None or p.type == type_)
    ]


def resource_json(r: ResourceStats) -> dict[str, Any]:
    """One resource's figures as JSON."""
    return {
        "name": r.name, "capacity": r.capacity, "seen_age": r.seen_age, "in_use": r.in_use,
        "waiting": r.waiting, "wanted": r.wanted, "largest": r.largest, "reserved": r.reserved,
    }


def resource_waits(
    uses: dict[str, int], stats: dict[str, ResourceStats], reserved: bool
) -> list[str]:
    """Why a ready job that takes ``uses`` cannot start now, one line per resource that
    holds it back (none when it fits)."""
    out: list[str] = []
    for name, units in sorted(uses.items()):
        r = stats.get(name)
        if r is None or r.capacity is None:
            out.append(f"{name}: needs {units}; no worker has recorded its capacity yet")
        elif units > r.capacity:
            out.append(
                f"{name}: needs {units}, more than its whole capacity of {r.capacity}: it "
                "waits for the capacity to grow"
            )
        elif r.in_use + units > r.capacity:
            out.append(
                f"{name}: needs {units}, {r.in_use} of {r.capacity} in use"
                + (" (its units are reserved for it as they free up)" if reserved else "")
            )
    return out


@dataclass(frozen=True)
class JobRef:
    """Another job, as a line in a listing."""

    id: int
    type: str
    state: str
    is_container: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": self.type,
            "state": self.state,
            "is_container": self.is_container,
        }


INSTANTS = (
    "created_at",
    "updated_at",
    "run_after",
    "started_at",
    "finished_at",
    "heartbeat_at",
    "lease_expires",
    "deadline",
)


@dataclass(frozen=True)
class AttemptRecord:
    """One attempt of a job: who ran it, when, and how it ended ("retried", "failed",
    "cancelled", "handed back", "timed out", "lease expired"; "done" or "running" for
    the attempt the job's row holds)."""

    attempt: int
    worker: str | None
    started_at: float | None
    ended_at: float | None
    outcome: str
    error: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "worker": self.worker,
            "started_at": iso(self.started_at),
            "ended_at": iso(self.ended_at),
            "outcome": self.outcome,
            "error": self.error,
        }


def number_text(value: float) -> str:
    """A count as people read it: 1,234 (a whole number), else 1,234.57."""
    if isinstance(value, int) or (value.is_integer() and abs(value) < 1e15):
        return f"{int(value):,}"
    return f"{value:,.2f}"


def progress_text(p: JobProgress, *, long: bool = False) -> str:
    """A job's progress in a few characters: ``42%`` with a total, else the count
    reported (``1,234``). ``long``: ``1,234 of 10,000 (12%)``. Whole percents are rounded
    down, so that a job shows 100% only once it got there."""
    fraction = p.fraction
    if fraction is None:
        return number_text(p.current)
    # The epsilon keeps 0.29 * 100 (28.999...) at 29%.
    percent = f"{int(fraction * 100 + 1e-9)}%"
    if not long:
        return percent
    assert p.total is not None
    return f"{number_text(p.current)} of {number_text(p.total)} ({percent})"


def progress_json(p: JobProgress | None) -> dict[str, Any] | None:
    """What a job's handler reported last with ``Job.progress``, as JSON."""
    if p is None:
        return None
    return {
        "current": p.current, "total": p.total,
        "fraction": None if p.fraction is None else round(p.fraction, 4),
        "message": p.message,
        "updated_at": None if p.updated_at is None
        else p.updated_at.isoformat(timespec="milliseconds"),
    }


@dataclass(frozen=True)
class StepRecord:
    """A step a job's attempts stored (``Job.step``): its name, the attempt that stored
    it and when, and the size of its JSON result in bytes (the result itself is not
    read)."""

    name: str
    attempt: int
    stored_at: float
    size: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "attempt": self.attempt, "stored_at": iso(self.stored_at),
                "bytes": self.size}


@dataclass(frozen=True)
class SavedState:
    """The state a job saved last (``Job.save_state``): its decoded JSON ``value``, the
    attempt that saved it and when, and the size of its JSON text in bytes."""

    value: Any
    attempt: int | None
    saved_at: float | None
    size: int

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "attempt": self.attempt, "saved_at": iso(self.saved_at),
                "bytes": self.size}


@dataclass(frozen=True)
class RunningProgress:
    """A job in flight that reported progress, as ``readyq top`` lists it."""

    id: int
    type: str
    state: str
    worker: str | None
    progress: JobProgress

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "type": self.type, "state": self.state, "worker": self.worker,
                "progress": progress_json(self.progress)}


@dataclass(frozen=True)
class JobDetail:
    """Everything about one job: its row, its edges, for a container its children, and
    what its attempts kept (progress, saved state, stored steps).

    ``dependencies`` and ``dependents`` hold the first 100 of each, by id;
    ``dependency_states`` and ``dependent_states`` count all of them per state."""

    fields: dict[str, Any]
    dependencies: list[JobRef]
    dependents: list[JobRef]
    parent: JobRef | None
    children: dict[str, int]
    now: float
    dependency_states: dict[str, int] = field(default_factory=dict)
    dependent_states: dict[str, int] = field(default_factory=dict)
    # For a ready job that takes resources: what holds it back, per resource.
    waits_for: list[str] = field(default_factory=list)
    # Its attempts, oldest first, the one its row holds (done or running) last.
    attempts: list[AttemptRecord] = field(default_factory=list)
    # What its attempts kept: the progress reported last, the state saved last, and the
    # first steps stored by name (``step_count`` counts all of them).
    progress: JobProgress | None = None
    saved_state: SavedState | None = None
    steps: list[StepRecord] = field(default_factory=list)
    step_count: int = 0

    @property
    def id(self) -> int:
        return int(self.fields["id"])

    def to_json(self) -> dict[str, Any]:
        out = dict(self.fields)
        for name in INSTANTS:
            out[name] = iso(out[name])
        out["dependencies"] = [d.to_json() for d in self.dependencies]
        out["dependents"] = [d.to_json() for d in self.dependents]
        out["dependency_states"] = self.dependency_states
        out["dependent_states"] = self.dependent_states
        out["parent"] = None if self.parent is None else self.parent.to_json()
        if self.fields["is_container"]:
            out["children"] = self.children
        out["waits_for"] = self.waits_for
        out["attempt_history"] = [a.to_json() for a in self.attempts]
        out["progress"] = progress_json(self.progress)
        out["saved_state"] = None if self.saved_state is None else self.saved_state.to_json()
        out["steps"] = [st.to_json() for st in self.steps]
        out["step_count"] = self.step_count
        return out


@dataclass(frozen=True)
class Node:
    id: int
    type: str
    state: str
    is_container: bool
    parent_id: int | None
    group: str
    # The job whose handler spawned this one (Job.spawn), if one did.
    spawned_by: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": self.type,
            "state": self.state,
            "is_container": self.is_container,
            "parent_id": self.parent_id,
            "group": self.group,
            "spawned_by": self.spawned_by,
        }


@dataclass
class Graph:
    """The dependency graph around one job.

    ``upstream``: every job that must end before the root can finish: its dependencies,
    theirs, and the children of any container among them (the root's own children too).
    ``downstream``: every job the root's end affects: its dependents, theirs, and the
    containers they belong to. ``deps`` holds edges (dependency, dependent) and
    ``contains`` edges (container, child), both between nodes of the graph.
    """

    root: int
    nodes: dict[int, Node] = field(default_factory=dict)
    deps: set[tuple[int, int]] = field(default_factory=set)
    contains: set[tuple[int, int]] = field(default_factory=set)
    upstream: set[int] = field(default_factory=set)
    downstream: set[int] = field(default_factory=set)
    truncated: bool = False

    def dependencies_of(self, node: int) -> list[int]:
        return sorted(a for a, b in self.deps if b == node)

    def dependents_of(self, node: int) -> list[int]:
        return sorted(b for a, b in self.deps if a == node)

    def children_of(self, node: int) -> list[int]:
        return sorted(b for a, b in self.contains if a == node)

    def container_of(self, node: int) -> int | None:
        for a, b in self.contains:
            if b == node:
                return a
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "nodes": [self.nodes[i].to_json() for i in sorted(self.nodes)],
            "edges": [{"from": a, "to": b, "kind": "depends"} for a, b in sorted(self.deps)]
            + [{"from": a, "to": b, "kind": "contains"} for a, b in sorted(self.contains)],
            "upstream": sorted(self.upstream),
            "downstream": sorted(self.downstream),
            "truncated": self.truncated,
        }


@dataclass(frozen=True)
class RetryResult:
    """What a retry changed, in one transaction.

    ``revived``: (job id, new state) for every job set back to ``ready`` or ``waiting``,
    the retried job(s) first. ``reopened``: containers set back to ``active``.
    """

    job_id: int
    revived: list[tuple[int, str]]
    reopened: list[int]

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "revived": [{"id": i, "state": s} for i, s in self.revived],
            "reopened": self.reopened,
        }


@dataclass(frozen=True)
class CancelResult:
    """A cancel of one job: its state ``before`` and ``after``; ``ended``: jobs ended
    ``cancelled`` at once (the job, or a container's waiting and ready children, and
    the empty containers in it); ``stopping``: running jobs asked to stop (they end at
    their next heartbeat, or done if they return first)."""

    job_id: int
    before: str
    after: str
    ended: int = 0
    stopping: int = 0

    @property
    def requested(self) -> bool:
        """The job was running: it was asked to stop and ends at its next heartbeat."""
        return self.before in IN_FLIGHT_STATES and self.after in IN_FLIGHT_STATES

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "before": self.before,
            "after": self.after,
            "requested": self.requested,
            "ended": self.ended,
            "stopping": self.stopping,
        }


@dataclass(frozen=True)
class PruneResult:
    """``deleted`` jobs (and ``edges`` job_deps rows); ``kept``: finished jobs older than
    the cutoff that stay because a job that stays depends on them or is inside them.
    With ``dry_run``, nothing was deleted: ``deleted`` and ``edges`` are what a prune
    would delete now."""

    cutoff: float
    candidates: int
    deleted: int
    edges: int
    dry_run: bool = False

    @property
    def kept(self) -> int:
        return max(0, self.candidates - self.deleted)

    def to_json(self) -> dict[str, Any]:
        return {
            "cutoff": iso(self.cutoff),
            "candidates": self.candidates,
            "deleted": self.deleted,
            "edges_deleted": self.edges,
            "kept": self.kept,
            "dry_run": self.dry_run,
        }


def job_info_json(info: JobInfo) -> dict[str, Any]:
    """A :class:`readyq.JobInfo` as JSON (instants ISO 8601 UTC)."""

    def when(value: datetime | None) -> str | None:
        return None if value is None else iso(value.timestamp())

    return {
        "id": info.id,
        "type": info.type,
        "state": info.state.value,
        "group": info.group,
        "weight": info.weight,
        "priority": info.priority,
        "attempts": info.attempts,
        "max_attempts": info.max_attempts,
        "parent_id": info.parent_id,
        "is_container": info.is_container,
        "depends_on": list(info.depends_on),
        "unique_key": info.unique_key,
        "lease_owner": info.lease_owner,
        "created_at": when(info.created_at),
        "run_after": when(info.run_after),
        "started_at": when(info.started_at),
        "finished_at": when(info.finished_at),
        "args": info.args,
        "result": info.result,
        "error": info.error,
        "progress": progress_json(info.progress),
    }


@dataclass(frozen=True)
class JobPage:
    """One page of a job listing (``Queue.jobs``).

    ``jobs`` in the listing's order (newest first by default); ``next_cursor`` continues
    it, or is None on the last page. ``filter`` is the filter's criteria as JSON;
    ``now`` the database's clock when the page was read.
    """

    jobs: list[JobInfo]
    next_cursor: str | None
    order: str
    limit: int
    filter: dict[str, Any]
    now: float = 0.0

    def __iter__(self) -> Any:
        return iter(self.jobs)

    def __len__(self) -> int:
        return len(self.jobs)

    def to_json(self) -> dict[str, Any]:
        return {
            "jobs": [job_info_json(j) for j in self.jobs],
            "next_cursor": self.next_cursor,
            "order": self.order,
            "limit": self.limit,
            "filter": self.filter,
            "now": iso(self.now),
        }


@dataclass(frozen=True)
class BulkResult:
    """What a retry or cancel of every job matching a filter changed (or, in a dry run,
    would change: nothing is kept then).

    ``matched``: jobs the filter selected in the states the action applies to.
    ``changed``: jobs whose state the action changed: for a retry every job revived
    (the matched ones and the dependents revived with them) and every container
    reopened; for a cancel the matched jobs that it ended (``cancelled``, or
    ``upstream_failed`` by the cancel of a matched job they depend on; dependents that
    did not match are not counted). ``requested``: running jobs asked to stop (a
    cancel). ``skipped``: matched jobs left as they were, with the first reasons in
    ``reasons`` as (job id, why).
    """

    action: str
    dry_run: bool
    matched: int
    changed: int
    requested: int
    skipped: int
    changed_ids: list[int]
    reasons: list[tuple[int, str]]
    filter: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "dry_run": self.dry_run,
            "matched": self.matched,
            "changed": self.changed,
            "requested": self.requested,
            "skipped": self.skipped,
            "changed_ids": self.changed_ids,
            "reasons": [{"id": i, "reason": r} for i, r in self.reasons],
            "filter": self.filter,
        }


@dataclass(frozen=True)
class RateUse:
    """A rate limit's starts within its period now, of its capacity."""

    name: str
    capacity: int
    period: float
    used: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "capacity": self.capacity, "period_seconds": self.period,
                "used": self.used}


@dataclass(frozen=True)
class GroupShare:
    """A group's slots now against its weight: ``share`` is its part of the jobs in
    flight, ``fair`` its weight's part of the weights of every group with work (ready or
    in flight)."""

    group: str
    weight: int
    in_flight: int
    ready: int
    share: float
    fair: float

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group, "weight": self.weight, "in_flight": self.in_flight,
                "ready": self.ready, "share": round(self.share, 4), "fair": round(self.fair, 4)}


@dataclass(frozen=True)
class Overview:
    """The dashboard's overview: the status, the counts per type, the rate limits' use,
    the groups' shares, and jobs finished and failed per time bucket.

    ``series`` holds (bucket start, done, failed) over the last ``window`` seconds, read
    from the newest ``series_rows`` jobs only (a bounded read): on a queue that finishes
    more jobs than that within the window, its older buckets undercount.
    """

    status: Status
    types: dict[str, dict[str, int]]
    rates: list[RateUse]
    shares: list[GroupShare]
    window: float
    bucket: float
    series: list[tuple[float, int, int]]
    series_rows: int

    def to_json(self) -> dict[str, Any]:
        return {
            **self.status.to_json(),
            "types": self.types,
            "rate_limits": [r.to_json() for r in self.rates],
            "group_shares": [g.to_json() for g in self.shares],
            "series": {
                "window_seconds": self.window,
                "bucket_seconds": self.bucket,
                "from_newest_jobs": self.series_rows,
                "buckets": [
                    {"start": iso(t), "done": d, "failed": f} for t, d, f in self.series
                ],
            },
        }


@dataclass(frozen=True)
class HeldJob:
    """A job a worker holds now."""

    id: int
    type: str
    state: str
    started_at: float | None
    heartbeat_at: float | None
    lease_expires: float | None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "type": self.type, "state": self.state,
                "started_at": iso(self.started_at), "heartbeat_at": iso(self.heartbeat_at),
                "lease_expires": iso(self.lease_expires)}


@dataclass(frozen=True)
class WorkerReport:
    """A worker as the jobs' rows show it: the leases it holds now and the jobs it
    finished among the newest. ``id`` is its lease owner (``host:pid:random`` unless the
    worker was given another id; ``host`` and ``pid`` are then None)."""

    id: str
    host: str | None
    pid: int | None
    held: list[HeldJob]
    finished_recently: int
    last_seen: float | None
    last_seen_age: float | None
    expired: bool

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "host": self.host, "pid": self.pid,
                "held": [h.to_json() for h in self.held],
                "finished_recently": self.finished_recently, "last_seen": iso(self.last_seen),
                "last_seen_age_seconds": round3(self.last_seen_age), "expired": self.expired}
