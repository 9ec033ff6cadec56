"""Quiver filter service: the SQL92 selector engine and tag filters."""
