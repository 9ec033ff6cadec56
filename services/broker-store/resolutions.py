"""Resolved transactions: transaction id -> C / R / D, forgotten with their half messages.

Owns the broker's memory of which transactions are resolved (transaction.py
asks it to refuse a second END_TRANSACTION and to skip resolved halves in a
check); not the op records that make it durable (transaction.py writes them and
rebuilds this from them after a restart).

Kept forever, it grew by one entry per transaction for the life of the process.
Once retention has deleted every copy of a half (the first and each re-put),
nothing can ask about it: an END_TRANSACTION naming it answers "not found" and
the txn-checker cannot read it. So entries are dropped in resolution order once
the CommitLog's first offset passes the CommitLog end noted when they were
resolved (every copy of their half was written before it) — memory bounded by
the transactions of the retention window, like the disk.
"""

import collections
import itertools

MARK_EVERY = 1024  # resolutions between two noted CommitLog ends (and prune checks)


class Resolutions:
    """`store`: anything with `max_phys_offset` (end of the whole puts) and `min_phys_offset`."""

    def __init__(self, store, mark_every: int = MARK_EVERY):
        self.store = store
        self.mark_every = mark_every
        self.states: dict[str, str] = {}   # in resolution order
        self._marks: collections.deque[tuple[int, int]] = collections.deque()  # (CommitLog end, entries added by then)
        self._added = 0
        self._dropped = 0

    def __contains__(self, txid: str) -> bool:
        return txid in self.states

    def __len__(self) -> int:
        return len(self.states)

    def get(self, txid: str) -> str | None:
        return self.states.get(txid)

    def add(self, txid: str, state: str) -> None:
        """`txid` is resolved as `state` (every copy of its half is already stored)."""
        if txid in self.states:
            self.states[txid] = state   # keeps its place: its half is no newer
            return
        self.states[txid] = state
        self._added += 1
        if self._added % self.mark_every == 0:
            self._marks.append((self.store.max_phys_offset, self._added))
            self.prune()

    def prune(self) -> int:
        """Forget the transactions whose halves retention has deleted; returns how many."""
        low = self.store.min_phys_offset
        upto = self._dropped
        while self._marks and self._marks[0][0] <= low:
            upto = self._marks.popleft()[1]
        n = upto - self._dropped
        if n <= 0:
            return 0
        for txid in list(itertools.islice(self.states, n)):
            del self.states[txid]
        self._dropped = upto
        return n
