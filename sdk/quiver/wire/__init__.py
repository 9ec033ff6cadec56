"""The wire: frames, codes, the CommitLog record, request and reply schemas, names, and the
client transport. Imports nothing above it (docs/architecture.md)."""
