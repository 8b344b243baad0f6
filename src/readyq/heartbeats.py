"""Heartbeats: a worker's leases kept alive, and given up, on a path of their own.

The worker's loop claims, records outcomes and sweeps, and any of those may wait: for
the gate row behind another worker's claim, for a lock, for a database that is slow or
cut off. Heartbeats never wait behind them. :class:`Heartbeats` extends every running
attempt's lease from a thread of its own (an asyncio task in the async worker), one
statement per round, every ``heartbeat_interval``, or sooner when a handler asks
(``job.heartbeat()``) or a child process does.

Each attempt carries a :class:`readyq.model.LeaseFlag`: ``job.lease_lost`` becomes true
when a heartbeat finds the lease gone, and also by itself, without any database, at
the instant the lease may have run out: the start of the last heartbeat that extended
it, plus the lease length, minus a margin (:func:`lease_margin`). The database's
expiry is never earlier than that start plus the lease length, so a worker cut off from
its database stops believing it holds its leases before any other worker may reclaim
them: its isolated children are killed then (:mod:`readyq.isolation`) and
``job.heartbeat()`` raises :class:`readyq.LeaseLost` at once. The guarantee, with its
bounds, is written in docs/multi-host.md.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from readyq.errors import LeaseLost
from readyq.model import ClaimedJob, Flag, LeaseFlag
from readyq.store import Lease, Store
from readyq.transient import describe, is_transient

log = logging.getLogger("readyq.worker")

# The longest a handler's ``job.heartbeat()`` waits for the database to answer.
ANSWER_WITHIN = 5.0
# A heartbeat round runs its statement once more after a failure it may retry (a lost
# connection, a serialization failure), not the store's usual dozen times: the next
# round is due soon, and a round must not outlast the leases it extends.
ROUND_RETRIES = 1


def lease_margin(lease_ttl: float) -> float:
    """How long before a lease's local end the worker gives it up: 1 s, or a tenth of
    a short lease. It covers the time it takes to notice (the 0.1 s watch of an isolated
    child) and to kill."""
    return min(1.0, lease_ttl / 10)


class Event(Protocol):
    """What :class:`Heartbeats` waits on: a ``threading.Event``, or the async worker's
    event of its loop."""

    def set(self) -> None: ...

    def clear(self) -> None: ...

    def wait(self, timeout: float | None = None) -> bool: ...


class Held(Protocol):
    """One attempt whose lease the heartbeats keep (the worker's running attempt)."""

    @property
    def claimed(self) -> ClaimedJob: ...

    @property
    def lost(self) -> LeaseFlag: ...

    @property
    def cancelled(self) -> Flag: ...


class Heartbeats:
    """Extends the leases of one worker's running attempts; see the module's text.

    Args:
        store: the worker's store.
        owner: the worker id its leases carry.
        lease_ttl: the lease length, in seconds.
        interval: seconds between two rounds.
        wake: the event a round waits on; set by :meth:`ask` and :meth:`stop`.
        on_lost: called (from the heartbeats' thread) with each attempt found lost or
            given up, once; the worker forgets it at its next tick.
    """

    def __init__(
        self,
        store: Store,
        owner: str,
        lease_ttl: float,
        interval: float,
        *,
        wake: Event,
        on_lost: Callable[[Held], None],
    ) -> None:
        self.store = store
        self.owner = owner
        self.lease_ttl = lease_ttl
        self.interval = interval
        self.margin = lease_margin(lease_ttl)
        self.wake = wake
        self.on_lost = on_lost
        self._held: dict[int, Held] = {}
        self._lock = threading.Lock()
        # Rounds started and finished (a handler waits for one that began after it
        # asked), and whether one is asked for.
        self._started = 0
        self._finished = 0
        self._asked = False
        self._answered = threading.Condition(self._lock)
        self._stopping = False
        self._last_round = time.monotonic()
        self._failing_since: float | None = None
        self.rounds = 0
        self.failures = 0

    # -- what the worker tells it ------------------------------------------------------

    def hold(self, held: Sequence[Held], until: float) -> None:
        """Keep the leases of ``held`` (one claim's attempts) from now on; they surely
        hold until ``until`` (this process's monotonic clock: when the claim began, plus
        the lease length)."""
        lost_at = until - self.margin
        for h in held:
            h.lost.until = lost_at
        with self._lock:
            for h in held:
                self._held[h.claimed.id] = h

    def release(self, held: Iterable[Held]) -> None:
        """Stop keeping the leases of ``held`` (their attempts were recorded, or
        abandoned)."""
        with self._lock:
            for h in held:
                if self._held.get(h.claimed.id) is h:
                    del self._held[h.claimed.id]

    def stop(self) -> None:
        """End :meth:`run` (after the round under way, if any)."""
        with self._lock:
            self._stopping = True
            self._answered.notify_all()
        self.wake.set()

    # -- what handlers and children ask ------------------------------------------------

    def ask(self, held: Held) -> Callable[[], bool | None]:
        """Ask for a round now, for ``held``; returns what polls the answer: None while
        there is none yet, True once a round extended the lease, False when it was not
        (lost, given up, or no answer within ``ANSWER_WITHIN`` seconds, after which the
        rounds go on trying). Never blocks: an isolated child's watcher polls it."""
        with self._lock:
            self._asked = True
            ticket = self._started + 1
        self.wake.set()
        give_up = min(time.monotonic() + ANSWER_WITHIN, held.lost.until)

        def answer() -> bool | None:
            if held.lost.is_set():
                return False
            if self._finished >= ticket:
                return True
            return False if time.monotonic() >= give_up or self._stopping else None

        return answer

    def beat(self, held: Held) -> bool:
        """``job.heartbeat()``: extend ``held``'s lease now; block until answered (see
        :meth:`ask`). Raises LeaseLost when the lease is gone, or given up for want of
        an answer, without waiting for the database then."""
        extended: bool | None = False
        if not held.lost.is_set():
            answer = self.ask(held)
            with self._lock:
                while (extended := answer()) is None:
                    self._answered.wait(0.05)
        if held.lost.is_set():
            c = held.claimed
            raise LeaseLost(f"job {c.id} attempt {c.attempt} lost its lease")
        return bool(extended)

    # -- the rounds ----------------------------------------------------------------------

    def due(self, now: float) -> bool:
        """Whether a round is due: the interval has passed, or a round was asked."""
        return self._asked or now - self._last_round >= self.interval

    def run(self) -> None:
        """Run rounds until :meth:`stop`: every ``interval``, or when asked."""
        while True:
            with self._lock:
                if self._stopping:
                    return
            now = time.monotonic()
            if self.due(now):
                self.run_once()
                continue
            self.wake.wait(self._next_wake(now))
            self.wake.clear()

    def _next_wake(self, now: float) -> float:
        """Seconds until the next round, or until the first held lease is to be given
        up, whichever comes first."""
        wake = self._last_round + self.interval - now
        with self._lock:
            for h in self._held.values():
                wake = min(wake, h.lost.until - now)
        return max(wake, 0.001)

    def run_once(self) -> int:
        """One round: extend every held lease in one statement; returns how many.

        A lease the database no longer has is lost; one whose local end passed without
        an extension is given up. Either way ``on_lost`` hears of it once. A database
        that cannot be reached leaves the leases as they are, to be given up at their
        local end unless a later round extends them.
        """
        with self._lock:
            self._asked = False
            self._started += 1
            number = self._started
            held = list(self._held.values())
        began = self._last_round = time.monotonic()
        try:
            if held:
                self._extend(held, began)
        finally:
            self._give_up_expired(held)
            with self._lock:
                self._finished = max(self._finished, number)
                self._answered.notify_all()
            self.rounds += 1
        return len(held)

    def _extend(self, held: Sequence[Held], began: float) -> None:
        leases = [Lease(h.claimed.id, h.claimed.lease_token) for h in held]
        try:
            status = self.store.heartbeat(
                self.owner, leases, self.lease_ttl, retries=ROUND_RETRIES
            )
        except Exception as exc:
            if not is_transient(exc):
                raise
            self.failures += 1
            if self._failing_since is None:
                self._failing_since = began
                log.warning(
                    "worker %s: heartbeats failing (%s); %d lease(s) held here until "
                    "their local end unless a heartbeat gets through",
                    self.owner, describe(exc), len(held),
                    extra={"event": "heartbeat_failed", "worker_id": self.owner,
                           "error_type": exc.__class__.__name__},
                )
            return
        if self._failing_since is not None:
            log.warning("worker %s: heartbeats through again after %.1fs", self.owner,
                        began - self._failing_since,
                        extra={"event": "heartbeat_recovered", "worker_id": self.owner})
            self._failing_since = None
        until = began + self.lease_ttl - self.margin
        for h in held:
            st = status.get(h.claimed.id)
            if st is None:
                continue
            if st.cancel_requested:
                h.cancelled.set()
            if st.lost:
                h.lost.set()
            elif not h.lost.is_set():
                # Extended: it holds for a lease length from this round's start.
                h.lost.until = until

    def _give_up_expired(self, held: Sequence[Held]) -> None:
        for h in held:
            if h.lost.is_set():
                job_id = h.claimed.id
                with self._lock:
                    mine = self._held.get(job_id) is h
                    if mine:
                        del self._held[job_id]
                if mine:
                    self.on_lost(h)

    @property
    def holding(self) -> int:
        """Leases held now."""
        return len(self._held)


def start_thread(heartbeats: Heartbeats) -> Callable[[], None]:
    """Run ``heartbeats`` on a daemon thread; returns the function that stops it and
    waits for it."""
    thread = threading.Thread(target=run_logged, args=(heartbeats,),
                              name="readyq-heartbeats", daemon=True)
    thread.start()

    def stop() -> None:
        heartbeats.stop()
        thread.join(30)

    return stop


def run_logged(heartbeats: Heartbeats) -> None:
    """``heartbeats.run()``; an error that ends it is logged, not raised."""
    try:
        heartbeats.run()
    except Exception:  # a permanent error: the loop meets it too, and stops the worker
        log.exception("worker %s: heartbeats stopped", heartbeats.owner)
