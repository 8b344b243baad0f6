"""The handler registry: which function runs each job type, and its policies."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from readyq.model import Job


@dataclass(frozen=True)
class HandlerSpec:
    """A registered handler and its policies (see ``Queue.handler``)."""

    type: str
    fn: Callable[[Job], Any]
    timeout: float | None
    max_attempts: int | None
    retry_on_timeout: bool
    retry_base: float
    retry_max: float
    args_model: Any = None
    result_model: Any = None
    rate_limit: str | None = None
    # "thread", "process", or None for the worker's default (see readyq.isolation).
    isolation: str | None = None
    # "cooperative" (the handler sees job.cancelled) or "terminate" (a running isolated
    # job's child is killed).
    on_cancel: str = "cooperative"
    # Units of named resources each job of the type takes in flight, unless the job
    # was enqueued with its own (see readyq.resources).
    uses: Mapping[str, int] = field(default_factory=dict)
    is_async: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Asked for every attempt: inspect once.
        object.__setattr__(self, "is_async", inspect.iscoroutinefunction(self.fn))


class HandlerRegistry:
    """The handlers of one queue, by job type. Workers read a snapshot of it."""

    def __init__(self) -> None:
        self._specs: dict[str, HandlerSpec] = {}

    def register(self, spec: HandlerSpec) -> None:
        """Register ``spec``; a later registration of the same type replaces it."""
        self._specs[spec.type] = spec

    def get(self, type: str) -> HandlerSpec | None:
        return self._specs.get(type)

    def snapshot(self) -> dict[str, HandlerSpec]:
        """The handlers registered now, by type."""
        return dict(self._specs)

    def __contains__(self, type: object) -> bool:
        return type in self._specs

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._specs))

    def __len__(self) -> int:
        return len(self._specs)

    def __bool__(self) -> bool:
        return bool(self._specs)
