"""What apps use: messages, producers, consumers, admin, and the one pull engine. Imports
the wire, never the service runtime or the tools."""
