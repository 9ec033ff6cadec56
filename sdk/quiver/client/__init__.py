"""What apps use: messages, producers, consumers, admin, and the one pull engine. Imports
the wire, never the service runtime or the tools."""

_BASE = ("ClientBase", "MessageQueue", "Route")  # quiver.client was one module before the layers


def __getattr__(name):
    if name in _BASE:
        from . import base
        return getattr(base, name)
    raise AttributeError(f"module 'quiver.client' has no attribute {name!r}")
