"""A bounded cache: a mapping that keeps its ``size`` most recently used entries (LRU).

The one helper behind the app's hand-rolled caches (scorers, comparisons, figures, run ids,
suites, traces stored). Not thread-safe: a cache shared by threads is used under its owner's lock."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class BoundedCache(Generic[K, V]):
    """At most ``size`` entries; reading (``get``) or writing (``put``) one makes it the most
    recent, and a ``put`` past ``size`` drops the least recently used."""

    def __init__(self, size: int):
        self.size = size
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def peek(self, key: K) -> V | None:
        """The entry, if held, without making it the most recent."""
        return self._items.get(key)

    def put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    def pop(self, key: K) -> V | None:
        return self._items.pop(key, None)

    def clear(self) -> None:
        self._items.clear()

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def newest_first(self) -> Iterator[tuple[K, V]]:
        """The entries, the most recently used first."""
        return reversed(self._items.items())
