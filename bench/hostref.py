"""How fast this machine runs Python right now, for reading figures across days.

The machines here share their cores: the same benchmark has run two to three
times slower from one hour to the next. Every benchmark prints this reference
beside its figures: the best of five CPU timings of one fixed pure-Python
loop. Figures from two runs compare only after scaling by it (a run whose
reference is twice as long ran on a machine twice as slow).
"""

from __future__ import annotations

import time


def reference_ms() -> float:
    """CPU milliseconds of ``sum(range(10**7))``, the best of five."""
    best = float("inf")
    for _ in range(5):
        start = time.process_time()
        sum(range(10**7))
        best = min(best, time.process_time() - start)
    return best * 1000


def line() -> str:
    return f"host reference: {reference_ms():.0f} ms of CPU for sum(range(10**7)) (best of 5; longer = slower host)"


if __name__ == "__main__":
    print(line())
