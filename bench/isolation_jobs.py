"""The no-op jobs of bench/isolation.py: importable by module and name, as child
processes (readyq's and RQ's work horses) need them to be."""

from __future__ import annotations

from typing import Any


def noop(job: Any = None) -> None:
    """readyq's handler and RQ's job function alike."""
    return None
