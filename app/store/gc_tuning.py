"""The cycle collector tuned for processes that make many acyclic objects.

What the import's worker, the OTLP scoring worker and the web server make per
record, span or request (rows as tuples, span references) is freed by
reference counting; the default thresholds walked it for cycles every 700 new
objects, 5-15% of those processes' CPU (perf)."""

from __future__ import annotations

import gc


def collect_cycles_rarely(young: int = 20_000, older: int = 20) -> None:
    """Never scan again what is loaded now (``gc.freeze``), and scan young objects
    every ``young`` allocations and older generations every ``older`` scans."""
    gc.freeze()
    gc.set_threshold(young, older, older)


def give_back_memory() -> None:
    """Return the heap's free memory to the system (glibc's ``malloc_trim``; nothing elsewhere):
    a buffer that held a burst and emptied otherwise keeps its peak resident."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        trim = getattr(libc, "malloc_trim", None)
    except OSError:
        return
    if trim is not None:
        trim(0)
