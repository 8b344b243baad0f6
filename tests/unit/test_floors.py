"""`.ci/floors.txt` pins what pyproject.toml declares as each dependency's oldest release."""

from __future__ import annotations

import re
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

try:
    import tomllib
except ImportError:  # Python 3.10: pytest brings tomli
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]


def _name(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


def declared_floors() -> dict[str, Version]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    floors: dict[str, Version] = {}
    for line in project["dependencies"] + project["optional-dependencies"]["test"]:
        req = Requirement(line)
        lower = [s.version for s in req.specifier if s.operator == ">="]
        assert len(lower) == 1, f"{line!r} declares no single oldest release"
        floors[_name(req.name)] = Version(lower[0])
    return floors


def pinned_floors() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for line in (ROOT / ".ci" / "floors.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"{line!r} pins no version"
            pins[_name(name)] = Version(version)
    return pins


def test_the_ci_floors_are_the_declared_oldest_releases() -> None:
    assert pinned_floors() == declared_floors()
