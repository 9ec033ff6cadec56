"""Alembic revision files (Alembic itself skips this file)."""
