"""quiver_txn: the transaction checker service (python -m quiver_txn)."""
