"""Named resources with per-job costs: definitions, costs and their stored form.

A resource (``queue.resource("gpu", capacity=4)``) is a capacity that jobs take units
of while they are in flight: ``uses={"gpu": 2}`` on a handler or a job. Its capacity is
an int, a callable re-read at every tick, or a list of them (their minimum), like the
worker's ``concurrency``; every job also takes 1 of that global cap.

The claim decides what fits under the gate row's lock, from the uses of the jobs in
flight in the database (never a worker's memory), so the capacity holds across every
worker process and host: see :mod:`readyq.store.resource_claim` and, for the order of
starts (weighted Dominant Resource Fairness) and the reservations that keep big jobs
from starving, :mod:`readyq.planning.drf`.

A job's costs are stored as canonical JSON (sorted keys, no spaces) in ``jobs.uses``:
the in-flight sums group by that text. A job enqueued without ``uses`` stores NULL and
takes what the handler of the worker that claims it declares, which the claim writes
into the row, so that every other claimer counts it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from readyq.errors import InvalidResource, InvalidResourceUse, UnknownResource
from readyq.planning.caps import Limit, Limits, current_cap, normalize
from readyq.schema import MAX_USES_CHARS, key_problem

# The most units one job may take of one resource (and the most a fixed capacity holds).
MAX_UNITS = 1_000_000
# The most resources one job may use.
MAX_RESOURCES_PER_JOB = 16


@dataclass(frozen=True)
class Resource:
    """A named capacity that jobs take units of while they are in flight.

    ``limits`` are the capacity's terms (ints and callables), whose minimum is the
    capacity at each tick; :attr:`fixed` is the smallest int among them, if any: no job
    may ask for more than that.
    """

    name: str
    limits: tuple[Limit, ...]

    @property
    def fixed(self) -> int | None:
        """The smallest fixed term of the capacity, or None if every term is a callable."""
        ints = [x for x in self.limits if isinstance(x, int)]
        return min(ints) if ints else None

    def capacity(self) -> int:
        """The capacity now: every term evaluated, their minimum (a callable that raises
        or returns no int counts as 0, which starts nothing that uses the resource; one
        that returns more than MAX_UNITS counts as MAX_UNITS, which the capacity column
        holds on every database)."""
        return min(current_cap(self.limits), MAX_UNITS)


def define(name: str, capacity: Limits) -> Resource:
    """Check a resource's name and capacity (:class:`InvalidResource` otherwise)."""
    problem = key_problem(name)
    if problem is not None:
        raise InvalidResource(f"resource name {problem}: {name!r}")
    try:
        limits = normalize(capacity)
    except ValueError as exc:
        message = str(exc).replace("concurrency limit", "capacity").replace(
            "concurrency", "capacity"
        )
        raise InvalidResource(f"resource {name!r}: {message}") from None
    for item in limits:
        if isinstance(item, int) and item > MAX_UNITS:
            raise InvalidResource(
                f"resource {name!r}: a capacity is at most {MAX_UNITS:,}, not {item}"
            )
    return Resource(name, limits)


def check_uses(
    uses: Any,
    resources: Mapping[str, Resource],
    *,
    what: str = "uses",
    known: Sequence[str] = (),
) -> dict[str, int]:
    """Check ``uses`` against the ``resources`` defined on the queue (and the names of
    ``known`` resources that only workers defined); return it as a plain dict.

    Raises:
        UnknownResource: a name that is neither defined nor known.
        InvalidResourceUse: not a mapping, a bad name, or a cost that is not a
            positive int (bools are refused) or that exceeds a fixed capacity.
    """
    if not isinstance(uses, Mapping):
        raise InvalidResourceUse(
            f"{what} must be a mapping of resource names to units, such as "
            f"{{'gpu': 2}}, not {uses!r}"
        )
    if len(uses) > MAX_RESOURCES_PER_JOB:
        raise InvalidResourceUse(
            f"{what} names {len(uses)} resources; a job may use at most "
            f"{MAX_RESOURCES_PER_JOB}"
        )
    checked: dict[str, int] = {}
    for name, units in uses.items():
        problem = key_problem(name)
        if problem is not None:
            raise InvalidResourceUse(f"{what}: a resource name {problem}: {name!r}")
        if isinstance(units, bool) or not isinstance(units, int) or not 1 <= units <= MAX_UNITS:
            raise InvalidResourceUse(
                f"{what}: the units of {name!r} must be an int from 1 to {MAX_UNITS:,}, "
                f"not {units!r}"
            )
        resource = resources.get(name)
        if resource is None and name not in known:
            defined = sorted(set(resources) | set(known))
            raise UnknownResource(
                f"{what} names resource {name!r}, which is not defined: define it with "
                f"queue.resource({name!r}, capacity=...)"
                + (f" (defined: {', '.join(defined)})" if defined else "")
            )
        fixed = None if resource is None else resource.fixed
        if fixed is not None and units > fixed:
            raise InvalidResourceUse(
                f"{what}: {units} units of {name!r} can never fit: its capacity is at "
                f"most {fixed}"
            )
        checked[str(name)] = int(units)
    return checked


def encode(uses: Mapping[str, int] | None) -> str | None:
    """The stored form of checked costs: canonical JSON, or None for no costs."""
    if not uses:
        return None
    text = json.dumps(dict(sorted(uses.items())), separators=(",", ":"), ensure_ascii=False)
    if len(text) > MAX_USES_CHARS:
        raise InvalidResourceUse(
            f"uses takes {len(text)} characters once stored; at most {MAX_USES_CHARS}"
        )
    return text


_decoded: dict[str, dict[str, int]] = {}


def decode(text: str | None) -> dict[str, int]:
    """The costs stored as ``text`` (an empty dict for NULL). Texts repeat across jobs,
    so a few thousand decodings are remembered; treat the result as read-only."""
    if text is None:
        return {}
    found = _decoded.get(text)
    if found is not None:
        return found
    try:
        raw = json.loads(text)
    except ValueError:
        raw = None
    # A row written by hand may hold anything: what is not a valid cost is no cost, but
    # a resource name that no worker knows keeps the job from every claim.
    value = (
        {str(k): int(v) for k, v in raw.items() if isinstance(v, int) and not isinstance(v, bool)}
        if isinstance(raw, dict)
        else {}
    )
    if len(_decoded) < 4096:
        _decoded[text] = value
    return value


def parse_cli_uses(items: Sequence[str]) -> dict[str, int]:
    """``["gpu=2", "api=1"]`` as a mapping (InvalidResourceUse for a malformed item)."""
    uses: dict[str, Any] = {}
    for item in items:
        name, sep, units = item.partition("=")
        if not sep or not name:
            raise InvalidResourceUse(f"--uses takes NAME=UNITS, such as gpu=2, not {item!r}")
        try:
            uses[name] = int(units)
        except ValueError:
            raise InvalidResourceUse(
                f"--uses {item!r}: the units must be an integer, not {units!r}"
            ) from None
    return uses


@dataclass(frozen=True)
class ResourceView:
    """What a claim weighs besides the global cap: each resource's capacity now, as the
    claiming worker evaluates it, and each job type's costs from its handler (applied to
    jobs stored without their own)."""

    capacity: dict[str, int]
    handler_uses: dict[str, dict[str, int]]
    # The stored form of each handler's costs (readyq.resources.encode), by type: worked
    # out from ``handler_uses`` unless given (a worker gives the one it made at start).
    handler_text: dict[str, str] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.handler_text is None:
            object.__setattr__(self, "handler_text", handler_texts(self.handler_uses))


def handler_texts(handler_uses: Mapping[str, Mapping[str, int]]) -> dict[str, str]:
    """The stored form of each handler's costs, by type (types without costs left out)."""
    texts = {t: encode(u) for t, u in handler_uses.items()}
    return {t: x for t, x in texts.items() if x is not None}
