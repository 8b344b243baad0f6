"""What the standing pauses take out of a claim: groups, job types, types within a group.

Pure: the claim reads the standing pauses under the gate row's lock
(:mod:`readyq.store.pauses`) and asks this what it may still take.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from readyq.schema import ANY


@dataclass(frozen=True)
class Standing:
    """The pauses in force now: whole groups, whole types, and (group, type) pairs."""

    groups: frozenset[str]
    types: frozenset[str]
    pairs: frozenset[tuple[str, str]]

    @classmethod
    def of(cls, rows: Iterable[tuple[str, str]]) -> Standing:
        """From (group, type) rows, ANY standing for a pause that does not name it."""
        groups, types, pairs = set(), set(), set()
        for group, type_ in rows:
            if type_ == ANY:
                groups.add(group)
            elif group == ANY:
                types.add(type_)
            else:
                pairs.add((group, type_))
        return cls(frozenset(groups), frozenset(types), frozenset(pairs))

    def __bool__(self) -> bool:
        return bool(self.groups or self.types or self.pairs)

    def blocks(self, group: str, type_: str) -> bool:
        """Whether a ready job of ``type_`` in ``group`` must not be claimed now."""
        return group in self.groups or type_ in self.types or (group, type_) in self.pairs

    def allowed_types(self, types: Sequence[str]) -> list[str]:
        """``types`` without the types paused in every group."""
        return [ty for ty in types if ty not in self.types]

    def group_types(self, group: str, types: Sequence[str]) -> list[str]:
        """The types of ``types`` that ``group`` may still run (none when it is paused)."""
        if group in self.groups:
            return []
        return [ty for ty in types if ty not in self.types and (group, ty) not in self.pairs]

    def narrowed_groups(self) -> frozenset[str]:
        """The groups in which only some types are paused."""
        return frozenset(group for group, _ in self.pairs) - self.groups
