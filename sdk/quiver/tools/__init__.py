"""Tools: the CLI, the local runner (quiver up), the demo."""
