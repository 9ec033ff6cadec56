"""Compiled selectors per (group, topic, expression), bounded LRU.

The engine's own `compile_cached` memoises by text; this cache is keyed the
way RocketMQ's ConsumerFilterManager is (per group and topic), so STATUS can
say who filters what, and a group changing its expression does not evict
others. Parse failures are not cached.
"""

from collections import OrderedDict

from . import sql92


class SelectorCache:
    def __init__(self, size: int = 1024):
        self.size = size
        self._items: OrderedDict = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, group: str, topic: str, expression: str) -> sql92.Selector:
        """The compiled selector; raises SubscriptionParseError for a bad expression."""
        key = (group, topic, expression)
        sel = self._items.get(key)
        if sel is not None:
            self.hits += 1
            self._items.move_to_end(key)
            return sel
        self.misses += 1
        sel = sql92.compile_cached(expression)
        self._items[key] = sel
        if len(self._items) > self.size:
            self._items.popitem(last=False)
        return sel

    def __len__(self) -> int:
        return len(self._items)

    def subscriptions(self) -> list[dict]:
        return [{"group": g, "topic": t, "expression": e} for g, t, e in self._items]
