"""Alembic environment for keelwave.

keelwave writes its schema as plain SQL (no ORM models), so there is no
metadata to autogenerate from; every revision in versions/ is hand-written.
`keelwave migrate` builds the alembic Config in code (keelwave/db/migrate.py),
so this folder needs no alembic.ini and works the same from a checkout and
from an installed wheel, where it ships as keelwave/migrations.
"""

from sqlalchemy import create_engine, pool

from alembic import context

config = context.config


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, transaction_per_migration=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine(config.get_main_option("sqlalchemy.url"), poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, transaction_per_migration=True)
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    context.configure(url=config.get_main_option("sqlalchemy.url"), literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    run_migrations_online()
