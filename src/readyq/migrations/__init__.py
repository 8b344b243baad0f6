"""readyq's Alembic migrations, shipped inside the package.

Two ways to run them:

* On their own, with their own version table ``<prefix>alembic_version``:
  :func:`readyq.admin.migrate` or ``readyq migrate``. This never touches the version
  table of the application's own Alembic environment.
* Inside the application's Alembic environment: add :func:`version_location` (or the
  string ``readyq:migrations/versions``) to its ``version_locations``. The readyq
  revisions form a separate branch labelled ``readyq``; upgrade with ``alembic upgrade
  heads`` (or ``readyq@head``). Their revision is then recorded in the application's
  version table. Pick one of the two ways per database, not both.

The table prefix reaches the revision scripts through :func:`current_prefix`, which
looks, in order, at ``config.attributes["readyq_prefix"]``, at ``-x readyq_prefix=...``
or ``-x prefix=...`` on the alembic command line, at the ``readyq_prefix`` option of the
ini file's main section, and falls back to ``readyq_``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from readyq.schema import DEFAULT_PREFIX, validate_prefix

if TYPE_CHECKING:
    from sqlalchemy import Connection

#: Key of the prefix in ``alembic.config.Config.attributes`` and in ``-x`` arguments.
PREFIX_ATTRIBUTE = "readyq_prefix"
#: The branch label of readyq's revisions (``alembic upgrade readyq@head``).
BRANCH_LABEL = "readyq"
#: The newest revision shipped with this version of readyq.
HEAD_REVISION = "readyq_0018"

_HERE = Path(__file__).resolve().parent


def script_location() -> str:
    """Directory of readyq's Alembic environment (``env.py`` and ``versions/``)."""
    return str(_HERE)


def version_location() -> str:
    """Directory of readyq's revision scripts, for ``version_locations``."""
    return str(_HERE / "versions")


def version_table(prefix: str = DEFAULT_PREFIX) -> str:
    """Name of readyq's own Alembic version table for ``prefix``."""
    return f"{validate_prefix(prefix)}alembic_version"


def readyq_table_names(prefix: str = DEFAULT_PREFIX) -> frozenset[str]:
    """Every table readyq creates for ``prefix``, its version table included."""
    validate_prefix(prefix)
    return frozenset(
        f"{prefix}{name}" for name in (
            "jobs", "job_deps", "groups", "gate", "rate_limits", "rate_slots", "resources",
            "reservations", "pauses", "alembic_version",
        )
    )


def include_name(prefix: str = DEFAULT_PREFIX) -> Callable[..., bool]:
    """An ``include_name`` hook for autogenerate that ignores readyq's tables.

    Without it, ``alembic revision --autogenerate`` in the application's environment sees
    readyq's tables in the database but not in the application's metadata, and proposes
    to drop them. Use it as ``context.configure(..., include_name=include_name())``.
    """
    names = readyq_table_names(prefix)

    def hook(name: str | None, type_: str, parent_names: dict[str, Any]) -> bool:
        if type_ == "table":
            return name not in names
        return True

    return hook


def current_prefix() -> str:
    """The table prefix for the migration being run (call from revision scripts only)."""
    from alembic import context

    config = context.config
    value = config.attributes.get(PREFIX_ATTRIBUTE)
    if value is None:
        x = context.get_x_argument(as_dictionary=True)
        value = x.get(PREFIX_ATTRIBUTE) or x.get("prefix")
    if value is None:
        value = config.get_main_option(PREFIX_ATTRIBUTE)
    return validate_prefix(value if value is not None else DEFAULT_PREFIX)


def sqlite_foreign_keys_off(connection: Connection) -> bool:
    """Switch SQLite's foreign key enforcement off on ``connection``; return whether it
    is off now.

    A revision that rebuilds a table others refer to needs it off (SQLite's own advice for
    any table rebuild): with it on, dropping the old table first deletes its rows, and
    their ON DELETE CASCADE takes every row that refers to them along. ``PRAGMA
    foreign_keys`` changes nothing inside a transaction, so this works only before the
    connection has written anything; afterwards it returns False. A connection switched
    off is detached from its pool, so that it is closed when released instead of being
    handed out again without enforcement (readyq's own connections switch it on).
    """
    if not connection.exec_driver_sql("PRAGMA foreign_keys").scalar():
        return True
    connection.exec_driver_sql("PRAGMA foreign_keys = OFF")
    if connection.exec_driver_sql("PRAGMA foreign_keys").scalar():
        return False
    connection.detach()
    return True
