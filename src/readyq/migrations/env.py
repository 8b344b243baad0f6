"""Alembic environment for readyq's own migrations.

Run through :func:`readyq.admin.migrate` (``readyq migrate``), which passes an open
connection in ``config.attributes["connection"]`` and the prefix in
``config.attributes["readyq_prefix"]``. It also works from the ``alembic`` command with
an ini file whose ``script_location`` is ``readyq:migrations``; the URL then comes from
``sqlalchemy.url`` and the prefix from ``-x prefix=...`` (see
:func:`readyq.migrations.current_prefix`).

The version table is ``<prefix>alembic_version``, so readyq's history never mixes with
the application's own ``alembic_version``. On SQLite, migrations run in batch mode
(copy-and-move), because SQLite's ALTER TABLE cannot change most things, and with
foreign key enforcement off, which a table rebuild needs (see
:func:`readyq.migrations.sqlite_foreign_keys_off`): it is switched off here, before any
revision writes, because SQLite cannot switch it inside a transaction.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context

from readyq.dialects import dialect_for
from readyq.migrations import (
    PREFIX_ATTRIBUTE,
    current_prefix,
    sqlite_foreign_keys_off,
    version_table,
)

config = context.config
prefix = current_prefix()
config.attributes[PREFIX_ATTRIBUTE] = prefix


def run_migrations_offline() -> None:
    """Emit the SQL instead of running it (``readyq migrate --sql``)."""
    url = config.get_main_option("sqlalchemy.url")
    backend = sa.make_url(url).get_backend_name() if url else ""
    context.configure(
        url=url,
        literal_binds=True,
        version_table=version_table(prefix),
        render_as_batch=backend == "sqlite",
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def _run(connection: sa.Connection) -> None:
    if connection.dialect.name == "sqlite":
        sqlite_foreign_keys_off(connection)
    context.configure(
        connection=connection,
        version_table=version_table(prefix),
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError(
            "readyq migrations need a database: set sqlalchemy.url in the ini file or pass "
            "a connection in config.attributes['connection']"
        )
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        # Prepared as readyq prepares its own engines (on SQLite: the WAL journal).
        prepared = dialect_for(engine).prepare_engine(engine, owned=True)
        with prepared.connect() as conn:
            _run(conn)
            conn.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
