"""The cycle collector tuned for processes that make many acyclic objects.

What the import's worker, the OTLP scoring worker and the web server make per
record, span or request (rows as tuples, span references) is freed by
reference counting; the default thresholds walked it for cycles every 700 new
objects, 5-15% of those processes' CPU (perf)."""

from __future__ import annotations

import gc
import os
from typing import Any


def collect_cycles_rarely(young: int = 20_000, older: int = 20) -> None:
    """Never scan again what is loaded now (``gc.freeze``), and scan young objects
    every ``young`` allocations and older generations every ``older`` scans."""
    gc.freeze()
    gc.set_threshold(young, older, older)


M_ARENA_MAX, M_MMAP_THRESHOLD = -8, -3  # glibc's mallopt parameters
MMAP_THRESHOLD = 128 * 1024  # glibc's default, kept fixed


def _libc_function(name: str) -> Any:
    """A function of glibc (None elsewhere, e.g. musl or macOS without it)."""
    import ctypes
    import ctypes.util

    lib = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(lib), name, None) if lib else None
    except OSError:
        return None


def give_back_memory() -> None:
    """Collect the cycles left (a process that collects rarely keeps a burst's sessions and
    connections until its next full collection, and the pages they hold with them), then return
    the heap's free memory to the system (glibc's ``malloc_trim``; nothing elsewhere): a buffer
    that held a burst and emptied otherwise keeps its peak resident."""
    gc.collect()
    trim = _libc_function("malloc_trim")
    if trim is not None:
        trim(0)


def cap_malloc_arenas(arenas: int = 1) -> None:
    """At most ``arenas`` glibc malloc arenas in this process (``MALLOC_ARENA_MAX``, set at
    run time) and blocks from 128 KiB always mapped apart (``MALLOC_MMAP_THRESHOLD_``), unless
    the environment says otherwise; call it before threads start. glibc gives each thread that
    allocates under contention an arena of its own (up to eight per core), and the free memory
    of each is kept apart: a server whose dozens of request threads took part in a burst kept
    tens of megabytes that ``malloc_trim`` could not join."""
    mallopt = _libc_function("mallopt")
    if mallopt is None:
        return
    if not os.environ.get("MALLOC_ARENA_MAX"):
        mallopt(M_ARENA_MAX, arenas)
    if not os.environ.get("MALLOC_MMAP_THRESHOLD_"):
        # blocks from 128 KiB (request bodies, large lists) mapped apart and unmapped when freed: glibc
        # otherwise raises this threshold to the largest block freed, and those blocks then fragment the heap
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
