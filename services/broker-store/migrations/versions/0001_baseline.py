"""Baseline: the metadata schema of every Quiver before migrations (no broker column).

Each table is created only where it is missing: a database that an older Quiver made is
normally stamped at this revision instead (runner.py), and one that lost a table on the
way (create_all ran table by table) gets just the missing one here.

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _missing(name: str) -> bool:
    return not sa.inspect(op.get_bind()).has_table(name)


def upgrade() -> None:
    if _missing("topics"):
        op.create_table("topics",
                        sa.Column("name", sa.String(255), primary_key=True),
                        sa.Column("read_queues", sa.Integer, nullable=False),
                        sa.Column("write_queues", sa.Integer, nullable=False),
                        sa.Column("perm", sa.Integer, nullable=False),
                        sa.Column("sysflag", sa.Integer, nullable=False),
                        sa.Column("order_topic", sa.Integer, nullable=False))
    if _missing("subscription_groups"):
        op.create_table("subscription_groups",
                        sa.Column("name", sa.String(255), primary_key=True),
                        sa.Column("retry_max_times", sa.Integer, nullable=False),
                        sa.Column("consume_enable", sa.Integer, nullable=False))
    if _missing("consumer_offsets"):
        op.create_table("consumer_offsets",
                        sa.Column("grp", sa.String(255), primary_key=True),
                        sa.Column("topic", sa.String(255), primary_key=True),
                        sa.Column("queue_id", sa.Integer, primary_key=True, autoincrement=False),
                        sa.Column("offset", sa.BigInteger, nullable=False),
                        sa.Column("updated_ms", sa.BigInteger, nullable=False))


def downgrade() -> None:
    for name in ("consumer_offsets", "subscription_groups", "topics"):
        op.drop_table(name)
