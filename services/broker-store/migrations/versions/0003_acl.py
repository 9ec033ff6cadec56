"""ACL tables: users and rules (acl.py), one set for the cluster, with no broker column.

Brokers that share one PostgreSQL share one ACL: `Admin` writes each change to every
master, and the second write of a change finds it done. On SQLite each broker keeps its
own copy; a slave takes its master's with the metadata sync.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def _missing(name: str) -> bool:
    # a broker of the release before migrations made these tables itself (create_all)
    return not sa.inspect(op.get_bind()).has_table(name)


def upgrade() -> None:
    if _missing("acl_users"):
        op.create_table("acl_users",
                        sa.Column("name", sa.String(64), primary_key=True),
                        sa.Column("public_key", sa.String(40), nullable=False, unique=True),
                        sa.Column("type", sa.String(8), nullable=False))
    if _missing("acl_rules"):
        op.create_table("acl_rules",
                        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
                        sa.Column("user", sa.String(64), nullable=False, index=True),
                        sa.Column("resource", sa.String(262), nullable=False),
                        sa.Column("actions", sa.String(64), nullable=False),
                        sa.Column("decision", sa.String(5), nullable=False),
                        sa.Column("source", sa.String(64), nullable=False, server_default=""))


def downgrade() -> None:
    op.drop_table("acl_rules")
    op.drop_table("acl_users")
