"""The README tells the truth about the package: its extras table lists every extra a
user installs (pyproject.toml's, less the project's own test, dev and bench), and its
CLI list every command the parser has."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from readyq.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
OWN_EXTRAS = {"test", "dev", "bench"}

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = None


def section(title: str) -> str:
    start = README.index(f"## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end if end > 0 else None]


def test_the_extras_table_lists_every_extra() -> None:
    listed = set(re.findall(r"^\| `([a-z]+)` \|", section("Add it to your project"), re.M))
    if tomllib is not None:
        extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
            "optional-dependencies"]
        declared = set(extras)
    else:
        text = (ROOT / "pyproject.toml").read_text()
        block = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
        declared = set(re.findall(r"^([a-z]+) = \[", block, re.M))
    assert listed == declared - OWN_EXTRAS


def test_the_cli_list_names_every_command() -> None:
    block = section("The CLI").split("```", 2)[1]
    listed = [m for m in re.findall(r"^  ([a-z]+)\s", block, re.M)]
    parser = build_parser()
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert sorted(listed) == sorted(commands.choices)
