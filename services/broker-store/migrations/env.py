"""Alembic's environment for the broker's metadata database.

Run by runner.upgrade (every broker at start) and by `python -m quiver_broker.migrations`:
both pass an open connection in `config.attributes["connection"]`, already inside the
transaction that holds the upgrade lock, so Alembic joins it and commits nothing itself.
With a plain `alembic` command line (an alembic.ini of your own whose script_location is
this directory) it connects to `sqlalchemy.url` instead; revision 0002 then takes the
broker's name from `-x broker=NAME`.
"""

from alembic import context
from sqlalchemy import create_engine

config = context.config


def run(connection) -> None:
    context.configure(connection=connection, render_as_batch=connection.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise SystemExit("offline (--sql) mode is not supported: the baseline looks at which tables exist")
given = config.attributes.get("connection")
if given is not None:
    run(given)
else:
    engine = create_engine(config.get_main_option("sqlalchemy.url"))
    try:
        with engine.connect() as conn:
            run(conn)
    finally:
        engine.dispose()
