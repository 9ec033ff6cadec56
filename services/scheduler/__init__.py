"""Quiver scheduler: delivers delay-level and timer messages (python -m quiver_scheduler)."""
