"""The metadata database's schema history: Alembic revisions, run by every broker at start."""

from .runner import BASELINE, LOCK_KEY, alembic_config, current_revision, head_revision, upgrade

__all__ = ["BASELINE", "LOCK_KEY", "alembic_config", "current_revision", "head_revision", "upgrade"]
