"""The web console: server-rendered pages over the SDK's Admin (`python -m quiver_console`)."""
