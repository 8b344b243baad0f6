"""The Queue a command works on: from --db/--prefix, or from an application's --app."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any

from readyq.cli.errors import CLIError

DEFAULT_DB = "sqlite:///readyq.db"


def database_url(args: argparse.Namespace) -> str:
    return str(
        getattr(args, "db", None)
        or args.db_global
        or os.environ.get("READYQ_DATABASE_URL")
        or DEFAULT_DB
    )


def table_prefix(args: argparse.Namespace) -> str:
    from readyq.schema import DEFAULT_PREFIX

    return str(getattr(args, "prefix", None) or args.prefix_global or DEFAULT_PREFIX)


def parse_url(url: str) -> Any:
    import sqlalchemy as sa

    try:
        return sa.make_url(url)
    except sa.exc.ArgumentError:
        raise CLIError(
            f"invalid database URL {url!r}: expected e.g. sqlite:///jobs.db or "
            "postgresql+psycopg://user@host/db",
            code=2,
        ) from None


def open_queue(args: argparse.Namespace, *, create: bool = False) -> Any:
    """The Queue for --db/--prefix; refuses a missing SQLite file unless ``create``."""
    from readyq.dialects import dialect_class
    from readyq.queue import Queue

    url = parse_url(database_url(args))
    path = dialect_class(url.get_backend_name()).database_file(url)
    if not create and path is not None and not os.path.exists(path):
        raise CLIError(
            f"no SQLite database at {path!r}: create it with `readyq migrate "
            f"--db {url.render_as_string(hide_password=True)}`"
        )
    try:
        return Queue(url, prefix=table_prefix(args))
    except ImportError as exc:
        raise CLIError(f"cannot load the driver for {url.drivername!r}: {exc}", code=2) from None


def load_app(spec: str) -> Any:
    from readyq.queue import Queue

    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise CLIError(
            f"--app {spec!r} must look like module:attribute, e.g. myapp.jobs:queue", code=2
        )
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (module_name == missing or module_name.startswith(missing + ".")):
            raise CLIError(
                f"--app {spec}: no module named {missing!r} (looked in the current "
                "directory and sys.path)",
                code=2,
            ) from None
        raise
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise CLIError(
                f"--app {spec}: {module_name!r} has no attribute {attr!r}", code=2
            ) from None
    if not isinstance(obj, Queue) and callable(obj):
        obj = obj()
    if not isinstance(obj, Queue):
        raise CLIError(f"--app {spec} is a {type(obj).__name__}, not a readyq.Queue", code=2)
    return obj
