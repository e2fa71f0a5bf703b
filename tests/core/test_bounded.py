"""The bounded cache (app.core.bounded): least recently used out, and safe between threads."""

from __future__ import annotations

import sys
import threading
import time

from app.core.bounded import BoundedCache


def test_the_least_recently_used_entry_goes_first() -> None:
    cache: BoundedCache[str, int] = BoundedCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # a is now the most recent
    cache.put("c", 3)  # b goes
    assert "b" not in cache and cache.peek("a") == 1 and cache.peek("c") == 3
    assert cache.peek("a") == 1
    cache.put("d", 4)  # peek did not make a recent: a goes
    assert [k for k, _ in cache.newest_first()] == ["d", "c"]
    assert cache.pop("c") == 3 and cache.pop("c") is None and len(cache) == 1


def test_readers_evictors_and_clears_in_threads_never_raise() -> None:
    """A get moves its entry (two steps): another thread's pop or clear in between must not make it
    raise, as it did without the lock (the OTLP receiver's run ids: a 503 for a request in flight)."""
    cache: BoundedCache[str, int] = BoundedCache(4)
    errors: list[BaseException] = []
    stop = time.monotonic() + 1.5

    def work(kind: int) -> None:
        try:
            while time.monotonic() < stop:
                for key in ("run", "x", "y", "z", "w"):
                    if kind == 0:
                        cache.get(key)
                    elif kind == 1:
                        cache.put(key, 1)
                    else:
                        cache.pop(key)
                        if key == "w":
                            cache.clear()
                    list(cache.newest_first())
        except BaseException as e:
            errors.append(e)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(k % 3,)) for k in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []
