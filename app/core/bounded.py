"""A bounded cache: a mapping that keeps its ``size`` most recently used entries (LRU).

The one helper behind the app's caches (scorers, comparisons, figures, run ids, suites,
traces stored, parsed suites, lint findings, bad price files). Safe to share between threads:
each operation holds the cache's own lock (a read that moves an entry is two steps, which a
plain dict's single steps were not)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class BoundedCache(Generic[K, V]):
    """At most ``size`` entries; reading (``get``) or writing (``put``) one makes it the most
    recent, and a ``put`` past ``size`` drops the least recently used."""

    def __init__(self, size: int):
        self.size = size
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def peek(self, key: K) -> V | None:
        """The entry, if held, without making it the most recent."""
        with self._lock:
            return self._items.get(key)

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def pop(self, key: K) -> V | None:
        with self._lock:
            return self._items.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._items

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def newest_first(self) -> list[tuple[K, V]]:
        """The entries, the most recently used first (a copy: safe while others write)."""
        with self._lock:
            return list(reversed(self._items.items()))
