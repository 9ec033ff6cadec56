"""Metadata keyed by broker: a `broker` column first in each table's primary key.

Several brokers share one database (a PostgreSQL behind a scaled broker-store); each
reads and writes only the rows of its own name (metadata.py). Rows that exist already
belonged to the broker that upgrades the database: they get its name, taken from
`config.attributes["broker"]` (runner.py) or `-x broker=NAME` (a hand-run `alembic`).
SQLite cannot alter a primary key in place, so the tables are rebuilt in batch mode
(copy, drop, rename); PostgreSQL alters them in place.

Revision ID: 0002
Revises: 0001
Create Date: 2025-01-01
"""

import sqlalchemy as sa
from alembic import context, op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

KEYS = {"topics": ("name",), "subscription_groups": ("name",), "consumer_offsets": ("grp", "topic", "queue_id")}
BROKER = sa.String(255)


def _broker() -> str | None:
    given = context.config.attributes.get("broker")
    return given or context.get_x_argument(as_dictionary=True).get("broker")


def _rows(table: str) -> int:
    return op.get_bind().execute(sa.select(sa.func.count()).select_from(sa.table(table))).scalar_one()


def _set_primary_key(table: str, columns, broker_nullable: bool = False) -> None:
    """`table`'s primary key becomes one on `columns`, named `<table>_pkey` (PostgreSQL's own
    name), and its broker column NOT NULL unless `broker_nullable`."""
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        old = sa.inspect(bind).get_pk_constraint(table).get("name")
        with op.batch_alter_table(table) as batch:  # in place, in this order: a key column is NOT NULL
            if old:
                batch.drop_constraint(old, type_="primary")
            batch.alter_column("broker", existing_type=BROKER, nullable=broker_nullable)
            batch.create_primary_key(f"{table}_pkey", list(columns))
        return
    # SQLite alters no key: the table is rebuilt from this description of it (copy, drop, rename)
    now = sa.Table(table, sa.MetaData(), autoload_with=bind)
    wanted = sa.Table(table, sa.MetaData(),
                      *(sa.Column(c.name, c.type, nullable=broker_nullable if c.name == "broker" else c.nullable,
                                  autoincrement=False) for c in now.columns),
                      sa.PrimaryKeyConstraint(*columns, name=f"{table}_pkey"))
    with op.batch_alter_table(table, copy_from=wanted, recreate="always"):
        pass


def upgrade() -> None:
    broker = _broker()
    for table, keys in KEYS.items():
        op.add_column(table, sa.Column("broker", BROKER, nullable=True))
        if broker:
            op.execute(sa.table(table, sa.column("broker")).update().values(broker=broker))
        elif _rows(table):
            raise RuntimeError(f"table {table} has rows: name the broker they belong to "
                               "(`python -m quiver_broker.migrations upgrade --broker-name NAME`, "
                               "or `alembic -x broker=NAME upgrade head`)")
        _set_primary_key(table, ("broker", *keys))


def downgrade() -> None:
    """Back to one broker per database: refused while rows of several brokers are stored."""
    bind = op.get_bind()
    owners = set()
    for table in KEYS:
        owners.update(bind.execute(sa.select(sa.column("broker")).select_from(sa.table(table)).distinct()).scalars())
    if len(owners) > 1:
        raise RuntimeError(f"rows of {len(owners)} brokers ({', '.join(sorted(owners))}) cannot share the "
                           "schema of revision 0001: give each broker a database of its own first")
    for table, keys in KEYS.items():
        _set_primary_key(table, keys, broker_nullable=True)
        with op.batch_alter_table(table) as batch:
            batch.drop_column("broker")
