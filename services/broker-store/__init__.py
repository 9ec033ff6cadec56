"""Quiver broker: CommitLog, ConsumeQueue and IndexFile store, send/pull/offset/admin requests."""
