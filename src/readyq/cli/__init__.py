"""The ``readyq`` command line: one module per command (or small family of commands),
each adding its own parser; ``main`` runs it."""

from __future__ import annotations

from readyq.cli.dashboard_command import served_hosts
from readyq.cli.demo_command import DEMO_DB, DEMO_PREFIX
from readyq.cli.entry_point import main
from readyq.cli.errors import CLIError
from readyq.cli.parser import build_parser
from readyq.cli.worker_command import add_worker_flags, run_worker

__all__ = [
    "DEMO_DB",
    "DEMO_PREFIX",
    "CLIError",
    "add_worker_flags",
    "build_parser",
    "main",
    "run_worker",
    "served_hosts",
]
