"""Quiver name server: brokers register here; clients ask it for routes. Memory only."""
