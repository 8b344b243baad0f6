"""Metrics hooks: readyq reports what it does to observers, and depends on no metrics library.

An observer is any object with some of the hook methods of :class:`Observer` (subclass it
to get no-op defaults for the others). Give observers to a queue with
``Queue(..., observers=[...])`` or ``queue.add_observer(...)``; :class:`readyq.AsyncQueue`
takes the same. The queue calls ``on_enqueued`` and every worker built from it calls the
other hooks, from its loop thread (the async worker: from its event loop), so a hook must
be quick. A hook that raises is logged on ``readyq.metrics`` and ignored: it never breaks
an enqueue or a worker.

Gauges that describe the whole database (what is waiting, what is in flight) are not
pushed: read them when they are wanted with :meth:`readyq.Queue.group_stats`.
:class:`readyq.prometheus.PrometheusMetrics` is a ready-made observer that does both.

Example::

    class Printer(readyq.metrics.Observer):
        def on_finished(self, job, state, duration):
            print(job.id, state, f"{duration:.1f}s")

    queue = readyq.Queue(url, observers=[Printer()])
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from readyq.errors import ConfigurationError
from readyq.model import GroupStats

if TYPE_CHECKING:
    from readyq.model import Job
    from readyq.store.records import BatchJob

log = logging.getLogger("readyq.metrics")

HOOKS = (
    "on_enqueued",
    "on_claim",
    "on_started",
    "on_finished",
    "on_reclaimed",
    "on_fenced",
)

# The ``state`` that on_finished reports for each kind of recorded outcome.
FINISHED_STATES = {"done": "done", "retry": "retried", "fail": "failed", "cancel": "cancelled"}


class Observer:
    """The hooks readyq calls; every one is a no-op here. Override the ones you need."""

    def on_enqueued(self, n: int, type: str) -> None:
        """``n`` jobs of ``type`` were enqueued (containers are not counted).

        Called when the enqueue call returns. With ``connection=`` the caller's
        transaction may still roll back afterwards; the jobs were counted anyway.
        """

    def on_claim(self, latency: float, claimed: int) -> None:
        """A worker's claim transaction took ``latency`` seconds and leased ``claimed`` jobs.

        The transaction also records the outcomes that finished since the last one.
        Called only for ticks that asked for jobs.
        """

    def on_started(self, job: Job) -> None:
        """A worker started an attempt of ``job`` (``job.attempt`` counts from 1)."""

    def on_finished(self, job: Job, state: str, duration: float) -> None:
        """An attempt's outcome was recorded: ``state`` is ``done``, ``retried`` (a retry
        is scheduled), ``failed`` or ``cancelled``; ``duration`` is the seconds the
        handler ran. An outcome fenced out by a lost lease calls ``on_fenced`` instead."""

    def on_reclaimed(self, n: int) -> None:
        """A worker's sweep ended ``n`` attempts whose lease expired or that timed out
        (on any worker): each is retried, failed or cancelled."""

    def on_fenced(self, n: int) -> None:
        """``n`` outcomes were fenced out: their lease was lost, so they changed nothing."""


class Observers:
    """The observers of one queue: calls a hook on each of them and never raises."""

    def __init__(self, observers: Iterable[Any] = ()) -> None:
        self._items: list[Any] = []
        for observer in observers:
            self.add(observer)

    def add(self, observer: Any) -> None:
        """Add an observer; raises ConfigurationError for one that has no hook at all."""
        if isinstance(observer, type):
            raise ConfigurationError(
                f"observers must be instances, not the class {observer.__name__}"
            )
        if not any(callable(getattr(observer, name, None)) for name in HOOKS):
            raise ConfigurationError(
                f"{observer!r} has none of the observer hooks ({', '.join(HOOKS)})"
            )
        self._items.append(observer)

    def __bool__(self) -> bool:
        return bool(self._items)

    def __iter__(self) -> Any:
        return iter(tuple(self._items))

    def enqueued(self, batch: Iterable[BatchJob]) -> None:
        """``on_enqueued(n, type)`` once per job type of ``batch``, with how many it
        holds; containers run no handler and are not counted."""
        if not self._items:
            return
        per_type = Counter(b.job.type for b in batch if not b.job.is_container)
        for type_, n in per_type.items():
            self.emit("on_enqueued", n, type_)

    def emit(self, hook: str, *args: Any) -> None:
        """Call ``hook(*args)`` on every observer that has it; log what raises."""
        for observer in tuple(self._items):
            fn = getattr(observer, hook, None)
            if fn is None:
                continue
            try:
                fn(*args)
            except Exception:
                log.exception("observer %r raised in %s; ignored", observer, hook)


__all__ = ["FINISHED_STATES", "HOOKS", "GroupStats", "Observer", "Observers"]
