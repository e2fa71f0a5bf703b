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
