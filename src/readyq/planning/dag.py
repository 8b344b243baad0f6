"""Ordering a batch of new jobs that refer to each other."""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence

from readyq.errors import DependencyCycle


def insertion_order(
    deps: Mapping[int, Sequence[int]], parents: Mapping[int, int | None], size: int
) -> list[int]:
    """Order batch positions so that every job comes after the jobs it refers to.

    ``deps[i]`` are the positions job ``i`` depends on and ``parents[i]`` its container's
    position. A job depending on its own container (or an ancestor) is a cycle too: the
    container only ends after the job. Kahn's algorithm over the whole batch; a cycle is
    reported with one offending path.
    """
    ancestors: dict[int, list[int]] = {}

    def chain(i: int) -> list[int]:
        if i not in ancestors:
            out: list[int] = []
            seen = {i}
            p = parents.get(i)
            while p is not None:
                if p in seen:
                    raise DependencyCycle(
                        "containers nest in a cycle: " + " -> ".join(f"#{x}" for x in [*out, p])
                    )
                seen.add(p)
                out.append(p)
                p = parents.get(p)
            ancestors[i] = out
        return ancestors[i]

    edges: dict[int, set[int]] = {i: set() for i in range(size)}  # i -> jobs i waits for
    for i in range(size):
        up = chain(i)
        for d in deps.get(i, ()):
            if d == i:
                raise DependencyCycle(f"job #{i} depends on itself")
            if d in up:
                raise DependencyCycle(
                    f"job #{i} depends on its own container #{d}, which only ends after it"
                )
            edges[i].add(d)
        if parents.get(i) is not None:
            edges[i].add(parents[i])  # type: ignore[arg-type]
    waiting = {i: len(e) for i, e in edges.items()}
    users: dict[int, list[int]] = {i: [] for i in range(size)}
    for i, e in edges.items():
        for d in e:
            users[d].append(i)
    # A heap keeps the given order wherever the dependencies allow it.
    ready = [i for i in range(size) if waiting[i] == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    if len(order) < size:
        stuck = {i for i in range(size) if waiting[i] > 0}
        node = min(stuck)
        path = [node]
        while True:
            node = min(d for d in edges[node] if d in stuck)
            if node in path:
                path = [*path[path.index(node) :], node]
                break
            path.append(node)
        raise DependencyCycle("dependency cycle: " + " -> ".join(f"#{x}" for x in path))
    return order
