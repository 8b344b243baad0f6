"""How progress reads in the CLI and the dashboard: whole percents rounded down (a job
shows 100% only once there), counts with thousands separators, no total: the count."""

from __future__ import annotations

import pytest

from readyq.model import JobProgress
from readyq.reports import progress_json, progress_text


@pytest.mark.parametrize(("current", "total", "short", "long"), [
    (29, 100, "29%", "29 of 100 (29%)"),
    (999, 1000, "99%", "999 of 1,000 (99%)"),
    (1000, 1000, "100%", "1,000 of 1,000 (100%)"),
    (1500, 1000, "100%", "1,500 of 1,000 (100%)"),
    (-5, 10, "0%", "-5 of 10 (0%)"),
    (1234, None, "1,234", "1,234"),
    (2.5, None, "2.50", "2.50"),
])
def test_progress_text(current: float, total: float | None, short: str, long: str) -> None:
    p = JobProgress(current, total, None, None)
    assert progress_text(p) == short and progress_text(p, long=True) == long


def test_progress_json() -> None:
    assert progress_json(None) is None
    assert progress_json(JobProgress(1, 3, "m", None)) == {
        "current": 1, "total": 3, "fraction": 0.3333, "message": "m", "updated_at": None}
